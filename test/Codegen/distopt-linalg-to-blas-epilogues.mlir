// RUN: distopt-opt %s --distopt-linalg-to-blas=epilogues=true --cse | FileCheck %s
// RUN: distopt-opt %s --distopt-linalg-to-blas | FileCheck %s --check-prefix=OFF

// Without the option (the CPU target) no GEMM takes an epilogue.
// OFF-NOT: dort_matmul_epilogue_f32

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#col3 = affine_map<(d0, d1, d2) -> (d2)>

// CHECK: func.func private @dort_matmul_epilogue_f32(memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?xf32, strided<[?], offset: ?>>, i32, i32, f32, f32, i32, i32) attributes {llvm.emit_c_interface}

// Gemm + bias + ReLU written in place of the product (an MLP layer): one
// call, act = 1 (ReLU), with a bias, beta = 0; D and R are the product's
// buffer; no generic is left.
// CHECK-LABEL: func.func @bias_relu_in_place
// CHECK: %[[C:.*]] = memref.alloc() : memref<4x16xf32>
// CHECK-DAG: %[[ALPHA:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[D:.*]] = memref.cast %[[C]] : memref<4x16xf32> to memref<?x?xf32
// CHECK-DAG: %[[B:.*]] = memref.cast %arg2 : memref<16xf32> to memref<?xf32
// CHECK-DAG: %[[BETA:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[ONE_I:.*]] = arith.constant 1 : i32
// CHECK: call @dort_matmul_epilogue_f32(%{{.*}}, %{{.*}}, %[[D]], %[[D]], %[[B]], %{{.*}}, %{{.*}}, %[[ALPHA]], %[[BETA]], %[[ONE_I]], %[[ONE_I]])
// CHECK-NOT: linalg.generic
// CHECK: return %[[C]]
func.func @bias_relu_in_place(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>) -> memref<4x16xf32> {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %bias : memref<4x16xf32>, memref<16xf32>) outs(%c : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  }
  return %c : memref<4x16xf32>
}

// A transformer's projection: the product over collapsed rows, read as
// [2, 2, 16] by a step that adds the bias and the residual (in either
// order) into a buffer of its own. D and R are collapsed to [4, 16],
// beta = 1, act = 0; the product's buffer goes.
// CHECK-LABEL: func.func @bias_residual_3d
// CHECK-NOT: memref.alloc
// CHECK-DAG: %[[ZERO_I:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[OUT:.*]] = memref.collapse_shape %arg4 {{\[\[}}0, 1], [2]] : memref<2x2x16xf32> into memref<4x16xf32>
// CHECK-DAG: %[[RES:.*]] = memref.collapse_shape %arg3 {{\[\[}}0, 1], [2]] : memref<2x2x16xf32> into memref<4x16xf32>
// CHECK-DAG: %[[D:.*]] = memref.cast %[[OUT]]
// CHECK-DAG: %[[R:.*]] = memref.cast %[[RES]]
// CHECK-DAG: %[[ONE_I:.*]] = arith.constant 1 : i32
// CHECK: call @dort_matmul_epilogue_f32(%{{.*}}, %{{.*}}, %[[D]], %[[R]], %{{.*}}, %[[ZERO_I]], %[[ZERO_I]], %[[ONE]], %[[ONE]], %[[ZERO_I]], %[[ONE_I]])
// CHECK-NOT: linalg.generic
func.func @bias_residual_3d(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>,
                            %res: memref<2x2x16xf32>, %out: memref<2x2x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  %e = memref.expand_shape %c [[0, 1], [2]] output_shape [2, 2, 16] : memref<4x16xf32> into memref<2x2x16xf32>
  linalg.generic {indexing_maps = [#id3, #col3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %bias, %e : memref<2x2x16xf32>, memref<16xf32>, memref<2x2x16xf32>) outs(%out : memref<2x2x16xf32>) {
  ^bb0(%r: f32, %y: f32, %x: f32, %o: f32):
    %s = arith.addf %y, %x : f32
    %t = arith.addf %r, %s : f32
    linalg.yield %t : f32
  }
  return
}

// GPT-2's GELU (tanh form, as its exporter writes it) after the bias:
// act = 2.
// CHECK-LABEL: func.func @bias_gelu_tanh
// CHECK-DAG: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK: call @dort_matmul_epilogue_f32({{.*}}, %[[TWO]], %{{.*}})
// CHECK-NOT: linalg.generic
func.func @bias_gelu_tanh(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>, %out: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %k0 = arith.constant 4.471500e-02 : f32
  %k1 = arith.constant 0.797884583 : f32
  %half = arith.constant 5.000000e-01 : f32
  %one = arith.constant 1.000000e+00 : f32
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#col, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%bias, %c : memref<16xf32>, memref<4x16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%y: f32, %x: f32, %o: f32):
    %z = arith.addf %y, %x : f32
    %z2 = arith.mulf %z, %z : f32
    %z3 = arith.mulf %z2, %z : f32
    %p = arith.mulf %z3, %k0 : f32
    %q = arith.addf %z, %p : f32
    %u = arith.mulf %q, %k1 : f32
    %t = math.tanh %u : f32
    %t1 = arith.addf %t, %one : f32
    %h = arith.mulf %z, %half : f32
    %g = arith.mulf %h, %t1 : f32
    linalg.yield %g : f32
  }
  return
}

// ReLU without a bias on the entry's output buffer (the product written in
// place): act = 1, hasBias = 0, an empty view of D stands for the bias.
// CHECK-LABEL: func.func @relu_only_output
// CHECK-DAG: %[[ZERO_I:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[ONE_I:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[EMPTY:.*]] = memref.reinterpret_cast %arg2 to offset: [0], sizes: [0], strides: [1]
// CHECK-DAG: %[[B:.*]] = memref.cast %[[EMPTY]]
// CHECK: call @dort_matmul_epilogue_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[B]], %[[ZERO_I]], %[[ZERO_I]], %{{.*}}, %{{.*}}, %[[ONE_I]], %[[ZERO_I]])
// CHECK-NOT: linalg.generic
func.func @relu_only_output(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %c: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<4x16xf32>) outs(%c : memref<4x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %zero : f32
    linalg.yield %r : f32
  }
  return
}

// Left alone:
// - GELU with erf (not the library's GELU);
// - a bias per row (not per column);
// - a product that is read again later;
// - a product accumulated onto (no zero fill: beta = 1 already);
// - an epilogue that writes into one of the GEMM's operands;
// - a step that uses an operand twice (z * bias).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: dort_matmul_epilogue_f32
// CHECK: return
func.func @left_alone(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>,
                      %rbias: memref<4xf32>, %out: memref<4x16xf32>, %acc: memref<4x16xf32>,
                      %sq: memref<4x4xf32>, %sqb: memref<4xf32>) -> memref<4x16xf32> {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 5.000000e-01 : f32
  %one = arith.constant 1.000000e+00 : f32
  %k = arith.constant 0.707106769 : f32
  %c1 = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c1 : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c1 : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c1, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    %u = arith.mulf %z, %k : f32
    %e = math.erf %u : f32
    %e1 = arith.addf %e, %one : f32
    %h = arith.mulf %z, %half : f32
    %g = arith.mulf %h, %e1 : f32
    linalg.yield %g : f32
  }
  %c2 = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c2 : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c2 : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c2, %rbias : memref<4x16xf32>, memref<4xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    linalg.yield %z : f32
  }
  %c3 = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c3 : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c3 : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c3, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    linalg.yield %z : f32
  }
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%acc : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    linalg.yield %z : f32
  }
  %c4 = memref.alloc() : memref<4x4xf32>
  linalg.fill ins(%zero : f32) outs(%c4 : memref<4x4xf32>)
  linalg.matmul ins(%sq, %sq : memref<4x4xf32>, memref<4x4xf32>) outs(%c4 : memref<4x4xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c4, %sqb : memref<4x4xf32>, memref<4xf32>) outs(%sq : memref<4x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    linalg.yield %z : f32
  }
  %c5 = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c5 : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c5 : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c5, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    %w = arith.mulf %z, %y : f32
    linalg.yield %w : f32
  }
  return %c3 : memref<4x16xf32>
}

// Clip(0, 10) agrees with ReLU below 8 but is not ReLU: left alone (the
// body is also evaluated far out).
// CHECK-LABEL: func.func @clip_is_not_relu
// CHECK-NOT: dort_matmul_epilogue_f32
// CHECK: linalg.generic
func.func @clip_is_not_relu(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>, %out: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %ten = arith.constant 10.0 : f32
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    %r = arith.maximumf %z, %zero : f32
    %m = arith.minimumf %r, %ten : f32
    linalg.yield %m : f32
  }
  return
}

// An f16 layer (its GEMM reads the 16-bit values): the step's roundings
// (truncf/extf around each f32 operation) are one rounding in the library;
// bias and ReLU fused: dort_matmul_epilogue_f16 on f16 D and bias.
// CHECK-LABEL: func.func @f16_bias_relu
// CHECK: call @dort_matmul_epilogue_f16(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (memref<?x?xf16, {{.*}}>, memref<?x?xf16, {{.*}}>, memref<?x?xf16, {{.*}}>, memref<?x?xf16, {{.*}}>, memref<?xf16, {{.*}}>, i32, i32, f32, f32, i32, i32) -> ()
// CHECK-NOT: linalg.generic
func.func @f16_bias_relu(%x: memref<4x8xf16> {bufferization.writable = false},
                         %w: memref<8x16xf16> {bufferization.writable = false},
                         %bias: memref<16xf16> {bufferization.writable = false},
                         %y: memref<4x16xf16>) {
  %zero = arith.constant 0.0 : f32
  %xw = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %ww = memref.alloc() : memref<8x16xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<8x16xf16>) outs(%ww : memref<8x16xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%xw, %ww : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %bias : memref<4x16xf32>, memref<16xf16>) outs(%y : memref<4x16xf16>) {
  ^bb0(%in: f32, %b: f16, %o: f16):
    %t = arith.truncf %in : f32 to f16
    %e = arith.extf %t : f16 to f32
    %eb = arith.extf %b : f16 to f32
    %s = arith.addf %e, %eb : f32
    %t2 = arith.truncf %s : f32 to f16
    %e2 = arith.extf %t2 : f16 to f32
    %r = arith.maximumf %e2, %zero : f32
    %t3 = arith.truncf %r : f32 to f16
    linalg.yield %t3 : f16
  }
  return
}

// An f32 step that rounds through f16 (a Cast round trip: fake
// quantisation) keeps its rounding: left alone.
// CHECK-LABEL: func.func @f32_step_rounding_through_f16
// CHECK-NOT: dort_matmul_epilogue
// CHECK: linalg.generic
func.func @f32_step_rounding_through_f16(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %bias: memref<16xf32>, %out: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %bias : memref<4x16xf32>, memref<16xf32>) outs(%out : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %z = arith.addf %x, %y : f32
    %t = arith.truncf %z : f32 to f16
    %e = arith.extf %t : f16 to f32
    linalg.yield %e : f32
  }
  return
}
