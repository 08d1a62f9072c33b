// RUN: distopt-opt %s --distopt-autocast=precision=f8 --split-input-file --verify-diagnostics

// expected-error@+1 {{distopt-autocast: precision must be bf16 or f16, got 'f8'}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
