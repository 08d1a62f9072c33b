// RUN: distopt-opt %s --distopt-fuse-elementwise | FileCheck %s

// A [2,2,8] x [8,16] matmul as the lowering emits it (rows collapsed, result
// expanded back) feeding bias add -> tanh. The elementwise pair fuses into
// one generic; the matmul stays a named op. (Upstream's
// linalg-fuse-elementwise-ops propagates the expand_shape through the matmul
// by turning it into a generic contraction, which loses the BLAS call.)
// CHECK-LABEL: func.func @chain
// CHECK: linalg.matmul
// CHECK: tensor.expand_shape
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: math.tanh
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last = affine_map<(d0, d1, d2) -> (d2)>
func.func @chain(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x2x16xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<4x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%init : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m3 = tensor.expand_shape %m [[0, 1], [2]] output_shape [2, 2, 16] : tensor<4x16xf32> into tensor<2x2x16xf32>
  %e0 = tensor.empty() : tensor<2x2x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #last, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%m3, %b : tensor<2x2x16xf32>, tensor<16xf32>) outs(%e0 : tensor<2x2x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<2x2x16xf32>
  %e1 = tensor.empty() : tensor<2x2x16xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s : tensor<2x2x16xf32>) outs(%e1 : tensor<2x2x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = math.tanh %x : f32
    linalg.yield %r : f32
  } -> tensor<2x2x16xf32>
  return %t : tensor<2x2x16xf32>
}

// A per-row producer read through a broadcast (softmax's 1/sum) is not
// fused into its per-element consumer: fused, the division would run for
// every element of the row.
// CHECK-LABEL: func.func @per_row_producer
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<4x1xf32>)
// CHECK: arith.divf
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<4x8xf32>)
// CHECK-NOT: arith.divf
// CHECK: arith.mulf
func.func @per_row_producer(%x: tensor<4x8xf32>, %s: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %one = arith.constant 1.0 : f32
  %e1 = tensor.empty() : tensor<4x1xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x1xf32>) outs(%e1 : tensor<4x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %d = arith.divf %one, %a : f32
    linalg.yield %d : f32
  } -> tensor<4x1xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%x, %r : tensor<4x8xf32>, tensor<4x1xf32>) outs(%e2 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
