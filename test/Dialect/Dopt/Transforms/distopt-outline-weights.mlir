// RUN: distopt-opt %s --distopt-outline-weights | FileCheck %s
// RUN: distopt-opt %s --distopt-outline-weights | distopt-opt | FileCheck %s

// Weights become trailing arguments of @main in order of first appearance;
// two references to one weight share one argument; external-data references
// keep location/offset/length.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:.*]]: tensor<2x4xf32> {dopt.name = "x"},
// CHECK-SAME: %[[W:.*]]: tensor<4x4xf32> {dopt.weight = {name = "w"}},
// CHECK-SAME: %[[E:.*]]: tensor<4xf32> {dopt.weight = {length = 16 : i64, location = "m.data", name = "e", offset = 64 : i64}})
// CHECK-NOT: dopt.weight {
// CHECK: %[[A:.*]] = dopt.matmul %[[X]], %[[W]]
// CHECK: %[[B:.*]] = dopt.matmul %[[A]], %[[W]]
// CHECK: dopt.add %[[B]], %[[E]]
func.func @main(%x: tensor<2x4xf32> {dopt.name = "x"}) -> tensor<2x4xf32> {
  %w = dopt.weight {name = "w", type = tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %a = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w2 = dopt.weight {name = "w", type = tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %b = dopt.matmul %a, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %e = dopt.weight {name = "e", type = tensor<4xf32>, location = "m.data", offset = 64 : i64, length = 16 : i64} : () -> tensor<4xf32>
  %c = dopt.add %b, %e : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %c : tensor<2x4xf32>
}
