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
    Other element types stay loops.

    ```mlir
    linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
    // becomes
    func.call @dort_matmul_f32(%a', %b', %c', %false, %false, %one, %one)
    ```
  }];
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
    `linalg.generic` with one use: chains like bias-add -> GELU ->
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

#endif // DISTOPT_TRANSFORMS_PASSES_TD
