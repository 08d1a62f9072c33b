//===- Passes.td - code generation passes on linalg, loops and buffers (CPU and CUDA targets) -*- tablegen -*-===//

#ifndef DISTOPT_CODEGEN_PASSES_TD
#define DISTOPT_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def LinalgToBlasPass : Pass<"distopt-linalg-to-blas", "mlir::ModuleOp"> {
  let summary = "Replace f32/f64 linalg.matmul and batch_matmul on buffers by BLAS calls";
  let description = [{
    Runs after bufferization. A `linalg.matmul` or `linalg.batch_matmul` on
    memrefs of f32 or f64 (plain or transposed operands, as expressed by its
    indexing maps) becomes a call to the runtime's
    `dort_{batch_}matmul_{f32,f64}` (C interface), which calls OpenBLAS
    `cblas_?gemm` with beta = 1 (the accumulator was zero-filled before).
    A GEMM of f16/bf16 values widened to f32 reads them as 16-bit values
    when both operands are (the last write of each operand's buffer yields
    `arith.extf` of a 16-bit value and only GEMMs read it: that write
    stores the 16-bit value instead, or the GEMM reads the entry argument
    it converted): `dort_(batch_)matmul_{f16,bf16}_f32`, f32 accumulation.
    Other element types stay loops.

    ```mlir
    linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
    // becomes
    func.call @dort_matmul_f32(%a', %b', %c', %false, %false, %one, %one)
    ```

    With `epilogues` (the CUDA targets: cuBLASLt's epilogues), a 2-D GEMM
    into a fresh buffer that only the next elementwise step reads, when
    that step computes `D = act(C + bias[column] + residual)` (each term
    optional; `act` none, ReLU, or GELU's tanh form, recognised by
    evaluating the step's body), becomes one
    `dort_matmul_epilogue_<t>(A, B, D, R, bias, transA, transB, alpha, beta,
    act, hasBias)`: D = act(alpha op(A) op(B) + beta R + bias), beta = 1
    with a residual; `t` is f32, or f16/bf16 for a 16-bit GEMM whose step's
    values are 16-bit (its roundings replaced by one at the end). The
    product buffer goes.
  }];
  let options = [
    Option<"epilogues", "epilogues", "bool", /*default=*/"false",
           "Fuse bias, residual and activation steps into the GEMM call "
           "(dort_matmul_epilogue_f32)">,
  ];
  let dependentDialects = ["mlir::func::FuncDialect", "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect"];
}

def FuseElementwisePass : Pass<"distopt-fuse-elementwise", "mlir::ModuleOp"> {
  let summary = "Fuse chains of elementwise linalg.generics, keeping named contractions";
  let description = [{
    Upstream `linalg-fuse-elementwise-ops` also propagates reshapes through
    `linalg.matmul` (e.g. the expand_shape after a matmul over collapsed
    rows), turning it into a generic contraction that the CPU pipeline can
    no longer hand to BLAS. This pass applies only the elementwise fusion
    patterns, and only when the producer is an all-parallel
    `linalg.generic` with one use that the consumer reads element for
    element (not through a broadcast, which would recompute a per-row value
    for every element of the row): chains like bias-add -> GELU ->
    residual-add become one loop nest, while matrix products and
    convolutions stay named ops.
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect"];
}

def ApproximateMathPass : Pass<"distopt-approximate-math", "mlir::ModuleOp"> {
  let summary = "Replace f32 exp/log/tanh/erf by inline polynomial approximations";
  let description = [{
    Lowered to libm, `math.exp`, `math.erf`, ... are scalar calls that keep
    LLVM from vectorising the loops around them (GELU's erf was 10% of a
    transformer's run time). Upstream's polynomial approximations (accurate
    to a few ulp, with inf/NaN handled) are plain arithmetic and vectorise.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::math::MathDialect",
                           "mlir::vector::VectorDialect"];
}

def PlanBuffersPass : Pass<"distopt-plan-buffers", "mlir::func::FuncOp"> {
  let summary = "Static memory plan: pack intermediate buffers into one arena by liveness";
  let description = [{
    Runs after bufferization, before deallocation. Every statically shaped
    `memref.alloc` in the function body gets an offset in one 64-byte-aligned
    arena; buffers whose live ranges (from the allocation to the last use of
    the buffer or of any view of it) do not overlap share bytes. Offsets are
    assigned largest-first, at the lowest offset free during the buffer's
    whole life. The allocs become `memref.view`s of the arena, so a run does
    one allocation instead of one per intermediate tensor, and the peak
    footprint is the arena size.

    ```mlir
    %a = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
    // becomes
    %arena = memref.alloc() {alignment = 64 : i64} : memref<8192xi8>
    %a = memref.view %arena[%c0][] : memref<8192xi8> to memref<4x16xf32>
    ```
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect", "mlir::arith::ArithDialect"];
}

def PromoteReductionsPass : Pass<"distopt-promote-reductions", "mlir::func::FuncOp"> {
  let summary = "Keep loop-invariant memory values in registers: reduction accumulators (reassociable) and invariant loads";
  let description = [{
    Lowered to loops, a linalg reduction loads and stores its accumulator
    in memory on every iteration, and its float adds must keep their order:
    LLVM can neither keep the accumulator in a register (the input might
    alias it, as far as it knows) nor vectorise the loop (that reorders the
    adds). The loop runs at the latency of one add per element.

    For an `scf.for` that loads and stores one memref element at indices
    that do not change in the loop, and writes no other memory, this pass
    loads the element once before the loop, carries it in `iter_args`, and
    stores it once after. A combining `arith.addf`/`mulf` gets
    `fastmath<reassoc>`, which lets LLVM vectorise the reduction (partial
    sums per lane, combined at the end), as every vectorising runtime does.
    Inputs of a linalg reduction never alias its output, so keeping the
    accumulator in a register is exact.

    Loads that read the same element on every iteration (a row's maximum,
    sum or mean in the loop over the row) move above the loop when the loop
    writes no buffer they could read: different buffers never overlap in
    this pipeline, but LLVM does not know it and would reload the value for
    every element.

    ```mlir
    scf.for %t = %c0 to %c128 step %c1 {
      %a = memref.load %acc[%i] : memref<64xf32>
      %x = memref.load %in[%i, %t] : memref<64x128xf32>
      %s = arith.addf %a, %x : f32
      memref.store %s, %acc[%i] : memref<64xf32>
    }
    // becomes
    %a0 = memref.load %acc[%i] : memref<64xf32>
    %r = scf.for %t = %c0 to %c128 step %c1 iter_args(%a = %a0) -> (f32) {
      %x = memref.load %in[%i, %t] : memref<64x128xf32>
      %s = arith.addf %a, %x fastmath<reassoc> : f32
      scf.yield %s : f32
    }
    memref.store %r, %acc[%i] : memref<64xf32>
    ```
  }];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect"];
}

def OutlineLoopNestsPass : Pass<"distopt-outline-loop-nests", "mlir::ModuleOp"> {
  let summary = "Split a large function's loop nests into functions of bounded size";
  let description = [{
    Runs on the loop-level program (after bufferization, before
    `convert-scf-to-openmp`). LLVM's work on one function grows faster than
    linearly with its size: OpenMP's region outlining scans the whole
    function once per parallel loop, and scalar evolution and the machine
    passes walk long chains of blocks. A training step is one function of
    thousands of loop nests. In every function with at least `min-ops`
    operations, runs of consecutive top-level operations without results
    (loop nests, runtime calls, copies) of about `chunk-ops` operations
    each become private functions, called in their place and kept out of
    line (`noinline`). Side-effect-free operations and allocations between
    them (views, constants) stay in the caller; constants are cloned into
    the functions that use them, so loop bounds stay known; any other
    operation with results ends a run. Functions under `min-ops` are left
    as they are.

    ```mlir
    func.func @dopt_main(%a: memref<64xf32>, %b: memref<64xf32>) {
      scf.for ... { ... %a ... }
      scf.parallel ... { ... %b ... }
      return
    }
    // becomes (with chunk-ops small enough)
    func.func private @dopt_main_part0(%a: memref<64xf32>)
        attributes {passthrough = ["noinline"]} {
      scf.for ... { ... }
      return
    }
    ...
    func.func @dopt_main(%a: memref<64xf32>, %b: memref<64xf32>) {
      call @dopt_main_part0(%a) : (memref<64xf32>) -> ()
      call @dopt_main_part1(%b) : (memref<64xf32>) -> ()
      return
    }
    ```
  }];
  let options = [
    Option<"minOps", "min-ops", "int64_t", /*default=*/"8000",
           "Operations a function needs before it is split">,
    Option<"chunkOps", "chunk-ops", "int64_t", /*default=*/"250",
           "Operations to aim for in each outlined function">,
  ];
  let dependentDialects = ["mlir::func::FuncDialect"];
}

def PrivatizeFillsPass : Pass<"distopt-privatize-fills", "mlir::func::FuncOp"> {
  let summary = "Give each user of a filled tensor its own fill before bufferization";
  let description = [{
    CSE merges the identical zero (or -inf) fills that start every matrix
    product and reduction into one tensor with many users. One-shot
    bufferization then fills one buffer and copies it into a fresh buffer
    for every user that writes into it: a full memcpy of zeros per GEMM,
    where a fill (or nothing, when BLAS writes C with beta = 0) would do.
    This pass gives each user a clone of the fill, and of the
    `tensor.empty` it fills, right before it (where LinalgToBlas can then
    drop a zero fill for beta = 0), and erases the shared one.

    ```mlir
    %e = tensor.empty() : tensor<4x8xf32>
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %a = linalg.matmul ins(...) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    %b = linalg.matmul ins(...) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    // becomes: %a and %b each right after their own tensor.empty + linalg.fill
    ```

    A `tensor.empty` CSE made the init (`outs`) of several ops is
    likewise cloned for each: shared, every in-place write into it conflicts
    with every other for one-shot bufferization's analysis to resolve along
    the use-def chains (superlinear: an unrolled recurrence of ~500 ops
    sharing two empties took 30 s), where each writer gets a buffer of its
    own either way.
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect", "mlir::tensor::TensorDialect"];
}

def CopiesToLinalgPass : Pass<"distopt-copies-to-linalg", "mlir::func::FuncOp"> {
  let summary = "Turn memref.copy into linalg.copy, so copies become parallel loops";
  let description = [{
    Bufferization writes a padded tensor (convolution inputs) as a fill of
    the padded buffer and a `memref.copy` of the input into its interior.
    A `memref.copy` into a strided view is a call to the runtime's
    element-by-element `memrefCopy`, on one thread. As a `linalg.copy` it is
    a loop nest like any other: parallel, vectorised, and open to loop
    fusion.

    ```mlir
    memref.copy %x, %interior : memref<8x3x32x32xf32> to memref<8x3x32x32xf32, strided<[3468, 1156, 34, 1], offset: 35>>
    // becomes
    linalg.copy ins(%x : memref<8x3x32x32xf32>) outs(%interior : memref<8x3x32x32xf32, strided<...>>)
    ```

    With `memcpy-max-bytes` N > 0 (the CPU target's), a copy between two
    contiguous buffers (identity layout, or a static offset into one) of at
    most N bytes stays a `memref.copy`, which finalize-memref-to-llvm lowers
    to one `llvm.intr.memcpy`: a small copy runs on one thread anyway, and as
    a loop LLVM would vectorise and unroll it into a run of loads and stores
    (an unrolled recurrence has thousands, and LLVM's scheduler is
    superlinear in them). The GPU targets keep every copy a loop (0).
  }];
  let options = [
    Option<"memcpyMaxBytes", "memcpy-max-bytes", "int64_t", /*default=*/"0",
           "Leave contiguous copies of at most this many bytes as memref.copy "
           "(a memcpy); 0: every copy becomes a linalg.copy">
  ];
  let dependentDialects = ["mlir::linalg::LinalgDialect"];
}

def InPlaceLoopBuffersPass : Pass<"distopt-in-place-loop-buffers", "mlir::func::FuncOp"> {
  let summary = "Drop the buffers an scf.for carries unchanged (a scatter's, after bufferization)";
  let description = [{
    `dopt.scatter_elements` lowers to an `scf.for` that carries its result
    tensor and inserts each update into it. Bufferized in place, the loop
    carries the buffer it stores into and yields it unchanged. As a
    loop-carried buffer, the ownership-based deallocation would give it
    a run-time ownership flag and a dealloc helper (which then runs as
    kernels on the GPU); it is only the loop's initial buffer:

    ```mlir
    %r = scf.for %k = %c0 to %n step %c1 iter_args(%b = %alloc) -> (memref<2x5xf32>) {
      memref.store %u, %b[%i, %j] : memref<2x5xf32>
      scf.yield %b : memref<2x5xf32>
    }
    // becomes
    scf.for %k = %c0 to %n step %c1 {
      memref.store %u, %alloc[%i, %j] : memref<2x5xf32>
    }
    ```
    Runs right after `one-shot-bufferize`; other loops are left alone.
  }];
  let dependentDialects = ["mlir::scf::SCFDialect"];
}

def FuseParallelLoopsPass : Pass<"distopt-fuse-parallel-loops", "mlir::func::FuncOp"> {
  let summary = "Fuse sibling scf.parallel loops over the rows they share";
  let description = [{
    Runs on `convert-linalg-to-parallel-loops` output, before the static
    memory plan (which then sees the fused loops' buffers live together).
    Two `scf.parallel` loops in the function body, adjacent up to pure ops
    (views, constants; they move above the first loop), fuse over their
    leading dimensions with equal bounds when that is row-local: every
    buffer one loop writes and the other touches is indexed, in both, by
    each fused induction variable at the same position, so iteration i of
    the second loop only touches what iteration i of the first wrote or
    read. Views are followed through casts, subviews (an index carries over
    in dimensions at offset 0 with stride 1) and reshapes that only add or
    drop unit dimensions. Distinct buffers never overlap. The unfused dimensions become a nested `scf.parallel`.

    Softmax (max, exp, sum, divide) and layer norm then make one pass over
    each row instead of four or five over the whole tensor.

    ```mlir
    scf.parallel (%i) = (%c0) to (%c64) step (%c1) {  // row maxima
      scf.for %j ... { ... memref.store %m, %max[%i] }
    }
    scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c128) step (%c1, %c1) {
      %m = memref.load %max[%i] ...                    // exp(x - max)
    }
    // becomes
    scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
      scf.for %j ... { ... }
      scf.parallel (%j) = (%c0) to (%c128) step (%c1) { ... }
    }
    ```
  }];
  let dependentDialects = ["mlir::scf::SCFDialect"];
}

def ParallelizeLoopsPass : Pass<"distopt-parallelize-loops", "mlir::func::FuncOp"> {
  let summary = "Keep the outer dimensions of large loop nests parallel, serialise the rest";
  let description = [{
    Runs on the output of `convert-linalg-to-parallel-loops`, before
    `convert-scf-to-openmp`, which turns every remaining `scf.parallel` into a
    work-shared OpenMP loop. Each outermost `scf.parallel` whose nest does at
    least `min-work` innermost iterations keeps its leading dimensions
    parallel (just enough of them for `min-chunks` iterations, and never the
    innermost dimension of an innermost loop, which LLVM vectorises); its
    other dimensions and every `scf.parallel` nested in it become `scf.for`
    loops. Smaller nests become `scf.for` loops entirely: forking threads
    costs more than they would save. The result has at most one level of
    parallelism, so there is no nested forking.

    ```mlir
    scf.parallel (%i, %j) = (%c0, %c0) to (%c1024, %c256) step (%c1, %c1) {
      ...
    }
    // becomes
    scf.parallel (%i) = (%c0) to (%c1024) step (%c1) {
      scf.for %j = %c0 to %c256 step %c1 {
        ...
      }
    }
    ```
  }];
  let options = [
    Option<"minWork", "min-work", "int64_t", /*default=*/"32768",
           "Innermost iterations a nest needs to run in parallel">,
    Option<"minChunks", "min-chunks", "int64_t", /*default=*/"64",
           "Parallel iterations to aim for (load balance across threads)">,
  ];
  let dependentDialects = ["mlir::scf::SCFDialect"];
}

def UpdateInPlacePass : Pass<"distopt-update-in-place", "mlir::func::FuncOp"> {
  let summary = "Write a training step's updated weights and optimizer state into their own buffers";
  let description = [{
    A training step returns each weight's and each optimizer state's new
    value; without this pass each gets a buffer of its own, and the train
    loop swaps it with the old one after the step: the weights and the
    state are held twice. In a function marked `dopt.update_in_place` (the
    driver marks the training steps), every result that updates one of the
    function's arguments (`dopt.updates_weight` names a weight argument,
    `dopt.updates` a state argument; see `distopt::inPlaceUpdates`) is
    marked `dopt.in_place_of = <argument>`, the argument becomes writable
    for one-shot bufferization, and the op computing the new value -- a
    linalg op whose `outs` is a `tensor.empty` it does not read, reached
    from the returned value through reshapes -- takes the argument
    (reshaped alike) as its destination. One-shot bufferization then
    writes the new value into the argument's buffer where no later read of
    the old value forbids it; `distopt-drop-in-place-results` removes the
    results afterwards (copying where bufferization could not write in
    place).

    Likewise, in any function, a result marked `dopt.accumulates = i` (a
    pipeline stage's backward, an accumulated micro-batch: the gradient sums
    it adds to) is computed into argument i: the calls of a schedule or a
    loop then add into one set of sums (`drop-equivalent-buffer-results`
    removes such results after bufferization).

    ```mlir
    func.func @dopt_main(%w: tensor<2x2xf32>, ...) -> (tensor<2x2xf32> {dopt.updates_weight = "w"})
      %e = tensor.empty() : tensor<4xf32>
      %n = linalg.generic ins(%cw, %g : ...) outs(%e : tensor<4xf32>) ...
      %r = tensor.expand_shape %n [[0, 1]] ...
      return %r
    // becomes: outs(collapse_shape %w), %w writable, the result marked
    // dopt.in_place_of = 0
    ```
  }];
  let dependentDialects = ["mlir::tensor::TensorDialect"];
}

def DropInPlaceResultsPass : Pass<"distopt-drop-in-place-results", "mlir::func::FuncOp"> {
  let summary = "Remove the results a function writes into its arguments' buffers";
  let description = [{
    After one-shot bufferization: each result marked `dopt.in_place_of = i`
    (by `distopt-update-in-place`) is removed from the function. Where
    bufferization wrote it into argument i's buffer (the returned memref is
    that argument, through casts and reshapes) nothing else is needed;
    elsewhere a `memref.copy` into the argument is added before the
    return. The entry point then has no buffer for it: the runtime keeps
    the updated value where the old one was.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

#endif // DISTOPT_CODEGEN_PASSES_TD
