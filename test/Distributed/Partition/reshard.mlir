// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// Every single-axis resharding on the tensor axis (tp = 4): split to
// replicated, split to another split, partial to split, replicated to split;
// and shape attributes that follow local shapes.

module {
  shard.grid @dopt_grid(shape = 1x1x4)
  func.func @main(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<8x16xf32>) {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %s0 = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %s1 = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %s2 = shard.sharding @dopt_grid split_axes = [[], [], [2]] : !shard.sharding
    %xs = shard.shard %x to %s0 : tensor<8x16xf32>
    // S(0) -> R: all_gather along 0.
    %a = shard.shard %xs to %rep annotate_for_users : tensor<8x16xf32>
    %n = dopt.neg %a : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %ns = shard.shard %n to %rep : tensor<8x16xf32>
    // S(0) -> S(1): all_to_all.
    %b = shard.shard %xs to %s1 annotate_for_users : tensor<8x16xf32>
    %e = dopt.exp %b : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %es = shard.shard %e to %s1 : tensor<8x16xf32>
    // R -> S(2) through a reshape whose shape attribute follows.
    %c = shard.shard %ns to %s1 annotate_for_users : tensor<8x16xf32>
    %r = dopt.reshape %c {shape = array<i64: 2, 4, 16>} : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %rs = shard.shard %r to %s2 : tensor<2x4x16xf32>
    // P(sum) -> S(1): reduce_scatter.
    %w = dopt.weight {name = "w", type = tensor<16x16xf32>} : () -> tensor<16x16xf32>
    %ws = shard.shard %w to %s0 : tensor<16x16xf32>
    %d = shard.shard %es to %s1 annotate_for_users : tensor<8x16xf32>
    %m = dopt.matmul %d, %ws : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %ms = shard.shard %m to %rep {dopt.partial = "sum"} : tensor<8x16xf32>
    %f = shard.shard %ms to %s1 annotate_for_users : tensor<8x16xf32>
    %t = dopt.tanh %f : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %ts = shard.shard %t to %s1 : tensor<8x16xf32>
    return %ns, %es, %rs, %ts : tensor<8x16xf32>, tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<8x16xf32>
  }
}

// CHECK: func.func @main(%[[X:.*]]: tensor<2x16xf32> {{.*}}) -> (tensor<8x16xf32> {dopt.global_type = tensor<8x16xf32>, dopt.split_axes = {{\[\[}}], []]}, tensor<8x4xf32> {{.*}}, tensor<2x4x4xf32> {{.*}}, tensor<8x4xf32> {{.*}})
// CHECK: %[[A:.*]] = shard.all_gather %[[X]] on @dopt_grid grid_axes = [2] gather_axis = 0 : tensor<2x16xf32> -> tensor<8x16xf32>
// CHECK: %[[N:.*]] = dopt.neg %[[A]] : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[B:.*]] = shard.all_to_all %[[X]] on @dopt_grid grid_axes = [2] split_axis = 1 concat_axis = 0 : tensor<2x16xf32> -> tensor<8x4xf32>
// CHECK: %[[E:.*]] = dopt.exp %[[B]] : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[C:.*]] = shard.all_slice %[[N]] on @dopt_grid grid_axes = [2] slice_axis = 1 : tensor<8x16xf32> -> tensor<8x4xf32>
// CHECK: dopt.reshape %[[C]] {shape = array<i64: 2, 4, 4>} : (tensor<8x4xf32>) -> tensor<2x4x4xf32>
// CHECK: %[[W:.*]] = dopt.weight {{.*}}type = tensor<4x16xf32>
// CHECK: %[[M:.*]] = dopt.matmul %[[E]], %[[W]] : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[F:.*]] = shard.reduce_scatter %[[M]] on @dopt_grid grid_axes = [2] scatter_axis = 1 : tensor<8x16xf32> -> tensor<8x4xf32>
// CHECK: dopt.tanh %[[F]] : (tensor<8x4xf32>) -> tensor<8x4xf32>
