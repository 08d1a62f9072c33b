//===- Passes.td - dopt-level preparation of a program for the runtime -*- tablegen -*-===//

#ifndef DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_TD
#define DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_TD

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

def AutocastPass : Pass<"distopt-autocast", "mlir::ModuleOp"> {
  let summary = "Compute @main in 16-bit mixed precision (bf16 or fp16)";
  let description = [{
    Rewrites the fp32 program `@main` to compute in `precision` (bf16 or
    f16) where that is safe, as PyTorch's autocast does. Each op says which
    precision it computes in by a trait (DoptInterfaces.td), read here and
    nowhere else:
     * `Dopt_Autocast16` (matmul, gemm, convolutions): fp32 operands are
       cast to 16 bits, the result is 16-bit; the lowering accumulates in
       fp32.
     * `Dopt_AutocastF32` (log-softmax, batch and layer norm, sums and
       means, exp, log, pow, reciprocal, ...): 16-bit operands are cast back
       to fp32, the result is fp32.
     * any other op follows its inputs: where every floating-point operand
       that is not computed from weights alone is 16-bit, it computes in 16
       bits (its weight and constant operands cast down, as a linear layer's
       bias is); where one of them is fp32, in fp32 (NumPy's promotion).
    A value is cast once, next to its definition, for all its consumers of
    one type: a weight's 16-bit copy is made once per run. A weight or
    constant read by several ops is cast next to each reader instead (each
    copy then takes its reader's layout when the program is partitioned). The function's
    inputs and results keep their types (results are cast back).

    `store-weights` (inference): a weight read only through its 16-bit copy
    becomes a 16-bit weight (`data_type` records the fp32 data, rounded to
    nearest-even when the bundle is written), halving its memory. A training
    step keeps fp32 master weights: its gradients flow through the casts
    (their adjoints cast the 16-bit gradient back to fp32).

    Before:
    ```mlir
    %w = dopt.weight {name = "fc.weight", type = tensor<4x8xf32>} : () -> tensor<4x8xf32>
    %y = dopt.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %s = dopt.log_softmax %y {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    ```
    After (bf16):
    ```mlir
    %xh = dopt.cast %x {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
    %wh = dopt.cast %w {to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
    %y = dopt.matmul %xh, %wh : (...) -> tensor<2x8xbf16>
    %yf = dopt.cast %y {to = f32} : (tensor<2x8xbf16>) -> tensor<2x8xf32>
    %s = dopt.log_softmax %yf {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"bf16\"",
           "the 16-bit type: bf16 or f16">,
    Option<"storeWeights", "store-weights", "bool", "false",
           "store weights read only in 16 bits as 16-bit weights">,
  ];
}

def FuseAttentionPass : Pass<"distopt-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Make dopt.attention of an exporter's attention chain";
  let description = [{
    Replaces the chain an exporter writes for scaled dot-product attention,
    `matmul(softmax(add?(where?(scale?(matmul(q, kᵀ))))), v)`, with one
    `dopt.attention`, whose lowering never holds the [..., Tq, Tk] scores
    (distopt-expand-attention):
     * `kᵀ` is a transpose of the last two axes (its operand is the key) or
       any other value (the key is its transpose);
     * the scale is a multiplication or division by a scalar: a constant
       (the op's `scale`; none: 1), or a value computed at run time, by
       which the query is multiplied or divided instead (HuggingFace's GPT-2
       divides by `pow(width, 0.5)`);
     * `where(keep, s, c)` with c a constant scalar of -inf or at most
       -1e30 (what exporters write for masked positions) gives `keep`;
     * an addition of a tensor gives `bias`;
     * the softmax is over the last axis; a `where(reduce_max(bias) ==
       -inf, 0, p)` after it (ONNX Attention's rule for a query whose every
       key the mask hides) gives `empty_rows_zero`.
    Only a chain whose intermediate values have no other reader is fused (a
    model that returns its attention probabilities keeps them). Leading dimensions must be equal (no broadcast
    between query, key and value).

    Before:
    ```mlir
    %kt = dopt.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (...) -> tensor<2x2x16x16xf32>
    %s = dopt.matmul %q, %kt : (...) -> tensor<2x2x16x16xf32>
    %t = dopt.mul %s, %c : (tensor<2x2x16x16xf32>, tensor<f32>) -> tensor<2x2x16x16xf32>
    %m = dopt.where %causal, %t, %ninf : (...) -> tensor<2x2x16x16xf32>
    %p = dopt.softmax %m {axis = 3 : i64} : (...) -> tensor<2x2x16x16xf32>
    %o = dopt.matmul %p, %v : (...) -> tensor<2x2x16x16xf32>
    ```
    After:
    ```mlir
    %o = dopt.attention %q, %k, %v keep %causal {scale = 2.5e-01 : f64} : (...) -> tensor<2x2x16x16xf32>
    ```
  }];
}

def ExpandAttentionPass : Pass<"distopt-expand-attention", "mlir::ModuleOp"> {
  let summary = "Compute dopt.attention over blocks of keys (online softmax)";
  let description = [{
    The lowering of `dopt.attention` (before dopt → linalg): an `scf.for`
    over blocks of `block` keys carries the running maximum m and sum l of
    each query's scores and its unnormalised output; each step slices the
    keys, values and masks of its block, computes that block's scores, and
    rescales what it carries by exp(m_old − m_new), as FlashAttention does.
    The output is the carried sum divided by l. Memory holds one block of
    scores, [..., Tq, block], instead of [..., Tq, Tk]. Keys that do not
    fill a last block are one more step after the loop; at most `block`
    keys are one step, without a loop. In 16 bits the scores, the softmax's
    statistics and the carried output are fp32; the probabilities are cast
    to 16 bits for the product with the values (FlashAttention's choice).
    A row whose keys are all masked gives NaN, as the unfused softmax does.
  }];
  let options = [
    Option<"block", "block", "int64_t", "256", "keys per step">,
  ];
  let dependentDialects = ["mlir::scf::SCFDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::bufferization::BufferizationDialect"];
}

def OutlineRepeatsPass : Pass<"distopt-outline-repeats", "mlir::ModuleOp"> {
  let summary = "Make each run of repeated op sequences one function, called per copy";
  let description = [{
    Where a function's body holds one sequence of ops several times in a
    row -- a transformer's layers: each layer's forward, each layer's
    backward, each layer's optimizer updates -- the sequence becomes one
    private function `@dopt_block_<n>`, called once per copy with the
    values the copy reads from outside it (its weights, the previous copy's
    output; constants alike in every copy are cloned into the function) and
    returning the values read after it. Ops are alike when their name,
    attributes and operand and result types are (not their names in the
    model); a run is outlined only where every copy's dataflow is the first
    copy's. The run saving the most ops goes first, then the search repeats,
    in every function of the module. Lowering and code generation then see
    each distinct block once, so compile time follows the distinct blocks,
    not the depth. What is lost: fusion across a copy's boundary, and a
    copy's temporaries are planned apart from its caller's.

    ```mlir
    // Before: %h1 = <block ops on %h0, %w0>; %h2 = <the same ops on %h1, %w1>
    // After:
    %h1 = call @dopt_block_0(%h0, %w0) : (...) -> tensor<...>
    %h2 = call @dopt_block_0(%h1, %w1) : (...) -> tensor<...>
    ```
  }];
  let options = [
    Option<"minOps", "min-ops", "int64_t", "16",
           "the fewest ops a repeated sequence must hold to be outlined">,
  ];
}

#endif // DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_TD
