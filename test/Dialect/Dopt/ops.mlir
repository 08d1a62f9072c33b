// RUN: distopt-opt %s | distopt-opt | FileCheck %s
// RUN: distopt-opt %s --mlir-print-op-generic | distopt-opt | FileCheck %s

// Round trip of every dopt op, in the custom and in the generic form. Each
// CHECK line holds the whole printed op, result type included: the result
// types written here are the ones the op infers (the verifier rejects any
// other), so these lines also pin down shape inference.

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<2xi64>, tensor<f32>, tensor<2x2xi1>, tensor<3xbf16>, tensor<0xi64>, tensor<2xf16>) {
  // CHECK: dopt.constant {value = dense<[2, 4]> : tensor<2xi64>} : () -> tensor<2xi64>
  %0 = dopt.constant {value = dense<[2, 4]> : tensor<2xi64>} : () -> tensor<2xi64>
  // CHECK: dopt.constant {value = dense<1.500000e+00> : tensor<f32>} : () -> tensor<f32>
  %1 = dopt.constant {value = dense<1.5> : tensor<f32>} : () -> tensor<f32>
  // CHECK: dopt.constant {value = dense<{{\[}}[true, false], [false, true]]> : tensor<2x2xi1>} : () -> tensor<2x2xi1>
  %2 = dopt.constant {value = dense<[[true, false], [false, true]]> : tensor<2x2xi1>} : () -> tensor<2x2xi1>
  // CHECK: dopt.constant {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xbf16>} : () -> tensor<3xbf16>
  %3 = dopt.constant {value = dense<[1.0, 2.0, 3.0]> : tensor<3xbf16>} : () -> tensor<3xbf16>
  // CHECK: dopt.constant {value = dense<> : tensor<0xi64>} : () -> tensor<0xi64>
  %4 = dopt.constant {value = dense<> : tensor<0xi64>} : () -> tensor<0xi64>
  // A dense_resource value (weights loaded with --inline-weights).
  // CHECK: dopt.constant {value = dense_resource<blob1> : tensor<2xf16>} : () -> tensor<2xf16>
  %5 = dopt.constant {value = dense_resource<blob1> : tensor<2xf16>} : () -> tensor<2xf16>
  return %0, %1, %2, %3, %4, %5 : tensor<2xi64>, tensor<f32>, tensor<2x2xi1>, tensor<3xbf16>, tensor<0xi64>, tensor<2xf16>
}

// CHECK-LABEL: func.func @weights
func.func @weights() -> (tensor<128x64xf32>, tensor<4x4xbf16>, tensor<i64>, tensor<8xi1>) {
  // Looked up by name in the ONNX file.
  // CHECK: dopt.weight {name = "fc1.weight", type = tensor<128x64xf32>} : () -> tensor<128x64xf32>
  %0 = dopt.weight {name = "fc1.weight", type = tensor<128x64xf32>} : () -> tensor<128x64xf32>
  // In an external-data file, with offset and length (attributes print sorted).
  // CHECK: dopt.weight {length = 32 : i64, location = "model.data", name = "w", offset = 4096 : i64, type = tensor<4x4xbf16>} : () -> tensor<4x4xbf16>
  %1 = dopt.weight {name = "w", type = tensor<4x4xbf16>, location = "model.data", offset = 4096, length = 32} : () -> tensor<4x4xbf16>
  // External data without offset/length; rank 0.
  // CHECK: dopt.weight {location = "model.data", name = "step", type = tensor<i64>} : () -> tensor<i64>
  %2 = dopt.weight {name = "step", type = tensor<i64>, location = "model.data"} : () -> tensor<i64>
  // i1 data is stored one byte per element: 8 bytes.
  // CHECK: dopt.weight {length = 8 : i64, location = "mask.bin", name = "mask", type = tensor<8xi1>} : () -> tensor<8xi1>
  %3 = dopt.weight {name = "mask", type = tensor<8xi1>, location = "mask.bin", length = 8} : () -> tensor<8xi1>
  return %0, %1, %2, %3 : tensor<128x64xf32>, tensor<4x4xbf16>, tensor<i64>, tensor<8xi1>
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops (broadcasting)
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @arithmetic
func.func @arithmetic(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<4x1x5xi64>, %d: tensor<3x1xi64>,
                      %h: tensor<f16>, %g: tensor<2x1xbf16>, %u: tensor<7xui8>, %e: tensor<2x0xf32>, %e1: tensor<1xf32>,
                      %n: tensor<3xi32>)
    -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3x5xi64>, tensor<4x3x5xi64>, tensor<4x3x5xi64>, tensor<2x3xf32>,
        tensor<f16>, tensor<2x1xbf16>, tensor<7xui8>, tensor<2x0xf32>, tensor<2x3xf32>, tensor<3x3xi64>) {
  // CHECK: %[[ADD:.*]] = dopt.add %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[SUB:.*]] = dopt.sub %arg1, %[[ADD]] : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = dopt.sub %b, %0 : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // Both operands broadcast: 4x1x5 and 3x1 give 4x3x5.
  // CHECK: %[[MUL:.*]] = dopt.mul %arg2, %arg3 : (tensor<4x1x5xi64>, tensor<3x1xi64>) -> tensor<4x3x5xi64>
  %2 = dopt.mul %c, %d : (tensor<4x1x5xi64>, tensor<3x1xi64>) -> tensor<4x3x5xi64>
  // CHECK: %[[DIV:.*]] = dopt.div %[[MUL]], %arg3 : (tensor<4x3x5xi64>, tensor<3x1xi64>) -> tensor<4x3x5xi64>
  %3 = dopt.div %2, %d : (tensor<4x3x5xi64>, tensor<3x1xi64>) -> tensor<4x3x5xi64>
  // CHECK: %[[MAX:.*]] = dopt.max %[[DIV]], %arg2 : (tensor<4x3x5xi64>, tensor<4x1x5xi64>) -> tensor<4x3x5xi64>
  %4 = dopt.max %3, %c : (tensor<4x3x5xi64>, tensor<4x1x5xi64>) -> tensor<4x3x5xi64>
  // CHECK: %[[MIN:.*]] = dopt.min %[[SUB]], %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = dopt.min %1, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // Rank 0 and f16.
  // CHECK: %[[H:.*]] = dopt.add %arg4, %arg4 : (tensor<f16>, tensor<f16>) -> tensor<f16>
  %6 = dopt.add %h, %h : (tensor<f16>, tensor<f16>) -> tensor<f16>
  // CHECK: %[[G:.*]] = dopt.mul %arg5, %arg5 : (tensor<2x1xbf16>, tensor<2x1xbf16>) -> tensor<2x1xbf16>
  %7 = dopt.mul %g, %g : (tensor<2x1xbf16>, tensor<2x1xbf16>) -> tensor<2x1xbf16>
  // CHECK: %[[U:.*]] = dopt.sub %arg6, %arg6 : (tensor<7xui8>, tensor<7xui8>) -> tensor<7xui8>
  %8 = dopt.sub %u, %u : (tensor<7xui8>, tensor<7xui8>) -> tensor<7xui8>
  // A zero-sized dimension broadcasts against 1 (and stays 0).
  // CHECK: %[[E:.*]] = dopt.add %arg7, %arg8 : (tensor<2x0xf32>, tensor<1xf32>) -> tensor<2x0xf32>
  %9 = dopt.add %e, %e1 : (tensor<2x0xf32>, tensor<1xf32>) -> tensor<2x0xf32>
  // The exponent may have another element type; the result has the base's.
  // CHECK: %[[POW:.*]] = dopt.pow %arg0, %arg9 : (tensor<2x3xf32>, tensor<3xi32>) -> tensor<2x3xf32>
  %10 = dopt.pow %a, %n : (tensor<2x3xf32>, tensor<3xi32>) -> tensor<2x3xf32>
  // CHECK: %[[IPOW:.*]] = dopt.pow %arg3, %arg1 : (tensor<3x1xi64>, tensor<3xf32>) -> tensor<3x3xi64>
  %11 = dopt.pow %d, %b : (tensor<3x1xi64>, tensor<3xf32>) -> tensor<3x3xi64>
  // CHECK: return %[[ADD]], %[[MIN]], %[[MUL]], %[[DIV]], %[[MAX]], %[[POW]], %[[H]], %[[G]], %[[U]], %[[E]], %[[POW]], %[[IPOW]]
  return %0, %5, %2, %3, %4, %10, %6, %7, %8, %9, %10, %11
      : tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3x5xi64>, tensor<4x3x5xi64>, tensor<4x3x5xi64>, tensor<2x3xf32>,
        tensor<f16>, tensor<2x1xbf16>, tensor<7xui8>, tensor<2x0xf32>, tensor<2x3xf32>, tensor<3x3xi64>
}

// CHECK-LABEL: func.func @comparisons
func.func @comparisons(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi32>, %j: tensor<i32>,
                       %p: tensor<2x1xi1>, %q: tensor<3xi1>, %h: tensor<2xf16>)
    -> (tensor<2x3xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2xi1>) {
  // CHECK: %[[EQ:.*]] = dopt.equal %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %0 = dopt.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: %[[LT:.*]] = dopt.less %arg2, %arg3 : (tensor<4xi32>, tensor<i32>) -> tensor<4xi1>
  %1 = dopt.less %i, %j : (tensor<4xi32>, tensor<i32>) -> tensor<4xi1>
  // CHECK: %[[LE:.*]] = dopt.less_equal %arg3, %arg2 : (tensor<i32>, tensor<4xi32>) -> tensor<4xi1>
  %2 = dopt.less_equal %j, %i : (tensor<i32>, tensor<4xi32>) -> tensor<4xi1>
  // CHECK: %[[GT:.*]] = dopt.greater %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %3 = dopt.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: %[[GE:.*]] = dopt.greater_equal %arg2, %arg2 : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
  %4 = dopt.greater_equal %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
  // i1 operands: equal accepts them, and/or require them.
  // CHECK: %[[EQB:.*]] = dopt.equal %arg4, %arg5 : (tensor<2x1xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %5 = dopt.equal %p, %q : (tensor<2x1xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: %[[AND:.*]] = dopt.and %[[EQ]], %[[GT]] : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %6 = dopt.and %0, %3 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: %[[OR:.*]] = dopt.or %[[AND]], %arg4 : (tensor<2x3xi1>, tensor<2x1xi1>) -> tensor<2x3xi1>
  %7 = dopt.or %6, %p : (tensor<2x3xi1>, tensor<2x1xi1>) -> tensor<2x3xi1>
  // CHECK: %[[EQH:.*]] = dopt.equal %arg6, %arg6 : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xi1>
  %8 = dopt.equal %h, %h : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xi1>
  // CHECK: return %[[EQ]], %[[LT]], %[[LE]], %[[GT]], %[[GE]], %[[EQB]], %[[OR]], %[[EQH]]
  return %0, %1, %2, %3, %4, %5, %7, %8
      : tensor<2x3xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<2x3xi1>, tensor<2xi1>
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<2x3xf32>, %h: tensor<4xf16>, %g: tensor<bf16>, %i: tensor<5xi8>, %m: tensor<2x2xi1>, %d: tensor<3xf64>)
    -> (tensor<2x3xf32>, tensor<4xf16>, tensor<bf16>, tensor<5xi8>, tensor<2x2xi1>, tensor<3xf64>) {
  // CHECK: %[[NEG:.*]] = dopt.neg %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = dopt.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[ABS:.*]] = dopt.abs %[[NEG]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = dopt.abs %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[SQRT:.*]] = dopt.sqrt %[[ABS]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = dopt.sqrt %1 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[RCP:.*]] = dopt.reciprocal %[[SQRT]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = dopt.reciprocal %2 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[EXP:.*]] = dopt.exp %arg1 : (tensor<4xf16>) -> tensor<4xf16>
  %4 = dopt.exp %h : (tensor<4xf16>) -> tensor<4xf16>
  // CHECK: %[[LOG:.*]] = dopt.log %[[EXP]] : (tensor<4xf16>) -> tensor<4xf16>
  %5 = dopt.log %4 : (tensor<4xf16>) -> tensor<4xf16>
  // CHECK: %[[TANH:.*]] = dopt.tanh %arg2 : (tensor<bf16>) -> tensor<bf16>
  %6 = dopt.tanh %g : (tensor<bf16>) -> tensor<bf16>
  // CHECK: %[[SIG:.*]] = dopt.sigmoid %[[TANH]] : (tensor<bf16>) -> tensor<bf16>
  %7 = dopt.sigmoid %6 : (tensor<bf16>) -> tensor<bf16>
  // CHECK: %[[ERF:.*]] = dopt.erf %arg5 : (tensor<3xf64>) -> tensor<3xf64>
  %8 = dopt.erf %d : (tensor<3xf64>) -> tensor<3xf64>
  // relu, neg and abs also take integers.
  // CHECK: %[[RELU:.*]] = dopt.relu %arg3 : (tensor<5xi8>) -> tensor<5xi8>
  %9 = dopt.relu %i : (tensor<5xi8>) -> tensor<5xi8>
  // CHECK: %[[INEG:.*]] = dopt.neg %[[RELU]] : (tensor<5xi8>) -> tensor<5xi8>
  %10 = dopt.neg %9 : (tensor<5xi8>) -> tensor<5xi8>
  // CHECK: %[[IABS:.*]] = dopt.abs %[[INEG]] : (tensor<5xi8>) -> tensor<5xi8>
  %11 = dopt.abs %10 : (tensor<5xi8>) -> tensor<5xi8>
  // CHECK: %[[NOT:.*]] = dopt.not %arg4 : (tensor<2x2xi1>) -> tensor<2x2xi1>
  %12 = dopt.not %m : (tensor<2x2xi1>) -> tensor<2x2xi1>
  // Default attributes are not printed.
  // CHECK: %[[LR0:.*]] = dopt.leaky_relu %[[RCP]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %13 = dopt.leaky_relu %3 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[LR:.*]] = dopt.leaky_relu %[[LR0]] {alpha = 2.000000e-01 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %14 = dopt.leaky_relu %13 {alpha = 0.2 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[GELU0:.*]] = dopt.gelu %[[LR]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %15 = dopt.gelu %14 {approximate = "none"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[GELU:.*]] = dopt.gelu %[[GELU0]] {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %16 = dopt.gelu %15 {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: return %[[GELU]], %[[LOG]], %[[SIG]], %[[IABS]], %[[NOT]], %[[ERF]]
  return %16, %5, %7, %11, %12, %8 : tensor<2x3xf32>, tensor<4xf16>, tensor<bf16>, tensor<5xi8>, tensor<2x2xi1>, tensor<3xf64>
}

// CHECK-LABEL: func.func @where_and_cast
func.func @where_and_cast(%c: tensor<2x1xi1>, %x: tensor<3xf32>, %y: tensor<f32>, %i: tensor<2x3xi64>, %m: tensor<4xi1>)
    -> (tensor<2x3xf32>, tensor<2x3xf16>, tensor<2x3xi32>, tensor<2x3xi1>, tensor<4xf32>, tensor<2x3xui8>, tensor<3xbf16>, tensor<4xi1>) {
  // Three-way broadcasting: 2x1, 3 and rank 0.
  // CHECK: %[[W:.*]] = dopt.where %arg0, %arg1, %arg2 : (tensor<2x1xi1>, tensor<3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %0 = dopt.where %c, %x, %y : (tensor<2x1xi1>, tensor<3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK: %[[C0:.*]] = dopt.cast %[[W]] {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  %1 = dopt.cast %0 {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  // CHECK: %[[C1:.*]] = dopt.cast %arg3 {to = i32} : (tensor<2x3xi64>) -> tensor<2x3xi32>
  %2 = dopt.cast %i {to = i32} : (tensor<2x3xi64>) -> tensor<2x3xi32>
  // CHECK: %[[C2:.*]] = dopt.cast %[[C1]] {to = i1} : (tensor<2x3xi32>) -> tensor<2x3xi1>
  %3 = dopt.cast %2 {to = i1} : (tensor<2x3xi32>) -> tensor<2x3xi1>
  // CHECK: %[[C3:.*]] = dopt.cast %arg4 {to = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %4 = dopt.cast %m {to = f32} : (tensor<4xi1>) -> tensor<4xf32>
  // CHECK: %[[C4:.*]] = dopt.cast %[[C0]] {to = ui8} : (tensor<2x3xf16>) -> tensor<2x3xui8>
  %5 = dopt.cast %1 {to = ui8} : (tensor<2x3xf16>) -> tensor<2x3xui8>
  // CHECK: %[[C5:.*]] = dopt.cast %arg1 {to = bf16} : (tensor<3xf32>) -> tensor<3xbf16>
  %6 = dopt.cast %x {to = bf16} : (tensor<3xf32>) -> tensor<3xbf16>
  // A cast to the same type is allowed (it folds away).
  // CHECK: %[[C6:.*]] = dopt.cast %arg4 {to = i1} : (tensor<4xi1>) -> tensor<4xi1>
  %7 = dopt.cast %m {to = i1} : (tensor<4xi1>) -> tensor<4xi1>
  // CHECK: return %[[W]], %[[C0]], %[[C1]], %[[C2]], %[[C3]], %[[C4]], %[[C5]], %[[C6]]
  return %0, %1, %2, %3, %4, %5, %6, %7
      : tensor<2x3xf32>, tensor<2x3xf16>, tensor<2x3xi32>, tensor<2x3xi1>, tensor<4xf32>, tensor<2x3xui8>, tensor<3xbf16>, tensor<4xi1>
}

//===----------------------------------------------------------------------===//
// Normalisation and activations over an axis
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @normalization
func.func @normalization(%x: tensor<2x8x5xf32>, %img: tensor<4x3x8x8xf16>, %s: tensor<3xf16>, %b: tensor<3xf16>,
                         %m: tensor<3xf16>, %v: tensor<3xf16>, %g: tensor<5xf32>, %beta: tensor<5xf32>, %g2: tensor<8x1xf32>,
                         %bn: tensor<2x3xbf16>, %bs: tensor<3xbf16>)
    -> (tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<4x3x8x8xf16>, tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<2x3xbf16>) {
  // CHECK: %[[SM:.*]] = dopt.softmax %arg0 {axis = 2 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  %0 = dopt.softmax %x {axis = 2 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  // CHECK: %[[LSM:.*]] = dopt.log_softmax %[[SM]] {axis = 0 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  %1 = dopt.log_softmax %0 {axis = 0 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  // CHECK: %[[BN:.*]] = dopt.batch_norm %arg1, %arg2, %arg3, %arg4, %arg5 {epsilon = 9.99999974E-6 : f32} : (tensor<4x3x8x8xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>) -> tensor<4x3x8x8xf16>
  %2 = dopt.batch_norm %img, %s, %b, %m, %v {epsilon = 1.0e-5 : f32}
      : (tensor<4x3x8x8xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>) -> tensor<4x3x8x8xf16>
  // Rank-2 batch norm (N x C), bf16.
  // CHECK: %[[BN2:.*]] = dopt.batch_norm %arg9, %arg10, %arg10, %arg10, %arg10 {epsilon = 1.000000e-03 : f32} : (tensor<2x3xbf16>, tensor<3xbf16>, tensor<3xbf16>, tensor<3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
  %3 = dopt.batch_norm %bn, %bs, %bs, %bs, %bs {epsilon = 1.0e-3 : f32}
      : (tensor<2x3xbf16>, tensor<3xbf16>, tensor<3xbf16>, tensor<3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
  // With and without the optional bias.
  // CHECK: %[[LN:.*]] = dopt.layer_norm %arg0, %arg6, %arg7 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x8x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x8x5xf32>
  %4 = dopt.layer_norm %x, %g, %beta {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x8x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x8x5xf32>
  // The scale broadcasts to the normalised 8x5 shape.
  // CHECK: %[[LN2:.*]] = dopt.layer_norm %arg0, %arg8 {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x8x5xf32>, tensor<8x1xf32>) -> tensor<2x8x5xf32>
  %5 = dopt.layer_norm %x, %g2 {axis = 1 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x8x5xf32>, tensor<8x1xf32>) -> tensor<2x8x5xf32>
  // CHECK: return %[[SM]], %[[LSM]], %[[BN]], %[[LN]], %[[LN2]], %[[BN2]]
  return %0, %1, %2, %4, %5, %3
      : tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<4x3x8x8xf16>, tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<2x3xbf16>
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %v: tensor<4xf32>, %w: tensor<3xf32>,
                  %p: tensor<7x1x2x3xbf16>, %q: tensor<5x3x6xbf16>, %i: tensor<2x3xi32>, %j: tensor<3x2xi32>)
    -> (tensor<2x3x5xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<f32>, tensor<7x5x2x6xbf16>, tensor<2x2xi32>) {
  // Batch dimension broadcast against a 2-D rhs.
  // CHECK: %[[M0:.*]] = dopt.matmul %arg0, %arg1 : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %0 = dopt.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  // 1-D rhs: its added dimension is removed from the result.
  // CHECK: %[[M1:.*]] = dopt.matmul %arg0, %arg2 : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  %1 = dopt.matmul %a, %v : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  // 1-D lhs.
  // CHECK: %[[M2:.*]] = dopt.matmul %arg2, %arg1 : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
  %2 = dopt.matmul %v, %b : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
  // Both 1-D: a dot product of rank 0.
  // CHECK: %[[M3:.*]] = dopt.matmul %arg2, %arg2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %3 = dopt.matmul %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  // Batch dims broadcast in both directions: 7x1 and 5 give 7x5.
  // CHECK: %[[M4:.*]] = dopt.matmul %arg4, %arg5 : (tensor<7x1x2x3xbf16>, tensor<5x3x6xbf16>) -> tensor<7x5x2x6xbf16>
  %4 = dopt.matmul %p, %q : (tensor<7x1x2x3xbf16>, tensor<5x3x6xbf16>) -> tensor<7x5x2x6xbf16>
  // CHECK: %[[M5:.*]] = dopt.matmul %arg6, %arg7 : (tensor<2x3xi32>, tensor<3x2xi32>) -> tensor<2x2xi32>
  %5 = dopt.matmul %i, %j : (tensor<2x3xi32>, tensor<3x2xi32>) -> tensor<2x2xi32>
  // CHECK: return %[[M0]], %[[M1]], %[[M2]], %[[M3]], %[[M4]], %[[M5]]
  return %0, %1, %2, %3, %4, %5
      : tensor<2x3x5xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<f32>, tensor<7x5x2x6xbf16>, tensor<2x2xi32>
}

// CHECK-LABEL: func.func @gemm
func.func @gemm(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>, %c: tensor<32xf32>, %at: tensor<16x8xf32>,
                %b2: tensor<16x32xf32>, %c2: tensor<8x1xf32>, %h: tensor<4x4xf16>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x4xf16>) {
  // Linear layer: y = x W^T + b.
  // CHECK: %[[G0:.*]] = dopt.gemm %arg0, %arg1, %arg2 {trans_b = true} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %0 = dopt.gemm %a, %b, %c {trans_b = true} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  // All attributes, C of shape Mx1.
  // CHECK: %[[G1:.*]] = dopt.gemm %arg3, %arg1, %arg5 {alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32, trans_a = true, trans_b = true} : (tensor<16x8xf32>, tensor<32x16xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  %1 = dopt.gemm %at, %b, %c2 {alpha = 0.5 : f32, beta = 2.0 : f32, trans_a = true, trans_b = true}
      : (tensor<16x8xf32>, tensor<32x16xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  // Without C.
  // CHECK: %[[G2:.*]] = dopt.gemm %arg0, %arg4 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %2 = dopt.gemm %a, %b2 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  // CHECK: %[[G3:.*]] = dopt.gemm %arg6, %arg6 {trans_a = true} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  %3 = dopt.gemm %h, %h {trans_a = true, trans_b = false} : (tensor<4x4xf16>, tensor<4x4xf16>) -> tensor<4x4xf16>
  // CHECK: return %[[G0]], %[[G1]], %[[G2]], %[[G3]]
  return %0, %1, %2, %3 : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<4x4xf16>
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

// The adjoint of a strided convolution: 3x3 stride 2 pad 1 back from 4x4
// to 8x8 (H = 2 * 3 + 1 + 3 - 1 - 1 = 8: the output padding restores the
// row the stride skipped), grouped, with a bias.
// CHECK-LABEL: func.func @conv_transpose
// CHECK: dopt.conv_transpose %arg0, %arg1, %arg2 {dilations = array<i64: 1, 1>, group = 2 : i64, output_padding = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>, tensor<6xf32>) -> tensor<2x6x8x8xf32>
func.func @conv_transpose(%x: tensor<2x4x4x4xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<6xf32>) -> tensor<2x6x8x8xf32> {
  %0 = dopt.conv_transpose %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, output_padding = array<i64: 1, 1>, group = 2 : i64}
      : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>, tensor<6xf32>) -> tensor<2x6x8x8xf32>
  return %0 : tensor<2x6x8x8xf32>
}

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<1x3x224x224xf32>, %w: tensor<64x3x7x7xf32>, %bias: tensor<64xf32>,
                %y: tensor<2x32x14x14xf16>, %dw: tensor<32x1x3x3xf16>, %gw: tensor<8x8x3x3xf16>)
    -> (tensor<1x64x112x112xf32>, tensor<2x32x14x14xf16>, tensor<2x8x5x4xf16>) {
  // ResNet stem: 7x7 stride 2 pad 3, with bias.
  // CHECK: %[[C0:.*]] = dopt.conv %arg0, %arg1, %arg2 {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 3, 3, 3, 3>, strides = array<i64: 2, 2>} : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>) -> tensor<1x64x112x112xf32>
  %0 = dopt.conv %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>) -> tensor<1x64x112x112xf32>
  // Depthwise (group = channels), no bias.
  // CHECK: %[[C1:.*]] = dopt.conv %arg3, %arg4 {dilations = array<i64: 1, 1>, group = 32 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x32x14x14xf16>, tensor<32x1x3x3xf16>) -> tensor<2x32x14x14xf16>
  %1 = dopt.conv %y, %dw {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 32 : i64}
      : (tensor<2x32x14x14xf16>, tensor<32x1x3x3xf16>) -> tensor<2x32x14x14xf16>
  // Grouped (4 groups of 8 channels), dilated (the 3x3 kernel spans 5x5),
  // asymmetric pads [top, left, bottom, right] and strides:
  // H = (14 + 0 + 0 - 5) / 2 + 1 = 5, W = (14 + 1 + 0 - 5) / 3 + 1 = 4.
  // CHECK: %[[C2:.*]] = dopt.conv %[[C1]], %arg5 {dilations = array<i64: 2, 2>, group = 4 : i64, pads = array<i64: 0, 1, 0, 0>, strides = array<i64: 2, 3>} : (tensor<2x32x14x14xf16>, tensor<8x8x3x3xf16>) -> tensor<2x8x5x4xf16>
  %2 = dopt.conv %1, %gw {strides = array<i64: 2, 3>, pads = array<i64: 0, 1, 0, 0>, dilations = array<i64: 2, 2>, group = 4 : i64}
      : (tensor<2x32x14x14xf16>, tensor<8x8x3x3xf16>) -> tensor<2x8x5x4xf16>
  // CHECK: return %[[C0]], %[[C1]], %[[C2]]
  return %0, %1, %2 : tensor<1x64x112x112xf32>, tensor<2x32x14x14xf16>, tensor<2x8x5x4xf16>
}

// CHECK-LABEL: func.func @pool
func.func @pool(%x: tensor<1x64x112x112xf32>, %y: tensor<2x4x7x7xf16>, %i: tensor<1x2x5x5xi8>, %j: tensor<1x2x4x4xi8>)
    -> (tensor<1x64x56x56xf32>, tensor<2x4x4x4xf16>, tensor<2x4x3x3xf16>, tensor<1x2x2x2xi8>, tensor<1x64x1x1xf32>, tensor<2x4x1x1xf16>, tensor<1x2x2x2xi8>) {
  // ResNet max pool: 3x3 stride 2 pad 1.
  // CHECK: %[[P0:.*]] = dopt.max_pool %arg0 {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x64x112x112xf32>) -> tensor<1x64x56x56xf32>
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>}
      : (tensor<1x64x112x112xf32>) -> tensor<1x64x56x56xf32>
  // ceil_mode: (7 - 2) / 2 + 1 = 3 rounds up to 4.
  // CHECK: %[[P1:.*]] = dopt.avg_pool %arg1 {ceil_mode = true, count_include_pad = true, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf16>) -> tensor<2x4x4x4xf16>
  %1 = dopt.avg_pool %y {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode = true, count_include_pad = true}
      : (tensor<2x4x7x7xf16>) -> tensor<2x4x4x4xf16>
  // Without ceil_mode it rounds down.
  // CHECK: %[[P2:.*]] = dopt.avg_pool %arg1 {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf16>) -> tensor<2x4x3x3xf16>
  %2 = dopt.avg_pool %y {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>}
      : (tensor<2x4x7x7xf16>) -> tensor<2x4x3x3xf16>
  // Integer max pool, dilation 2 (the 2x2 window spans 3x3), ceil_mode:
  // (5 + 0 + 1 - 3) / 3 = 1 rounded up, + 1 = 2 windows.
  // CHECK: %[[P3:.*]] = dopt.max_pool %arg2 {ceil_mode = true, dilations = array<i64: 2, 2>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 1, 1>, strides = array<i64: 3, 3>} : (tensor<1x2x5x5xi8>) -> tensor<1x2x2x2xi8>
  %3 = dopt.max_pool %i {kernel_shape = array<i64: 2, 2>, strides = array<i64: 3, 3>, pads = array<i64: 0, 0, 1, 1>, dilations = array<i64: 2, 2>, ceil_mode = true}
      : (tensor<1x2x5x5xi8>) -> tensor<1x2x2x2xi8>
  // ceil_mode does not add a window that would start in the end padding:
  // (4 + 1 - 2) / 2 = 1.5 rounds up to 2, + 1 = 3, but the third window
  // would start at 4 = the input size, so there are 2.
  // CHECK: %[[P6:.*]] = dopt.max_pool %arg3 {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x4x4xi8>) -> tensor<1x2x2x2xi8>
  %6 = dopt.max_pool %j {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = true}
      : (tensor<1x2x4x4xi8>) -> tensor<1x2x2x2xi8>
  // CHECK: %[[P4:.*]] = dopt.global_avg_pool %arg0 : (tensor<1x64x112x112xf32>) -> tensor<1x64x1x1xf32>
  %4 = dopt.global_avg_pool %x : (tensor<1x64x112x112xf32>) -> tensor<1x64x1x1xf32>
  // CHECK: %[[P5:.*]] = dopt.global_avg_pool %arg1 : (tensor<2x4x7x7xf16>) -> tensor<2x4x1x1xf16>
  %5 = dopt.global_avg_pool %y : (tensor<2x4x7x7xf16>) -> tensor<2x4x1x1xf16>
  // CHECK: return %[[P0]], %[[P1]], %[[P2]], %[[P3]], %[[P4]], %[[P5]], %[[P6]]
  return %0, %1, %2, %3, %4, %5, %6
      : tensor<1x64x56x56xf32>, tensor<2x4x4x4xf16>, tensor<2x4x3x3xf16>, tensor<1x2x2x2xi8>, tensor<1x64x1x1xf32>, tensor<2x4x1x1xf16>, tensor<1x2x2x2xi8>
}

// CHECK-LABEL: func.func @global_avg_pool_3d_1d
func.func @global_avg_pool_3d_1d(%x: tensor<2x3x4x5x6xf32>, %y: tensor<2x3x9xbf16>) -> (tensor<2x3x1x1x1xf32>, tensor<2x3x1xbf16>) {
  // CHECK: dopt.global_avg_pool %arg0 : (tensor<2x3x4x5x6xf32>) -> tensor<2x3x1x1x1xf32>
  %0 = dopt.global_avg_pool %x : (tensor<2x3x4x5x6xf32>) -> tensor<2x3x1x1x1xf32>
  // CHECK: dopt.global_avg_pool %arg1 : (tensor<2x3x9xbf16>) -> tensor<2x3x1xbf16>
  %1 = dopt.global_avg_pool %y : (tensor<2x3x9xbf16>) -> tensor<2x3x1xbf16>
  return %0, %1 : tensor<2x3x1x1x1xf32>, tensor<2x3x1xbf16>
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi64>, %h: tensor<8xf16>)
    -> (tensor<2x1x1xf32>, tensor<3xf32>, tensor<i64>, tensor<5x6xi64>, tensor<1xf16>, tensor<f16>) {
  // keepdims defaults to true.
  // CHECK: %[[R0:.*]] = dopt.reduce_sum %arg0 {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %0 = dopt.reduce_sum %x {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  // CHECK: %[[R1:.*]] = dopt.reduce_mean %arg0 {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  %1 = dopt.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  // Everything reduced without keepdims: rank 0.
  // CHECK: %[[R2:.*]] = dopt.reduce_max %arg1 {axes = array<i64: 0, 1>, keepdims = false} : (tensor<5x6xi64>) -> tensor<i64>
  %2 = dopt.reduce_max %i {axes = array<i64: 0, 1>, keepdims = false} : (tensor<5x6xi64>) -> tensor<i64>
  // Empty axes: no reduction.
  // CHECK: %[[R3:.*]] = dopt.reduce_sum %arg1 {axes = array<i64>} : (tensor<5x6xi64>) -> tensor<5x6xi64>
  %3 = dopt.reduce_sum %i {axes = array<i64>} : (tensor<5x6xi64>) -> tensor<5x6xi64>
  // keepdims = true is the default and is not printed.
  // CHECK: %[[R4:.*]] = dopt.reduce_max %arg2 {axes = array<i64: 0>} : (tensor<8xf16>) -> tensor<1xf16>
  %4 = dopt.reduce_max %h {axes = array<i64: 0>, keepdims = true} : (tensor<8xf16>) -> tensor<1xf16>
  // CHECK: %[[R5:.*]] = dopt.reduce_mean %arg2 {axes = array<i64: 0>, keepdims = false} : (tensor<8xf16>) -> tensor<f16>
  %5 = dopt.reduce_mean %h {axes = array<i64: 0>, keepdims = false} : (tensor<8xf16>) -> tensor<f16>
  // CHECK: return %[[R0]], %[[R1]], %[[R2]], %[[R3]], %[[R4]], %[[R5]]
  return %0, %1, %2, %3, %4, %5 : tensor<2x1x1xf32>, tensor<3xf32>, tensor<i64>, tensor<5x6xi64>, tensor<1xf16>, tensor<f16>
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reshape_transpose
func.func @reshape_transpose(%x: tensor<2x3x4xf32>, %s: tensor<i64>, %m: tensor<2x3xi1>, %e: tensor<0x3xf32>)
    -> (tensor<6x4xf32>, tensor<1xi64>, tensor<i64>, tensor<4x2x3xf32>, tensor<3x2xi1>, tensor<3x0xf32>, tensor<0x5xf32>) {
  // CHECK: %[[RS:.*]] = dopt.reshape %arg0 {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %0 = dopt.reshape %x {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // Unsqueeze and squeeze of a scalar.
  // CHECK: %[[US:.*]] = dopt.reshape %arg1 {shape = array<i64: 1>} : (tensor<i64>) -> tensor<1xi64>
  %1 = dopt.reshape %s {shape = array<i64: 1>} : (tensor<i64>) -> tensor<1xi64>
  // CHECK: %[[SQ:.*]] = dopt.reshape %[[US]] {shape = array<i64>} : (tensor<1xi64>) -> tensor<i64>
  %2 = dopt.reshape %1 {shape = array<i64>} : (tensor<1xi64>) -> tensor<i64>
  // CHECK: %[[T0:.*]] = dopt.transpose %arg0 {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %3 = dopt.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  // CHECK: %[[T1:.*]] = dopt.transpose %arg2 {perm = array<i64: 1, 0>} : (tensor<2x3xi1>) -> tensor<3x2xi1>
  %4 = dopt.transpose %m {perm = array<i64: 1, 0>} : (tensor<2x3xi1>) -> tensor<3x2xi1>
  // CHECK: %[[T2:.*]] = dopt.transpose %arg3 {perm = array<i64: 1, 0>} : (tensor<0x3xf32>) -> tensor<3x0xf32>
  %5 = dopt.transpose %e {perm = array<i64: 1, 0>} : (tensor<0x3xf32>) -> tensor<3x0xf32>
  // Zero elements reshape to any shape with zero elements.
  // CHECK: %[[RS0:.*]] = dopt.reshape %arg3 {shape = array<i64: 0, 5>} : (tensor<0x3xf32>) -> tensor<0x5xf32>
  %6 = dopt.reshape %e {shape = array<i64: 0, 5>} : (tensor<0x3xf32>) -> tensor<0x5xf32>
  // CHECK: return %[[RS]], %[[US]], %[[SQ]], %[[T0]], %[[T1]], %[[T2]], %[[RS0]]
  return %0, %1, %2, %3, %4, %5, %6 : tensor<6x4xf32>, tensor<1xi64>, tensor<i64>, tensor<4x2x3xf32>, tensor<3x2xi1>, tensor<3x0xf32>, tensor<0x5xf32>
}

// CHECK-LABEL: func.func @concat_split
func.func @concat_split(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<1xi64>, %d: tensor<2xi64>, %e: tensor<2x0xf32>)
    -> (tensor<2x13xf32>, tensor<3xi64>, tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x4xf32>, tensor<2x0xf32>, tensor<2x8xf32>, tensor<2x3xf32>) {
  // CHECK: %[[CAT:.*]] = dopt.concat %arg0, %arg1, %arg4, %arg1 {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x0xf32>, tensor<2x5xf32>) -> tensor<2x13xf32>
  %0 = dopt.concat %a, %b, %e, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>, tensor<2x0xf32>, tensor<2x5xf32>) -> tensor<2x13xf32>
  // CHECK: %[[CATI:.*]] = dopt.concat %arg2, %arg3 {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  %1 = dopt.concat %c, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  // One input.
  // CHECK: %[[CAT1:.*]] = dopt.concat %arg0 {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = dopt.concat %a {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // Multiple results, including an empty piece.
  // CHECK: %[[S:.*]]:4 = dopt.split %[[CAT]] {axis = 1 : i64, sizes = array<i64: 1, 4, 0, 8>} : (tensor<2x13xf32>) -> (tensor<2x1xf32>, tensor<2x4xf32>, tensor<2x0xf32>, tensor<2x8xf32>)
  %3:4 = dopt.split %0 {axis = 1 : i64, sizes = array<i64: 1, 4, 0, 8>} : (tensor<2x13xf32>) -> (tensor<2x1xf32>, tensor<2x4xf32>, tensor<2x0xf32>, tensor<2x8xf32>)
  // A single piece.
  // CHECK: %[[S1:.*]] = dopt.split %arg0 {axis = 0 : i64, sizes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = dopt.split %a {axis = 0 : i64, sizes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: return %[[CAT]], %[[CATI]], %[[CAT1]], %[[S]]#0, %[[S]]#1, %[[S]]#2, %[[S]]#3, %[[S1]]
  return %0, %1, %2, %3#0, %3#1, %3#2, %3#3, %4
      : tensor<2x13xf32>, tensor<3xi64>, tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x4xf32>, tensor<2x0xf32>, tensor<2x8xf32>, tensor<2x3xf32>
}

// CHECK-LABEL: func.func @slice_gather
func.func @slice_gather(%x: tensor<4x10xf32>, %i: tensor<2x3xi64>, %j: tensor<i32>, %k: tensor<3xi64>)
    -> (tensor<2x3xf32>, tensor<4x0xf32>, tensor<4x5xf32>, tensor<4x2x3xf32>, tensor<10xf32>, tensor<3x10xf32>, tensor<4xi64>) {
  // Positive steps.
  // CHECK: %[[SL0:.*]] = dopt.slice %arg0 {ends = array<i64: 3, 10>, starts = array<i64: 1, 2>, steps = array<i64: 1, 3>} : (tensor<4x10xf32>) -> tensor<2x3xf32>
  %0 = dopt.slice %x {starts = array<i64: 1, 2>, ends = array<i64: 3, 10>, steps = array<i64: 1, 3>} : (tensor<4x10xf32>) -> tensor<2x3xf32>
  // An empty slice.
  // CHECK: %[[SL1:.*]] = dopt.slice %arg0 {ends = array<i64: 4, 5>, starts = array<i64: 0, 5>, steps = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x0xf32>
  %1 = dopt.slice %x {starts = array<i64: 0, 5>, ends = array<i64: 4, 5>, steps = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x0xf32>
  // Reversal: end = -1 runs through index 0; [9:-1:-2] selects 9, 7, 5, 3, 1.
  // CHECK: %[[SL2:.*]] = dopt.slice %arg0 {ends = array<i64: 4, -1>, starts = array<i64: 0, 9>, steps = array<i64: 1, -2>} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  %2 = dopt.slice %x {starts = array<i64: 0, 9>, ends = array<i64: 4, -1>, steps = array<i64: 1, -2>} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  // Gather: data.shape[:axis] + indices.shape + data.shape[axis+1:].
  // CHECK: %[[G0:.*]] = dopt.gather %arg0, %arg1 {axis = 1 : i64} : (tensor<4x10xf32>, tensor<2x3xi64>) -> tensor<4x2x3xf32>
  %3 = dopt.gather %x, %i {axis = 1 : i64} : (tensor<4x10xf32>, tensor<2x3xi64>) -> tensor<4x2x3xf32>
  // A rank-0 i32 index removes the axis.
  // CHECK: %[[G1:.*]] = dopt.gather %arg0, %arg2 {axis = 0 : i64} : (tensor<4x10xf32>, tensor<i32>) -> tensor<10xf32>
  %4 = dopt.gather %x, %j {axis = 0 : i64} : (tensor<4x10xf32>, tensor<i32>) -> tensor<10xf32>
  // CHECK: %[[G2:.*]] = dopt.gather %arg0, %arg3 {axis = 0 : i64} : (tensor<4x10xf32>, tensor<3xi64>) -> tensor<3x10xf32>
  %5 = dopt.gather %x, %k {axis = 0 : i64} : (tensor<4x10xf32>, tensor<3xi64>) -> tensor<3x10xf32>
  // Gathering from an i64 shape vector (the exporters' pattern).
  // CHECK: %[[SH:.*]] = dopt.shape %arg0 {end = 2 : i64, start = 0 : i64} : (tensor<4x10xf32>) -> tensor<2xi64>
  %6 = dopt.shape %x {start = 0 : i64, end = 2 : i64} : (tensor<4x10xf32>) -> tensor<2xi64>
  // CHECK: %[[G3:.*]] = dopt.gather %[[SH]], %arg1 {axis = 0 : i64} : (tensor<2xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  %7 = dopt.gather %6, %i {axis = 0 : i64} : (tensor<2xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  // CHECK: %[[RG3:.*]] = dopt.reshape %[[G3]] {shape = array<i64: 6>} : (tensor<2x3xi64>) -> tensor<6xi64>
  %8 = dopt.reshape %7 {shape = array<i64: 6>} : (tensor<2x3xi64>) -> tensor<6xi64>
  // CHECK: %[[SL3:.*]] = dopt.slice %[[RG3]] {ends = array<i64: 6>, starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<6xi64>) -> tensor<4xi64>
  %9 = dopt.slice %8 {starts = array<i64: 2>, ends = array<i64: 6>, steps = array<i64: 1>} : (tensor<6xi64>) -> tensor<4xi64>
  // CHECK: return %[[SL0]], %[[SL1]], %[[SL2]], %[[G0]], %[[G1]], %[[G2]], %[[SL3]]
  return %0, %1, %2, %3, %4, %5, %9 : tensor<2x3xf32>, tensor<4x0xf32>, tensor<4x5xf32>, tensor<4x2x3xf32>, tensor<10xf32>, tensor<3x10xf32>, tensor<4xi64>
}

// CHECK-LABEL: func.func @slice_edge_cases
func.func @slice_edge_cases(%s: tensor<f32>, %e: tensor<0x2xi8>) -> (tensor<f32>, tensor<0x2xi8>, tensor<0x1xi8>) {
  // Rank 0: no entries.
  // CHECK: dopt.slice %arg0 {ends = array<i64>, starts = array<i64>, steps = array<i64>} : (tensor<f32>) -> tensor<f32>
  %0 = dopt.slice %s {starts = array<i64>, ends = array<i64>, steps = array<i64>} : (tensor<f32>) -> tensor<f32>
  // Reversing an empty dimension: start = end = -1.
  // CHECK: dopt.slice %arg1 {ends = array<i64: -1, -1>, starts = array<i64: -1, 1>, steps = array<i64: -1, -1>} : (tensor<0x2xi8>) -> tensor<0x2xi8>
  %1 = dopt.slice %e {starts = array<i64: -1, 1>, ends = array<i64: -1, -1>, steps = array<i64: -1, -1>} : (tensor<0x2xi8>) -> tensor<0x2xi8>
  // CHECK: dopt.slice %arg1 {ends = array<i64: 0, 2>, starts = array<i64: 0, 1>, steps = array<i64: 1, 5>} : (tensor<0x2xi8>) -> tensor<0x1xi8>
  %2 = dopt.slice %e {starts = array<i64: 0, 1>, ends = array<i64: 0, 2>, steps = array<i64: 1, 5>} : (tensor<0x2xi8>) -> tensor<0x1xi8>
  return %0, %1, %2 : tensor<f32>, tensor<0x2xi8>, tensor<0x1xi8>
}

// CHECK-LABEL: func.func @expand_pad
func.func @expand_pad(%x: tensor<3x1xf32>, %s: tensor<i1>, %y: tensor<2x3xi64>, %z: tensor<1x4x4x1xf16>)
    -> (tensor<2x3x4xf32>, tensor<5x6xi1>, tensor<3x1xf32>, tensor<4x9xi64>, tensor<2x3xi64>, tensor<1x6x8x1xf16>, tensor<1x6x6x1xf16>, tensor<0x3x0xf32>) {
  // Bidirectional: the input's 3x1 broadcasts against 2x1x4.
  // CHECK: %[[E0:.*]] = dopt.expand %arg0 {shape = array<i64: 2, 1, 4>} : (tensor<3x1xf32>) -> tensor<2x3x4xf32>
  %0 = dopt.expand %x {shape = array<i64: 2, 1, 4>} : (tensor<3x1xf32>) -> tensor<2x3x4xf32>
  // CHECK: %[[E1:.*]] = dopt.expand %arg1 {shape = array<i64: 5, 6>} : (tensor<i1>) -> tensor<5x6xi1>
  %1 = dopt.expand %s {shape = array<i64: 5, 6>} : (tensor<i1>) -> tensor<5x6xi1>
  // A shorter target shape keeps the input's.
  // CHECK: %[[E2:.*]] = dopt.expand %arg0 {shape = array<i64: 1>} : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %2 = dopt.expand %x {shape = array<i64: 1>} : (tensor<3x1xf32>) -> tensor<3x1xf32>
  // A target 0 against an input 1: the result is empty.
  // CHECK: %[[E3:.*]] = dopt.expand %arg0 {shape = array<i64: 0, 3, 0>} : (tensor<3x1xf32>) -> tensor<0x3x0xf32>
  %3 = dopt.expand %x {shape = array<i64: 0, 3, 0>} : (tensor<3x1xf32>) -> tensor<0x3x0xf32>
  // Constant padding (the default mode) with a value.
  // CHECK: %[[P0:.*]] = dopt.pad %arg2 {pads = array<i64: 1, 2, 1, 4>, value = -1.000000e+00 : f64} : (tensor<2x3xi64>) -> tensor<4x9xi64>
  %4 = dopt.pad %y {pads = array<i64: 1, 2, 1, 4>, value = -1.0 : f64} : (tensor<2x3xi64>) -> tensor<4x9xi64>
  // No padding.
  // CHECK: %[[P1:.*]] = dopt.pad %arg2 {pads = array<i64: 0, 0, 0, 0>} : (tensor<2x3xi64>) -> tensor<2x3xi64>
  %5 = dopt.pad %y {pads = array<i64: 0, 0, 0, 0>, mode = "constant", value = 0.0 : f64} : (tensor<2x3xi64>) -> tensor<2x3xi64>
  // CHECK: %[[P2:.*]] = dopt.pad %arg3 {mode = "reflect", pads = array<i64: 0, 1, 3, 0, 0, 1, 1, 0>} : (tensor<1x4x4x1xf16>) -> tensor<1x6x8x1xf16>
  %6 = dopt.pad %z {mode = "reflect", pads = array<i64: 0, 1, 3, 0, 0, 1, 1, 0>} : (tensor<1x4x4x1xf16>) -> tensor<1x6x8x1xf16>
  // Edge padding may exceed the dimension.
  // CHECK: %[[P3:.*]] = dopt.pad %arg3 {mode = "edge", pads = array<i64: 0, 0, 2, 0, 0, 2, 0, 0>} : (tensor<1x4x4x1xf16>) -> tensor<1x6x6x1xf16>
  %7 = dopt.pad %z {mode = "edge", pads = array<i64: 0, 0, 2, 0, 0, 2, 0, 0>} : (tensor<1x4x4x1xf16>) -> tensor<1x6x6x1xf16>
  // CHECK: return %[[E0]], %[[E1]], %[[E2]], %[[P0]], %[[P1]], %[[P2]], %[[P3]], %[[E3]]
  return %0, %1, %2, %4, %5, %6, %7, %3
      : tensor<2x3x4xf32>, tensor<5x6xi1>, tensor<3x1xf32>, tensor<4x9xi64>, tensor<2x3xi64>, tensor<1x6x8x1xf16>, tensor<1x6x6x1xf16>, tensor<0x3x0xf32>
}

// CHECK-LABEL: func.func @shape
func.func @shape(%x: tensor<2x3x4xbf16>, %s: tensor<f32>) -> (tensor<3xi64>, tensor<1xi64>, tensor<0xi64>, tensor<0xi64>) {
  // CHECK: dopt.shape %arg0 {end = 3 : i64, start = 0 : i64} : (tensor<2x3x4xbf16>) -> tensor<3xi64>
  %0 = dopt.shape %x {start = 0 : i64, end = 3 : i64} : (tensor<2x3x4xbf16>) -> tensor<3xi64>
  // CHECK: dopt.shape %arg0 {end = 2 : i64, start = 1 : i64} : (tensor<2x3x4xbf16>) -> tensor<1xi64>
  %1 = dopt.shape %x {start = 1 : i64, end = 2 : i64} : (tensor<2x3x4xbf16>) -> tensor<1xi64>
  // CHECK: dopt.shape %arg0 {end = 3 : i64, start = 3 : i64} : (tensor<2x3x4xbf16>) -> tensor<0xi64>
  %2 = dopt.shape %x {start = 3 : i64, end = 3 : i64} : (tensor<2x3x4xbf16>) -> tensor<0xi64>
  // CHECK: dopt.shape %arg1 {end = 0 : i64, start = 0 : i64} : (tensor<f32>) -> tensor<0xi64>
  %3 = dopt.shape %s {start = 0 : i64, end = 0 : i64} : (tensor<f32>) -> tensor<0xi64>
  return %0, %1, %2, %3 : tensor<3xi64>, tensor<1xi64>, tensor<0xi64>, tensor<0xi64>
}

{-#
  dialect_resources: {
    builtin: {
      blob1: "0x02000000003C0040"
    }
  }
#-}

// CHECK-LABEL: func.func @attention
// CHECK: dopt.attention %{{.*}}, %{{.*}}, %{{.*}} keep %{{.*}} bias %{{.*}} {scale = 1.250000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x3xf32>, tensor<1x1x8x6xi1>, tensor<2x1x1x6xf32>) -> tensor<2x4x8x3xf32>
// CHECK: dopt.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : (tensor<8x16xbf16>, tensor<6x16xbf16>, tensor<6x3xbf16>) -> tensor<8x3xbf16>
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x6x16xf32>, %v: tensor<2x4x6x3xf32>, %keep: tensor<1x1x8x6xi1>, %bias: tensor<2x1x1x6xf32>, %qh: tensor<8x16xbf16>, %kh: tensor<6x16xbf16>, %vh: tensor<6x3xbf16>) -> (tensor<2x4x8x3xf32>, tensor<8x3xbf16>) {
  %0 = dopt.attention %q, %k, %v keep %keep bias %bias {scale = 0.125 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x3xf32>, tensor<1x1x8x6xi1>, tensor<2x1x1x6xf32>) -> tensor<2x4x8x3xf32>
  %1 = dopt.attention %qh, %kh, %vh {scale = 1.0 : f64} : (tensor<8x16xbf16>, tensor<6x16xbf16>, tensor<6x3xbf16>) -> tensor<8x3xbf16>
  return %0, %1 : tensor<2x4x8x3xf32>, tensor<8x3xbf16>
}

