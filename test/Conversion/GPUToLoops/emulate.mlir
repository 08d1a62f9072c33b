// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches))' | FileCheck %s
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches{forward=true}))' | FileCheck %s --check-prefix=FWD

// With forward=true a phase's threads run in increasing order: the thread
// index is the loop's induction variable.
// FWD-LABEL: func.func @row
// FWD: scf.for %[[I:.*]] = %c0 to %{{.*}} step %{{.*}} {
// FWD-NEXT: arith.remui %[[I]]

// A row kernel (4 blocks of 32 threads): thread 0 writes a value, a barrier,
// every thread reads it; then a block sum through gpu.all_reduce.
// CHECK-LABEL: func.func @row
func.func @row(%x: memref<4x32xf32>, %s: memref<4xf32>, %y: memref<4x32xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  // Each thread's partial sum is kept for the all-reduce; the thread-0 test
  // (pure) is recomputed in each phase, not kept.
  // CHECK-NOT: memref.alloca() : memref<32xi1>
  // CHECK: %[[PART:.*]] = memref.alloca() : memref<32xf32>
  // CHECK-NOT: memref.alloca
  // CHECK: scf.for %[[B:.*]] = %c0 to %{{.*}} step %{{.*}} {
  // Phase 1, threads in reverse order: t = 31 - i.
  // CHECK:   scf.for %[[I:.*]] = %c0 to %{{.*}} step %{{.*}} {
  // CHECK:     arith.subi %{{.*}}, %[[I]]
  // CHECK:     %[[FIRST:.*]] = arith.cmpi eq
  // CHECK:     scf.if %[[FIRST]] {
  // CHECK:       memref.store %{{.*}}, %[[S:.*]][
  // Phase 2: every thread reads the stored value and adds its element.
  // CHECK:   scf.for
  // CHECK:     arith.subi
  // CHECK-NEXT: %[[T2:.*]] = arith.subi
  // CHECK:     memref.load %[[S]]
  // CHECK:     memref.store %{{.*}}, %[[PART]][%[[T2]]]
  // The all-reduce: the partials in thread order, shared by the block.
  // CHECK:   %[[FIRSTP:.*]] = memref.load %[[PART]][%c0]
  // CHECK:   %[[SUM:.*]] = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[FIRSTP]])
  // CHECK:     %[[P:.*]] = memref.load %[[PART]][%[[J]]]
  // CHECK:     arith.addf %[[ACC]], %[[P]]
  // Phase 3 uses the sum on thread 0.
  // CHECK:   scf.for
  // CHECK:     arith.cmpi eq
  // CHECK:     scf.if
  // CHECK:       memref.store %[[SUM]]
  // CHECK-NOT: gpu.
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c4, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %tx, %c0 : index
    scf.if %first {
      %v = memref.load %x[%bx, %c0] : memref<4x32xf32>
      memref.store %v, %s[%bx] : memref<4xf32>
    }
    gpu.barrier
    %a = memref.load %s[%bx] : memref<4xf32>
    %e = memref.load %x[%bx, %tx] : memref<4x32xf32>
    %p = arith.addf %a, %e : f32
    %sum = gpu.all_reduce add %p uniform {} : (f32) -> f32
    scf.if %first {
      memref.store %sum, %y[%bx, %c0] : memref<4x32xf32>
    }
    gpu.terminator
  }
  return
}
