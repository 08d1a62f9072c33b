// RUN: distopt-opt %s --distopt-convert-dopt-to-linalg=library-convolutions=true --cse --split-input-file | FileCheck %s

// With library-convolutions (what --target cuda and cuda-emu use), a float
// convolution is one runtime call on the input and weight buffers: no
// im2col, no GEMM. The output is a fresh buffer the call writes whole; the
// bias is an elementwise add after it.
// CHECK-LABEL: func.func @conv_bias
// CHECK-NOT: linalg.batch_matmul
// CHECK: %[[X:.*]] = bufferization.to_buffer %arg0 read_only {dopt.library_call = 0 : i64} : tensor<2x3x9x9xf32> to memref<2x3x9x9xf32, strided<[?, ?, ?, ?], offset: ?>>
// CHECK: %[[XC:.*]] = memref.cast %[[X]]
// CHECK: %[[W:.*]] = bufferization.to_buffer %arg1 read_only
// CHECK: %[[WC:.*]] = memref.cast %[[W]]
// CHECK: %[[Y:.*]] = memref.alloc() : memref<2x6x5x5xf32>
// CHECK: %[[YC:.*]] = memref.cast %[[Y]]
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : i64
// CHECK: call @dort_conv2d_f32(%[[XC]], %[[WC]], %[[YC]], %[[C2]], %[[C2]], %[[C1]], %[[C1]], %[[C1]], %[[C1]], %[[C3]])
// CHECK: %[[T:.*]] = bufferization.to_tensor %[[Y]] restrict writable
// CHECK: linalg.generic {{.*}} ins(%[[T]], %{{.*}} : tensor<2x6x5x5xf32>, tensor<6x1x1xf32>)
// CHECK: arith.addf
// CHECK: func.func private @dort_conv2d_f32(memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, i64, i64, i64, i64, i64, i64, i64) attributes {llvm.emit_c_interface}
func.func @conv_bias(%x: tensor<2x3x9x9xf32>, %w: tensor<6x1x3x3xf32>, %b: tensor<6xf32>) -> tensor<2x6x5x5xf32> {
  %0 = dopt.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 3 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x3x9x9xf32>, tensor<6x1x3x3xf32>, tensor<6xf32>) -> tensor<2x6x5x5xf32>
  return %0 : tensor<2x6x5x5xf32>
}

// -----

// Pads that differ between the two ends of a dimension (ONNX's SAME_UPPER,
// Autodiff's input gradients): the library gets the smaller of each pair
// (here 0 and 1) and the rest is padded here first.
// CHECK-LABEL: func.func @conv_uneven_pads
// CHECK: %[[P:.*]] = tensor.pad %arg0 low[0, 0, 0, 0] high[0, 0, 1, 1]
// CHECK: tensor<1x2x6x6xf32> to tensor<1x2x7x7xf32>
// CHECK: bufferization.to_buffer %[[P]] read_only {{.*}}: tensor<1x2x7x7xf32>
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: call @dort_conv2d_f32(%{{.*}}, %{{.*}}, %{{.*}}, %[[C1]], %[[C1]], %[[C0]], %[[C1]], %[[C2]], %[[C1]], %[[C1]])
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @conv_uneven_pads(%x: tensor<1x2x6x6xf32>, %w: tensor<3x2x2x2xf32>) -> tensor<1x3x5x8xf32> {
  %0 = dopt.conv %x, %w {dilations = array<i64: 2, 1>, group = 1 : i64, pads = array<i64: 0, 1, 1, 2>, strides = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<3x2x2x2xf32>) -> tensor<1x3x5x8xf32>
  return %0 : tensor<1x3x5x8xf32>
}

// -----

// f64 calls the f64 twin; f16 is widened to f32 first (one rounding at the
// end), as on the CPU.
// CHECK-LABEL: func.func @conv_f64
// CHECK: call @dort_conv2d_f64
// CHECK-LABEL: func.func @conv_f16
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: call @dort_conv2d_f32
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK-DAG: func.func private @dort_conv2d_f64
// CHECK-DAG: func.func private @dort_conv2d_f32
func.func @conv_f64(%x: tensor<1x2x5x5xf64>, %w: tensor<3x2x3x3xf64>) -> tensor<1x3x3x3xf64> {
  %0 = dopt.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x5x5xf64>, tensor<3x2x3x3xf64>) -> tensor<1x3x3x3xf64>
  return %0 : tensor<1x3x3x3xf64>
}
func.func @conv_f16(%x: tensor<1x2x5x5xf16>, %w: tensor<3x2x3x3xf16>) -> tensor<1x3x2x2xf16> {
  %0 = dopt.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf16>, tensor<3x2x3x3xf16>) -> tensor<1x3x2x2xf16>
  return %0 : tensor<1x3x2x2xf16>
}

// -----

// A weight gradient's shape: operands that are dopt.transposes are passed
// as views of the transposes' inputs (reinterpret_casts with the permuted
// sizes and strides: views the buffer planner follows), not as copies; and
// a convolution nothing reads is not lowered at all (a call would not be
// dead code to later passes).
// CHECK-LABEL: func.func @conv_weight_grad_views
// CHECK: %[[X:.*]] = bufferization.to_buffer %arg0 read_only {{.*}}: tensor<4x3x6x6xf32>
// CHECK: %{{.*}}, %[[OFF:.*]], %{{.*}}:4, %[[ST:.*]]:4 = memref.extract_strided_metadata %[[X]]
// CHECK: %[[XV:.*]] = memref.reinterpret_cast %[[X]] to offset: [%[[OFF]]], sizes: [3, 4, 6, 6], strides: [%[[ST]]#1, %[[ST]]#0, %[[ST]]#2, %[[ST]]#3]
// CHECK: %[[XC:.*]] = memref.cast %[[XV]]
// CHECK: %[[G:.*]] = bufferization.to_buffer %arg1 read_only {{.*}}: tensor<4x5x4x4xf32>
// CHECK: memref.reinterpret_cast %[[G]] {{.*}} sizes: [5, 4, 4, 4]
// CHECK: call @dort_conv2d_f32(%[[XC]],
// CHECK-NOT: call @dort_conv2d_f32
// CHECK: return
func.func @conv_weight_grad_views(%x: tensor<4x3x6x6xf32>, %g: tensor<4x5x4x4xf32>) -> tensor<3x5x3x3xf32> {
  %xt = dopt.transpose %x {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x3x6x6xf32>) -> tensor<3x4x6x6xf32>
  %gt = dopt.transpose %g {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x5x4x4xf32>) -> tensor<5x4x4x4xf32>
  %r = dopt.conv %xt, %gt {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<3x4x6x6xf32>, tensor<5x4x4x4xf32>) -> tensor<3x5x3x3xf32>
  %dead = dopt.conv %x, %x {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<4x3x6x6xf32>, tensor<4x3x6x6xf32>) -> tensor<4x4x1x1xf32>
  return %r : tensor<3x5x3x3xf32>
}

// -----

// Each call reads its operands through to_buffer ops of its own, numbered
// by the call (dopt.library_call): One-Shot Bufferize takes a to_buffer as
// the read of its tensor, so CSE must not replace the weight gradient's by
// the forward convolution's, made before the ops that may since have
// reused the activation's memory.
// CHECK-LABEL: func.func @operands_per_call
// CHECK: bufferization.to_buffer %arg0 read_only {dopt.library_call = 0 : i64}
// CHECK: call @dort_conv2d_f32
// CHECK: bufferization.to_buffer %arg0 read_only {dopt.library_call = 1 : i64}
// CHECK: call @dort_conv2d_f32
func.func @operands_per_call(%x: tensor<4x3x6x6xf32>, %w: tensor<5x3x3x3xf32>, %g: tensor<4x5x4x4xf32>) -> (tensor<4x5x4x4xf32>, tensor<3x5x3x3xf32>) {
  %y = dopt.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<4x3x6x6xf32>, tensor<5x3x3x3xf32>) -> tensor<4x5x4x4xf32>
  %xt = dopt.transpose %x {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x3x6x6xf32>) -> tensor<3x4x6x6xf32>
  %gt = dopt.transpose %g {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x5x4x4xf32>) -> tensor<5x4x4x4xf32>
  %r = dopt.conv %xt, %gt {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<3x4x6x6xf32>, tensor<5x4x4x4xf32>) -> tensor<3x5x3x3xf32>
  return %y, %r : tensor<4x5x4x4xf32>, tensor<3x5x3x3xf32>
}

// -----

// A transposed convolution is one backward-data call: its input is the
// call's dy, its weight (C x M/G x kh x kw, as ONNX's ConvTranspose) the
// convolution's w, its output the dx the call writes whole; the bias is
// added after it.
// CHECK-LABEL: func.func @conv_transpose
// CHECK-NOT: linalg.batch_matmul
// CHECK: %[[Y:.*]] = memref.alloc() : memref<2x6x9x11xf32>
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: call @dort_conv2d_backward_data_f32(%{{.*}}, %{{.*}}, %{{.*}}, %[[C2]], %[[C2]], %[[C1]], %[[C1]], %[[C1]], %[[C1]], %[[C2]])
// CHECK: bufferization.to_tensor %[[Y]] restrict writable
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: func.func private @dort_conv2d_backward_data_f32(memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, i64, i64, i64, i64, i64, i64, i64) attributes {llvm.emit_c_interface}
func.func @conv_transpose(%x: tensor<2x4x5x6xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<6xf32>) -> tensor<2x6x9x11xf32> {
  %0 = dopt.conv_transpose %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x5x6xf32>, tensor<4x3x3x3xf32>, tensor<6xf32>) -> tensor<2x6x9x11xf32>
  return %0 : tensor<2x6x9x11xf32>
}

// -----

// Pads that differ between the ends, or an output padding of a stride or
// more, have no shape the library's dx can take: it computes the full
// result (no pads) and the pads are cut off here, the rest of the output
// padding added as zeros. Here the full result is 1x2x11x6: rows 2..9 are
// kept; columns 1..5 and one zero column.
// CHECK-LABEL: func.func @conv_transpose_uneven
// CHECK: %[[Y:.*]] = memref.alloc() : memref<1x2x11x6xf32>
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : i64
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i64
// CHECK: call @dort_conv2d_backward_data_f32(%{{.*}}, %{{.*}}, %{{.*}}, %[[C2]], %[[C1]], %[[C0]], %[[C0]], %[[C1]], %[[C2]], %[[C1]])
// CHECK: %[[T:.*]] = bufferization.to_tensor %[[Y]]
// CHECK: %[[S:.*]] = tensor.extract_slice %[[T]][0, 0, 2, 1] [1, 2, 8, 5] [1, 1, 1, 1]
// CHECK: tensor.pad %[[S]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: tensor<1x2x8x5xf32> to tensor<1x2x8x6xf32>
func.func @conv_transpose_uneven(%x: tensor<1x3x5x4xf32>, %w: tensor<3x2x3x2xf32>) -> tensor<1x2x8x6xf32> {
  %0 = dopt.conv_transpose %x, %w {dilations = array<i64: 1, 2>, group = 1 : i64, output_padding = array<i64: 0, 1>, pads = array<i64: 2, 1, 1, 0>, strides = array<i64: 2, 1>} : (tensor<1x3x5x4xf32>, tensor<3x2x3x2xf32>) -> tensor<1x2x8x6xf32>
  return %0 : tensor<1x2x8x6xf32>
}
