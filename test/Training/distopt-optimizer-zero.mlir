// RUN: distopt-opt %s --distopt-autodiff --distopt-sync-gradients='zero-stage=1' --distopt-optimizer='kind=sgd' | FileCheck %s

// ZeRO-1 on 2 replicas, a weight of 5 elements: its gradient arrives as
// this replica's chunk of 3 (padded to 6, reduce-scattered); SGD's momentum
// is a chunk too (split over the data axis, whole [6]); the replica updates
// its slice of the weight and all-gathers the chunks into the new weight.
// The global norm adds the chunks' squares over the replicas.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: tensor<3xf32> {dopt.global_type = tensor<6xf32>, dopt.name = "opt.momentum:w", dopt.optimizer_state = {kind = "momentum", weight = "w"}, dopt.split_axes = {{\[}}[1]]}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "grad_norm"},
// CHECK-SAME: tensor<3xf32> {dopt.global_type = tensor<6xf32>, dopt.name = "opt.momentum:w", dopt.split_axes = {{\[}}[1]], dopt.updates = "opt.momentum:w"}
// CHECK-SAME: tensor<5xf32> {dopt.name = "update:w", dopt.updates_weight = "w"})
// CHECK: %[[RS:.*]] = shard.reduce_scatter %{{.*}} on @dopt_grid grid_axes = [1] scatter_axis = 0 {dopt.async, dopt.bucket = 0 : i64} : tensor<2x3xf32> -> tensor<1x3xf32>
// CHECK: %[[G:.*]] = dopt.reshape %[[RS]] {shape = array<i64: 3>}
// CHECK: %[[SQ:.*]] = dopt.reduce_sum
// CHECK: %[[ALL:.*]] = shard.all_reduce %[[SQ]] on @dopt_grid grid_axes = [1]
// CHECK: dopt.sqrt
// CHECK: %[[MINE:.*]] = shard.all_slice %{{.*}} on @dopt_grid grid_axes = [1] slice_axis = 0 : tensor<2x3xf32> -> tensor<1x3xf32>
// CHECK: %[[NEW:.*]] = dopt.sub
// CHECK: %[[GATHERED:.*]] = shard.all_gather %[[NEW]] on @dopt_grid grid_axes = [1] gather_axis = 0 : tensor<3xf32> -> tensor<6xf32>
// CHECK: %[[W:.*]] = dopt.slice %[[GATHERED]] {ends = array<i64: 5>, starts = array<i64: 0>, steps = array<i64: 1>}
// CHECK: return
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x5xf32> {dopt.name = "x"}, %w: tensor<5xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
    %y = dopt.mul %x, %w : (tensor<2x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
    %s = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x5xf32>) -> tensor<f32>
    %l = shard.all_reduce %s on @dopt_grid grid_axes = [1] : tensor<f32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
