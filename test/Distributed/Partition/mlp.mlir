// RUN: distopt-opt %s --distopt-partition --split-input-file --verify-diagnostics | FileCheck %s

// Megatron's MLP on dp 2 x tp 2: W1 split by columns, W2 by rows; the
// partial sum becomes one all_reduce over the tensor axis; the batch halves.

module attributes {dopt.plan = {dp = 2 : i64, microbatch_size = 8 : i64, microbatches = 1 : i64, pp = 1 : i64, recompute = "off", tp = 2 : i64}} {
  shard.grid @dopt_grid(shape = 1x2x2)
  func.func @main(%x: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %batch = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %col = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %row = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %batchcol = shard.sharding @dopt_grid split_axes = [[1], [2]] : !shard.sharding
    %xs = shard.shard %x to %batch : tensor<8x32xf32>
    %w1 = dopt.weight {name = "fc1", type = tensor<32x128xf32>} : () -> tensor<32x128xf32>
    %w1s = shard.shard %w1 to %col : tensor<32x128xf32>
    %h = dopt.matmul %xs, %w1s : (tensor<8x32xf32>, tensor<32x128xf32>) -> tensor<8x128xf32>
    %hs = shard.shard %h to %batchcol : tensor<8x128xf32>
    %g = dopt.relu %hs : (tensor<8x128xf32>) -> tensor<8x128xf32>
    %gs = shard.shard %g to %batchcol : tensor<8x128xf32>
    %w2 = dopt.weight {name = "fc2", type = tensor<128x32xf32>} : () -> tensor<128x32xf32>
    %w2s = shard.shard %w2 to %row : tensor<128x32xf32>
    %o = dopt.matmul %gs, %w2s : (tensor<8x128xf32>, tensor<128x32xf32>) -> tensor<8x32xf32>
    %os = shard.shard %o to %batch {dopt.partial = "sum"} : tensor<8x32xf32>
    %y = shard.shard %os to %batch annotate_for_users : tensor<8x32xf32>
    %r = dopt.add %xs, %y : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
    %rs = shard.shard %r to %batch : tensor<8x32xf32>
    return %rs : tensor<8x32xf32>
  }
}

// CHECK-LABEL: module attributes {dopt.partitioned
// CHECK: shard.grid @dopt_grid(shape = 1x2x2)
// CHECK: func.func @main(%[[X:.*]]: tensor<4x32xf32> {dopt.global_type = tensor<8x32xf32>, dopt.split_axes = {{\[\[}}1], []]}) -> (tensor<4x32xf32> {dopt.global_type = tensor<8x32xf32>, dopt.split_axes = {{\[\[}}1], []]})
// CHECK-NOT: shard.sharding
// CHECK-NOT: shard.shard
// CHECK: %[[W1:.*]] = dopt.weight {dopt.global_type = tensor<32x128xf32>, dopt.split_axes = {{\[\[}}], [2]], name = "fc1", type = tensor<32x64xf32>} : () -> tensor<32x64xf32>
// CHECK: %[[H:.*]] = dopt.matmul %[[X]], %[[W1]] : (tensor<4x32xf32>, tensor<32x64xf32>) -> tensor<4x64xf32>
// CHECK: %[[G:.*]] = dopt.relu %[[H]] : (tensor<4x64xf32>) -> tensor<4x64xf32>
// CHECK: %[[W2:.*]] = dopt.weight {dopt.global_type = tensor<128x32xf32>, dopt.split_axes = {{\[\[}}2], []], name = "fc2", type = tensor<64x32xf32>}
// CHECK: %[[O:.*]] = dopt.matmul %[[G]], %[[W2]] : (tensor<4x64xf32>, tensor<64x32xf32>) -> tensor<4x32xf32>
// CHECK: %[[Y:.*]] = shard.all_reduce %[[O]] on @dopt_grid grid_axes = [2] : tensor<4x32xf32> -> tensor<4x32xf32>
// CHECK: %[[R:.*]] = dopt.add %[[X]], %[[Y]] : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
// CHECK: return %[[R]] : tensor<4x32xf32>
