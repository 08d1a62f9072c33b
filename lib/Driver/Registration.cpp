//===- Registration.cpp - what a context needs to plan and compile -------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Import/ONNX/Importer.h"
#include "distopt/Planner/OpModels.h"
#include "distopt/Training/Autodiff.h"

#include "mlir/IR/DialectRegistry.h"

void distopt::driver::registerDialects(mlir::DialectRegistry &registry) {
  registerONNXImportDialects(registry);
  planner::registerOpModels(registry);
  autodiff::registerOpModels(registry);
}
