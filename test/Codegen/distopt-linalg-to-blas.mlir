// RUN: distopt-opt %s --distopt-linalg-to-blas | FileCheck %s

// f32 matmul on buffers (B transposed through its indexing map) becomes a
// call to the runtime's BLAS kernel with transB = 1; the declaration carries
// llvm.emit_c_interface.
// CHECK: func.func private @dort_matmul_f32(memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, i32, i32, f32, f32) attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @gemm_tb
// CHECK-DAG: %[[F:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[T:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: call @dort_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %[[F]], %[[T]], %[[ONE]], %[[ONE]])
// CHECK-NOT: linalg.matmul
func.func @gemm_tb(%a: memref<4x8xf32>, %b: memref<16x8xf32>, %c: memref<4x16xf32>) {
  linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
    ins(%a, %b : memref<4x8xf32>, memref<16x8xf32>) outs(%c : memref<4x16xf32>)
  return
}

// f64 batched: dort_batch_matmul_f64.
// CHECK-LABEL: func.func @batched
// CHECK: call @dort_batch_matmul_f64
func.func @batched(%a: memref<2x4x8xf64>, %b: memref<2x8x3xf64>, %c: memref<2x4x3xf64>) {
  linalg.batch_matmul ins(%a, %b : memref<2x4x8xf64>, memref<2x8x3xf64>) outs(%c : memref<2x4x3xf64>)
  return
}

// Integer matmuls and tensor-level matmuls are left alone.
// CHECK-LABEL: func.func @left_alone
// CHECK: linalg.matmul ins(%arg0, %arg1 : memref<4x8xi32>, memref<8x2xi32>)
// CHECK: linalg.matmul ins(%arg3, %arg4 : tensor<4x8xf32>, tensor<8x2xf32>)
func.func @left_alone(%a: memref<4x8xi32>, %b: memref<8x2xi32>, %c: memref<4x2xi32>,
                      %ta: tensor<4x8xf32>, %tb: tensor<8x2xf32>, %tc: tensor<4x2xf32>) -> tensor<4x2xf32> {
  linalg.matmul ins(%a, %b : memref<4x8xi32>, memref<8x2xi32>) outs(%c : memref<4x2xi32>)
  %r = linalg.matmul ins(%ta, %tb : tensor<4x8xf32>, tensor<8x2xf32>) outs(%tc : tensor<4x2xf32>) -> tensor<4x2xf32>
  return %r : tensor<4x2xf32>
}

// A zero fill of the whole accumulator right before the product goes away:
// BLAS writes C with beta = 0 instead of reading zeros. A shared A (no
// batch dimension, as a convolution's weights) becomes a batch of one.
// CHECK-LABEL: func.func @fresh_accumulator_shared_lhs
// CHECK-NOT: linalg.fill
// CHECK: %[[A3:.*]] = memref.expand_shape %arg0 {{\[\[}}0, 1], [2]] output_shape [1, 16, 27] : memref<16x27xf32> into memref<1x16x27xf32>
// CHECK: %[[A:.*]] = memref.cast %[[A3]]
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: call @dort_batch_matmul_f32(%[[A]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[ZERO]])
func.func @fresh_accumulator_shared_lhs(%w: memref<16x27xf32>, %col: memref<4x27x64xf32>, %out: memref<4x1x16x64xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<4x1x16x64xf32>)
  %c = memref.subview %out[0, 0, 0, 0] [4, 1, 16, 64] [1, 1, 1, 1] : memref<4x1x16x64xf32> to memref<4x16x64xf32, strided<[1024, 64, 1]>>
  linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
    ins(%w, %col : memref<16x27xf32>, memref<4x27x64xf32>) outs(%c : memref<4x16x64xf32, strided<[1024, 64, 1]>>)
  return
}

// The fill stays, and beta = 1, when the product covers only part of the
// filled buffer (one group of two), when something writes memory in
// between, or when the fill is not zero.
// CHECK-LABEL: func.func @accumulator_kept
// CHECK: linalg.fill
// CHECK: call @dort_batch_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE1:.*]], %[[ONE1]])
// CHECK: linalg.fill
// CHECK: linalg.copy
// CHECK: call @dort_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE2:.*]], %[[ONE2]])
// CHECK: linalg.fill
// CHECK: call @dort_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE3:.*]], %[[ONE3]])
func.func @accumulator_kept(%w: memref<16x27xf32>, %col: memref<4x27x64xf32>, %out: memref<4x2x16x64xf32>,
                            %a: memref<4x8xf32>, %b: memref<8x2xf32>, %c: memref<4x2xf32>, %d: memref<4x2xf32>) {
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<4x2x16x64xf32>)
  %g0 = memref.subview %out[0, 0, 0, 0] [4, 1, 16, 64] [1, 1, 1, 1] : memref<4x2x16x64xf32> to memref<4x16x64xf32, strided<[2048, 64, 1]>>
  linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
    ins(%w, %col : memref<16x27xf32>, memref<4x27x64xf32>) outs(%g0 : memref<4x16x64xf32, strided<[2048, 64, 1]>>)
  linalg.fill ins(%zero : f32) outs(%c : memref<4x2xf32>)
  linalg.copy ins(%d : memref<4x2xf32>) outs(%c : memref<4x2xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x2xf32>) outs(%c : memref<4x2xf32>)
  linalg.fill ins(%two : f32) outs(%c : memref<4x2xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x2xf32>) outs(%c : memref<4x2xf32>)
  return
}

// A zero fill of exactly C (one group's slice of a convolution's output)
// also becomes beta = 0.
// CHECK-LABEL: func.func @fresh_slice
// CHECK-NOT: linalg.fill
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: call @dort_batch_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[ZERO]])
func.func @fresh_slice(%w: memref<16x27xf32>, %col: memref<4x27x64xf32>, %out: memref<4x2x16x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %g1 = memref.subview %out[0, 1, 0, 0] [4, 1, 16, 64] [1, 1, 1, 1] : memref<4x2x16x64xf32> to memref<4x16x64xf32, strided<[2048, 64, 1], offset: 1024>>
  linalg.fill ins(%zero : f32) outs(%g1 : memref<4x16x64xf32, strided<[2048, 64, 1], offset: 1024>>)
  linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
    ins(%w, %col : memref<16x27xf32>, memref<4x27x64xf32>) outs(%g1 : memref<4x16x64xf32, strided<[2048, 64, 1], offset: 1024>>)
  return
}
