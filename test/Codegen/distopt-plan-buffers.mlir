// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-plan-buffers))' | FileCheck %s

// a, b, c are 64 bytes each. a is dead once b is written, so c reuses a's
// bytes; b overlaps both. Views of a buffer (collapse_shape) keep it alive.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: distopt.arena_bytes = 128
// CHECK: %[[ARENA:.*]] = memref.alloc() {alignment = 64 : i64} : memref<128xi8>
// CHECK-NEXT: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: memref.view %[[ARENA]][%[[C0]]][] : memref<128xi8> to memref<4x4xf32>
// CHECK-NEXT: %[[C64:.*]] = arith.constant 64 : index
// CHECK-NEXT: memref.view %[[ARENA]][%[[C64]]][] : memref<128xi8> to memref<16xf32>
// CHECK-NEXT: %[[C0B:.*]] = arith.constant 0 : index
// CHECK-NEXT: memref.view %[[ARENA]][%[[C0B]]][] : memref<128xi8> to memref<16xf32>
// CHECK-NOT: memref.alloc()
func.func @chain(%x: memref<16xf32>, %out: memref<16xf32>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<4x4xf32>
  %b = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  %c = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  %av = memref.collapse_shape %a [[0, 1]] : memref<4x4xf32> into memref<16xf32>
  linalg.copy ins(%x : memref<16xf32>) outs(%av : memref<16xf32>)
  linalg.copy ins(%av : memref<16xf32>) outs(%b : memref<16xf32>)
  linalg.copy ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
  linalg.copy ins(%c : memref<16xf32>) outs(%out : memref<16xf32>)
  return
}


// A returned buffer escapes and is not planned; i1 buffers are left to the
// allocator.
// CHECK-LABEL: func.func @escapes
// CHECK: memref.alloc() : memref<8xf32>
// CHECK: memref.alloc() : memref<8xi1>
// CHECK-NOT: memref.view
func.func @escapes(%x: memref<8xf32>) -> memref<8xf32> {
  %a = memref.alloc() : memref<8xf32>
  %m = memref.alloc() : memref<8xi1>
  linalg.copy ins(%x : memref<8xf32>) outs(%a : memref<8xf32>)
  return %a : memref<8xf32>
}
