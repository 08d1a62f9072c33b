// RUN: distopt-opt %s --distopt-optimizer='kind=lamb' --verify-diagnostics
// RUN: not distopt-opt %s --distopt-optimizer='kind=sgd' 2>&1 | FileCheck %s --check-prefix=NOGRAD

// An unknown optimizer; and (kind=sgd) a model whose gradients were never
// taken.
// expected-error @+1 {{unknown optimizer 'lamb' (expected sgd, adam or adamw)}}
func.func @main(%w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
  %l = dopt.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
// NOGRAD: no gradients to apply (run distopt-autodiff first; are all weights frozen?)
