// RUN: distopt-opt %s --distopt-outline-stages --split-input-file | FileCheck %s

// A partitioned 2-stage, tp 2 program (distopt-partition outline-stages=false)
// whose stage boundary lies inside a tensor-parallel region: the activation
// %h is the column-split matmul's block, different on each rank of the
// tensor axis, and says so on both sides (the pipelined backward needs to
// know); %x, the same everywhere, does not.
// CHECK-NOT: func.func @main
// CHECK: func.func @dopt_stage_0(%arg0: tensor<2x8xf32> {dopt.model_input = 0 : i64, dopt.name = "x"})
// CHECK-SAME: -> (tensor<2x4xf32> {dopt.activation = 0 : i64, dopt.tensor_varying}, tensor<2x8xf32> {dopt.activation = 1 : i64})
// CHECK: func.func @dopt_stage_1(%arg0: tensor<2x4xf32> {dopt.activation = 0 : i64, dopt.tensor_varying}, %arg1: tensor<2x8xf32> {dopt.activation = 1 : i64})
// CHECK: shard.all_reduce
module attributes {dopt.partitioned, dopt.pipeline = {microbatches = 2 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x2)
  func.func @main(%x: tensor<2x8xf32> {dopt.name = "x"}) -> (tensor<2x8xf32> {dopt.name = "y"}) {
    %w1 = dopt.weight {dopt.global_type = tensor<8x8xf32>, dopt.split_axes = [[], [2]], name = "w1", type = tensor<8x4xf32>, dopt.stage = 0 : i64} : () -> tensor<8x4xf32>
    %xn = dopt.neg %x {dopt.stage = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %h = dopt.matmul %xn, %w1 {dopt.stage = 0 : i64} : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    %w2 = dopt.weight {dopt.global_type = tensor<8x8xf32>, dopt.split_axes = [[2], []], name = "w2", type = tensor<4x8xf32>, dopt.stage = 1 : i64} : () -> tensor<4x8xf32>
    %r = dopt.relu %h {dopt.stage = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %p = dopt.matmul %r, %w2 {dopt.stage = 1 : i64} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %y = shard.all_reduce %p on @dopt_grid grid_axes = [2] {dopt.stage = 1 : i64} : tensor<2x8xf32> -> tensor<2x8xf32>
    %z = dopt.add %y, %xn {dopt.stage = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    return %z : tensor<2x8xf32>
  }
}

// -----

// A constant read by two stages (a causal mask, a scale) is copied into
// each: it is not an activation sent between them.
// CHECK: shard.grid @dopt_grid(shape = 2x1x1)
// CHECK: func.func @dopt_stage_0(%arg0: tensor<2x8xf32> {dopt.model_input = 0 : i64, dopt.name = "x"})
// CHECK-SAME: -> (tensor<2x8xf32> {dopt.activation = 0 : i64})
// CHECK: dopt.constant
// CHECK: func.func @dopt_stage_1(%arg0: tensor<2x8xf32> {dopt.activation = 0 : i64})
// CHECK-SAME: -> (tensor<2x8xf32> {dopt.model_output = 0 : i64, dopt.name = "y"})
// CHECK: %[[C:.*]] = dopt.constant
// CHECK: dopt.mul %arg0, %[[C]]
module attributes {dopt.partitioned, dopt.pipeline = {microbatches = 2 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%x: tensor<2x8xf32> {dopt.name = "x"}) -> (tensor<2x8xf32> {dopt.name = "y"}) {
    %c = dopt.constant {value = dense<0.5> : tensor<2x8xf32>} : () -> tensor<2x8xf32>
    %a = dopt.mul %x, %c {dopt.stage = 0 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %b = dopt.mul %a, %c {dopt.stage = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    return %b : tensor<2x8xf32>
  }
}
