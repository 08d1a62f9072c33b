//===- ImportFuzzer.cpp - libFuzzer target for the ONNX importer ----------===//
//
// Feeds arbitrary bytes to the binary-protobuf import path. Any outcome but
// a module or a diagnosed failure (a crash, an ASan report, a hang) is a bug.
//
//===----------------------------------------------------------------------===//

#include "distopt/Import/ONNX/Importer.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::DialectRegistry *registry = [] {
    auto *r = new mlir::DialectRegistry();
    distopt::registerONNXImportDialects(*r);
    return r;
  }();
  static distopt::ONNXImportOptions *options = [] {
    auto *o = new distopt::ONNXImportOptions();
    // Bind the symbolic dimensions the seed models use, so the fuzzer gets
    // past input specialisation into the node importers.
    for (const char *dim : {"batch", "N", "seq", "num_selected"})
      o->symbolicDims[dim] = 2;
    o->textFormat = false;
    return o;
  }();
  mlir::MLIRContext context(*registry,
                            mlir::MLIRContext::Threading::DISABLED);
  context.getDiagEngine().registerHandler(
      [](mlir::Diagnostic &) { return mlir::success(); });
  auto module = distopt::importONNXBuffer(
      context,
      llvm::StringRef(reinterpret_cast<const char *>(data), size),
      "/nonexistent/fuzz.onnx", *options);
  (void)module;
  return 0;
}
