// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-emulate-gpu-launches))' --split-input-file --verify-diagnostics

// Threads that skip a barrier cannot be run phase by phase.
func.func @barrier_in_if(%x: memref<32xf32>) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %tx, %c0 : index
    scf.if %first {
      // expected-error @+1 {{cannot emulate a 'gpu.barrier' inside control flow}}
      gpu.barrier
    }
    gpu.terminator
  }
  return
}

// -----

// The block size decides the per-thread arrays: it must be known.
func.func @dynamic_block(%x: memref<32xf32>, %n: index) {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{block size is not a positive constant}}
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %n, %ny = %c1, %nz = %c1) {
    gpu.terminator
  }
  return
}

// -----

func.func @shuffle(%x: memref<32xf32>) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %c0 = arith.constant 0 : index
    %v = memref.load %x[%tx] : memref<32xf32>
    %o = arith.constant 1 : i32
    %w = arith.constant 32 : i32
    // expected-error @+1 {{cannot emulate 'gpu.shuffle'}}
    %s, %ok = gpu.shuffle xor %v, %o, %w : f32
    memref.store %s, %x[%tx] : memref<32xf32>
    gpu.terminator
  }
  return
}
