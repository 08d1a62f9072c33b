// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-copies-to-linalg))' | FileCheck %s
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-copies-to-linalg{memcpy-max-bytes=288}))' | FileCheck %s --check-prefix=MEMCPY

// A copy into the interior of a padded buffer (strided view) becomes a
// linalg.copy; copies between differently shaped or dynamic memrefs, and
// 0-d ones, stay memref.copy.
// CHECK-LABEL: func.func @pad_interior
// CHECK-NOT: memref.copy %arg0
// CHECK: linalg.copy ins(%arg0 : memref<2x3x4x4xf32>) outs(%{{.*}} : memref<2x3x4x4xf32, strided<[108, 36, 6, 1], offset: 7>>)
// CHECK: memref.copy %arg2, %arg3 : memref<?xf32> to memref<?xf32>
// CHECK: memref.copy %arg4, %arg5 : memref<f32> to memref<f32>
func.func @pad_interior(%x: memref<2x3x4x4xf32>, %padded: memref<2x3x6x6xf32>,
                        %d: memref<?xf32>, %e: memref<?xf32>,
                        %s: memref<f32>, %t: memref<f32>) {
  %interior = memref.subview %padded[0, 0, 1, 1] [2, 3, 4, 4] [1, 1, 1, 1] : memref<2x3x6x6xf32> to memref<2x3x4x4xf32, strided<[108, 36, 6, 1], offset: 7>>
  memref.copy %x, %interior : memref<2x3x4x4xf32> to memref<2x3x4x4xf32, strided<[108, 36, 6, 1], offset: 7>>
  memref.copy %d, %e : memref<?xf32> to memref<?xf32>
  memref.copy %s, %t : memref<f32> to memref<f32>
  return
}

// A copy of a buffer onto itself (bufferization writes an in-place result
// back through a second, identical view) is dropped, not turned into a
// pass over memory; a copy between different views of one buffer stays.
// CHECK-LABEL: func.func @self_copy
// CHECK-NOT: linalg.copy ins(%{{.*}} : memref<2x4xf32, strided<[8, 1]>>) outs(%{{.*}} : memref<2x4xf32, strided<[8, 1]>>)
// CHECK: linalg.copy ins(%{{.*}} : memref<2x4xf32, strided<[8, 1]>>) outs(%{{.*}} : memref<2x4xf32, strided<[8, 1], offset: 4>>)
// CHECK-NOT: memref.copy
func.func @self_copy(%buf: memref<2x8xf32>) {
  %a = memref.subview %buf[0, 0] [2, 4] [1, 1] : memref<2x8xf32> to memref<2x4xf32, strided<[8, 1]>>
  %b = memref.subview %buf[0, 0] [2, 4] [1, 1] : memref<2x8xf32> to memref<2x4xf32, strided<[8, 1]>>
  memref.copy %a, %b : memref<2x4xf32, strided<[8, 1]>> to memref<2x4xf32, strided<[8, 1]>>
  memref.copy %a, %a : memref<2x4xf32, strided<[8, 1]>> to memref<2x4xf32, strided<[8, 1]>>
  %c = memref.subview %buf[0, 4] [2, 4] [1, 1] : memref<2x8xf32> to memref<2x4xf32, strided<[8, 1], offset: 4>>
  memref.copy %a, %c : memref<2x4xf32, strided<[8, 1]>> to memref<2x4xf32, strided<[8, 1], offset: 4>>
  return
}

// Between two contiguous buffers the copy runs over one dimension (a
// [M, C, 3, 3] copy's 3x3 loops would be unrolled away by LLVM and the loop
// around them vectorized strided by 9).
// CHECK-LABEL: func.func @contiguous
// CHECK: %[[S:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1, 2, 3]] : memref<4x2x3x3xf32> into memref<72xf32>
// CHECK: %[[T:.*]] = memref.collapse_shape %arg1 {{\[}}[0, 1, 2, 3]] : memref<4x2x3x3xf32> into memref<72xf32>
// CHECK: linalg.copy ins(%[[S]] : memref<72xf32>) outs(%[[T]] : memref<72xf32>)
func.func @contiguous(%w: memref<4x2x3x3xf32>, %out: memref<4x2x3x3xf32>) {
  memref.copy %w, %out : memref<4x2x3x3xf32> to memref<4x2x3x3xf32>
  return
}

// With memcpy-max-bytes (the CPU target's), contiguous copies up to that
// size stay memref.copy (one memcpy each), also into a contiguous slice at
// an offset; larger ones, strided ones and those of sub-byte elements
// become loops.
// MEMCPY-LABEL: func.func @contiguous
// MEMCPY-NEXT: memref.copy %arg0, %arg1 : memref<4x2x3x3xf32> to memref<4x2x3x3xf32>
// MEMCPY-NEXT: return
// MEMCPY-LABEL: func.func @memcpy_sizes
// MEMCPY: memref.copy %arg0, %{{.*}} : memref<1x4x8xf32> to memref<1x4x8xf32, strided<[32, 8, 1], offset: 64>>
// MEMCPY: linalg.copy ins(%{{.*}} : memref<73xf32>) outs(%{{.*}} : memref<73xf32>)
// MEMCPY: linalg.copy ins(%arg0 : memref<1x4x8xf32>) outs(%{{.*}} : memref<1x4x8xf32, strided<[64, 16, 1]>>)
// MEMCPY: linalg.copy ins(%arg5 : memref<16xi1>) outs(%arg6 : memref<16xi1>)
// MEMCPY-NOT: memref.copy
func.func @memcpy_sizes(%x: memref<1x4x8xf32>, %steps: memref<4x4x8xf32>,
                        %big: memref<73xf32>, %big2: memref<73xf32>,
                        %wide: memref<4x4x16xf32>, %b: memref<16xi1>,
                        %b2: memref<16xi1>) {
  %step = memref.subview %steps[2, 0, 0] [1, 4, 8] [1, 1, 1] : memref<4x4x8xf32> to memref<1x4x8xf32, strided<[32, 8, 1], offset: 64>>
  memref.copy %x, %step : memref<1x4x8xf32> to memref<1x4x8xf32, strided<[32, 8, 1], offset: 64>>
  memref.copy %big, %big2 : memref<73xf32> to memref<73xf32>
  %half = memref.subview %wide[0, 0, 0] [1, 4, 8] [1, 1, 1] : memref<4x4x16xf32> to memref<1x4x8xf32, strided<[64, 16, 1]>>
  memref.copy %x, %half : memref<1x4x8xf32> to memref<1x4x8xf32, strided<[64, 16, 1]>>
  memref.copy %b, %b2 : memref<16xi1> to memref<16xi1>
  return
}
