// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// A fused-QKV bias the plan keeps whole (the exporter shares one zero bias
// between layers) but the projection needs in its block layout: each rank
// takes its block of every part -- [24] viewed as [3, 8], sliced along the
// 8, back to [12] -- rather than the plain half a slice would give.

module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %col = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %bias = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %xs = shard.shard %x to %rep : tensor<4x8xf32>
    %w = dopt.weight {name = "qkv.weight", type = tensor<8x24xf32>} : () -> tensor<8x24xf32>
    %ws = shard.shard %w to %col : tensor<8x24xf32>
    %m = dopt.matmul %xs, %ws : (tensor<4x8xf32>, tensor<8x24xf32>) -> tensor<4x24xf32>
    %ms = shard.shard %m to %col : tensor<4x24xf32>
    %b = dopt.weight {name = "shared.bias", type = tensor<24xf32>} : () -> tensor<24xf32>
    %br = shard.shard %b to %rep : tensor<24xf32>
    %bs = shard.shard %br to %bias annotate_for_users : tensor<24xf32>
    %a = dopt.add %bs, %ms : (tensor<24xf32>, tensor<4x24xf32>) -> tensor<4x24xf32>
    %as = shard.shard %a to %col : tensor<4x24xf32>
    %p:3 = dopt.split %as {axis = 1 : i64, sizes = array<i64: 8, 8, 8>} : (tensor<4x24xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
    %q = shard.shard %p#0 to %col : tensor<4x8xf32>
    %k = shard.shard %p#1 to %col : tensor<4x8xf32>
    %v = shard.shard %p#2 to %col : tensor<4x8xf32>
    %s = dopt.add %q, %k : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %ss = shard.shard %s to %col : tensor<4x8xf32>
    %o = dopt.mul %ss, %v : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %os = shard.shard %o to %col : tensor<4x8xf32>
    %big = dopt.add %br, %br : (tensor<24xf32>, tensor<24xf32>) -> tensor<24xf32>
    return %os : tensor<4x8xf32>
  }
}

// CHECK: %[[B:.*]] = dopt.weight {name = "shared.bias", type = tensor<24xf32>}
// CHECK: %[[V:.*]] = dopt.reshape %[[B]] {shape = array<i64: 3, 8>} : (tensor<24xf32>) -> tensor<3x8xf32>
// CHECK: %[[S:.*]] = shard.all_slice %[[V]] on @dopt_grid grid_axes = [2] slice_axis = 1 : tensor<3x8xf32> -> tensor<3x4xf32>
// CHECK: %[[L:.*]] = dopt.reshape %[[S]] {shape = array<i64: 12>} : (tensor<3x4xf32>) -> tensor<12xf32>
// CHECK: dopt.add %[[L]]
