// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 schedule=1f1b' | FileCheck %s --check-prefix=ONEF
// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 schedule=gpipe' | FileCheck %s --check-prefix=GPIPE
// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 recompute=full' | FileCheck %s --check-prefix=FULL
// RUN: not distopt-opt %s --distopt-pipeline-training='stage=0 schedule=zigzag' 2>&1 | FileCheck %s --check-prefix=BAD

// Stage 0 of 3 over 4 micro-batches: the step takes the replica's 4
// micro-batches ([8, 4]) and returns the loss (all-reduced over the stages)
// and the gradient summed over the micro-batches.
// ONEF-LABEL: func.func @main(%arg0: tensor<8x4xf32> {{.*}}dopt.name = "x"}, %arg1: tensor<4x4xf32> {dopt.weight = {name = "w"}})
// ONEF-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<4x4xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// 1F1B: S - 1 - k = 2 warm-up forwards, then a forward and a backward in
// turn, then the remaining backwards. Forwards send their activation to
// stage 1; backwards receive its adjoint from there.
// ONEF: dopt.slice %arg0 {ends = array<i64: 2, 4>, starts = array<i64: 0, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: dopt.slice %arg0 {ends = array<i64: 4, 4>, starts = array<i64: 2, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: dopt.slice %arg0 {ends = array<i64: 6, 4>, starts = array<i64: 4, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF: dopt.slice %arg0 {ends = array<i64: 8, 4>, starts = array<i64: 6, 0>
// ONEF: shard.send {{.*}} destination = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF: shard.recv {{.*}} source = [1]
// ONEF-NOT: shard.send
// ONEF: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [0]
// GPipe: every forward, then every backward.
// GPIPE-COUNT-4: shard.send {{.*}} destination = [1]
// GPIPE-NOT: shard.send
// GPIPE-COUNT-4: shard.recv {{.*}} source = [1]
// Full recomputation: each backward runs the forward's matmul and relu
// again from the stashed input slice.
// FULL: %[[X0:.*]] = dopt.slice %arg0 {ends = array<i64: 2, 4>
// FULL: shard.send
// FULL: %[[H:.*]] = dopt.matmul %[[X0]], %arg1 {dopt.recomputed}
// FULL-NEXT: dopt.relu %[[H]] {dopt.recomputed}
// FULL: shard.recv
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
