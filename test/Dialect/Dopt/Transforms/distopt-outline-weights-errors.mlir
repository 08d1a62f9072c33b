// RUN: distopt-opt %s --distopt-outline-weights --split-input-file --verify-diagnostics

// One name, two types: an error at the second reference.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = dopt.weight {name = "w", type = tensor<4xf32>} : () -> tensor<4xf32>
  // expected-error@+1 {{weight 'w' is used with two different types}}
  %b = dopt.weight {name = "w", type = tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %c = dopt.add %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// expected-error@+1 {{no @main function to outline weights into}}
module {
  func.func @other() {
    return
  }
}
