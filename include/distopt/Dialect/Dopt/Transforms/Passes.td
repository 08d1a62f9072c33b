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

#endif // DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_TD
