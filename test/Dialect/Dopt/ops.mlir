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
