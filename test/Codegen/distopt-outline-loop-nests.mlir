// RUN: distopt-opt %s --distopt-outline-loop-nests='min-ops=0 chunk-ops=12' | FileCheck %s
// RUN: distopt-opt %s --distopt-outline-loop-nests | FileCheck %s --check-prefix=SMALL

// Loop nests of a function become functions of about chunk-ops operations,
// called in their place. The arena stays in the caller and is passed whole
// (its position recorded for noalias); its views, the constants and index
// arithmetic are recomputed in each function; a value a loop computes and a
// later chunk reads is returned; an operation that reads the chunk being
// formed joins it; a stack allocation never moves into a function (one
// whose size a chunk computes ends that chunk). The arena's dealloc may
// move: the buffer is the function's argument.

// CHECK-LABEL: func.func private @step_part0(
// CHECK-SAME: %[[IN:.*]]: memref<16xf32>, %[[ARENA:.*]]: memref<1024xi8>) -> f32
// CHECK-SAME: attributes {dopt.outlined = array<i64: 6>, passthrough = ["noinline"]}
// CHECK-DAG:   %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:   %[[A:.*]] = memref.view %[[ARENA]][%[[C0]]][] : memref<1024xi8> to memref<16xf32>
// CHECK:       scf.for
// CHECK:         memref.load %[[IN]]
// CHECK:         memref.store {{.*}}, %[[A]]
// CHECK:       %[[SUM:.*]] = scf.for {{.*}} -> (f32)
// CHECK:       %[[TWICE:.*]] = arith.addf %[[SUM]], %[[SUM]] : f32
// CHECK:       return %[[TWICE]] : f32

// CHECK-LABEL: func.func private @step_part1(
// CHECK-SAME: %[[S:[^:]*]]: f32, %[[ARENA1:[^:]*]]: memref<1024xi8>) -> index
// CHECK-DAG:   %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG:   %[[B:.*]] = memref.view %[[ARENA1]][%[[C64]]][] : memref<1024xi8> to memref<16xf32>
// CHECK:       %[[M:.*]] = scf.for
// CHECK:         memref.store %[[S]], %[[B]]
// CHECK:       %[[N:.*]] = arith.fptoui %[[M]]
// CHECK:       %[[K:.*]] = arith.index_cast %[[N]]
// CHECK:       return %[[K]] : index

// CHECK-LABEL: func.func private @step_part2(
// CHECK-SAME: %[[DYN:[^:]*]]: memref<?xf32>, %[[KK:[^:]*]]: index, %[[ARENA2:[^:]*]]: memref<1024xi8>, %[[STACK:[^:]*]]: memref<4xf32>, %[[OUT:[^:]*]]: memref<16xf32>)
// CHECK-SAME: dopt.outlined = array<i64: 1, 7, 12>
// CHECK:       scf.for {{.*}} to %[[KK]]
// CHECK:         memref.store {{.*}}, %[[DYN]]
// CHECK:       memref.store {{.*}}, %[[STACK]]
// CHECK:       memref.store {{.*}}, %[[OUT]]
// CHECK:       memref.dealloc %[[ARENA2]]
// CHECK-NEXT:  return

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[IN0:[^:]*]]: memref<16xf32>, %[[OUT0:[^:]*]]: memref<16xf32>)
// CHECK:       %[[ARENA0:.*]] = memref.alloc() {alignment = 64 : i64} : memref<1024xi8>
// CHECK:       %[[T:.*]] = call @step_part0(%[[IN0]], %[[ARENA0]]) : (memref<16xf32>, memref<1024xi8>) -> f32
// CHECK:       %[[STACK0:.*]] = memref.alloca() : memref<4xf32>
// CHECK:       %[[K0:.*]] = call @step_part1(%[[T]], %[[ARENA0]])
// CHECK:       %[[DYN0:.*]] = memref.alloca(%[[K0]]) : memref<?xf32>
// CHECK:       call @step_part2(%[[DYN0]], %[[K0]], %[[ARENA0]], %[[STACK0]], %[[OUT0]])
// CHECK-NEXT:  return

// Under the default min-ops (8000) nothing changes.
// SMALL-NOT: call @step_part
// SMALL-NOT: func.func private

func.func @step(%in: memref<16xf32>, %out: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %arena = memref.alloc() {alignment = 64 : i64} : memref<1024xi8>
  %a = memref.view %arena[%c0][] : memref<1024xi8> to memref<16xf32>
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %in[%i] : memref<16xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %a[%i] : memref<16xf32>
  }
  %sum = scf.for %i = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %a[%i] : memref<16xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  }
  %twice = arith.addf %sum, %sum : f32
  %b = memref.view %arena[%c64][] : memref<1024xi8> to memref<16xf32>
  %m = scf.for %i = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> (f32) {
    memref.store %twice, %b[%i] : memref<16xf32>
    %t = arith.addf %acc, %twice : f32
    scf.yield %t : f32
  }
  %stack = memref.alloca() : memref<4xf32>
  %n = arith.fptoui %m : f32 to i32
  %k = arith.index_cast %n : i32 to index
  %dyn = memref.alloca(%k) : memref<?xf32>
  scf.for %i = %c0 to %k step %c1 {
    memref.store %zero, %dyn[%i] : memref<?xf32>
  }
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %b[%i] : memref<16xf32>
    %j = arith.remui %i, %c1 : index
    memref.store %x, %stack[%j] : memref<4xf32>
    memref.store %x, %out[%i] : memref<16xf32>
  }
  memref.dealloc %arena : memref<1024xi8>
  return
}
