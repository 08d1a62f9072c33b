// RUN: distopt-opt %s --distopt-pipeline-training='stage=0 schedule=1f1b' | FileCheck %s

// A stage whose weight computes in 16 bits (autocast's cast of the weight
// argument): the copy is made once in the step and passed to each
// micro-batch's forward and backward (after their other arguments); the
// stage functions hold no cast of the weight, and the backward still
// returns the fp32 weight's gradient sum.
// CHECK-LABEL: func.func private @dopt_stage_forward(
// CHECK-SAME: %[[WB:[^:]*]]: tensor<4x4xbf16>)
// CHECK-NOT: dopt.cast %arg2
// CHECK: dopt.matmul %{{.*}}, %[[WB]]
// CHECK-LABEL: func.func private @dopt_stage_backward(
// CHECK-SAME: %arg6: tensor<4x4xbf16>) -> (tensor<4x4xf32> {dopt.accumulates = 4 : i64})
// CHECK-NOT: dopt.cast %arg2 {to = bf16}
// CHECK-LABEL: func.func @main(
// CHECK: %[[COPY:.*]] = dopt.cast %arg1 {to = bf16}
// CHECK-COUNT-4: call @dopt_stage_forward({{.*}}, %[[COPY]])
module attributes {dopt.pipeline = {microbatches = 4 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%x: tensor<2x4xbf16> {dopt.batch_dim = 0 : i64, dopt.model_input = 0 : i64, dopt.name = "x"},
                  %w: tensor<4x4xf32> {dopt.weight = {name = "w"}}) -> (tensor<2x4xbf16> {dopt.activation = 0 : i64}) {
    %wb = dopt.cast %w {to = bf16} : (tensor<4x4xf32>) -> tensor<4x4xbf16>
    %h = dopt.matmul %x, %wb : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
    %r = dopt.relu %h : (tensor<2x4xbf16>) -> tensor<2x4xbf16>
    return %r : tensor<2x4xbf16>
  }
}
