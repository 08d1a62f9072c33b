// RUN: distopt-opt %s --distopt-convert-gpu-launch-to-runtime --split-input-file --verify-diagnostics | FileCheck %s

// The binary's bytes become an internal constant (NUL-terminated), the
// kernel's name another; the launch a call into the runtime with one 8-byte
// slot per argument: the buffer's aligned pointer, the index, the float's
// bits.
// CHECK-NOT: gpu.container_module
// CHECK-DAG: llvm.mlir.global internal constant @__dopt_cuda_image_kernels("PTX\00")
// CHECK-DAG: llvm.mlir.global internal constant @__dopt_cuda_kernel_k("k\00")
// CHECK-LABEL: func.func @main
// CHECK: %[[N:.*]] = llvm.mlir.constant(3 : i64) : i64
// CHECK: %[[SLOTS:.*]] = llvm.alloca %[[N]] x i64
// CHECK: %[[P:.*]] = memref.extract_aligned_pointer_as_index %arg0
// CHECK: %[[PI:.*]] = arith.index_castui %[[P]] : index to i64
// CHECK: %[[S0:.*]] = llvm.getelementptr %[[SLOTS]][0]
// CHECK: llvm.store %[[PI]], %[[S0]]
// CHECK: arith.index_castui %arg1 : index to i64
// CHECK: arith.bitcast %arg2 : f32 to i32
// CHECK: arith.extui
// CHECK: %[[IMG:.*]] = llvm.mlir.addressof @__dopt_cuda_image_kernels
// CHECK: %[[NAME:.*]] = llvm.mlir.addressof @__dopt_cuda_kernel_k
// CHECK: call @dort_cuda_launch(%[[IMG]], %[[NAME]], {{.*}}, %[[SLOTS]], %c3_i32)
// CHECK-NOT: gpu.binary
// CHECK: func.func private @dort_cuda_launch(!llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64, i64, i32, !llvm.ptr, i32)
module attributes {gpu.container_module} {
  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = "sm_80">, "PTX">]
  func.func @main(%x: memref<16xf32>, %n: index, %a: f32) {
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1) args(%x : memref<16xf32>, %n : index, %a : f32)
    return
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = "sm_80">, "PTX">]
  func.func @strided(%x: memref<4xf32, strided<[2]>>) {
    %c1 = arith.constant 1 : index
    // expected-error @+1 {{kernel argument #0 of type 'memref<4xf32, strided<[2]>>' cannot be passed to the GPU}}
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%x : memref<4xf32, strided<[2]>>)
    return
  }
}

// -----

// The kernels were not compiled to a binary yet.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%x: memref<4xf32>) kernel {
      gpu.return
    }
  }
  func.func @unbuilt(%x: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    // expected-error @+1 {{no gpu.binary @kernels for this launch (compile the kernels first)}}
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%x : memref<4xf32>)
    return
  }
}
