// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-map-loops-to-gpu))' | FileCheck %s

// A flat nest: one thread per iteration, 256 a block, the grid rounded up;
// the last dimension varies fastest (remainder), so a warp touches
// consecutive elements. The view of the arena moves into the kernel, so the
// kernel's operand is the whole buffer.
// CHECK-LABEL: func.func @flat
// CHECK: %[[C256:.*]] = arith.constant 256 : index
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%[[BD:.*]] = %[[C256]],
// CHECK: memref.view %[[ARENA:.*]][
// CHECK: %[[L:.*]] = arith.muli %[[BX]], %[[BD]]
// CHECK: %[[LIN:.*]] = arith.addi %[[L]], %[[TX]]
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[LIN]], %{{.*}}
// CHECK: scf.if %[[IN]]
// CHECK: arith.remui %[[LIN]]
// CHECK: arith.divui %[[LIN]]
// CHECK: memref.store
// CHECK-NOT: scf.parallel
func.func @flat(%x: memref<3x5xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %arena = memref.alloc() : memref<64xi8>
  %v = memref.view %arena[%c0][] : memref<64xi8> to memref<3x5xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c3, %c5) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<3x5xf32>
    %b = arith.addf %a, %a : f32
    memref.store %b, %v[%i, %j] : memref<3x5xf32>
    scf.reduce
  }
  memref.dealloc %arena : memref<64xi8>
  return
}

// A row-fused nest (a row sum, then a division by it): one block per row,
// 32 threads (the row's width rounded up to a warp). The inner parallel
// loop strides over the threads; the scalar steps that write memory run on
// thread 0, between barriers.
// CHECK-LABEL: func.func @row_fused
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}}) threads(%[[T:.*]], %{{.*}}, %{{.*}}) in (%[[N:.*]] = %[[C32]],
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[T]], %{{.*}}
// CHECK: scf.if %[[FIRST]] {
// CHECK:   memref.store
// CHECK:   scf.for
// CHECK: }
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %[[T]] to %{{.*}} step %[[N]]
// CHECK:   arith.divf
// CHECK-NOT: gpu.barrier
// CHECK: gpu.terminator
func.func @row_fused(%x: memref<4x20xf32>, %y: memref<4x20xf32>, %s: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c20 = arith.constant 20 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    memref.store %zero, %s[%i] : memref<4xf32>
    scf.for %j = %c0 to %c20 step %c1 {
      %a = memref.load %x[%i, %j] : memref<4x20xf32>
      %acc = memref.load %s[%i] : memref<4xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<4xf32>
    }
    scf.parallel (%j) = (%c0) to (%c20) step (%c1) {
      %a = memref.load %x[%i, %j] : memref<4x20xf32>
      %t = memref.load %s[%i] : memref<4xf32>
      %q = arith.divf %a, %t : f32
      memref.store %q, %y[%i, %j] : memref<4x20xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}

// A parent loop holding only parallel loops (a pad, then a copy into the
// padded buffer, per image) is split into one kernel per child over the
// combined iteration space, not one block per image.
// CHECK-LABEL: func.func @fission
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<2x6xf32>
// CHECK: gpu.terminator
// CHECK: gpu.launch
// CHECK: memref.load %{{.*}} : memref<2x4xf32>
// CHECK: gpu.terminator
func.func @fission(%x: memref<2x4xf32>, %p: memref<2x6xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%n) = (%c0) to (%c2) step (%c1) {
    scf.parallel (%j) = (%c0) to (%c6) step (%c1) {
      memref.store %zero, %p[%n, %j] : memref<2x6xf32>
      scf.reduce
    }
    scf.parallel (%j) = (%c0) to (%c4) step (%c1) {
      %a = memref.load %x[%n, %j] : memref<2x4xf32>
      %k = arith.addi %j, %c1 : index
      memref.store %a, %p[%n, %k] : memref<2x6xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}

// A reduction to one scalar (no parallel dimension) runs on one thread; a
// runtime call stays on the host, between the kernels.
// CHECK-LABEL: func.func @single
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %[[ONE:[a-z0-9_]+]], {{.*}} threads({{.*}}) in (%{{.*}} = %[[ONE]],
// CHECK: scf.for
// CHECK: gpu.terminator
// CHECK: call @runtime
func.func private @runtime(memref<f32>)
func.func @single(%x: memref<8xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %j = %c0 to %c8 step %c1 {
    %a = memref.load %x[%j] : memref<8xf32>
    %acc = memref.load %s[] : memref<f32>
    %sum = arith.addf %acc, %a : f32
    memref.store %sum, %s[] : memref<f32>
  }
  call @runtime(%s) : (memref<f32>) -> ()
  return
}

// A reduction to a scalar whose result later loops read (a softmax over a
// single row, its one-trip row loop folded away): the stretch from the
// reduction to the last use becomes one kernel, the reciprocal computed
// from the kernel's value included. The reduction's value is an SSA value
// (iter_args), which only one thread has: the whole stretch runs on that
// thread, the parallel loop as a sequential one.
// CHECK-LABEL: func.func @stretch
// CHECK: gpu.launch
// CHECK: scf.if
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.divf
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: gpu.terminator
// CHECK-NOT: gpu.launch
// CHECK: return
func.func @stretch(%x: memref<8xf32>, %y: memref<8xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %sum = scf.for %j = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%j] : memref<8xf32>
    %n = arith.addf %acc, %a : f32
    scf.yield %n : f32
  }
  memref.store %sum, %s[] : memref<f32>
  %t = memref.load %s[] : memref<f32>
  %r = arith.divf %one, %t : f32
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    %a = memref.load %x[%i] : memref<8xf32>
    %q = arith.mulf %a, %r : f32
    memref.store %q, %y[%i] : memref<8xf32>
    scf.reduce
  }
  return
}

// A long reduction in a row-fused nest is shared by the block: each thread
// folds a strided part (from the neutral element, -inf for a maximum), a
// gpu.all_reduce combines the parts, thread 0 folds the total into the
// accumulator. Thread 0 initialised it just before, so no barrier is needed
// between the two; the loop that reads it waits for thread 0.
// CHECK-LABEL: func.func @block_reduction
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}}) threads(%[[T:[a-z0-9_]+]], %{{.*}}, %{{.*}}) in (%[[N:[a-z0-9_]+]] = %{{.*}},
// CHECK: scf.if
// CHECK:   memref.store
// CHECK-NOT: gpu.barrier
// CHECK: arith.muli %[[T]]
// CHECK: %[[START:.*]] = arith.addi
// CHECK: %[[STRIDE:.*]] = arith.muli %{{.*}}, %[[N]]
// CHECK: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[PART:.*]] = scf.for %{{.*}} = %[[START]] to %{{.*}} step %[[STRIDE]] iter_args(%[[ACC:.*]] = %[[NEGINF]])
// CHECK:   %[[V:.*]] = memref.load
// CHECK:   %[[M:.*]] = arith.maximumf %[[ACC]], %[[V]]
// CHECK:   scf.yield %[[M]]
// CHECK: %[[TOTAL:.*]] = gpu.all_reduce maximumf %[[PART]] uniform
// CHECK: scf.if
// CHECK:   %[[OLD:.*]] = memref.load
// CHECK:   %[[NEW:.*]] = arith.maximumf %[[OLD]], %[[TOTAL]]
// CHECK:   memref.store %[[NEW]]
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %[[T]] to %{{.*}} step %[[N]]
// CHECK:   arith.subf
func.func @block_reduction(%x: memref<4x300xf32>, %y: memref<4x300xf32>, %s: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c300 = arith.constant 300 : index
  %ninf = arith.constant 0xFF800000 : f32
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    memref.store %ninf, %s[%i] : memref<4xf32>
    scf.for %j = %c0 to %c300 step %c1 {
      %a = memref.load %x[%i, %j] : memref<4x300xf32>
      %acc = memref.load %s[%i] : memref<4xf32>
      %m = arith.maximumf %acc, %a : f32
      memref.store %m, %s[%i] : memref<4xf32>
    }
    scf.parallel (%j) = (%c0) to (%c300) step (%c1) {
      %a = memref.load %x[%i, %j] : memref<4x300xf32>
      %t = memref.load %s[%i] : memref<4xf32>
      %d = arith.subf %a, %t : f32
      memref.store %d, %y[%i, %j] : memref<4x300xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}

// Row sums alone (no inner parallel loop), read along the rows: a block per
// row (256 threads for 300 columns).
// CHECK-LABEL: func.func @row_sums
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c512{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: gpu.all_reduce add
func.func @row_sums(%x: memref<512x300xf32>, %s: memref<512xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c300 = arith.constant 300 : index
  %c512 = arith.constant 512 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c512) step (%c1) {
    memref.store %zero, %s[%i] : memref<512xf32>
    scf.for %j = %c0 to %c300 step %c1 {
      %a = memref.load %x[%i, %j] : memref<512x300xf32>
      %acc = memref.load %s[%i] : memref<512xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<512xf32>
    }
    scf.reduce
  }
  return
}

// Column sums (a bias gradient: the sum over the batch) of many columns:
// the flat mapping, a thread per column, so a warp reads a row's
// consecutive elements; a block per column would read down the column.
// CHECK-LABEL: func.func @column_sums
// CHECK: gpu.launch
// CHECK-NOT: gpu.all_reduce
// CHECK: gpu.terminator
func.func @column_sums(%x: memref<64x1024xf32>, %s: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c1024) step (%c1) {
    memref.store %zero, %s[%i] : memref<1024xf32>
    scf.for %j = %c0 to %c64 step %c1 {
      %a = memref.load %x[%j, %i] : memref<64x1024xf32>
      %acc = memref.load %s[%i] : memref<1024xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<1024xf32>
    }
    scf.reduce
  }
  return
}

// A long reduction to one scalar: one block of 256 threads, not one thread.
// CHECK-LABEL: func.func @scalar_sum
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %[[ONE:[a-z0-9_]+]], {{.*}} threads({{.*}}) in (%{{.*}} = %c256
// CHECK: gpu.all_reduce add
func.func @scalar_sum(%x: memref<1000xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %s[] : memref<f32>
  scf.for %j = %c0 to %c1000 step %c1 {
    %a = memref.load %x[%j] : memref<1000xf32>
    %acc = memref.load %s[] : memref<f32>
    %sum = arith.addf %acc, %a : f32
    memref.store %sum, %s[] : memref<f32>
  }
  return
}

// A reduction whose outermost dimension is reduced lowers to a nest that
// starts with a sequential loop (here a bias gradient: the sum over the
// batch, scf.for over rows around scf.parallel over columns). The columns
// become the parallel loop, the rows the reduction inside it: the flat
// mapping (a thread per column), not one thread for the whole nest.
// CHECK-LABEL: func.func @batch_sum_nest
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c4{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: scf.if
// CHECK:   scf.for %{{.*}} = %{{.*}} to %c64
// CHECK:     memref.load %{{.*}} : memref<64x1024xf32>
func.func @batch_sum_nest(%x: memref<64x1024xf32>, %s: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c1024 = arith.constant 1024 : index
  scf.for %b = %c0 to %c64 step %c1 {
    scf.parallel (%i) = (%c0) to (%c1024) step (%c1) {
      %a = memref.load %x[%b, %i] : memref<64x1024xf32>
      %acc = memref.load %s[%i] : memref<1024xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<1024xf32>
      scf.reduce
    }
  }
  return
}

// Batch-norm statistics (a sum over N, H and W per channel): one block per
// channel, the N x H x W elements one loop strided over its threads (the
// innermost dimension fastest) and a block all-reduce.
// CHECK-LABEL: func.func @channel_stats_nest
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c16{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: scf.for %{{.*}} = %{{.*}} to %c800 step %{{.*}} iter_args
// CHECK:   arith.remui
// CHECK: gpu.all_reduce add
func.func @channel_stats_nest(%x: memref<2x16x20x20xf32>, %s: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c20 = arith.constant 20 : index
  scf.for %n = %c0 to %c2 step %c1 {
    scf.parallel (%c) = (%c0) to (%c16) step (%c1) {
      scf.for %h = %c0 to %c20 step %c1 {
        scf.for %w = %c0 to %c20 step %c1 {
          %a = memref.load %x[%n, %c, %h, %w] : memref<2x16x20x20xf32>
          %acc = memref.load %s[%c] : memref<16xf32>
          %sum = arith.addf %acc, %a : f32
          memref.store %sum, %s[%c] : memref<16xf32>
        }
      }
      scf.reduce
    }
  }
  return
}

// The same stretch over a long row (a softmax over one row of 1000 logits):
// the reduction in registers is shared by one block of 256 threads; the
// all-reduce gives every thread the sum, the initial value is folded in by
// each, and the loop that uses it is strided over the threads.
// CHECK-LABEL: func.func @stretch_long
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %{{.*}}, {{.*}} threads(%[[T:[a-z0-9_]+]], %{{.*}}, %{{.*}}) in (%[[N:[a-z0-9_]+]] = %c256
// CHECK: %[[PART:.*]] = scf.for {{.*}} iter_args
// CHECK: %[[TOTAL:.*]] = gpu.all_reduce add %[[PART]] uniform
// CHECK: %[[SUM:.*]] = arith.addf %{{.*}}, %[[TOTAL]]
// CHECK: scf.if
// CHECK:   memref.store %[[SUM]]
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %[[T]] to %{{.*}} step %[[N]]
// CHECK:   arith.mulf
func.func @stretch_long(%x: memref<1000xf32>, %y: memref<1000xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %sum = scf.for %j = %c0 to %c1000 step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%j] : memref<1000xf32>
    %n = arith.addf %acc, %a : f32
    scf.yield %n : f32
  }
  memref.store %sum, %s[] : memref<f32>
  %t = memref.load %s[] : memref<f32>
  %r = arith.divf %one, %t : f32
  scf.parallel (%i) = (%c0) to (%c1000) step (%c1) {
    %a = memref.load %x[%i] : memref<1000xf32>
    %q = arith.mulf %a, %r : f32
    memref.store %q, %y[%i] : memref<1000xf32>
    scf.reduce
  }
  return
}

// An elementwise nest along dense rows: each thread takes four consecutive
// elements (16 bytes) of the innermost dimension, loaded and stored as
// aligned vectors (ld.global.v4 on the GPU), the arithmetic per lane; a
// broadcast operand (a bias along the row) is a vector too. 64 x 256
// elements: 4096 threads.
// CHECK-LABEL: func.func @vectorised
// CHECK: %[[C4096:.*]] = arith.constant 4096 : index
// CHECK: gpu.launch
// CHECK: arith.cmpi ult, %{{.*}}, %[[C4096]]
// CHECK: %[[COL:.*]] = arith.muli %{{.*}}, %c4
// CHECK: %[[X:.*]] = vector.load %{{.*}}[%{{.*}}, %[[COL]]] {alignment = 16 : i64} : memref<64x256xf32>, vector<4xf32>
// CHECK: %[[B:.*]] = vector.load %{{.*}}[%[[COL]]] {alignment = 16 : i64} : memref<256xf32>, vector<4xf32>
// CHECK-COUNT-4: arith.addf
// CHECK: %[[V:.*]] = vector.from_elements
// CHECK: vector.store %[[V]], %{{.*}}[%{{.*}}, %[[COL]]] {alignment = 16 : i64} : memref<64x256xf32>, vector<4xf32>
func.func @vectorised(%x: memref<64x256xf32>, %b: memref<256xf32>, %y: memref<64x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<64x256xf32>
    %c = memref.load %b[%j] : memref<256xf32>
    %s = arith.addf %a, %c : f32
    memref.store %s, %y[%i, %j] : memref<64x256xf32>
    scf.reduce
  }
  return
}

// Not vectorised: a row of 250 (not a multiple of four), a transposed
// read (the innermost index is not the last), a view 8 bytes into the
// arena (not 16-byte aligned).
// CHECK-LABEL: func.func @not_vectorised
// CHECK-NOT: vector.
// CHECK: return
func.func @not_vectorised(%x: memref<64x250xf32>, %y: memref<64x250xf32>,
                          %t: memref<256x64xf32>, %u: memref<64x256xf32>,
                          %arena: memref<1040xi8>, %w: memref<256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %c250 = arith.constant 250 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c250) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<64x250xf32>
    memref.store %a, %y[%i, %j] : memref<64x250xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
    %a = memref.load %t[%j, %i] : memref<256x64xf32>
    memref.store %a, %u[%i, %j] : memref<64x256xf32>
    scf.reduce
  }
  %v = memref.view %arena[%c8][] : memref<1040xi8> to memref<256xf32>
  scf.parallel (%j) = (%c0) to (%c256) step (%c1) {
    %a = memref.load %v[%j] : memref<256xf32>
    memref.store %a, %w[%j] : memref<256xf32>
    scf.reduce
  }
  return
}

// Long column sums over few columns (a bias gradient: 384 columns of 4000
// rows would be 2 blocks of threads summing 4000 elements each) are split:
// 62 chunks of 65 rows summed in parallel into a temporary buffer, then
// each column's 62 partial sums folded into it in order.
// CHECK-LABEL: func.func @split_column_sums
// CHECK: %[[TMP:.*]] = memref.alloc() : memref<62x384xf32>
// CHECK: gpu.launch
// CHECK:   arith.muli %{{.*}}, %c65
// CHECK:   %[[LO:.*]] = arith.addi
// CHECK:   %[[HI:.*]] = arith.minsi
// CHECK:   %[[P:.*]] = scf.for %{{.*}} = %[[LO]] to %[[HI]] step %{{.*}} iter_args
// CHECK:   memref.store %[[P]], %[[TMP]]
// CHECK: gpu.launch
// CHECK:   scf.for %{{.*}} = %{{.*}} to %c62
// CHECK:     memref.load %[[TMP]]
// CHECK: memref.dealloc %[[TMP]]
func.func @split_column_sums(%x: memref<4000x384xf32>, %s: memref<384xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c384 = arith.constant 384 : index
  %c4000 = arith.constant 4000 : index
  scf.parallel (%i) = (%c0) to (%c384) step (%c1) {
    scf.for %j = %c0 to %c4000 step %c1 {
      %a = memref.load %x[%j, %i] : memref<4000x384xf32>
      %acc = memref.load %s[%i] : memref<384xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<384xf32>
    }
    scf.reduce
  }
  return
}

// A row's statistic over two axes (a layer norm over the last two): the
// two-deep nest inside the row is flattened into one loop of 16 x 64, which
// the row's block shares.
// CHECK-LABEL: func.func @row_nest
// CHECK: gpu.launch
// CHECK: scf.for %{{.*}} = %{{.*}} to %c1024 step %{{.*}} iter_args
// CHECK:   arith.remui
// CHECK: gpu.all_reduce add
func.func @row_nest(%x: memref<8x16x64xf32>, %y: memref<8x16x64xf32>, %s: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %zero, %s[%i] : memref<8xf32>
    scf.for %j = %c0 to %c16 step %c1 {
      scf.for %k = %c0 to %c64 step %c1 {
        %a = memref.load %x[%i, %j, %k] : memref<8x16x64xf32>
        %acc = memref.load %s[%i] : memref<8xf32>
        %sum = arith.addf %acc, %a : f32
        memref.store %sum, %s[%i] : memref<8xf32>
      }
    }
    scf.parallel (%j, %k) = (%c0, %c0) to (%c16, %c64) step (%c1, %c1) {
      %a = memref.load %x[%i, %j, %k] : memref<8x16x64xf32>
      %t = memref.load %s[%i] : memref<8xf32>
      %q = arith.subf %a, %t : f32
      memref.store %q, %y[%i, %j, %k] : memref<8x16x64xf32>
      scf.reduce
    }
    scf.reduce
  }
  return
}

// A stretch holding a chain of views (a subview, then a collapse_shape of
// it) whose last view is also read after the stretch: the whole chain stays
// on the host before the kernel (a pipelined training step's micro-batch
// of labels took this shape; the collapse_shape used to be refused as
// "used outside the kernel").
// CHECK-LABEL: func.func @stretch_view_chain
// CHECK: %[[SV:.*]] = memref.subview
// CHECK: %[[CS:.*]] = memref.collapse_shape %[[SV]]
// CHECK: gpu.launch
// CHECK: gpu.terminator
// CHECK: call @consume(%[[CS]])
func.func private @consume(memref<8xf32, strided<[1], offset: 8>>)
func.func @stretch_view_chain(%x: memref<8xf32>, %w: memref<4x4xf32>, %y: memref<8xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %sum = scf.for %j = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%j] : memref<8xf32>
    %n = arith.addf %acc, %a : f32
    scf.yield %n : f32
  }
  memref.store %sum, %s[] : memref<f32>
  %sv = memref.subview %w[2, 0] [2, 4] [1, 1] : memref<4x4xf32> to memref<2x4xf32, strided<[4, 1], offset: 8>>
  %cs = memref.collapse_shape %sv [[0, 1]] : memref<2x4xf32, strided<[4, 1], offset: 8>> into memref<8xf32, strided<[1], offset: 8>>
  %t = memref.load %s[] : memref<f32>
  %r = arith.divf %one, %t : f32
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    %a = memref.load %cs[%i] : memref<8xf32, strided<[1], offset: 8>>
    %q = arith.mulf %a, %r : f32
    memref.store %q, %y[%i] : memref<8xf32>
    scf.reduce
  }
  call @consume(%cs) : (memref<8xf32, strided<[1], offset: 8>>) -> ()
  return
}

// A global that a runtime call reads (the constant 0 a pipeline's first
// stage adds to the loss all-reduce) lives in host memory, while runtime
// calls take device buffers: it is copied into a device buffer by a kernel
// first, the call reads the copy, and the copy is freed at the end.
// CHECK-LABEL: func.func @global_to_runtime_call
// CHECK: %[[COPY:.*]] = memref.alloc() : memref<f32>
// CHECK: gpu.launch
// CHECK: memref.get_global @zero
// CHECK: memref.store {{.*}}, %[[COPY]][]
// CHECK: gpu.terminator
// CHECK: %[[CAST:.*]] = memref.cast %[[COPY]]
// CHECK: call @reduce(%[[CAST]], %{{.*}})
// CHECK: memref.dealloc %[[COPY]]
// CHECK-NEXT: return
memref.global "private" constant @zero : memref<f32> = dense<0.0>
func.func private @reduce(memref<*xf32>, memref<*xf32>)
func.func @global_to_runtime_call(%out: memref<f32>) {
  %g = memref.get_global @zero : memref<f32>
  %a = memref.cast %g : memref<f32> to memref<*xf32>
  %b = memref.cast %out : memref<f32> to memref<*xf32>
  call @reduce(%a, %b) : (memref<*xf32>, memref<*xf32>) -> ()
  return
}

// The index fault's shape and message are read by the runtime on the host:
// not copied to the device.
// CHECK-LABEL: func.func @index_fault_globals_stay_on_host
// CHECK-NOT: memref.alloc
// CHECK-NOT: gpu.launch
// CHECK: %[[SHAPE:.*]] = memref.get_global @fault_shape
// CHECK: %[[TEXT:.*]] = memref.get_global @fault_text
// CHECK: call @dort_index_fault(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NEXT: return
memref.global "private" constant @fault_shape : memref<1xi64> = dense<4>
memref.global "private" constant @fault_text : memref<2xi8> = dense<[120, 0]>
func.func private @dort_index_fault(memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi8, strided<[?], offset: ?>>, i64, i64)
func.func @index_fault_globals_stay_on_host(%fault: memref<2xi64>) {
  %lo = arith.constant 0 : i64
  %hi = arith.constant 3 : i64
  %s = memref.get_global @fault_shape : memref<1xi64>
  %sc = memref.cast %s : memref<1xi64> to memref<?xi64, strided<[?], offset: ?>>
  %t = memref.get_global @fault_text : memref<2xi8>
  %tc = memref.cast %t : memref<2xi8> to memref<?xi8, strided<[?], offset: ?>>
  %f = memref.cast %fault : memref<2xi64> to memref<?xi64, strided<[?], offset: ?>>
  call @dort_index_fault(%f, %sc, %tc, %lo, %hi) : (memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi8, strided<[?], offset: ?>>, i64, i64) -> ()
  return
}

// A global only kernels read is not copied: the kernel carries it in.
// CHECK-LABEL: func.func @global_in_kernel
// CHECK-NOT: memref.alloc
// CHECK: gpu.launch
// CHECK: memref.get_global @table
// CHECK-NOT: memref.dealloc
// CHECK: return
memref.global "private" constant @table : memref<4xf32> = dense<[1.0, 2.0, 3.0, 4.0]>
func.func @global_in_kernel(%y: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %g = memref.get_global @table : memref<4xf32>
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    %v = memref.load %g[%i] : memref<4xf32>
    memref.store %v, %y[%i] : memref<4xf32>
    scf.reduce
  }
  return
}

// A long reduction to one element (a gradient's sum of squares for the
// global norm: 131072 elements) is split across the GPU: 2048 threads
// (131072 / 64; 8 blocks, one thread per partial, not a block each),
// thread t folding elements t, t + 2048, ... (a warp reads consecutive
// elements) into a partial sum, then one block folds the 2048 partials into
// the accumulator (thread 0 adds the block's total). One block alone would
// read 512 elements per thread.
// CHECK-LABEL: func.func @split_scalar_sum
// CHECK: %[[P:.*]] = memref.alloc() : memref<2048xf32>
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c8{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: scf.for {{.*}} step %c2048{{.*}} iter_args
// CHECK: memref.store {{.*}}, %[[P]]
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: memref.load %[[P]]
// CHECK: gpu.all_reduce add
// CHECK: memref.dealloc %[[P]]
func.func @split_scalar_sum(%x: memref<131072xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 131072 : index
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %s[] : memref<f32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<131072xf32>
    %sq = arith.mulf %a, %a : f32
    %acc = memref.load %s[] : memref<f32>
    %new = arith.addf %acc, %sq : f32
    memref.store %new, %s[] : memref<f32>
  }
  return
}

// A longer one (4 M elements) has 65536 partials, which are split again:
// 1024 partials of 64 each, then one block folds those.
// CHECK-LABEL: func.func @split_scalar_sum_twice
// CHECK: %[[P1:.*]] = memref.alloc() : memref<65536xf32>
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c256{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: %[[P2:.*]] = memref.alloc() : memref<1024xf32>
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c4{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: memref.load %[[P1]]
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK: memref.load %[[P2]]
// CHECK: gpu.all_reduce add
// CHECK: memref.dealloc %[[P2]]
// CHECK: memref.dealloc %[[P1]]
func.func @split_scalar_sum_twice(%x: memref<4194304xf32>, %s: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 4194304 : index
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %s[] : memref<f32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<4194304xf32>
    %acc = memref.load %s[] : memref<f32>
    %new = arith.addf %acc, %a : f32
    memref.store %new, %s[] : memref<f32>
  }
  return
}

// Long column sums over few columns (batch-norm statistics: 64 channels of
// 65536 elements): split into 1024 chunks, and then the fold of each
// channel's 1024 partial sums is a block's (64 blocks sharing their fold,
// gpu.all_reduce), not one thread's (one block of 64 threads, each reading
// 1024 partials in turn).
// CHECK-LABEL: func.func @split_few_column_sums
// CHECK: %[[TMP:.*]] = memref.alloc() : memref<1024x64xf32>
// CHECK: gpu.launch
// CHECK:   memref.store %{{.*}}, %[[TMP]]
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c64{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK:   scf.for %{{.*}} = %{{.*}} to %c1024{{.*}} step %{{.*}} iter_args
// CHECK:     memref.load %[[TMP]]
// CHECK:   gpu.all_reduce add
// CHECK: memref.dealloc %[[TMP]]
func.func @split_few_column_sums(%x: memref<65536x64xf32>, %s: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %n = arith.constant 65536 : index
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %n step %c1 {
      %a = memref.load %x[%j, %i] : memref<65536x64xf32>
      %acc = memref.load %s[%i] : memref<64xf32>
      %sum = arith.addf %acc, %a : f32
      memref.store %sum, %s[%i] : memref<64xf32>
    }
    scf.reduce
  }
  return
}

// Independent reductions to scalars one after another (the global norm's
// sums of squares of small gradients, each into its own accumulator in
// the arena): one kernel with a block per reduction, each block's part in
// a branch on its block id, not one block running them in turn.
// CHECK-LABEL: func.func @independent_sums
// CHECK: gpu.launch blocks(%[[BX:[a-z0-9_]+]], {{.*}}) in (%{{.*}} = %c2{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK-DAG: %[[S:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<64xi8> to memref<f32>
// CHECK: %[[IS0:.*]] = arith.cmpi eq, %[[BX]], %c0
// CHECK: scf.if %[[IS0]] {
// CHECK:   memref.load %arg0
// CHECK:   gpu.all_reduce add
// CHECK: %[[IS1:.*]] = arith.cmpi eq, %[[BX]], %c1
// CHECK: scf.if %[[IS1]] {
// CHECK:   memref.load %arg1
// CHECK:   gpu.all_reduce add
func.func @independent_sums(%x: memref<1000xf32>, %y: memref<64x9xf32>, %arena: memref<64xi8>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c9 = arith.constant 9 : index
  %c64 = arith.constant 64 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %s = memref.view %arena[%c0][] : memref<64xi8> to memref<f32>
  %t = memref.view %arena[%c32][] : memref<64xi8> to memref<f32>
  memref.store %zero, %s[] : memref<f32>
  scf.for %j = %c0 to %c1000 step %c1 {
    %a = memref.load %x[%j] : memref<1000xf32>
    %sq = arith.mulf %a, %a : f32
    %acc = memref.load %s[] : memref<f32>
    %sum = arith.addf %acc, %sq : f32
    memref.store %sum, %s[] : memref<f32>
  }
  memref.store %zero, %t[] : memref<f32>
  scf.for %j = %c0 to %c64 step %c1 {
    scf.for %k = %c0 to %c9 step %c1 {
      %a = memref.load %y[%j, %k] : memref<64x9xf32>
      %sq = arith.mulf %a, %a : f32
      %acc = memref.load %t[] : memref<f32>
      %sum = arith.addf %acc, %sq : f32
      memref.store %sum, %t[] : memref<f32>
    }
  }
  return
}

// The same with the second reduction reading the first's accumulator (the
// arena bytes overlap): not independent, one block runs both in turn.
// CHECK-LABEL: func.func @dependent_sums
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1{{.*}}) threads({{.*}}) in (%{{.*}} = %c256
// CHECK-NOT: arith.cmpi eq, %{{.*}}, %c1
// CHECK: gpu.all_reduce add
// CHECK: gpu.all_reduce add
func.func @dependent_sums(%x: memref<1000xf32>, %arena: memref<64xi8>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c1000 = arith.constant 1000 : index
  %zero = arith.constant 0.0 : f32
  %s = memref.view %arena[%c0][] : memref<64xi8> to memref<f32>
  %t = memref.view %arena[%c32][] : memref<64xi8> to memref<f32>
  %s1 = memref.view %arena[%c0][] : memref<64xi8> to memref<1xf32>
  memref.store %zero, %s[] : memref<f32>
  scf.for %j = %c0 to %c1000 step %c1 {
    %a = memref.load %x[%j] : memref<1000xf32>
    %acc = memref.load %s[] : memref<f32>
    %sum = arith.addf %acc, %a : f32
    memref.store %sum, %s[] : memref<f32>
  }
  memref.store %zero, %t[] : memref<f32>
  scf.for %j = %c0 to %c1000 step %c1 {
    %a = memref.load %x[%j] : memref<1000xf32>
    %b = memref.load %s1[%c0] : memref<1xf32>
    %ab = arith.mulf %a, %b : f32
    %acc = memref.load %t[] : memref<f32>
    %sum = arith.addf %acc, %ab : f32
    memref.store %sum, %t[] : memref<f32>
  }
  return
}

// A sequential loop that calls the runtime (fused attention's loop over
// blocks of keys, whose products are library calls) stays on the host; the
// loop nests in its body become kernels launched from it.
// CHECK-LABEL: func.func @host_loop_with_runtime_calls
// CHECK: scf.for
// CHECK-NEXT: func.call @library(%{{.*}})
// CHECK: gpu.launch
// CHECK: gpu.terminator
// CHECK: return
func.func private @library(memref<64xf32>)
func.func @host_loop_with_runtime_calls(%a: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %two = arith.constant 2.0 : f32
  scf.for %i = %c0 to %c4 step %c1 {
    func.call @library(%a) : (memref<64xf32>) -> ()
    scf.parallel (%j) = (%c0) to (%c64) step (%c1) {
      %x = memref.load %a[%j] : memref<64xf32>
      %y = arith.mulf %x, %two : f32
      memref.store %y, %a[%j] : memref<64xf32>
      scf.reduce
    }
  }
  return
}
