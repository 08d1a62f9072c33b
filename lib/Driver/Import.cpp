//===- Import.cpp - `distopt import` and the import's settings ------------===//
//
// `--shape x=32x256`, `--dim batch=32` and `--freeze name=file.npy` (graph
// inputs bound to values at compile time), parsed into ONNXImportOptions;
// an imported model written as MLIR.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "distopt/Import/ONNX/Importer.h"
#include "distopt/Runtime/Tensor.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/Twine.h"

using namespace llvm;

bool distopt::driver::readFrozenInput(StringRef file, ONNXFrozenInput &out,
                                      std::string &error) {
  runtime::Tensor t;
  if (!runtime::readTensorFile(file.str(), t, error))
    return false;
  out.onnxDataType = runtime::onnxDataType(t.dtype());
  out.shape.assign(t.shape().begin(), t.shape().end());
  const char *p = static_cast<const char *>(t.data());
  out.bytes.assign(p, p + t.byteSize());
  return true;
}

bool distopt::driver::addImportSetting(ImportSetting setting, StringRef arg,
                                       ONNXImportOptions &options,
                                       std::string &error) {
  StringRef flag = setting == ImportSetting::Shape ? "--shape"
                   : setting == ImportSetting::Dim ? "--dim"
                                                   : "--freeze";
  auto fail = [&](const Twine &what) {
    error = (flag + " " + arg + ": " + what).str();
    return false;
  };
  auto [name, value] = arg.split('=');
  if (name.empty() || !arg.contains('=')) {
    error = (flag + " expects name=value, got '" + arg + "'").str();
    return false;
  }
  switch (setting) {
  case ImportSetting::Shape: {
    std::optional<SmallVector<int64_t>> dims = parseShapeSpec(value);
    if (!dims)
      return fail("expected dimensions like 32x256");
    options.inputShapes[name] = *dims;
    return true;
  }
  case ImportSetting::Dim: {
    int64_t n;
    if (value.getAsInteger(10, n) || n < 0)
      return fail("expected a non-negative integer");
    options.symbolicDims[name] = n;
    return true;
  }
  case ImportSetting::Freeze:
    if (!readFrozenInput(value, options.frozenInputs[name], error))
      return fail(error);
    return true;
  }
  return false;
}

mlir::LogicalResult
distopt::driver::importToFile(mlir::MLIRContext &context, StringRef input,
                              const ONNXImportOptions &options,
                              StringRef output, bool printGeneric,
                              std::string &error) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importONNXFile(context, input, options);
  if (!module)
    return mlir::failure();
  mlir::OpPrintingFlags flags;
  if (printGeneric)
    flags.printGenericOpForm();
  return mlir::success(writeOutputFile(
      output, [&](raw_ostream &os) { module->print(os, flags), os << "\n"; },
      error));
}
