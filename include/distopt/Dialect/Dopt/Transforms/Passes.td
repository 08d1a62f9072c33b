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

#endif // DISTOPT_DIALECT_DOPT_TRANSFORMS_PASSES_TD
