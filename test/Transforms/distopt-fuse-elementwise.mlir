// RUN: distopt-opt %s --distopt-fuse-elementwise | FileCheck %s

// bias add -> tanh fuse into one generic, but the matmul producing the bias
// add's input stays a named op (upstream fusion would turn it into a generic
// contraction and lose the BLAS call).
// CHECK-LABEL: func.func @chain
// CHECK: linalg.matmul
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: math.tanh
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @chain(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %acc: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %m = linalg.matmul ins(%a, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e0 = tensor.empty() : tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%e0 : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %e1 = tensor.empty() : tensor<4x16xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x16xf32>) outs(%e1 : tensor<4x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = math.tanh %x : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %t : tensor<4x16xf32>
}
