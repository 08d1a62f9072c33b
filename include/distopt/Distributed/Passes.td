//===- Passes.td - distribution passes: partitioning, pipeline stages, gradient synchronisation -*- tablegen -*-===//

#ifndef DISTOPT_DISTRIBUTED_PASSES_TD
#define DISTOPT_DISTRIBUTED_PASSES_TD

include "mlir/Pass/PassBase.td"

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

#endif // DISTOPT_DISTRIBUTED_PASSES_TD
