// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-map-loops-to-gpu))' --split-input-file --verify-diagnostics

// A strided copy would need the host's memrefCopy inside a kernel.
func.func @strided_copy(%x: memref<2x3xf32>, %y: memref<2x6xf32>) {
  %v = memref.subview %y[0, 0] [2, 3] [1, 2] : memref<2x6xf32> to memref<2x3xf32, strided<[6, 2]>>
  // expected-error @+1 {{memref.copy left for the GPU}}
  memref.copy %x, %v : memref<2x3xf32> to memref<2x3xf32, strided<[6, 2]>>
  return
}

// -----

func.func @reduction(%x: memref<8xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{a parallel loop with reductions cannot be mapped to the GPU}}
  %r = scf.parallel (%i) = (%c0) to (%c8) step (%c1) init (%zero) -> f32 {
    %a = memref.load %x[%i] : memref<8xf32>
    scf.reduce(%a : f32) {
    ^bb0(%l: f32, %r: f32):
      %s = arith.addf %l, %r : f32
      scf.reduce.return %s : f32
    }
  }
  return %r : f32
}

// -----

// A value a kernel computes cannot be read by the host afterwards.
func.func @host_use(%x: memref<8xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{its result is used outside the kernel}}
  %a = memref.load %x[%c0] : memref<8xf32>
  return %a : f32
}

// -----

// A global a runtime call reads is copied to device memory first; one
// with a strided layout cannot be.
memref.global "private" constant @strided : memref<2x2xf32, strided<[1, 2]>> = dense<0.0>
func.func private @reduce(memref<*xf32>)
func.func @strided_global_to_runtime_call() {
  // expected-error @+1 {{cannot copy this global to the GPU for the runtime call that reads it}}
  %g = memref.get_global @strided : memref<2x2xf32, strided<[1, 2]>>
  %a = memref.cast %g : memref<2x2xf32, strided<[1, 2]>> to memref<*xf32>
  call @reduce(%a) : (memref<*xf32>) -> ()
  return
}
