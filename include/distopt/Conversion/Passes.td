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
    CPU pipeline turns into BLAS calls; convolutions and pooling become the
    named linalg convolution and pooling ops on padded inputs; reshapes are
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
  let dependentDialects = ["mlir::linalg::LinalgDialect",
                           "mlir::tensor::TensorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect",
                           "mlir::func::FuncDialect"];
}

#endif // DISTOPT_CONVERSION_PASSES_TD
