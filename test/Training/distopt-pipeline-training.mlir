// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 schedule=1f1b' | FileCheck %s --check-prefix=ONEF
// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 schedule=gpipe' | FileCheck %s --check-prefix=GPIPE
// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 recompute=full' | FileCheck %s --check-prefix=FULL
// RUN: not distopt-opt %s --distopt-pipeline-training='stage=0 schedule=zigzag' 2>&1 | FileCheck %s --check-prefix=BAD

// Stage 0 of 3 over 4 micro-batches: the step takes the replica's 4
// micro-batches ([8, 4]) and returns the loss (all-reduced over the stages)
// and the gradient summed over the micro-batches. The stage's forward and
// backward of one micro-batch are functions, compiled once and called per
// micro-batch with its index: the forward returns the activation it sends
// and what the backward reads of it (the stash: the matmul's result, which
// the relu's backward reads); the backward takes the micro-batch's inputs,
// the received adjoint, the gradient's sum so far and the stash, and
// returns the sum.
// ONEF-LABEL: func.func private @dopt_stage_forward(
// ONEF-SAME: %{{.*}}: tensor<i64>, %[[FX:.*]]: tensor<2x4xf32>, %[[FW:.*]]: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// ONEF: %[[H:.*]] = dopt.matmul %[[FX]], %[[FW]]
// ONEF: %[[R:.*]] = dopt.relu %[[H]]
// ONEF: return %[[R]], %[[H]]
// ONEF-LABEL: func.func private @dopt_stage_backward(
// ONEF-SAME: %{{.*}}: tensor<i64>, %[[BX:[^:]*]]: tensor<2x4xf32>, %{{.*}}: tensor<4x4xf32>, %[[ADJ:[^:]*]]: tensor<2x4xf32>, %[[SUM:[^:]*]]: tensor<4x4xf32>, %[[STASH:[^:]*]]: tensor<2x4xf32>) -> (tensor<4x4xf32> {dopt.accumulates = 4 : i64})
// ONEF-NOT: dopt.matmul
// ONEF: dopt.greater %[[STASH]]
// ONEF: %[[G:.*]] = dopt.gemm %[[BX]], %{{.*}} {trans_a = true}
// ONEF: %[[NEW:.*]] = dopt.add %[[SUM]], %[[G]]
// ONEF: return %[[NEW]]
// ONEF-LABEL: func.func @main(%arg0: tensor<8x4xf32> {{.*}}dopt.name = "x"}, %arg1: tensor<4x4xf32> {dopt.weight = {name = "w"}})
// ONEF-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<4x4xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// 1F1B: S - 1 - k = 2 warm-up forwards, then a forward and a backward in
// turn, then the remaining backwards. Forwards send their activation to
// stage 1; backwards receive its adjoint from there.
// ONEF: %[[X0:.*]] = dopt.slice %arg0 {ends = array<i64: 2, 4>, starts = array<i64: 0, 0>
// ONEF: %[[F0:.*]]:2 = call @dopt_stage_forward(%{{.*}}, %[[X0]], %arg1)
// ONEF: shard.send %[[F0]]#0 {{.*}} destination = [1]
// ONEF: dopt.slice %arg0 {ends = array<i64: 4, 4>, starts = array<i64: 2, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: dopt.slice %arg0 {ends = array<i64: 6, 4>, starts = array<i64: 4, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: %[[A0:.*]] = shard.recv {{.*}} source = [1]
// ONEF: %[[B0:.*]] = call @dopt_stage_backward(%{{.*}}, %[[X0]], %arg1, %[[A0]], %{{.*}}, %[[F0]]#1)
// ONEF: dopt.slice %arg0 {ends = array<i64: 8, 4>, starts = array<i64: 6, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF: call @dopt_stage_backward(%{{.*}}, %{{.*}}, %arg1, %{{.*}}, %[[B0]], %{{.*}})
// ONEF: shard.recv {{.*}} source = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF-NOT: shard.send
// ONEF: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [0]
// GPipe: every forward, then every backward.
// GPIPE-COUNT-4: shard.send {{.*}} destination = [1]
// GPIPE-NOT: shard.send
// GPIPE-COUNT-4: shard.recv {{.*}} source = [1]
// Full recomputation: the forward stashes nothing; each backward runs the
// forward's matmul again from the micro-batch's input slice.
// FULL-LABEL: func.func private @dopt_stage_forward(
// FULL-SAME: -> tensor<2x4xf32>
// FULL-LABEL: func.func private @dopt_stage_backward(
// FULL-SAME: %{{.*}}: tensor<i64>, %[[X:[^:]*]]: tensor<2x4xf32>, %[[W:[^:]*]]: tensor<4x4xf32>, %{{.*}}: tensor<2x4xf32>, %{{.*}}: tensor<4x4xf32>) -> (tensor<4x4xf32> {dopt.accumulates = 4 : i64})
// FULL: %[[H:.*]] = dopt.matmul %[[X]], %[[W]] {dopt.recomputed}
// FULL: dopt.greater %[[H]]
// FULL-LABEL: func.func @main(
// FULL: %[[X0:.*]] = dopt.slice %arg0 {ends = array<i64: 2, 4>
// FULL: call @dopt_stage_forward(%{{.*}}, %[[X0]], %arg1) : {{.*}} -> tensor<2x4xf32>
// FULL: shard.send
// FULL: shard.recv
// FULL: call @dopt_stage_backward(%{{.*}}, %[[X0]], %arg1,
// BAD: unknown pipeline schedule 'zigzag' (expected gpipe or 1f1b)
module attributes {dopt.pipeline = {microbatches = 4 : i64, stages = 3 : i64}} {
  shard.grid @dopt_grid(shape = 3x1x1)
  func.func @main(%x: tensor<2x4xf32> {dopt.batch_dim = 0 : i64, dopt.model_input = 0 : i64, dopt.name = "x"},
                  %w: tensor<4x4xf32> {dopt.weight = {name = "w"}}) -> (tensor<2x4xf32> {dopt.activation = 0 : i64}) {
    %h = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %r = dopt.relu %h : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %r : tensor<2x4xf32>
  }
}
