// RUN: distopt-opt %s --distopt-autodiff | FileCheck %s

// One replica of dp 2 normalising its samples with the batch's mean (an
// averaging all-reduce over the data axis, grid axis 1, made it whole):
// what the replica computes from the mean and its samples is only its share
// of the mean's adjoint, so backward averages the shares over the replicas
// at the all-reduce (SyncBatchNorm's backward), marked dopt.backward. The
// loss's own sum is whole: its all-reduce passes the seed through. The
// weight's gradient is this replica's part (distopt-sync-gradients sums it).
// CHECK-LABEL: func.func @main
// CHECK: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [1] reduction = average :
// CHECK: %[[L:.*]] = shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [1] :
// CHECK: %[[SHARE:.*]] = dopt.neg
// CHECK: %[[SUM:.*]] = dopt.reduce_sum %[[SHARE]]
// CHECK: %[[AVG:.*]] = shard.all_reduce %[[SUM]] on @dopt_grid grid_axes = [1] reduction = average {dopt.backward}
// CHECK: dopt.mul %[[AVG]]
// CHECK-NOT: shard.all_reduce
// CHECK: return %[[L]], %{{.*}}
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x0: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
    %x = dopt.mul %x0, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %m0 = dopt.reduce_mean %x {axes = array<i64: 0>, keepdims = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
    %m = shard.all_reduce %m0 on @dopt_grid grid_axes = [1] reduction = average : tensor<1x3xf32> -> tensor<1x3xf32>
    %c = dopt.sub %x, %m : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
    %q = dopt.mul %c, %c : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %s = dopt.reduce_sum %q {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %l = shard.all_reduce %s on @dopt_grid grid_axes = [1] : tensor<f32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
