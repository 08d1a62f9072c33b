// RUN: distopt-opt %s --split-input-file --distopt-accumulate-gradients='steps=2' -verify-diagnostics | FileCheck %s --check-prefix=ACC
// RUN: distopt-opt %s --split-input-file --distopt-pipeline-training='stage=0 schedule=gpipe' -verify-diagnostics | FileCheck %s --check-prefix=PIPE

// Micro-batches of a model whose batch is dimension 1 (sequence-first,
// [seq, batch, features]; dopt.batch_dim from distopt compile): the data
// input's samples are cut along dimension 1, and each dropout (its batch
// dimension from the planner's graph) continues its mask positions along
// that dimension, so that the micro-batches draw the whole batch's masks.

// ACC-LABEL: func.func @main(
// ACC-SAME: %arg0: tensor<3x4x5xf32> {dopt.batch_dim = 1 : i64, dopt.name = "x"}
// ACC: scf.for %[[M:.*]] = %{{.*}} to %{{.*}} step
// ACC: %[[ROW:.*]] = arith.muli %[[M]], %{{.*}} : index
// ACC: %[[S:.*]] = tensor.extract_slice %arg0[0, %[[ROW]], 0] [3, 2, 5] [1, 1, 1]
// ACC: %[[M64:.*]] = arith.index_cast %[[M]] : index to i64
// ACC: %[[I:.*]] = tensor.from_elements %[[M64]] : tensor<i64>
// ACC: func.call @dopt_microbatch(%[[S]], %arg1, %arg2, %[[I]],
// The function's dropout is at rows m * 2 along dimension 1, m its argument.
// ACC-LABEL: func.func private @dopt_microbatch(
// ACC-SAME: %[[X:[^:]*]]: tensor<3x2x5xf32>, %{{.*}}: tensor<5xf32>, %[[KEY:[^:]*]]: tensor<i64>, %[[M:[^:]*]]: tensor<i64>
// ACC: %[[ROWS:.*]] = dopt.constant {value = dense<[0, 2, 0]> : tensor<3xi64>}
// ACC: %[[O:.*]] = dopt.mul %[[ROWS]], %[[M]]
// ACC: dopt.dropout %[[X]], %[[KEY]], %[[O]] {dopt.batch_dim = 1 : i64, global_shape = array<i64: 3, 4, 5>
// A pipeline (one stage here, two micro-batches) places them alike: its
// forward function's dropout at m * 2, the micro-batches' calls with m.
// PIPE-LABEL: func.func private @dopt_stage_forward(
// PIPE-SAME: %[[M:[^:]*]]: tensor<i64>, %[[X:[^:]*]]: tensor<3x2x5xf32>, %{{.*}}: tensor<5xf32>, %[[KEY:[^:]*]]: tensor<i64>)
// PIPE: %[[ROWS:.*]] = dopt.constant {value = dense<[0, 2, 0]> : tensor<3xi64>}
// PIPE: %[[O:.*]] = dopt.mul %[[ROWS]], %[[M]]
// PIPE: dopt.dropout %[[X]], %[[KEY]], %[[O]] {dopt.batch_dim = 1 : i64, global_shape = array<i64: 3, 4, 5>
// PIPE-LABEL: func.func @main(
// PIPE-SAME: %arg0: tensor<3x4x5xf32> {dopt.batch_dim = 1 : i64, dopt.name = "x"}
// PIPE: %[[S0:.*]] = dopt.slice %arg0 {ends = array<i64: 3, 2, 5>, starts = array<i64: 0, 0, 0>
// PIPE: %[[S1:.*]] = dopt.slice %arg0 {ends = array<i64: 3, 4, 5>, starts = array<i64: 0, 2, 0>
// PIPE: %[[I0:.*]] = dopt.constant {value = dense<0> : tensor<i64>}
// PIPE: call @dopt_stage_forward(%[[I0]], %[[S0]],
// PIPE: %[[I1:.*]] = dopt.constant {value = dense<1> : tensor<i64>}
// PIPE: call @dopt_stage_forward(%[[I1]], %[[S1]],
module attributes {dopt.pipeline = {microbatches = 2 : i64, stages = 1 : i64}} {
  shard.grid @dopt_grid(shape = 1x1x1)
  func.func @main(%x: tensor<3x2x5xf32> {dopt.batch_dim = 1 : i64, dopt.name = "x"},
                  %w: tensor<5xf32> {dopt.weight = {name = "w"}},
                  %k: tensor<i64> {dopt.rng_key})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}) {
    %d = dopt.dropout %x, %k {dopt.batch_dim = 1 : i64, ratio = 2.500000e-01 : f32, stream = 0 : i64} : (tensor<3x2x5xf32>, tensor<i64>) -> tensor<3x2x5xf32>
    %y = dopt.mul %d, %w : (tensor<3x2x5xf32>, tensor<5xf32>) -> tensor<3x2x5xf32>
    %l = dopt.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<3x2x5xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    return %l, %c : tensor<f32>, tensor<f32>
  }
}

// -----

// A dropout whose input holds the batch spread over a dimension with other
// data (dopt.batch_dim = -1: [seq * batch, features] with the sequence
// outermost): a micro-batch's rows are not one block there, so no offset
// gives it the whole batch's mask.
module attributes {dopt.pipeline = {microbatches = 2 : i64, stages = 2 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%x: tensor<6x5xf32> {dopt.batch_dim = 0 : i64, dopt.model_input = 0 : i64, dopt.name = "x"},
                  %w: tensor<5xf32> {dopt.weight = {name = "w"}},
                  %k: tensor<i64> {dopt.rng_key})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}) {
    // expected-error @+1 {{cuts the batch into micro-batches, but this dropout's input holds the batch spread over a dimension with other data, so a micro-batch's mask cannot be the whole batch's}}
    %d = dopt.dropout %x, %k {dopt.batch_dim = -1 : i64, ratio = 2.500000e-01 : f32, stream = 0 : i64} : (tensor<6x5xf32>, tensor<i64>) -> tensor<6x5xf32>
    %y = dopt.mul %d, %w : (tensor<6x5xf32>, tensor<5xf32>) -> tensor<6x5xf32>
    %l = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<6x5xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    return %l, %c : tensor<f32>, tensor<f32>
  }
}

// -----

// A replica's dropout (the partitioner's offsets: its block of the batch at
// micro-batch size) holds its K micro-batches as one block of the whole
// batch, as the loader lays the samples out: offsets * K + m * rows along
// the batch dimension, in a whole tensor K times as large there.
// ACC-LABEL: func.func @main(
// ACC: scf.for
// ACC: func.call @dopt_microbatch(
// ACC-LABEL: func.func private @dopt_microbatch(
// ACC-SAME: %[[OFF:[^:]*]]: tensor<3xi64>, %[[M:[^:]*]]: tensor<i64>
// ACC: %[[ROWS:.*]] = dopt.constant {value = dense<[0, 2, 0]> : tensor<3xi64>}
// ACC: %[[SH:.*]] = dopt.mul %[[ROWS]], %[[M]]
// ACC: %[[K:.*]] = dopt.constant {value = dense<[1, 2, 1]> : tensor<3xi64>}
// ACC: %[[SC:.*]] = dopt.mul %[[OFF]], %[[K]]
// ACC: %[[O:.*]] = dopt.add %[[SC]], %[[SH]]
// ACC: dopt.dropout %{{.*}}, %{{.*}}, %[[O]] {dopt.batch_dim = 1 : i64, global_shape = array<i64: 3, 8, 5>
module attributes {dopt.pipeline = {microbatches = 2 : i64, stages = 1 : i64}} {
  shard.grid @dopt_grid(shape = 1x1x1)
  func.func @main(%x: tensor<3x2x5xf32> {dopt.batch_dim = 1 : i64, dopt.name = "x"},
                  %w: tensor<5xf32> {dopt.weight = {name = "w"}},
                  %k: tensor<i64> {dopt.rng_key}, %off: tensor<3xi64> {dopt.weight = {name = "off"}})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}) {
    %d = dopt.dropout %x, %k, %off {dopt.batch_dim = 1 : i64, global_shape = array<i64: 3, 4, 5>, ratio = 2.500000e-01 : f32, stream = 0 : i64} : (tensor<3x2x5xf32>, tensor<i64>, tensor<3xi64>) -> tensor<3x2x5xf32>
    %y = dopt.mul %d, %w : (tensor<3x2x5xf32>, tensor<5xf32>) -> tensor<3x2x5xf32>
    %l = dopt.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<3x2x5xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    return %l, %c : tensor<f32>, tensor<f32>
  }
}
