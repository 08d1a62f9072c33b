//===- Passes.td - distopt transformation passes -----------*- tablegen -*-===//

#ifndef DISTOPT_TRANSFORMS_PASSES_TD
#define DISTOPT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def OutlineWeightsPass : Pass<"distopt-outline-weights", "mlir::ModuleOp"> {
  let summary = "Turn dopt.weight references into arguments of @main";
  let description = [{
    Compiled programs receive their weights from the runtime (mmap'ed from
    the bundle's weight file or the model's external-data file), so each
    `dopt.weight` becomes a new argument of `@main`, placed after the graph
    inputs in order of first appearance, with an argument attribute
    `dopt.weight` that keeps the reference (name, and location/offset/length
    for external data). Uses of the same weight share one argument.

    Before:
    ```mlir
    func.func @main(%x: tensor<2x4xf32> {dopt.name = "x"}) -> tensor<2x8xf32> {
      %w = dopt.weight {name = "fc.weight", type = tensor<4x8xf32>} : () -> tensor<4x8xf32>
      %y = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      return %y : tensor<2x8xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<2x4xf32> {dopt.name = "x"},
                    %w: tensor<4x8xf32> {dopt.weight = {name = "fc.weight"}}) -> tensor<2x8xf32> {
      %y = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      return %y : tensor<2x8xf32>
    }
    ```
  
    A `dopt.rng_key` (the random key of training-mode dropout) becomes one
    more input, `rng.key` (`dopt.rng_key`), after the model's inputs: the
    train loop feeds it each step.
  }];
}

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

def PartitionPass : Pass<"distopt-partition", "mlir::ModuleOp"> {
  let summary = "Rewrite a planned program into the program one rank runs";
  let description = [{
    Input: the output of `distopt plan --emit=ir` — `shard.grid @dopt_grid`
    (axes: stages, data, tensor), every value annotated with the sharding it
    is produced in (`shard.shard`), operands needed in another sharding
    annotated `annotate_for_users`, partial sums marked `dopt.partial`.

    Output: the SPMD program of one rank of a stage: every tensor has its
    local shape (split dimensions divided by the grid axes splitting them),
    shape attributes follow (reshape/expand shapes, split sizes, slice ends),
    and each resharding the plan priced becomes a `shard` collective on the
    tensor-parallel grid axis: partial→replicated `all_reduce`,
    partial→split `reduce_scatter`, split→replicated `all_gather`,
    split→other split `all_to_all`, replicated→split `all_slice` (local).
    Sharded weights keep their global type in `dopt.global_type` and their
    split in `dopt.split_axes` (the runtime loads each rank's block);
    function arguments and results carry `dopt.split_axes` too.

    ```mlir
    %w1 = dopt.weight {name = "fc1", type = tensor<32x128xf32>} : ...
    %a = shard.shard %w1 to %col : tensor<32x128xf32>       // [[], [2]]
    %h = dopt.matmul %x, %a : (tensor<8x32xf32>, tensor<32x128xf32>) -> tensor<8x128xf32>
    %hs = shard.shard %h to %col : tensor<8x128xf32>
    ...
    %o = dopt.matmul %g, %b : (tensor<8x128xf32>, tensor<128x32xf32>) -> tensor<8x32xf32>
    %os = shard.shard %o to %rep {dopt.partial = "sum"} : tensor<8x32xf32>
    %y = shard.shard %os to %rep annotate_for_users : tensor<8x32xf32>
    // becomes, with tp = 2:
    %w1 = dopt.weight {dopt.global_type = tensor<32x128xf32>, dopt.split_axes = [[], [2]],
                       name = "fc1", type = tensor<32x64xf32>} : () -> tensor<32x64xf32>
    %h = dopt.matmul %x, %w1 : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    ...
    %o = dopt.matmul %g, %w2 : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %y = shard.all_reduce %o on @dopt_grid grid_axes = [2] : tensor<8x32xf32> -> tensor<8x32xf32>
    ```

    Pipelined plans (pp > 1): batch dimensions become one micro-batch and
    @main is outlined into `@dopt_stage_<k>` functions whose arguments and
    results say what they carry (`dopt.model_input`, `dopt.model_output`,
    `dopt.activation`); activations pass between neighbouring stages only.

    Errors (at the op): a dimension that does not split evenly, a batch
    that does not split into the micro-batches, a stage reading a later
    stage's value, a resharding along the data axis, or a block-layout split
    (fused QKV) whose producer is not a column-split weight GEMM.

    A gather from a table split over its rows (vocabulary-parallel
    embedding) looks up only the rows this rank holds, offset by its
    position on the tensor axis (`shard.process_multi_index`), and yields
    zeros elsewhere: partial sums.
  }];
  let options = [
    Option<"outlineStages", "outline-stages", "bool", /*default=*/"true",
           "Pipelined plans: outline @main into one function per stage "
           "(false: keep @main with its ops' dopt.stage, for a training "
           "step's loss; distopt-outline-stages does it later)">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::tensor::TensorDialect"];
}

def OutlineStagesPass : Pass<"distopt-outline-stages", "mlir::ModuleOp"> {
  let summary = "Outline a partitioned pipelined @main into one function per stage";
  let description = [{
    After `distopt-partition outline-stages=false` (and, for a training
    step, `distopt-append-loss`): @main, whose ops carry their pipeline
    stage (`dopt.stage`; unmarked ops take their first user's, else the
    last stage), becomes `@dopt_stage_<k>(model inputs it reads...,
    activations from earlier stages...) -> (activations for later
    stages..., model outputs)`: arguments and results say what they carry
    (`dopt.model_input = i`, `dopt.model_output = i` with @main's
    attributes, `dopt.activation = id`); an activation needed beyond the
    next stage passes through the stages between. Activations that differ
    between the ranks of the tensor axis are marked `dopt.tensor_varying`.
    Error: a stage reading a value of a later stage.
  }];
}

def PipelineTrainingPass : Pass<"distopt-pipeline-training", "mlir::ModuleOp"> {
  let summary = "Make a pipeline stage's forward its training step over the micro-batches";
  let description = [{
    @main is stage `stage` of a pipelined plan (module attribute
    `dopt.pipeline`: stages, micro-batches M) over one micro-batch, after
    `distopt-outline-stages` and `distopt-outline-weights`: model inputs,
    activations from the stage before (`dopt.activation`), weights; results:
    activations for the stage after and, on the last stage, `loss` and
    `counted` (`distopt-append-loss counted=true`). It becomes the stage's
    whole training step: data inputs holding the replica's M micro-batches
    along their batch dimension, results `loss` (the whole batch's, on every
    stage: all-reduced over the stage axis, the others adding zeros) and
    `grad:<w>` per trained weight, summed over the micro-batches -- exactly
    the gradient of the whole batch (the last stage seeds micro-batch m's
    backward with counted_m / sum counted, known from the labels before the
    first backward). Then `distopt-sync-gradients` and `distopt-optimizer`
    run as for any step.

    The micro-batches' forwards (F) and backwards (B) run in the order of
    `schedule`: `gpipe` (all F, then all B) or `1f1b` (PipeDream-Flush:
    S - 1 - k warm-up F, then F and B in turn, then the remaining B).
    Activations go to the next stage and their adjoints come back by
    `shard.send` / `shard.recv` on the stage axis (sends do not wait for
    the receive). A B reads the values of its F (kept until then: the stash
    of in-flight micro-batches), or recomputes them from the stashed stage
    inputs: `recompute=full` re-runs every forward op in B,
    `recompute=selective` all but the matmuls and convolutions (their
    results are kept); recomputed ops are marked `dopt.recomputed`. Each
    forward and backward is bracketed by calls to
    `dort_trace_pipeline(kind, micro-batch)` for the timeline.

    ```mlir
    // stage 0 of 2, M = 2, 1f1b: F0 F1 B0 B1
    %x0 = dopt.slice %x ...            %h0 = ... ; shard.send %h0 ... destination = [1]
    %x1 = dopt.slice %x ...            %h1 = ... ; shard.send %h1 ...
    %g0 = shard.recv ... source = [1]  (backward of micro-batch 0)
    ...
    ```

    A dropout draws the mask of its micro-batch's rows of the whole batch
    (the micro-batches stacked along dimension 0 of the replica's block),
    so masks are the same under any plan. Errors: a model input without a
    batch dimension, a last stage without `loss` and `counted`.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "The pipeline stage this program is">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe or 1f1b">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"off\"",
           "off, selective or full">,
    Option<"freezeWeights", "freeze-weights", "std::string", /*default=*/"",
           "Weights whose names match this regular expression get no gradient">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect"];
}

def AutodiffPass : Pass<"distopt-autodiff", "mlir::ModuleOp"> {
  let summary = "Append the gradients of @main's scalar loss with respect to its weights";
  let description = [{
    Reverse-mode differentiation on dopt, after `distopt-outline-weights`:
    @main's result `loss` (one float value) is differentiated with respect
    to every float weight argument (`dopt.weight`) whose name
    `freeze-weights` (a regular expression) does not match; each gradient
    becomes a further result named `grad:<weight>` (`dopt.grad_of`). The
    backward ops come from each op's rule (AutodiffRules.cpp): broadcasts
    are summed back, a matrix product's operands get the two transposed
    products, softmax and log-softmax their closed forms, where/relu their
    masks. A float op on the path from a weight to the loss without a rule
    is an error at the op; integer and boolean values carry no gradient.

    ```mlir
    func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
      %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %l = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<f32>
      return %l : tensor<f32>
    }
    // becomes @main(...) -> (tensor<f32>, tensor<3xf32> {dopt.name = "grad:w"}):
    // the adjoint 1 spread over [2, 3], times %x, summed over dimension 0.
    ```
  }];
  let options = [
    Option<"loss", "loss", "unsigned", /*default=*/"0",
           "Which result of @main is the loss">,
    Option<"freezeWeights", "freeze-weights", "std::string", /*default=*/"\"\"",
           "Weights whose name matches this regular expression get no gradient">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect"];
}

def AccumulateGradientsPass : Pass<"distopt-accumulate-gradients", "mlir::ModuleOp"> {
  let summary = "One training step over K micro-batches, gradients summed";
  let description = [{
    After `distopt-autodiff` on a program returning (loss, counted,
    grad:<w>...) for one micro-batch: the data inputs (not weights, not the
    random key) hold `steps` times the samples along dimension 0, and the
    micro-batch program runs on each slice in turn (one micro-batch's
    activations alive at a time); loss and gradients are the micro-batches'
    weighted by their `counted` over the total, as one batch of all the
    samples. Dropout positions continue across the micro-batches. Run
    `distopt-sync-gradients` after it: the sums are communicated once.

    ```mlir
    // steps=2: %x: tensor<4x8xf32> becomes tensor<8x8xf32>; the body runs on
    // %x[0:4] and %x[4:8]; grad:w = (g0 * c0 + g1 * c1) / (c0 + c1)
    ```
  }];
  let options = [
    Option<"steps", "steps", "int64_t", /*default=*/"1",
           "Micro-batches per step (1: leave the program alone)">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect"];
}

def SyncGradientsPass : Pass<"distopt-sync-gradients", "mlir::ModuleOp"> {
  let summary = "All-reduce a data-parallel replica's gradients, in buckets";
  let description = [{
    After `distopt-autodiff` on a partitioned program whose grid has more
    than one data-parallel replica: each `grad:<weight>` result is this
    replica's share and becomes the sum over the grid's data axis. The
    gradients are taken in the order backward produces them and gathered
    into buckets of at most `bucket-bytes` (one element type each); a
    bucket is flattened (`dopt.reshape`, `dopt.concat`), all-reduced once
    (`shard.all_reduce`, marked `dopt.bucket = k`), and split back, right
    after its last gradient. With `grad-dtype` f16 or bf16 a bucket is
    multiplied by 1/replicas, cast to 16 bits, summed, cast back and
    multiplied by the replica count: half the bytes on the links, the
    update still in f32. With `zero-stage=1` (ZeRO-1) each gradient is
    flattened, padded and viewed as [replicas, chunk]; the bucket joins them
    along the chunks and is reduce-scattered (started where it stands,
    `dopt.async`, as the all-reduces are), so each
    replica gets the chunk of every gradient it updates: the result becomes
    that chunk (`dopt.zero_shard`), which distopt-optimizer updates. A
    program without a grid, or with one replica, is left alone.

    ```mlir
    %g1 = ... // grad:b2 (produced first)
    %g2 = ... // grad:w2
    // with bucket-bytes large enough for both becomes
    %f1 = dopt.reshape %g1 ...   %f2 = dopt.reshape %g2 ...
    %c = dopt.concat %f1, %f2 {axis = 0}
    %r = shard.all_reduce %c on @dopt_grid grid_axes = [1] {dopt.bucket = 0}
    %p:2 = dopt.split %r {axis = 0, sizes = ...}
    ```
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"25 << 20",
           "Largest bucket in bytes (a larger gradient travels alone)">,
    Option<"gradDtype", "grad-dtype", "std::string", /*default=*/"\"f32\"",
           "f32, f16 or bf16: the dtype the buckets travel in (16-bit: "
           "scaled by 1/replicas before the sum, so f16 cannot overflow, and "
           "back to f32 after it)">,
    Option<"zeroStage", "zero-stage", "int", /*default=*/"0",
           "1: reduce-scatter instead of all-reduce, so each replica gets "
           "the chunk of every gradient it updates (ZeRO-1, "
           "ZeroSharding.h); 0: all-reduce">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect", "mlir::shard::ShardDialect"];
}

def AppendLossPass : Pass<"distopt-append-loss", "mlir::ModuleOp"> {
  let summary = "Turn an inference @main into its training loss on a labels input";
  let description = [{
    `kind` is `cross-entropy` (softmax over the last axis of `output`,
    integer labels of its shape without that axis, ignore_index -100, mean
    over the counted elements: PyTorch's CrossEntropyLoss on the flattened
    logits), `nll` (the same on log-probabilities), `mse` (float targets of
    the output's shape) or `output` (the output is the loss already). The
    labels are a new input named `labels`; @main returns the loss alone
    (named "loss"). The losses are DoptLosses.h's compositions, as for the
    ONNX loss ops.

    ```mlir
    func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x10xf32> {dopt.name = "logits"})
    // with kind=cross-entropy output=logits becomes
    func.func @main(%x: tensor<4x8xf32>, %labels: tensor<4xi64> {dopt.name = "labels"})
        -> (tensor<f32> {dopt.name = "loss"})
    ```
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"cross-entropy\"",
           "cross-entropy, nll, mse or output">,
    Option<"output", "output", "std::string", /*default=*/"\"0\"",
           "The model output the loss is taken of (name or position)">,
    Option<"labels", "labels", "std::string", /*default=*/"\"labels\"",
           "Name of the labels input">,
    Option<"counted", "counted", "bool", /*default=*/"false",
           "Also return `counted`, the f32 count the loss's mean divides by "
           "(labels not -100; mse: the output's elements), over the whole "
           "batch (distopt-accumulate-gradients weights micro-batches by it)">,
    Option<"accuracy", "accuracy", "bool", /*default=*/"false",
           "cross-entropy and nll: also return `correct` (samples whose "
           "label scores the maximum) and `counted` (labels not -100), as "
           "f32 counts over the whole batch (the evaluation program)">,
    Option<"local", "local", "bool", /*default=*/"false",
           "In a partitioned program: the loss of this replica's samples "
           "alone, not summed over the replicas (a parameter-server worker "
           "pushes its own gradient); `counted` is then the replica's count">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect", "mlir::shard::ShardDialect",
                           "mlir::arith::ArithDialect", "mlir::tensor::TensorDialect"];
}

def OptimizerPass : Pass<"distopt-optimizer", "mlir::ModuleOp"> {
  let summary = "Turn loss and gradients into one training step (SGD, Adam, AdamW)";
  let description = [{
    After `distopt-autodiff`: adds the optimizer state (SGD's momentum
    buffer, Adam's two moments per weight: inputs `opt.<state>:<weight>`,
    `dopt.optimizer_state`) and the hyperparameters (0-d f32 inputs
    `opt.lr`, `opt.step`, `opt.weight_decay`, `opt.clip_norm`, and
    `opt.momentum` or `opt.beta1`/`opt.beta2`/`opt.eps`, `dopt.hyper`), and
    returns the loss, the gradients' global norm, then per weight the
    updated state (`dopt.updates` names the input it replaces) and the
    updated weight (`update:<weight>`, `dopt.updates_weight`). The formulas
    are PyTorch's: torch.optim.SGD (dampening 0, `nesterov`), Adam (L2
    weight decay), AdamW (decoupled), clip_grad_norm_ (clip_norm > 0).
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"sgd\"",
           "sgd, adam or adamw">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD: Nesterov momentum">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect", "mlir::shard::ShardDialect"];
}

#endif // DISTOPT_TRANSFORMS_PASSES_TD
