// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-promote-reductions))' | FileCheck %s

// A row sum: the accumulator is loaded once, carried in iter_args, stored
// once; the add may be reassociated (so LLVM vectorises it).
// CHECK-LABEL: func.func @row_sum
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[A0:.*]] = memref.load %arg1[%[[I]]] : memref<64xf32>
// CHECK-NEXT: %[[R:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A:.*]] = %[[A0]]) -> (f32)
// CHECK-NEXT: %[[X:.*]] = memref.load %arg0
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[A]], %[[X]] fastmath<reassoc> : f32
// CHECK-NEXT: scf.yield %[[S]] : f32
// CHECK: memref.store %[[R]], %arg1[%[[I]]] : memref<64xf32>
func.func @row_sum(%in: memref<64x128xf32>, %acc: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c64 step %c1 {
    scf.for %t = %c0 to %c128 step %c1 {
      %a = memref.load %acc[%i] : memref<64xf32>
      %x = memref.load %in[%i, %t] : memref<64x128xf32>
      %s = arith.addf %a, %x : f32
      memref.store %s, %acc[%i] : memref<64xf32>
    }
  }
  return
}

// A max reduction is carried too (no flag needed); the outer loop, whose
// load and store move with its induction variable, is left alone.
// CHECK-LABEL: func.func @row_max
// CHECK: scf.for %{{.*}} iter_args
// CHECK: arith.maximumf
// CHECK-NOT: iter_args
func.func @row_max(%in: memref<64x128xf32>, %acc: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c64 step %c1 {
    scf.for %t = %c0 to %c128 step %c1 {
      %a = memref.load %acc[%i] : memref<64xf32>
      %x = memref.load %in[%i, %t] : memref<64x128xf32>
      %s = arith.maximumf %a, %x : f32
      memref.store %s, %acc[%i] : memref<64xf32>
    }
  }
  return
}

// Left alone: an index that changes in the loop (a map, not a reduction),
// a second access to the accumulator, and a call that may write memory.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: iter_args
// CHECK: return
func.func private @opaque()
func.func @left_alone(%in: memref<128xf32>, %acc: memref<128xf32>, %s: memref<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  scf.for %t = %c0 to %c128 step %c1 {
    %a = memref.load %acc[%t] : memref<128xf32>
    %x = memref.load %in[%t] : memref<128xf32>
    %y = arith.addf %a, %x : f32
    memref.store %y, %acc[%t] : memref<128xf32>
  }
  scf.for %t = %c0 to %c128 step %c1 {
    %a = memref.load %s[%c0] : memref<1xf32>
    %b = memref.load %s[%c0] : memref<1xf32>
    %y = arith.addf %a, %b : f32
    memref.store %y, %s[%c0] : memref<1xf32>
  }
  scf.for %t = %c0 to %c128 step %c1 {
    %a = memref.load %s[%c0] : memref<1xf32>
    %x = memref.load %in[%t] : memref<128xf32>
    %y = arith.addf %a, %x : f32
    func.call @opaque() : () -> ()
    memref.store %y, %s[%c0] : memref<1xf32>
  }
  return
}

// A load of the same element on every iteration (the row's scale) moves
// above the loop when the loop writes other buffers only; a load of a
// buffer the loop writes stays.
// CHECK-LABEL: func.func @invariant_loads
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[R:.*]] = memref.load %arg1[%[[I]]] : memref<64xf32>
// CHECK-NEXT: scf.for
// CHECK-NEXT: memref.load %arg0
// CHECK-NEXT: arith.mulf %{{.*}}, %[[R]]
// CHECK: scf.for
// CHECK-NEXT: memref.load %arg2[%{{.*}}] : memref<64x128xf32>
// CHECK-NEXT: memref.load %arg2[%[[I]], %c0] : memref<64x128xf32>
func.func @invariant_loads(%in: memref<64x128xf32>, %scale: memref<64xf32>, %out: memref<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  scf.for %i = %c0 to %c64 step %c1 {
    scf.for %t = %c0 to %c128 step %c1 {
      %x = memref.load %in[%i, %t] : memref<64x128xf32>
      %r = memref.load %scale[%i] : memref<64xf32>
      %y = arith.mulf %x, %r : f32
      memref.store %y, %out[%i, %t] : memref<64x128xf32>
    }
    scf.for %t = %c0 to %c128 step %c1 {
      %x = memref.load %out[%i, %t] : memref<64x128xf32>
      %f = memref.load %out[%i, %c0] : memref<64x128xf32>
      %y = arith.addf %x, %f : f32
      memref.store %y, %out[%i, %t] : memref<64x128xf32>
    }
  }
  return
}

// A loop that rewrites a buffer through a linalg op keeps its loads of it.
// CHECK-LABEL: func.func @opaque_writer
// CHECK: scf.for
// CHECK-NEXT: memref.load %arg0[%c0]
// CHECK: linalg.fill
func.func @opaque_writer(%b: memref<4xf32>, %out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %k = %c0 to %c8 step %c1 {
    %v = memref.load %b[%c0] : memref<4xf32>
    memref.store %v, %out[%k] : memref<8xf32>
    %i = arith.index_cast %k : index to i32
    %f = arith.sitofp %i : i32 to f32
    linalg.fill ins(%f : f32) outs(%b : memref<4xf32>)
  }
  return
}
