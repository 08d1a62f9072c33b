// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// Resharding on a 2-D grid (data x tensor), one axis at a time: split
// dimensions are undone innermost axis first, a split that moves to a
// dimension where it fits becomes an all_to_all on its axis, new splits are
// local slices. (Checked numerically across 4 processes in
// python/tests/test_distributed.py.)

module {
  shard.grid @dopt_grid(shape = 1x2x2)
  func.func @main(%x: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
    %b_t = shard.sharding @dopt_grid split_axes = [[1], [2]] : !shard.sharding
    %bt = shard.sharding @dopt_grid split_axes = [[1, 2]] : !shard.sharding
    %t_b = shard.sharding @dopt_grid split_axes = [[2], [1]] : !shard.sharding
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %b_t : tensor<8x4xf32>
    // [[1], [2]] -> [[]]: gather the tensor axis, then the data axis.
    %a = shard.shard %xs to %rep annotate_for_users : tensor<8x4xf32>
    %n = dopt.neg %a : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %ns = shard.shard %n to %rep : tensor<8x4xf32>
    // [[1], [2]] -> [[2], [1]]: both axes move (two all_to_alls).
    %c = shard.shard %xs to %t_b annotate_for_users : tensor<8x4xf32>
    %e = dopt.exp %c : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %es = shard.shard %e to %t_b : tensor<8x4xf32>
    // [[2], [1]] -> [[1, 2]]: dim 1's data split moves to dim 0, outside.
    %f = shard.shard %es to %bt annotate_for_users : tensor<8x4xf32>
    %g = dopt.tanh %f : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %gs = shard.shard %g to %bt : tensor<8x4xf32>
    %h = shard.shard %gs to %rep annotate_for_users : tensor<8x4xf32>
    return %ns, %h : tensor<8x4xf32>, tensor<8x4xf32>
  }
}

// CHECK: func.func @main(%[[X:.*]]: tensor<4x2xf32>
// [[1], [2]] -> [[]]: each dimension's split undone (independent dims).
// CHECK: %[[G1:.*]] = shard.all_gather %[[X]] on @dopt_grid grid_axes = [1] gather_axis = 0 : tensor<4x2xf32> -> tensor<8x2xf32>
// CHECK: %[[G2:.*]] = shard.all_gather %[[G1]] on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<8x2xf32> -> tensor<8x4xf32>
// CHECK: dopt.neg %[[G2]]
// [[1], [2]] -> [[2], [1]]: three steps.
// CHECK: %[[A1:.*]] = shard.all_gather %[[X]] on @dopt_grid grid_axes = [1] gather_axis = 0 : tensor<4x2xf32> -> tensor<8x2xf32>
// CHECK: %[[A2:.*]] = shard.all_to_all %[[A1]] on @dopt_grid grid_axes = [2] split_axis = 0 concat_axis = 1 : tensor<8x2xf32> -> tensor<4x4xf32>
// CHECK: %[[A3:.*]] = shard.all_slice %[[A2]] on @dopt_grid grid_axes = [1] slice_axis = 1 : tensor<4x4xf32> -> tensor<4x2xf32>
// CHECK: %[[E:.*]] = dopt.exp %[[A3]]
// [[2], [1]] -> [[1, 2]]: the data axis moves to dim 0, the tensor axis
// nests inside it.
// CHECK: %[[B1:.*]] = shard.all_gather %[[E]] on @dopt_grid grid_axes = [2] gather_axis = 0 : tensor<4x2xf32> -> tensor<8x2xf32>
// CHECK: %[[B2:.*]] = shard.all_to_all %[[B1]] on @dopt_grid grid_axes = [1] split_axis = 0 concat_axis = 1 : tensor<8x2xf32> -> tensor<4x4xf32>
// CHECK: %[[B3:.*]] = shard.all_slice %[[B2]] on @dopt_grid grid_axes = [2] slice_axis = 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[T:.*]] = dopt.tanh %[[B3]]
// [[1, 2]] -> [[]]: the inner (tensor) axis first.
// CHECK: %[[C1:.*]] = shard.all_gather %[[T]] on @dopt_grid grid_axes = [2] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// CHECK: %[[C2:.*]] = shard.all_gather %[[C1]] on @dopt_grid grid_axes = [1] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
// CHECK: return %{{.*}}, %[[C2]]
