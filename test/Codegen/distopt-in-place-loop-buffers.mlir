// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-in-place-loop-buffers))' | FileCheck %s

// A scatter's loop after bufferization: it carries the buffer it stores
// into and yields it unchanged. The buffer stops being carried; the loop's
// other results (a running count) are kept, and uses of the result read
// the initial buffer.
// CHECK-LABEL: func.func @scatter_loop
// CHECK: %[[R:.*]] = scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[N:.*]] = %{{.*}}) -> (i64) {
// CHECK:   memref.store %{{.*}}, %arg0[%[[K]]] : memref<4xf32>
// CHECK:   %[[N2:.*]] = arith.addi %[[N]]
// CHECK:   scf.yield %[[N2]] : i64
// CHECK: memref.load %arg0[%{{.*}}] : memref<4xf32>
// CHECK: return %[[R]] : i64
func.func @scatter_loop(%buf: memref<4xf32>, %u: f32) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r:2 = scf.for %k = %c0 to %c4 step %c1 iter_args(%b = %buf, %n = %zero) -> (memref<4xf32>, i64) {
    memref.store %u, %b[%k] : memref<4xf32>
    %n2 = arith.addi %n, %one : i64
    scf.yield %b, %n2 : memref<4xf32>, i64
  }
  %v = memref.load %r#0[%c0] : memref<4xf32>
  return %r#1 : i64
}

// A loop that yields another buffer than the one it was given is left
// alone.
// CHECK-LABEL: func.func @swapping_loop
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %arg0, %{{.*}} = %arg1) -> (memref<4xf32>, memref<4xf32>)
func.func @swapping_loop(%a: memref<4xf32>, %b: memref<4xf32>) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r:2 = scf.for %k = %c0 to %c4 step %c1 iter_args(%x = %a, %y = %b) -> (memref<4xf32>, memref<4xf32>) {
    scf.yield %y, %x : memref<4xf32>, memref<4xf32>
  }
  return %r#0 : memref<4xf32>
}
