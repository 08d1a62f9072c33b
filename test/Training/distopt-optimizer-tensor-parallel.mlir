// RUN: distopt-opt %s --distopt-autodiff --distopt-optimizer='kind=sgd' | FileCheck %s

// Tensor parallelism (tp 2): the global norm counts every element once --
// the squares of the block %w's gradient are all-reduced over the tensor
// axis, the replicated %b's (the same on both ranks) are taken as they are.
// The block's momentum is a block too (the weight's local shape). The
// squares are summed, and the update made, on the tensors viewed in one
// dimension.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %{{.*}}: tensor<2x4xf32> {dopt.name = "opt.momentum:w"
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 8>} : (tensor<2x4xf32>) -> tensor<8xf32>
// CHECK: %[[SW:.*]] = dopt.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = false} : (tensor<8xf32>) -> tensor<f32>
// CHECK: %[[SB:.*]] = dopt.reduce_sum %{{.*}} {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
// CHECK: %[[T:.*]] = dopt.add %{{.*}}, %[[SB]]
// CHECK: %[[ALL:.*]] = shard.all_reduce %[[SW]] on @dopt_grid grid_axes = [2]
// CHECK: dopt.add %[[T]], %[[ALL]]
// CHECK: dopt.sqrt
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<3x4xf32> {dopt.name = "x"},
                  %w: tensor<2x4xf32> {dopt.weight = {name = "w", split_axes = [[2], []]}},
                  %b: tensor<4xf32> {dopt.weight = {name = "b"}}) -> tensor<f32> {
    %h = dopt.gemm %x, %w {trans_b = true} : (tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<3x2xf32>
    %y = shard.all_gather %h on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<3x2xf32> -> tensor<3x4xf32>
    %z = dopt.add %y, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
    %s = dopt.reduce_sum %z {axes = array<i64: 0, 1>, keepdims = false} : (tensor<3x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
