// RUN: distopt-opt %s --distopt-autocast --split-input-file | FileCheck %s
// RUN: distopt-opt %s --distopt-autocast="precision=f16 store-weights=true" --split-input-file | FileCheck %s --check-prefix=STORE

// A linear layer, its bias, GELU-like arithmetic with a constant, softmax,
// log-softmax. The matmul computes in bf16; a weight read once is cast next
// to it, one read by two matmuls is cast next to each (each copy laid out as
// its reader is split); the bias add follows its 16-bit input (the bias is
// cast down); the mul by a constant stays 16-bit (the constant is rounded);
// softmax follows its input (its lowering sums in fp32 whatever the
// storage); log-softmax is fp32; the results keep their types.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK: %[[XH:.*]] = dopt.cast %[[X]] {to = bf16}
// CHECK: %[[W:.*]] = dopt.weight {name = "w"
// CHECK: %[[B:.*]] = dopt.weight {name = "b"
// CHECK-NEXT: %[[BH:.*]] = dopt.cast %[[B]] {to = bf16}
// CHECK-NEXT: %[[WH:.*]] = dopt.cast %[[W]] {to = bf16}
// CHECK-NEXT: %[[Y:.*]] = dopt.matmul %[[XH]], %[[WH]] {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[YB:.*]] = dopt.add %[[Y]], %[[BH]] {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[CH:.*]] = dopt.constant {value = dense<5.000000e-01> : tensor<bf16>}
// CHECK: %[[M:.*]] = dopt.mul %[[YB]], %[[CH]] {{.*}} -> tensor<2x4xbf16>
// CHECK-NEXT: %[[WH2:.*]] = dopt.cast %[[W]] {to = bf16}
// CHECK-NEXT: %[[Z:.*]] = dopt.matmul %[[M]], %[[WH2]] {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[ZF:.*]] = dopt.cast %[[Z]] {to = f32}
// CHECK: %[[S:.*]] = dopt.softmax %[[Z]] {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[SF:.*]] = dopt.cast %[[S]] {to = f32}
// CHECK: %[[L:.*]] = dopt.log_softmax %[[ZF]] {{.*}} -> tensor<2x4xf32>
// CHECK: return %[[SF]], %[[L]]
// STORE-LABEL: func.func @main
// STORE: dopt.weight {data_type = f32, name = "w", type = tensor<4x4xf16>}
// STORE: dopt.weight {data_type = f32, name = "b", type = tensor<4xf16>}
// STORE-NOT: dopt.cast {{.*}}weight
func.func @main(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %w = dopt.weight {name = "w", type = tensor<4x4xf32>} : () -> tensor<4x4xf32>
  %b = dopt.weight {name = "b", type = tensor<4xf32>} : () -> tensor<4xf32>
  %y = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %yb = dopt.add %y, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %c = dopt.constant {value = dense<5.000000e-01> : tensor<f32>} : () -> tensor<f32>
  %m = dopt.mul %yb, %c : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %z = dopt.matmul %m, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %s = dopt.softmax %z {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = dopt.log_softmax %z {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %s, %l : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// A residual stream in fp32 (an fp32 input plus a 16-bit product): the add
// promotes to fp32, as NumPy and PyTorch do; the 16-bit result is returned
// in the function's type. A layer norm's statistics stay fp32; a weight read
// in fp32 (the norm's scale) is kept fp32 even with store-weights.
// CHECK-LABEL: func.func @main
// CHECK: %[[P:.*]] = dopt.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[PF:.*]] = dopt.cast %[[P]] {to = f32}
// CHECK: %[[R:.*]] = dopt.add %{{.*}}, %[[PF]] {{.*}} -> tensor<2x4xf32>
// CHECK: dopt.layer_norm %[[R]], {{.*}} -> tensor<2x4xf32>
// CHECK: %[[Q:.*]] = dopt.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[T:.*]] = dopt.tanh %[[Q]] {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[TF:.*]] = dopt.cast %[[T]] {to = f32}
// CHECK: return %{{.*}}, %[[TF]]
// STORE: dopt.weight {name = "g", type = tensor<4xf32>}
func.func @main(%x: tensor<2x4xf32>, %v: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %p = dopt.matmul %x, %v : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = dopt.add %x, %p : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = dopt.weight {name = "g", type = tensor<4xf32>} : () -> tensor<4xf32>
  %n = dopt.layer_norm %r, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %q = dopt.matmul %n, %v : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %t = dopt.tanh %q : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %n, %t : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Integer work and ops on weights alone are left as they are: the gather of
// an embedding row stays fp32 (its table is a weight, its indices ints).
// CHECK-LABEL: func.func @main
// CHECK: dopt.gather {{.*}} -> tensor<2x4xf32>
// CHECK-NOT: bf16
func.func @main(%i: tensor<2xi64>) -> tensor<2x4xf32> {
  %e = dopt.weight {name = "e", type = tensor<8x4xf32>} : () -> tensor<8x4xf32>
  %g = dopt.gather %e, %i {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}
