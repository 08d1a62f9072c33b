// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-copies-to-linalg))' | FileCheck %s

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
