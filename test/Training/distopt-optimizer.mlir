// RUN: distopt-opt %s --distopt-autodiff --distopt-optimizer='kind=adamw' --split-input-file --verify-diagnostics | FileCheck %s

// AdamW on one weight: the state (m, v) and the hyperparameters become
// inputs before the weights; the results are the loss, the gradients'
// global norm, the new moments and the new weight, decayed first.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<2x3xf32> {dopt.name = "x"}
// CHECK-SAME: {dopt.hyper = "lr", dopt.name = "opt.lr"}
// CHECK-SAME: {dopt.hyper = "step", dopt.name = "opt.step"}
// CHECK-SAME: {dopt.name = "opt.m:w", dopt.optimizer_state = {kind = "m", weight = "w"}}
// CHECK-SAME: {dopt.name = "opt.v:w", dopt.optimizer_state = {kind = "v", weight = "w"}}
// CHECK-SAME: {dopt.weight = {name = "w"}}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "grad_norm"},
// CHECK-SAME: {dopt.name = "opt.m:w", dopt.updates = "opt.m:w"}
// CHECK-SAME: {dopt.name = "opt.v:w", dopt.updates = "opt.v:w"}
// CHECK-SAME: {dopt.name = "update:w", dopt.updates_weight = "w"}
// CHECK: dopt.sqrt
// CHECK: dopt.min
// CHECK: dopt.pow
// CHECK: return
func.func @main(%x: tensor<2x3xf32> {dopt.name = "x"}, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
  %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
