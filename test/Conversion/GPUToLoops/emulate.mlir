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

// A value loaded before a barrier and used after it through a pure op is
// kept per thread, not loaded again (the memory may have changed); gpu
// index ops are the launch's indices; an all-reduce of a value from outside
// the kernel sums one copy per thread.
// CHECK-LABEL: func.func @through_pure
// CHECK: %[[KEPT:.*]] = memref.alloca() : memref<32xf32>
// CHECK: %[[UNIFORM:.*]] = memref.alloca() : memref<32xf32>
// CHECK: scf.for
// CHECK:   scf.for
// CHECK:     %[[V:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<32xf32>
// CHECK:     memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<32xf32>
// CHECK:     memref.store %[[V]], %[[KEPT]]
// CHECK:   scf.for
// CHECK-NOT: memref.load %arg0
// CHECK:     %[[K:.*]] = memref.load %[[KEPT]]
// CHECK:     arith.mulf %[[K]], %[[K]]
// CHECK:     memref.store %{{.*}}, %[[UNIFORM]]
// CHECK:   scf.for {{.*}} iter_args
// CHECK:     memref.load %[[UNIFORM]]
// CHECK-NOT: gpu.
func.func @through_pure(%x: memref<32xf32>, %y: memref<32xf32>, %u: f32) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %t = gpu.thread_id x
    %v = memref.load %x[%t] : memref<32xf32>
    %one = arith.constant 1.0 : f32
    memref.store %one, %x[%t] : memref<32xf32>
    %sq = arith.mulf %v, %v : f32
    gpu.barrier
    memref.store %sq, %y[%t] : memref<32xf32>
    %total = gpu.all_reduce add %u uniform {} : (f32) -> f32
    memref.store %total, %y[%tx] : memref<32xf32>
    gpu.terminator
  }
  return
}
