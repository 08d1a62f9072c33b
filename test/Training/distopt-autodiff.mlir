// RUN: distopt-opt %s --distopt-autodiff='freeze-weights=^frozen' --split-input-file --verify-diagnostics | FileCheck %s

// A weight broadcast against an input, summed to a scalar: the adjoint 1 is
// spread back over the sum's input, multiplied by the other factor, and
// summed over the dimension the broadcast added.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK: %[[ONE:.*]] = dopt.constant {value = dense<1.000000e+00> : tensor<f32>}
// CHECK: %[[R:.*]] = dopt.reshape %[[ONE]] {{.*}} -> tensor<1x1xf32>
// CHECK: %[[E:.*]] = dopt.expand %[[R]] {{.*}} -> tensor<2x3xf32>
// CHECK: %[[M:.*]] = dopt.mul %[[E]], %arg0
// CHECK: %[[S:.*]] = dopt.reduce_sum %[[M]] {axes = array<i64: 0>}
// CHECK: %[[G:.*]] = dopt.reshape %[[S]] {{.*}} -> tensor<3xf32>
// CHECK: return %{{.*}}, %[[G]]
func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
  %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A matrix product: dW = X^T G, a gemm reading X transposed (no copy); the
// frozen weight, and a weight that does not reach the loss, get nothing.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32>, tensor<4x5xf32> {dopt.grad_of = "fc", dopt.name = "grad:fc"})
// CHECK-NOT: dopt.transpose
// CHECK: %[[GW:.*]] = dopt.gemm %arg0, %{{.*}} {trans_a = true} : (tensor<2x4xf32>, tensor<2x5xf32>) -> tensor<4x5xf32>
// CHECK: return %{{.*}}, %[[GW]] :
func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x5xf32> {dopt.weight = {name = "fc"}},
                %b: tensor<5xf32> {dopt.weight = {name = "frozen.bias"}},
                %u: tensor<7xf32> {dopt.weight = {name = "unused"}}) -> tensor<f32> {
  %y = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  %z = dopt.add %y, %b : (tensor<2x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  %l = dopt.reduce_mean %z {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An op without a rule on the path from a weight to the loss is an error at
// the op.
func.func @main(%x: tensor<2x4xf32>, %w: tensor<4xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
  %y = dopt.add %x, %w : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // expected-error @+1 {{no gradient rule for dopt.pad in mode 'reflect' yet}}
  %s = dopt.pad %y {pads = array<i64: 0, 1, 0, 1>, mode = "reflect"} : (tensor<2x4xf32>) -> tensor<2x6xf32>
  %m = dopt.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x6xf32>) -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// expected-error @+1 {{the loss (result 0) must be one float value, got 'tensor<2xf32>'}}
func.func @main(%w: tensor<2xf32> {dopt.weight = {name = "w"}}) -> tensor<2xf32> {
  return %w : tensor<2xf32>
}

// -----

// A replica's loss summed over the data-parallel replicas: the sum's
// adjoint reaches this replica's share unchanged (the weights' adjoints are
// then partial sums, distopt-sync-gradients adds them up).
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK: %[[S:.*]] = dopt.reduce_sum
// CHECK: shard.all_reduce %[[S]]
// CHECK: %[[ONE:.*]] = dopt.constant {value = dense<1.000000e+00> : tensor<f32>}
// CHECK-NOT: shard.all_reduce
// CHECK: dopt.reshape %[[ONE]]
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
    %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %s = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    %l = shard.all_reduce %s on @dopt_grid grid_axes = [1] : tensor<f32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Only sums over replicas are differentiated.
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
    %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %s = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
    // expected-error @+1 {{no gradient rule for a max all-reduce (only sums and averages over ranks are differentiated)}}
    %l = shard.all_reduce %s on @dopt_grid grid_axes = [1] reduction = max : tensor<f32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Convolutions: the input gradient of a strided convolution is a
// transposed convolution of the output gradient with the same weight and
// parameters (no flipped or regrouped weight copy; cuDNN's backward data on
// a GPU), its output padding the row and column the stride skipped (8 = 2 *
// 3 + 3 - 1 - 1 + 1); the weight gradient of a transposed convolution is a
// convolution of the input with its output gradient as the filter, and its
// input gradient a plain convolution.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32>, tensor<4x2x3x3xf32> {dopt.grad_of = "down", dopt.name = "grad:down"}, tensor<4x2x3x3xf32> {dopt.grad_of = "up", dopt.name = "grad:up"})
// CHECK: %[[GD:.*]] = dopt.conv %{{.*}}, %arg2 {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
// CHECK: %[[DX:.*]] = dopt.conv_transpose %{{.*}}, %arg1 {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x8x8xf32>
func.func @main(%x: tensor<1x2x8x8xf32>, %wd: tensor<4x2x3x3xf32> {dopt.weight = {name = "down"}},
                %wu: tensor<4x2x3x3xf32> {dopt.weight = {name = "up"}}) -> tensor<f32> {
  %h = dopt.conv %x, %wd {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
  %y = dopt.conv_transpose %h, %wu {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, output_padding = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x8x8xf32>
  %l = dopt.reduce_sum %y {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x2x8x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A weight from an ONNX Constant node (`constant`) is part of the model, not
// a parameter: only the initializer gets a gradient.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32> {dopt.grad_of = "w", dopt.name = "grad:w"})
// CHECK-NOT: grad:table
func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}},
                %t: tensor<3xf32> {dopt.weight = {constant, name = "table"}}) -> tensor<f32> {
  %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = dopt.mul %y, %t : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = dopt.reduce_sum %z {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
