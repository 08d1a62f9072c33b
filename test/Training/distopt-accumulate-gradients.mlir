// RUN: distopt-opt %s --split-input-file --distopt-accumulate-gradients='steps=2' | FileCheck %s

// Two micro-batches of 2 samples: the data input holds 4; the micro-batch
// program, one function, is called on rows [0, 2) then [2, 4) with the
// micro-batch's index and the sums so far (zero before the first); it adds
// its loss and gradient weighted by its count; @main divides by the total.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<4x3xf32> {dopt.name = "x"}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK-DAG: %[[Z:.*]] = dopt.constant {value = dense<0.000000e+00> : tensor<f32>}
// CHECK-DAG: %[[ZG:.*]] = dopt.constant {value = dense<0.000000e+00> : tensor<3xf32>}
// CHECK: %[[S0:.*]] = dopt.slice %arg0 {ends = array<i64: 2, 3>, starts = array<i64: 0, 0>
// CHECK: %[[I0:.*]] = dopt.constant {value = dense<0> : tensor<i64>}
// CHECK: %[[R0:.*]]:3 = call @dopt_microbatch(%[[S0]], %arg1, %[[I0]], %{{.*}}, %{{.*}}, %[[ZG]])
// CHECK: %[[S1:.*]] = dopt.slice %arg0 {ends = array<i64: 4, 3>, starts = array<i64: 2, 0>
// CHECK: %[[I1:.*]] = dopt.constant {value = dense<1> : tensor<i64>}
// CHECK: %[[R1:.*]]:3 = call @dopt_microbatch(%[[S1]], %arg1, %[[I1]], %[[R0]]#0, %[[R0]]#1, %[[R0]]#2)
// CHECK: %[[L:.*]] = dopt.div %[[R1]]#0, %[[R1]]#1
// CHECK: %[[G:.*]] = dopt.div %[[R1]]#2, %[[R1]]#1
// CHECK: return %[[L]], %[[R1]]#1, %[[G]]
// CHECK-LABEL: func.func private @dopt_microbatch(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>, %[[W:.*]]: tensor<3xf32>, %{{.*}}: tensor<i64>, %[[LS:.*]]: tensor<f32>, %[[CS:.*]]: tensor<f32>, %[[GS:.*]]: tensor<3xf32>)
// CHECK: %[[Y:.*]] = dopt.mul %[[X]], %[[W]]
// CHECK: %[[LOSS:.*]] = dopt.reduce_sum %[[Y]]
// CHECK: %[[C:.*]] = dopt.constant {value = dense<2.000000e+00>
// CHECK: %[[GRAD:.*]] = dopt.reduce_sum %[[X]]
// CHECK: %[[ALIVE:.*]] = dopt.greater %[[C]]
// A micro-batch without counted labels adds nothing.
// CHECK: %[[WL:.*]] = dopt.mul %[[LOSS]], %[[C]]
// CHECK: %[[PL:.*]] = dopt.where %[[ALIVE]], %[[WL]]
// CHECK: %[[NL:.*]] = dopt.add %[[LS]], %[[PL]]
// CHECK: %[[NC:.*]] = dopt.add %[[CS]], %[[C]]
// CHECK: %[[WG:.*]] = dopt.mul %[[GRAD]], %[[C]]
// CHECK: %[[PG:.*]] = dopt.where %[[ALIVE]], %[[WG]]
// CHECK: %[[NG:.*]] = dopt.add %[[GS]], %[[PG]]
// CHECK: return %[[NL]], %[[NC]], %[[NG]]
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
// dopt.updates_weight): the function returns its new value, micro-batch 1
// updates what micro-batch 0 wrote, and only the last call's result is
// marked (dopt.updates_weights, per result); the step records K for the
// collectives' check.
// CHECK-LABEL: module attributes {dopt.accumulate = 2 : i64}
// CHECK: func.func @main(
// CHECK: %[[R0:.*]]:3 = call @dopt_microbatch(%{{.*}}, %arg1, %{{.*}})
// CHECK-NOT: dopt.updates_weights
// CHECK: call @dopt_microbatch(%{{.*}}, %[[R0]]#2, %{{.*}}) {dopt.updates_weights = [unit, unit, "rm"]}
// CHECK: func.func private @dopt_microbatch(
// CHECK: %[[M:.*]] = dopt.reduce_mean %arg0
// CHECK: %[[U:.*]] = dopt.add %arg1, %[[M]] : (
// CHECK-NOT: dopt.updates_weight
// CHECK: return %{{.*}}, %{{.*}}, %[[U]]
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
