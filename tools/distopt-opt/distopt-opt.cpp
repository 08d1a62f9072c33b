//===- distopt-opt.cpp - MLIR optimiser driver with distopt's dialects ----===//
//
// For pass developers and lit tests: `distopt-opt in.mlir --canonicalize`.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/Dopt/IR/DoptDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  distopt::registerDistoptConversionPasses();
  mlir::DialectRegistry registry;
  registry.insert<distopt::dopt::DoptDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::linalg::LinalgDialect, mlir::math::MathDialect,
                  mlir::shard::ShardDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "distopt optimizer driver (dopt dialect and passes)\n",
      registry));
}
