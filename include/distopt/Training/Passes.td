//===- Passes.td - training passes: losses, reverse mode, optimizers, accumulation, pipeline steps -*- tablegen -*-===//

#ifndef DISTOPT_TRAINING_PASSES_TD
#define DISTOPT_TRAINING_PASSES_TD

include "mlir/Pass/PassBase.td"

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
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "Seed the backward with the input opt.loss_scale (fp16 training)">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect"];
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

    One micro-batch's forward (F) and backward (B) are private functions,
    `@dopt_stage_forward` and `@dopt_stage_backward`, compiled once whatever
    M is; `@main` calls them in the order of `schedule`: `gpipe` (all F,
    then all B) or `1f1b` (PipeDream-Flush: S - 1 - k warm-up F, then F and
    B in turn, then the remaining B). Both take the micro-batch's index
    (where its dropouts' masks lie in the batch) and its stage inputs.
    Activations go to the next stage and their adjoints come back by
    `shard.send` / `shard.recv` on the stage axis in `@main` (sends do not
    wait for the receive). F returns what B reads of it (the stash, kept
    until that B: the in-flight micro-batches'), or B recomputes it from
    the stage inputs: `recompute=full` re-runs every forward op in B,
    `recompute=selective` all but the matmuls and convolutions (their
    results are stashed); recomputed ops are marked `dopt.recomputed`. B
    adds the micro-batch's gradients to the sums it takes and returns them,
    with the adjoints of the entering activations. Weights the forward
    updates (batch norm's running statistics) are returned by F and passed
    to the next F; the last call's are marked `dopt.updates_weights`. Each
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
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "Seed the last stage's backward with the input opt.loss_scale">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect"];
}

def AccumulateGradientsPass : Pass<"distopt-accumulate-gradients", "mlir::ModuleOp"> {
  let summary = "One training step over K micro-batches, gradients summed";
  let description = [{
    After `distopt-autodiff` on a program returning (loss, counted,
    grad:<w>...) for one micro-batch: the data inputs (not weights, not the
    random key, not hyperparameters) hold `steps` times the samples along
    their batch dimension, and the micro-batch program becomes one private
    function, `@dopt_microbatch`, that `@main` calls in an `scf.for` over
    the `steps` micro-batches, on each one's slice in turn (one
    micro-batch's activations alive at a time; the program does not grow
    with `steps`). The function takes the micro-batch's index (where its
    dropouts' masks lie in the batch) and the sums so far, and returns them
    with its loss and gradients added, weighted by its `counted`; `@main`
    divides by the total, as one batch of all the samples. Weights the
    forward pass updates (`dopt.updates_weight`) are returned and carried
    to the next iteration; the loop's are marked `dopt.updates_weights`.
    Run `distopt-sync-gradients` after it: the sums are communicated once.

    ```mlir
    // steps=2: %x: tensor<4x8xf32> becomes tensor<8x8xf32>;
    // %r:3 = scf.for %m = 0 to 2 iter_args(zeros...) {
    //   %xm = tensor.extract_slice %x[%m * 4, 0] [4, 8] [1, 1]
    //   scf.yield call @dopt_microbatch(%xm, %w, %m, %sums...)
    // }
    // grad:w = %r#2 / %r#1  (= (g0 * c0 + g1 * c1) / (c0 + c1))
    ```
  }];
  let options = [
    Option<"steps", "steps", "int64_t", /*default=*/"1",
           "Micro-batches per step (1: leave the program alone)">,
    Option<"loop", "loop", "bool", /*default=*/"true",
           "Call the function in an scf.for (false: K calls one after the "
           "other; the CUDA target's host code cannot yet deallocate the "
           "buffers a loop carries)">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect", "mlir::scf::SCFDialect",
                           "mlir::tensor::TensorDialect", "mlir::arith::ArithDialect"];
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

    `loss-scale` (fp16 training, PyTorch's GradScaler): the gradients arrive
    multiplied by the input `opt.loss_scale` (distopt-autodiff's
    `loss-scale` seeds the backward with it) and are divided by it first;
    the output `found_inf` (0-d f32) is 1 when any gradient on any rank is
    inf or NaN (the global norm's sum of squares, reduced over every axis,
    is not finite), and the step then returns the weights and optimizer
    state unchanged. The runtime keeps the scale (GradScaler's growth and
    back-off) and does not count a skipped step in Adam's `opt.step`.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"sgd\"",
           "sgd, adam or adamw">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD: Nesterov momentum">,
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "Dynamic loss scaling: divide the gradients by opt.loss_scale, "
           "return found_inf, and leave weights and state as they were "
           "when a gradient is not finite">,
  ];
  let dependentDialects = ["distopt::dopt::DoptDialect", "mlir::shard::ShardDialect"];
}

#endif // DISTOPT_TRAINING_PASSES_TD
