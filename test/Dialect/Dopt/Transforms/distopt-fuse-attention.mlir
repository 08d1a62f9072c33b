// RUN: distopt-opt %s --distopt-fuse-attention --split-input-file | FileCheck %s

// GPT's chain (a causal mask by where, a scale by mul, kᵀ a transpose):
// one dopt.attention on the key itself; the mask and the scale kept.
// CHECK-LABEL: func.func @causal
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x16x8xf32>, %[[K:.*]]: tensor<2x2x16x8xf32>, %[[V:.*]]: tensor<2x2x16x4xf32>)
// CHECK: %[[KEEP:.*]] = dopt.constant {{.*}} tensor<1x1x16x16xi1>
// CHECK: %[[O:.*]] = dopt.attention %[[Q]], %[[K]], %[[V]] keep %[[KEEP]] {scale = 2.500000e-01 : f64}
// CHECK-NOT: dopt.softmax
// CHECK-NOT: dopt.matmul
// CHECK: return %[[O]]
func.func @causal(%q: tensor<2x2x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x4xf32>) -> tensor<2x2x16x4xf32> {
  %keep = dopt.constant {value = dense<true> : tensor<1x1x16x16xi1>} : () -> tensor<1x1x16x16xi1>
  %kt = dopt.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x8x16xf32>
  %s = dopt.matmul %q, %kt : (tensor<2x2x16x8xf32>, tensor<2x2x8x16xf32>) -> tensor<2x2x16x16xf32>
  %c = dopt.constant {value = dense<2.500000e-01> : tensor<f32>} : () -> tensor<f32>
  %t = dopt.mul %s, %c : (tensor<2x2x16x16xf32>, tensor<f32>) -> tensor<2x2x16x16xf32>
  %ninf = dopt.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %m = dopt.where %keep, %t, %ninf : (tensor<1x1x16x16xi1>, tensor<2x2x16x16xf32>, tensor<f32>) -> tensor<2x2x16x16xf32>
  %p = dopt.softmax %m {axis = 3 : i64} : (tensor<2x2x16x16xf32>) -> tensor<2x2x16x16xf32>
  %o = dopt.matmul %p, %v : (tensor<2x2x16x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x16x4xf32>
  return %o : tensor<2x2x16x4xf32>
}

// -----

// A division by a constant, an additive mask (either operand), a kᵀ that
// is not a transpose (the key is transposed back), rank 3.
// CHECK-LABEL: func.func @bias_and_division
// CHECK-SAME: (%[[Q:.*]]: tensor<4x6x8xf32>, %[[KT:.*]]: tensor<4x8x5xf32>, %[[V:.*]]: tensor<4x5x3xf32>, %[[B:.*]]: tensor<4x1x5xf32>)
// CHECK: %[[K:.*]] = dopt.transpose %[[KT]] {perm = array<i64: 0, 2, 1>}
// CHECK: dopt.attention %[[Q]], %[[K]], %[[V]] bias %[[B]] {scale = 5.000000e-01 : f64}
// CHECK-NOT: dopt.softmax
func.func @bias_and_division(%q: tensor<4x6x8xf32>, %kt: tensor<4x8x5xf32>, %v: tensor<4x5x3xf32>, %b: tensor<4x1x5xf32>) -> tensor<4x6x3xf32> {
  %s = dopt.matmul %q, %kt : (tensor<4x6x8xf32>, tensor<4x8x5xf32>) -> tensor<4x6x5xf32>
  %c = dopt.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %t = dopt.div %s, %c : (tensor<4x6x5xf32>, tensor<f32>) -> tensor<4x6x5xf32>
  %a = dopt.add %b, %t : (tensor<4x1x5xf32>, tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  %p = dopt.softmax %a {axis = 2 : i64} : (tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  %o = dopt.matmul %p, %v : (tensor<4x6x5xf32>, tensor<4x5x3xf32>) -> tensor<4x6x3xf32>
  return %o : tensor<4x6x3xf32>
}

// -----

// A scale computed at run time (a scalar, not a constant): the query is
// divided by it, the op's scale is 1.
// CHECK-LABEL: func.func @computed_scale
// CHECK-SAME: (%[[Q:.*]]: tensor<2x6x8xf32>, %[[K:.*]]: tensor<2x6x8xf32>, %[[V:.*]]: tensor<2x6x3xf32>, %[[W:.*]]: tensor<f32>)
// CHECK: %[[ROOT:.*]] = dopt.pow %[[W]]
// CHECK: %[[QS:.*]] = dopt.div %[[Q]], %[[ROOT]] : (tensor<2x6x8xf32>, tensor<f32>) -> tensor<2x6x8xf32>
// CHECK: dopt.attention %[[QS]], %[[K]], %[[V]] {scale = 1.000000e+00 : f64}
func.func @computed_scale(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x3xf32>, %w: tensor<f32>) -> tensor<2x6x3xf32> {
  %kt = dopt.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x6x8xf32>) -> tensor<2x8x6xf32>
  %s = dopt.matmul %q, %kt : (tensor<2x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %half = dopt.constant {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %root = dopt.pow %w, %half : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %t = dopt.div %s, %root : (tensor<2x6x6xf32>, tensor<f32>) -> tensor<2x6x6xf32>
  %p = dopt.softmax %t {axis = 2 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o = dopt.matmul %p, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  return %o : tensor<2x6x3xf32>
}

// -----

// ONNX Attention's masked form: a float mask added, and the rows it masks
// whole zeroed after the softmax (where(reduce_max(mask) == -inf, 0, p)):
// empty_rows_zero; the test of the rows goes with the chain.
// CHECK-LABEL: func.func @empty_rows_zero
// CHECK-SAME: (%[[Q:.*]]: tensor<2x6x8xf32>, %[[K:.*]]: tensor<2x6x8xf32>, %[[V:.*]]: tensor<2x6x3xf32>, %[[M:.*]]: tensor<1x6x6xf32>)
// CHECK: dopt.attention %[[Q]], %[[K]], %[[V]] bias %[[M]] {empty_rows_zero, scale = 1.000000e+00 : f64}
// CHECK-NOT: dopt.reduce_max
// CHECK-NOT: dopt.equal
func.func @empty_rows_zero(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x3xf32>, %m: tensor<1x6x6xf32>) -> tensor<2x6x3xf32> {
  %kt = dopt.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x6x8xf32>) -> tensor<2x8x6xf32>
  %s = dopt.matmul %q, %kt : (tensor<2x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %a = dopt.add %s, %m : (tensor<2x6x6xf32>, tensor<1x6x6xf32>) -> tensor<2x6x6xf32>
  %p = dopt.softmax %a {axis = 2 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %rm = dopt.reduce_max %m {axes = array<i64: 2>} : (tensor<1x6x6xf32>) -> tensor<1x6x1xf32>
  %ninf = dopt.constant {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
  %empty = dopt.equal %rm, %ninf : (tensor<1x6x1xf32>, tensor<f32>) -> tensor<1x6x1xi1>
  %zero = dopt.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %z = dopt.where %empty, %zero, %p : (tensor<1x6x1xi1>, tensor<f32>, tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o = dopt.matmul %z, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  return %o : tensor<2x6x3xf32>
}

// -----

// Not fused: the probabilities are read again (a training step's backward
// pass does), the softmax is not over the keys, the masked fill is not a
// large negative constant, the query's batch broadcasts.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: dopt.attention
// CHECK-COUNT-4: dopt.softmax
func.func @not_fused(%q: tensor<2x6x8xf32>, %kt: tensor<2x8x6xf32>, %v: tensor<2x6x3xf32>, %q1: tensor<1x6x8xf32>, %keep: tensor<6x6xi1>) -> (tensor<2x6x3xf32>, tensor<2x6x6xf32>, tensor<2x6x3xf32>, tensor<2x6x3xf32>, tensor<2x6x3xf32>) {
  %s = dopt.matmul %q, %kt : (tensor<2x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %p = dopt.softmax %s {axis = 2 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o = dopt.matmul %p, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  %s2 = dopt.matmul %q, %kt : (tensor<2x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %p2 = dopt.softmax %s2 {axis = 1 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o2 = dopt.matmul %p2, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  %s3 = dopt.matmul %q, %kt : (tensor<2x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %zero = dopt.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m3 = dopt.where %keep, %s3, %zero : (tensor<6x6xi1>, tensor<2x6x6xf32>, tensor<f32>) -> tensor<2x6x6xf32>
  %p3 = dopt.softmax %m3 {axis = 2 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o3 = dopt.matmul %p3, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  %s4 = dopt.matmul %q1, %kt : (tensor<1x6x8xf32>, tensor<2x8x6xf32>) -> tensor<2x6x6xf32>
  %p4 = dopt.softmax %s4 {axis = 2 : i64} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  %o4 = dopt.matmul %p4, %v : (tensor<2x6x6xf32>, tensor<2x6x3xf32>) -> tensor<2x6x3xf32>
  return %o, %p, %o2, %o3, %o4 : tensor<2x6x3xf32>, tensor<2x6x6xf32>, tensor<2x6x3xf32>, tensor<2x6x3xf32>, tensor<2x6x3xf32>
}
