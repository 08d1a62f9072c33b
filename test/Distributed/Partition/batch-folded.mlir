// RUN: distopt-opt %s --distopt-partition --split-input-file | FileCheck %s

// Data parallelism over a batch that attention folds with the heads
// ([T, B, D] -> [T, B*H, D/H], dopt.batch_inner = H) and unfolds as the
// minor part of [T*B, D]: only the batch part of each dimension shrinks.

module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<4x8x32xf32>) -> tensor<4x8x32xf32> {
    %b1 = shard.sharding @dopt_grid split_axes = [[], [1]] : !shard.sharding
    %b0 = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %xs = shard.shard %x to %b1 {dopt.batch_dim = 1 : i64} : tensor<4x8x32xf32>
    %h = dopt.reshape %xs {shape = array<i64: 4, 32, 8>} : (tensor<4x8x32xf32>) -> tensor<4x32x8xf32>
    %hs = shard.shard %h to %b1 {dopt.batch_dim = 1 : i64, dopt.batch_inner = 4 : i64} : tensor<4x32x8xf32>
    %f = dopt.reshape %hs {shape = array<i64: 32, 32>} : (tensor<4x32x8xf32>) -> tensor<32x32xf32>
    %fs = shard.shard %f to %b0 {dopt.batch_dim = 0 : i64} : tensor<32x32xf32>
    %y = dopt.reshape %fs {shape = array<i64: 4, 8, 32>} : (tensor<32x32xf32>) -> tensor<4x8x32xf32>
    %ys = shard.shard %y to %b1 {dopt.batch_dim = 1 : i64} : tensor<4x8x32xf32>
    return %ys : tensor<4x8x32xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<4x4x32xf32>
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 4, 16, 8>} : (tensor<4x4x32xf32>) -> tensor<4x16x8xf32>
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 16, 32>} : (tensor<4x16x8xf32>) -> tensor<16x32xf32>
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 4, 4, 32>} : (tensor<16x32xf32>) -> tensor<4x4x32xf32>
// CHECK-NOT: shard.all

// -----

// An uneven batch of 3 over 2 replicas: each runs ceil(3/2) = 2 samples,
// so [T, 3*H, hd] becomes [T, 2*H, hd], not ceil(12/2).

module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<4x3x32xf32>) -> tensor<4x3x32xf32> {
    %b1 = shard.sharding @dopt_grid split_axes = [[], [1]] : !shard.sharding
    %b0 = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %xs = shard.shard %x to %b1 {dopt.batch_dim = 1 : i64} : tensor<4x3x32xf32>
    %h = dopt.reshape %xs {shape = array<i64: 4, 12, 8>} : (tensor<4x3x32xf32>) -> tensor<4x12x8xf32>
    %hs = shard.shard %h to %b1 {dopt.batch_dim = 1 : i64, dopt.batch_inner = 4 : i64} : tensor<4x12x8xf32>
    %e = dopt.exp %hs : (tensor<4x12x8xf32>) -> tensor<4x12x8xf32>
    %es = shard.shard %e to %b1 {dopt.batch_dim = 1 : i64, dopt.batch_inner = 4 : i64} : tensor<4x12x8xf32>
    %f = dopt.reshape %es {shape = array<i64: 12, 32>} : (tensor<4x12x8xf32>) -> tensor<12x32xf32>
    %fs = shard.shard %f to %b0 {dopt.batch_dim = 0 : i64} : tensor<12x32xf32>
    %n = dopt.neg %fs : (tensor<12x32xf32>) -> tensor<12x32xf32>
    %ns = shard.shard %n to %b0 {dopt.batch_dim = 0 : i64} : tensor<12x32xf32>
    %y = dopt.reshape %ns {shape = array<i64: 4, 3, 32>} : (tensor<12x32xf32>) -> tensor<4x3x32xf32>
    %ys = shard.shard %y to %b1 {dopt.batch_dim = 1 : i64} : tensor<4x3x32xf32>
    return %ys : tensor<4x3x32xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 4, 8, 8>} : (tensor<4x2x32xf32>) -> tensor<4x8x8xf32>
// CHECK: dopt.exp %{{.*}} : (tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 8, 32>} : (tensor<4x8x8xf32>) -> tensor<8x32xf32>
// CHECK: dopt.reshape %{{.*}} {shape = array<i64: 4, 2, 32>} : (tensor<8x32xf32>) -> tensor<4x2x32xf32>
