//===- Passes.td - distopt conversion passes ---------------*- tablegen -*-===//

#ifndef DISTOPT_CONVERSION_PASSES_TD
#define DISTOPT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertDoptToLinalgPass : Pass<"distopt-convert-dopt-to-linalg", "mlir::ModuleOp"> {
  let summary = "Lower dopt ops to linalg, tensor, arith and math on tensors";
  let description = [{
    Every dopt op becomes destination-style tensor code: elementwise ops,
    broadcasts, reductions, normalisations, gathers and slices with negative
    steps are `linalg.generic`s (so `linalg-fuse-elementwise-ops` can fuse
    chains of them); matrix products become `linalg.matmul` /
    `linalg.batch_matmul` (transposed operands via `indexing_maps`), which the
    CPU pipeline turns into BLAS calls; convolutions become im2col + GEMM
    (or, with `library-convolutions`, one `dort_conv2d_<type>` runtime call
    on the input and weight buffers: cuDNN on the CUDA target); transposed
    convolutions become one `dort_conv2d_backward_data_<type>` call on every
    target (cuDNN's backward data on a GPU, GEMM + col2im on CPUs); pooling
    becomes the named linalg pooling ops on padded inputs; reshapes are
    `tensor.collapse_shape`/`expand_shape` views. Unsigned element types
    (ui8) become signless, with their semantics kept in the arithmetic chosen.
    `dopt.weight` must have been turned into function arguments first.

    Before:
    ```mlir
    %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    After:
    ```mlir
    %e = tensor.empty() : tensor<2x3xf32>
    %0 = linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d1), (d0, d1) -> (d0, d1)], ...}
           ins(%a, %b : tensor<2x3xf32>, tensor<3xf32>) outs(%e : tensor<2x3xf32>) {
      ^bb0(%x: f32, %y: f32, %o: f32):
        %s = arith.addf %x, %y : f32
        linalg.yield %s : f32
    } -> tensor<2x3xf32>
    ```
  }];
  let options = [
    Option<"libraryConvolutions", "library-convolutions", "bool",
           /*default=*/"false",
           "Lower float convolutions to the runtime's dort_conv2d_<type> "
           "call (cuDNN on the CUDA target) instead of im2col + GEMM">
  ];
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::func::FuncDialect",
                           "mlir::bufferization::BufferizationDialect",
                           "mlir::memref::MemRefDialect"];
}

def ConvertShardToRuntimePass : Pass<"distopt-convert-shard-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower the partitioner's shard collectives to runtime calls";
  let description = [{
    Runs on tensors, before bufferization. Each `shard.all_reduce`,
    `all_gather`, `reduce_scatter`, `all_to_all` and `all_slice` on the
    `@dopt_grid` becomes a call into the runtime's collective layer
    (`dort_shard_<op>_<type>`, MLIR C interface, unranked memrefs) between
    `bufferization.to_buffer` of its input and `bufferization.to_tensor` of a
    fresh result buffer; grid axes, dimensions and the reduction kind are
    passed as integers. A pipeline's `shard.send` / `shard.recv` to one peer
    on one axis become `dort_shard_send_<type>(in, axis, peer)` (the runtime
    copies the tensor and sends it without waiting for the receive; the
    send's result is its input) and `dort_shard_recv_<type>(out, axis,
    peer)`. The `shard.grid` symbol is removed afterwards.

    ```mlir
    %y = shard.all_reduce %x on @dopt_grid grid_axes = [2] : tensor<4x8xf32> -> tensor<4x8xf32>
    // becomes
    %xb = bufferization.to_buffer %x read_only : tensor<4x8xf32> to memref<4x8xf32, strided<[?, ?], offset: ?>>
    %yb = memref.alloc() : memref<4x8xf32>
    func.call @dort_shard_all_reduce_f32(%xu, %yu, %c2, %c1) : (memref<*xf32>, memref<*xf32>, i64, i64) -> ()
    %y = bufferization.to_tensor %yb restrict writable : memref<4x8xf32> to tensor<4x8xf32>
    ```
    Element types f32, f64, f16, bf16, i64, i32, i8 and i1; collectives over
    more than one grid axis, and other shard ops, are errors.

    An all-reduce or reduce-scatter marked `dopt.async` (a data-parallel
    gradient bucket) starts instead: `%h = dort_shard_start_all_reduce_<type>(in,
    out, axis, kind, bucket) -> i64` (`..._reduce_scatter_<type>(in, out,
    axis, kind, dim, bucket)`), and `dort_shard_wait(%h)` followed by the
    `to_tensor` of its result goes before the first op that reads it; the
    ops in between overlap the communication.
  }];
  let dependentDialects = ["mlir::bufferization::BufferizationDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::func::FuncDialect"];
}

def MapLoopsToGPUPass : Pass<"distopt-map-loops-to-gpu", "mlir::func::FuncOp"> {
  let summary = "Map the bufferized loop nests of a function onto gpu.launch";
  let description = [{
    The CUDA pipeline's loop mapping, on what the CPU pipeline has after
    `distopt-fuse-parallel-loops` and `distopt-plan-buffers`. Each top-level
    `scf.parallel` becomes one `gpu.launch`:
    - a flat nest: one thread per iteration (256 a block, the last loop
      dimension fastest, so a warp reads consecutive elements);
    - a row-fused nest (inner `scf.parallel` loops between scalar steps, as
      `distopt-fuse-parallel-loops` leaves softmax and layer norm): one block
      per outer iteration, each inner loop strided over the block's threads,
      steps that write memory outside them (a reduction's `scf.for`) on
      thread 0, with barriers between steps that share memory.
    Other top-level ops that read or write buffers (a reduction to a scalar)
    run on one thread. Runtime calls, allocations and view arithmetic stay on
    the host; views, globals and constants are sunk into the kernels, so
    every kernel argument is a whole buffer.

    ```mlir
    scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c1) { ... }
    // becomes
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, ...) threads(%tx, ...) in (%b = %c256, ...) {
      %lin = bx * 256 + tx ; scf.if %lin < 32 { %i = lin / 8 ; %j = lin % 8 ; ... }
    }
    ```
  }];
  let dependentDialects = ["mlir::gpu::GPUDialect", "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect", "mlir::vector::VectorDialect"];
}

def EmulateGPULaunchesPass : Pass<"distopt-emulate-gpu-launches", "mlir::func::FuncOp"> {
  let summary = "Run gpu.launch kernels on the host as sequential loops (testing the GPU mapping without a GPU)";
  let description = [{
    For `distopt compile --target cuda-emu`: each `gpu.launch` that
    `distopt-map-loops-to-gpu` made becomes a loop over its blocks; the
    kernel body is cut into phases at its top-level `gpu.barrier` and
    `gpu.all_reduce` ops, and each phase runs all the block's threads (in
    reverse order, so a write by thread 0 that others read without a barrier
    between shows up as a wrong result; `forward=true` for the opposite
    case; `runtime-order=true` leaves the choice to the run: each launch
    calls `dort_emulate_threads_forward`, which the module must declare)
    before the next phase starts. A
    scalar loaded in one phase and used in a later one is kept in a
    per-thread `memref.alloca`; pure values (views, indices) are recomputed. An all-reduce folds the
    threads' values in thread order. Barriers inside control flow, memory
    attributions, shuffles and other gpu ops are errors.

    ```mlir
    gpu.launch blocks(%b, ...) in (%g = %c4, ...) threads(%t, ...) in (%n = %c32, ...) {
      A(%t) ; gpu.barrier ; B(%t) ; gpu.terminator }
    // becomes
    scf.for %b = 0 to 4 { scf.for %i = 0 to 32 { A(31 - %i) } scf.for %i = 0 to 32 { B(31 - %i) } }
    ```
  }];
  let options = [
    Option<"forward", "forward", "bool", /*default=*/"false",
           "Run a phase's threads in increasing order (catches a thread 0 that "
           "reads what the others write without a barrier between; the "
           "default reverse order catches the others reading what thread 0 "
           "writes)">,
    Option<"runtimeOrder", "runtime-order", "bool", /*default=*/"false",
           "Choose the order when the program runs: each launch calls "
           "`dort_emulate_threads_forward(i32 default) -> i32` (declared in "
           "the module; default: `forward`), so one executable runs either "
           "order (the runtime reads DISTOPT_EMULATE_THREADS)">
  ];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::arith::ArithDialect",
                           "mlir::memref::MemRefDialect", "mlir::func::FuncDialect"];
}

def ConvertGPULaunchToRuntimePass : Pass<"distopt-convert-gpu-launch-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower gpu.launch_func and gpu.binary to distopt CUDA runtime calls";
  let description = [{
    After `gpu-module-to-binary` (and distopt's ptxas/fatbinary step), each
    `gpu.binary`'s single object becomes an internal constant LLVM global of
    its bytes, and each `gpu.launch_func` a call
    `dort_cuda_launch(image, name, gx, gy, gz, bx, by, bz, smem, args, nargs)`
    with the kernel arguments in 8-byte stack slots (buffers by their aligned
    pointer, for kernels compiled with the bare-pointer convention). The
    runtime loads each image once on the rank's device and launches on its
    stream; upstream's per-launch stream and pre-main module loading are not
    used.

    ```mlir
    gpu.launch_func @k::@f blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1) args(%buf : memref<64xf32>)
    // becomes
    %slots = llvm.alloca %c1 x i64 : (i64) -> !llvm.ptr
    ... llvm.store %bufptr, %slot0 : i64, !llvm.ptr
    func.call @dort_cuda_launch(%image, %name, %g, %c1, %c1, %c256, %c1, %c1, %c0, %slots, %c1_i32) : (...) -> ()
    ```
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::func::FuncDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect"];
}

#endif // DISTOPT_CONVERSION_PASSES_TD
