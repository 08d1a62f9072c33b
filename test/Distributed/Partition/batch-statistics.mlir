// RUN: distopt-opt %s --distopt-partition --split-input-file --verify-diagnostics | FileCheck %s

// Batch norm's statistics in training form under data parallelism: a mean
// over the batch split over the data axis (grid axis 1) is each replica's
// mean of its samples, completed by an averaging all-reduce over the
// replicas (equal shares); a sum by a summing one. What reads the statistic
// reads the completed value.

module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<4x3x5xf32>) -> (tensor<4x3x5xf32>, tensor<3xf32>) {
    %b0 = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %r = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %b0 {dopt.batch_dim = 0 : i64} : tensor<4x3x5xf32>
    %m = dopt.reduce_mean %xs {axes = array<i64: 0, 2>, keepdims = true} : (tensor<4x3x5xf32>) -> tensor<1x3x1xf32>
    %ms = shard.shard %m to %r : tensor<1x3x1xf32>
    %c = dopt.sub %xs, %ms : (tensor<4x3x5xf32>, tensor<1x3x1xf32>) -> tensor<4x3x5xf32>
    %cs = shard.shard %c to %b0 {dopt.batch_dim = 0 : i64} : tensor<4x3x5xf32>
    %s = dopt.reduce_sum %cs {axes = array<i64: 0, 2>, keepdims = false} : (tensor<4x3x5xf32>) -> tensor<3xf32>
    %ss = shard.shard %s to %r : tensor<3xf32>
    return %cs, %ss : tensor<4x3x5xf32>, tensor<3xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x5xf32>
// CHECK: %[[M:.*]] = dopt.reduce_mean %[[X]] {{.*}} : (tensor<2x3x5xf32>) -> tensor<1x3x1xf32>
// CHECK: %[[MA:.*]] = shard.all_reduce %[[M]] on @dopt_grid grid_axes = [1] reduction = average
// CHECK: %[[C:.*]] = dopt.sub %[[X]], %[[MA]]
// CHECK: %[[S:.*]] = dopt.reduce_sum %[[C]] {{.*}} -> tensor<3xf32>
// CHECK: %[[SA:.*]] = shard.all_reduce %[[S]] on @dopt_grid grid_axes = [1] : tensor<3xf32>
// CHECK: return %[[C]], %[[SA]]

// -----

// Over an unevenly split batch (3 samples on 2 replicas, the last one
// padded) the padding would enter the statistic: refused.

module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<3x4xf32>) -> tensor<4xf32> {
    %b0 = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %r = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %b0 {dopt.batch_dim = 0 : i64} : tensor<3x4xf32>
    // expected-error @+1 {{this op combines samples of an unevenly split batch}}
    %s = dopt.reduce_sum %xs {axes = array<i64: 0>, keepdims = false} : (tensor<3x4xf32>) -> tensor<4xf32>
    %ss = shard.shard %s to %r : tensor<4xf32>
    return %ss : tensor<4xf32>
  }
}
