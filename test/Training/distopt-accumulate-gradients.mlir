// RUN: distopt-opt %s --split-input-file --distopt-accumulate-gradients='steps=2' | FileCheck %s

// Two micro-batches of 2 samples: the data input holds 4; the micro-batch
// program runs on rows [0, 2) then [2, 4); loss and gradient are the two
// weighted by their counts over the total.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<4x3xf32> {dopt.name = "x"}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK: %[[S0:.*]] = dopt.slice %arg0 {ends = array<i64: 2, 3>, starts = array<i64: 0, 0>
// CHECK: %[[G0:.*]] = dopt.mul %[[S0]], %arg1
// CHECK: %[[S1:.*]] = dopt.slice %arg0 {ends = array<i64: 4, 3>, starts = array<i64: 2, 0>
// CHECK: %[[G1:.*]] = dopt.mul %[[S1]], %arg1
// CHECK: %[[C:.*]] = dopt.add %[[C0:.*]], %[[C1:.*]]
// CHECK: dopt.div %{{.*}}, %[[C]]
// CHECK: return
// CHECK-NOT: dopt_microbatch
module {
  func.func @main(%x: tensor<2x3xf32> {dopt.name = "x"}, %w: tensor<3xf32> {dopt.weight = {name = "w"}})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"},
          tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"}) {
    %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %l = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %g = dopt.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
    return %l, %c, %g : tensor<f32>, tensor<f32>, tensor<3xf32>
  }
}

// -----

// A weight the forward pass updates (batch norm's running mean, marked
// dopt.updates_weight): micro-batch 1 updates what micro-batch 0 wrote, and
// only its update stays marked; the step records K for the collectives'
// check.
// CHECK-LABEL: module attributes {dopt.accumulate = 2 : i64}
// CHECK: func.func @main(
// CHECK: %[[S0:.*]] = dopt.slice %arg0
// CHECK: %[[M0:.*]] = dopt.reduce_mean %[[S0]]
// CHECK: %[[U0:.*]] = dopt.add %arg1, %[[M0]] : (
// CHECK: %[[S1:.*]] = dopt.slice %arg0
// CHECK: %[[M1:.*]] = dopt.reduce_mean %[[S1]]
// CHECK: dopt.add %[[U0]], %[[M1]] {dopt.updates_weight = "rm"}
module {
  func.func @main(%x: tensor<2x3xf32> {dopt.name = "x"}, %rm: tensor<3xf32> {dopt.weight = {name = "rm"}})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}) {
    %m = dopt.reduce_mean %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
    %u = dopt.add %rm, %m {dopt.updates_weight = "rm"} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %l = dopt.reduce_sum %x {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    return %l, %c : tensor<f32>, tensor<f32>
  }
}
