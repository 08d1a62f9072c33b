// RUN: distopt-opt %s --split-input-file --distopt-optimizer='kind=sgd' | FileCheck %s

// A pipeline stage's squares join the other stages' in the global norm
// (all-reduced over the stage axis, grid axis 0).
// CHECK-LABEL: func.func @main
// CHECK: %[[SQ:.*]] = dopt.reduce_sum
// CHECK: %[[ALL:.*]] = shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [0]
// CHECK: dopt.sqrt %[[ALL]]
module attributes {dopt.pipeline = {microbatches = 2 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%w: tensor<4xf32> {dopt.weight = {name = "w"}}, %l: tensor<f32>)
      -> (tensor<f32> {dopt.name = "loss"}, tensor<4xf32> {dopt.grad_of = "w", dopt.name = "grad:w"}) {
    return %l, %w : tensor<f32>, tensor<4xf32>
  }
}

// -----

// A stage that trains nothing still computes the step's norm with the
// others (its own squares: none).
// CHECK-LABEL: func.func @main
// CHECK: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [0]
// CHECK: dopt.sqrt
// CHECK: return %{{.*}}, %{{.*}} : tensor<f32>, tensor<f32>
module attributes {dopt.pipeline = {microbatches = 2 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%l: tensor<f32>) -> (tensor<f32> {dopt.name = "loss"}) {
    return %l : tensor<f32>
  }
}
