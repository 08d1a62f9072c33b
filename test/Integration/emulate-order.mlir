// The emulated kernels' thread order is chosen when the program runs
// (distopt-emulate-gpu-launches{runtime-order=true}; `distopt compile
// --target cuda-emu` always compiles so): DISTOPT_EMULATE_THREADS=forward or
// reverse, else the pass's `forward` option. One executable checks both
// orders (python/conformance/run_node_tests.py --target cuda-emu runs each
// node test's bundle twice).
//
// The kernel below lacks a barrier: every thread writes its element, and
// thread 0 reads thread 31's. In reverse order thread 0 runs last and sees
// 32; in forward order it runs first and sees the 0 written before the
// launch: the race shows only in forward order, and only if the order is
// really the one asked for.

// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches{runtime-order=true}),convert-scf-to-cf,convert-to-llvm,reconcile-unrealized-casts)' -o %t.reverse.mlir
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches{runtime-order=true forward=true}),convert-scf-to-cf,convert-to-llvm,reconcile-unrealized-casts)' -o %t.forward.mlir
// RUN: env -u DISTOPT_EMULATE_THREADS mlir-runner %t.reverse.mlir -e main -entry-point-result=void -shared-libs=%runtime_shared,%mlir_c_runner_utils | FileCheck %s --check-prefix=SEEN
// RUN: env DISTOPT_EMULATE_THREADS=reverse mlir-runner %t.reverse.mlir -e main -entry-point-result=void -shared-libs=%runtime_shared,%mlir_c_runner_utils | FileCheck %s --check-prefix=SEEN
// RUN: env DISTOPT_EMULATE_THREADS=forward mlir-runner %t.reverse.mlir -e main -entry-point-result=void -shared-libs=%runtime_shared,%mlir_c_runner_utils | FileCheck %s --check-prefix=RACE
// RUN: env -u DISTOPT_EMULATE_THREADS mlir-runner %t.forward.mlir -e main -entry-point-result=void -shared-libs=%runtime_shared,%mlir_c_runner_utils | FileCheck %s --check-prefix=RACE
// RUN: env DISTOPT_EMULATE_THREADS=reverse mlir-runner %t.forward.mlir -e main -entry-point-result=void -shared-libs=%runtime_shared,%mlir_c_runner_utils | FileCheck %s --check-prefix=SEEN
// SEEN: {{^}}32{{$}}
// RACE: {{^}}0{{$}}

// Without the runtime's function declared, the module does not verify.
// RUN: sed -e '/@dort_emulate_threads_forward/d' %s | not distopt-opt --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches{runtime-order=true}))' 2>&1 | FileCheck %s --check-prefix=NODECL
// NODECL: 'func.call' op 'dort_emulate_threads_forward' does not reference a valid function

func.func private @dort_emulate_threads_forward(i32) -> i32

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c31 = arith.constant 31 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0 : i32
  %buf = memref.alloca() : memref<32xi32>
  %out = memref.alloca() : memref<1xi32>
  scf.for %i = %c0 to %c32 step %c1 {
    memref.store %zero, %buf[%i] : memref<32xi32>
  }
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %t = arith.index_cast %tx : index to i32
    %one = arith.constant 1 : i32
    %v = arith.addi %t, %one : i32
    memref.store %v, %buf[%tx] : memref<32xi32>
    %first = arith.cmpi eq, %tx, %c0 : index
    scf.if %first {
      %last = memref.load %buf[%c31] : memref<32xi32>
      memref.store %last, %out[%c0] : memref<1xi32>
    }
    gpu.terminator
  }
  %r = memref.load %out[%c0] : memref<1xi32>
  vector.print %r : i32
  return
}
