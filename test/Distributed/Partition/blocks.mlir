// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// A fused QKV projection split into Q, K and V along the column-split axis:
// each rank must hold the same block of every part, so the weight and the
// bias are loaded in that block layout (dopt.block_parts = 3) and the split
// sizes become local.

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
    %b = dopt.weight {name = "qkv.bias", type = tensor<24xf32>} : () -> tensor<24xf32>
    %bs = shard.shard %b to %bias : tensor<24xf32>
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
    return %os : tensor<4x8xf32>
  }
}

// CHECK: dopt.weight {dopt.block_parts = 3 : i64, dopt.global_type = tensor<8x24xf32>, dopt.split_axes = {{\[\[}}], [2]], name = "qkv.weight", type = tensor<8x12xf32>}
// CHECK: dopt.matmul {{.*}} : (tensor<4x8xf32>, tensor<8x12xf32>) -> tensor<4x12xf32>
// CHECK: dopt.weight {dopt.block_parts = 3 : i64, dopt.global_type = tensor<24xf32>, dopt.split_axes = {{\[\[}}2]], name = "qkv.bias", type = tensor<12xf32>}
// CHECK: dopt.split {{.*}} {axis = 1 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<4x12xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK-NOT: shard.all
