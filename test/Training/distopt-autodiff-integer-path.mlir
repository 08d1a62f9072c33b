// RUN: distopt-opt %s --distopt-autodiff --verify-diagnostics | FileCheck %s

// A weight the loss depends on only through integers (a QuantizeLinear:
// divided by its scale, rounded, cast to i8, cast back) gets no gradient:
// that is said, with its name, since a quantization-aware export is likely
// meant to train it. A weight the loss does not depend on at all gets none
// silently (a batch norm's running statistics), and %v, used, gets its
// gradient.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<4xf32> {dopt.grad_of = "v", dopt.name = "grad:v"})
module {
  // expected-warning@+1 {{weight 'q' reaches the loss only through integer or boolean values (a QuantizeLinear, a comparison, a cast to an integer type): it gets no gradient and is not trained}}
  func.func @main(%q: tensor<4xf32> {dopt.weight = {name = "q"}},
                  %unused: tensor<4xf32> {dopt.weight = {name = "unused"}},
                  %v: tensor<4xf32> {dopt.weight = {name = "v"}}) -> (tensor<f32> {dopt.name = "loss"}) {
    %r = dopt.round %q : (tensor<4xf32>) -> tensor<4xf32>
    %i = dopt.cast %r {to = i8} : (tensor<4xf32>) -> tensor<4xi8>
    %f = dopt.cast %i {to = f32} : (tensor<4xi8>) -> tensor<4xf32>
    %p = dopt.mul %f, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %s = dopt.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
