// RUN: distopt-opt %s --distopt-linalg-to-blas --cse | FileCheck %s

// GEMMs of f16 and bf16 values (widened to f32 by dopt -> linalg) read the
// 16-bit values: dort_matmul_f16_f32 / dort_batch_matmul_bf16_f32 with f16
// (bf16) A and B and an f32 C.

#id = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// An entry argument's conversion goes (the argument is read-only: inputs and
// weights are): the GEMM reads the argument. The
// ReLU written in place of the first product is stored in f16 for the
// second GEMM (the product keeps its f32 buffer).
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]*]]: memref<4x8xf16> {{.*}}, %[[W1:[^:]*]]: memref<8x16xf16> {{.*}}, %[[W2:[^:]*]]: memref<16x2xf16>
// CHECK-DAG: %[[H16:.*]] = memref.alloc() : memref<4x16xf16>
// CHECK-DAG: %[[H:.*]] = memref.alloc() : memref<4x16xf32>
// CHECK-DAG: %[[XC:.*]] = memref.cast %[[X]] : memref<4x8xf16> to memref<?x?xf16, strided<[?, ?], offset: ?>>
// CHECK-DAG: %[[W1C:.*]] = memref.cast %[[W1]] : memref<8x16xf16> to memref<?x?xf16, strided<[?, ?], offset: ?>>
// CHECK: call @dort_matmul_f16_f32(%[[XC]], %[[W1C]],
// CHECK: linalg.generic {{.*}} ins(%[[H]] : memref<4x16xf32>) outs(%[[H16]] : memref<4x16xf16>)
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: f16):
// CHECK: arith.maximumf
// CHECK-NEXT: %[[R:.*]] = arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT: linalg.yield %[[R]] : f16
// CHECK: %[[HC:.*]] = memref.cast %[[H16]] : memref<4x16xf16>
// CHECK: call @dort_matmul_f16_f32(%[[HC]],
// CHECK-NOT: arith.extf
func.func @mlp(%x: memref<4x8xf16> {bufferization.writable = false},
               %w1: memref<8x16xf16> {bufferization.writable = false},
               %w2: memref<16x2xf16> {bufferization.writable = false}, %y: memref<4x2xf32>) {
  %zero = arith.constant 0.0 : f32
  %xw = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %w1w = memref.alloc() : memref<8x16xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w1 : memref<8x16xf16>) outs(%w1w : memref<8x16xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %h = memref.alloc() : memref<4x16xf32>
  linalg.fill ins(%zero : f32) outs(%h : memref<4x16xf32>)
  linalg.matmul ins(%xw, %w1w : memref<4x8xf32>, memref<8x16xf32>) outs(%h : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%h : memref<4x16xf32>) outs(%h : memref<4x16xf32>) {
  ^bb0(%in: f32, %o: f32):
    %t = arith.truncf %in : f32 to f16
    %e = arith.extf %t : f16 to f32
    %r = arith.maximumf %e, %zero : f32
    %t2 = arith.truncf %r : f32 to f16
    %e2 = arith.extf %t2 : f16 to f32
    linalg.yield %e2 : f32
  }
  %w2w = memref.alloc() : memref<16x2xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w2 : memref<16x2xf16>) outs(%w2w : memref<16x2xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<4x2xf32>)
  linalg.matmul ins(%h, %w2w : memref<4x16xf32>, memref<16x2xf32>) outs(%y : memref<4x2xf32>)
  return
}

// bf16, batched, through reshapes; one buffer written twice (bufferization
// reuses it): each write is its own 16-bit value.
// CHECK-LABEL: func.func @batched_bf16
// CHECK: memref.collapse_shape %arg0 {{.*}} : memref<2x3x4x8xbf16> into memref<6x4x8xbf16>
// CHECK: call @dort_batch_matmul_bf16_f32(
// CHECK: memref.collapse_shape %arg2 {{.*}} : memref<2x3x4x8xbf16> into memref<6x4x8xbf16>
// CHECK: call @dort_batch_matmul_bf16_f32(
// CHECK-NOT: linalg.generic
func.func @batched_bf16(%q: memref<2x3x4x8xbf16> {bufferization.writable = false},
                        %k: memref<6x8x4xbf16> {bufferization.writable = false},
                        %v: memref<2x3x4x8xbf16> {bufferization.writable = false},
                        %c1: memref<6x4x4xf32>, %c2: memref<6x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %qw = memref.alloc() : memref<2x3x4x8xf32>
  %kw = memref.alloc() : memref<6x8x4xf32>
  linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : memref<2x3x4x8xbf16>) outs(%qw : memref<2x3x4x8xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %e = arith.extf %in : bf16 to f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%k : memref<6x8x4xbf16>) outs(%kw : memref<6x8x4xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %e = arith.extf %in : bf16 to f32
    linalg.yield %e : f32
  }
  %qc = memref.collapse_shape %qw [[0, 1], [2], [3]] : memref<2x3x4x8xf32> into memref<6x4x8xf32>
  linalg.fill ins(%zero : f32) outs(%c1 : memref<6x4x4xf32>)
  linalg.batch_matmul ins(%qc, %kw : memref<6x4x8xf32>, memref<6x8x4xf32>) outs(%c1 : memref<6x4x4xf32>)
  linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%v : memref<2x3x4x8xbf16>) outs(%qw : memref<2x3x4x8xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %e = arith.extf %in : bf16 to f32
    linalg.yield %e : f32
  }
  %vc = memref.collapse_shape %qw [[0, 1], [2], [3]] : memref<2x3x4x8xf32> into memref<6x4x8xf32>
  linalg.fill ins(%zero : f32) outs(%c2 : memref<6x4x4xf32>)
  linalg.batch_matmul ins(%vc, %kw : memref<6x4x8xf32>, memref<6x8x4xf32>) outs(%c2 : memref<6x4x4xf32>)
  return
}

// A conversion of an argument that may be written stays a conversion, now
// into a 16-bit buffer.
// CHECK-LABEL: func.func @writable_argument
// CHECK: %[[COPY:.*]] = memref.alloc() : memref<4x8xf16>
// CHECK: linalg.generic {{.*}} ins(%arg0 : memref<4x8xf16>) outs(%[[COPY]] : memref<4x8xf16>)
// CHECK: %[[C:.*]] = memref.cast %[[COPY]]
// CHECK: call @dort_matmul_f16_f32(%[[C]],
func.func @writable_argument(%x: memref<4x8xf16>, %w: memref<8x2xf16> {bufferization.writable = false},
                             %y: memref<4x2xf32>) {
  %zero = arith.constant 0.0 : f32
  %xw = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %ww = memref.alloc() : memref<8x2xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<8x2xf16>) outs(%ww : memref<8x2xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<4x2xf32>)
  linalg.matmul ins(%xw, %ww : memref<4x8xf32>, memref<8x2xf32>) outs(%y : memref<4x2xf32>)
  return
}

// Left f32: an f16 operand with an f32 one, a widened value that something
// other than a GEMM reads too, and one that a named op reads (a transpose).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: f16_f32
// CHECK: call @dort_matmul_f32
// CHECK-NOT: f16_f32
// CHECK: call @dort_matmul_f32
// CHECK-NOT: f16_f32
// CHECK: call @dort_matmul_f32
// CHECK-NOT: f16_f32
// CHECK: return
func.func @left_alone(%x: memref<4x8xf16>, %w: memref<8x2xf32>, %w16: memref<8x2xf16>,
                      %y: memref<4x2xf32>, %z: memref<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %xw = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<4x2xf32>)
  linalg.matmul ins(%xw, %w : memref<4x8xf32>, memref<8x2xf32>) outs(%y : memref<4x2xf32>)
  %ww = memref.alloc() : memref<8x2xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w16 : memref<8x2xf16>) outs(%ww : memref<8x2xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  %xw2 = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw2 : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<4x2xf32>)
  linalg.matmul ins(%xw2, %ww : memref<4x8xf32>, memref<8x2xf32>) outs(%y : memref<4x2xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%xw2 : memref<4x8xf32>) outs(%z : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  }
  %xw3 = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf16>) outs(%xw3 : memref<4x8xf32>) {
  ^bb0(%in: f16, %o: f32):
    %e = arith.extf %in : f16 to f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%y : memref<4x2xf32>)
  linalg.matmul ins(%xw3, %ww : memref<4x8xf32>, memref<8x2xf32>) outs(%y : memref<4x2xf32>)
  %t = memref.alloc() : memref<8x4xf32>
  linalg.transpose ins(%xw3 : memref<4x8xf32>) outs(%t : memref<8x4xf32>) permutation = [1, 0]
  return
}
