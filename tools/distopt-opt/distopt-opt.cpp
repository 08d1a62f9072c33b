//===- distopt-opt.cpp - MLIR optimiser driver with distopt's dialects ----===//
//
// For pass developers and lit tests: mlir-opt with distopt's dialect and
// passes added, e.g. `distopt-opt in.mlir --distopt-convert-dopt-to-linalg`.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"
#include "distopt/Distributed/Passes.h"
#include "distopt/Planner/OpModels.h"
#include "distopt/Training/Autodiff.h"
#include "distopt/Training/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  distopt::registerDistoptConversionPasses();
  distopt::registerDistoptDoptTransformsPasses();
  distopt::registerDistoptDistributedPasses();
  distopt::registerDistoptTrainingPasses();
  distopt::registerDistoptCodegenPasses();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // gpu-module-to-binary translates kernels to LLVM IR in process.
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<distopt::dopt::DoptDialect>();
  // The planner's sharding rules and costs, autodiff's gradients.
  distopt::planner::registerOpModels(registry);
  distopt::autodiff::registerOpModels(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "distopt optimizer driver (dopt dialect and passes)\n",
      registry));
}
