// RUN: distopt-opt %s --split-input-file --distopt-accumulate-gradients='steps=2' | FileCheck %s
// RUN: distopt-opt %s --split-input-file --distopt-accumulate-gradients="steps=2 loop=false" | FileCheck %s --check-prefix=NOLOOP

// Two micro-batches of 2 samples: the data input holds 4; the micro-batch
// program, one function, is called in a loop over the two micro-batches,
// on rows [2m, 2m + 2) with the index m and the sums so far (zero before
// the first); it adds its loss and gradient weighted by its count; @main
// divides by the total.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<4x3xf32> {dopt.name = "x"}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK-DAG: %[[Z:.*]] = dopt.constant {value = dense<0.000000e+00> : tensor<f32>}
// CHECK-DAG: %[[ZG:.*]] = dopt.constant {value = dense<0.000000e+00> : tensor<3xf32>}
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[R:.*]]:3 = scf.for %[[M:.*]] = %[[C0]] to %[[C2]] step %{{.*}} iter_args(%[[L:.*]] = %{{.*}}, %[[N:.*]] = %{{.*}}, %[[G:.*]] = %[[ZG]])
// CHECK: %[[ROW:.*]] = arith.muli %[[M]], %{{.*}} : index
// CHECK: %[[S:.*]] = tensor.extract_slice %arg0[%[[ROW]], 0] [2, 3] [1, 1]
// CHECK: %[[I:.*]] = tensor.from_elements
// CHECK: %[[C:.*]]:3 = func.call @dopt_microbatch(%[[S]], %arg1, %[[I]], %[[L]], %[[N]], %[[G]])
// CHECK: scf.yield %[[C]]#0, %[[C]]#1, %[[C]]#2
// CHECK: %[[LOSS:.*]] = dopt.div %[[R]]#0, %[[R]]#1
// CHECK: %[[GRAD:.*]] = dopt.div %[[R]]#2, %[[R]]#1
// CHECK: return %[[LOSS]], %[[R]]#1, %[[GRAD]]
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
// dopt.updates_weight): the function returns its new value, the loop
// carries it to the next micro-batch (which updates what the one before
// wrote), and the loop's result is marked (dopt.updates_weights, per
// result); the step records K for the collectives' check.
// CHECK-LABEL: module attributes {dopt.accumulate = 2 : i64}
// CHECK: func.func @main(
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %[[RM:.*]] = %arg1)
// CHECK: func.call @dopt_microbatch(%{{.*}}, %[[RM]], %{{.*}})
// CHECK: } {dopt.updates_weights = [unit, unit, "rm"]}
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

// -----

// loop=false (the CUDA target): the same function, called once per
// micro-batch one after the other; the last call's update is the step's.
// NOLOOP-LABEL: func.func @main(%arg0: tensor<4x3xf32> {dopt.name = "x"}, %arg1: tensor<3xf32> {dopt.weight = {name = "rs"}})
// NOLOOP-NOT: scf.for
// NOLOOP: %[[R0:.*]]:3 = call @dopt_microbatch(%{{.*}}, %arg1, %{{.*}})
// NOLOOP-NOT: dopt.updates_weights
// NOLOOP: call @dopt_microbatch(%{{.*}}, %[[R0]]#2, %{{.*}}) {dopt.updates_weights = [unit, unit, "rs"]}
module {
  func.func @main(%x: tensor<2x3xf32> {dopt.name = "x"}, %rm: tensor<3xf32> {dopt.weight = {name = "rs"}})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"}) {
    %m = dopt.reduce_mean %x {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
    %u = dopt.add %rm, %m {dopt.updates_weight = "rs"} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %l = dopt.reduce_sum %x {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    return %l, %c : tensor<f32>, tensor<f32>
  }
}

// -----

// A weight's 16-bit copy (autocast's cast of the weight argument) is made
// once, in @main before the loop, and passed to every call after the sums;
// the micro-batch function reads the copy, not a cast of its own.
// CHECK: func.func @main(%arg0: tensor<4x3xbf16>
// CHECK: %[[COPY:.*]] = dopt.cast %arg1 {to = bf16}
// CHECK: scf.for
// CHECK: func.call @dopt_microbatch(%{{.*}}, %arg1, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[COPY]])
// CHECK: func.func private @dopt_microbatch(%arg0: tensor<2x3xbf16>
// CHECK-SAME: %[[WB:[^:]*]]: tensor<3xbf16>)
// CHECK-NOT: dopt.cast %arg1
// CHECK: dopt.mul %{{.*}}, %[[WB]]
module {
  func.func @main(%x: tensor<2x3xbf16> {dopt.name = "x"}, %w: tensor<3xf32> {dopt.weight = {name = "w"}})
      -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "counted"},
          tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"}) {
    %wb = dopt.cast %w {to = bf16} : (tensor<3xf32>) -> tensor<3xbf16>
    %y = dopt.mul %x, %wb : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
    %y32 = dopt.cast %y {to = f32} : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    %l = dopt.reduce_sum %y32 {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %x32 = dopt.cast %x {to = f32} : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    %g = dopt.reduce_sum %x32 {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
    return %l, %c, %g : tensor<f32>, tensor<f32>, tensor<3xf32>
  }
}
