//===- Importer.h - ONNX -> dopt --------------------------------*- C++ -*-===//
//
// Imports an ONNX model (binary protobuf, or ONNX's textual syntax) into a
// module holding one `func.func @main` of dopt ops. Errors are reported
// through the MLIRContext's diagnostic engine, located at the ONNX node
// (NameLoc of the node name fused with the model file), and the import
// returns null. It never aborts on bad input.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_IMPORT_ONNX_IMPORTER_H
#define DISTOPT_IMPORT_ONNX_IMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class DialectRegistry;
} // namespace mlir

namespace distopt {

/// A graph input bound to a value at compile time (`--freeze name=file`):
/// it becomes a constant, so inputs that feed shapes (axes, pads, Reshape
/// targets) can be runtime inputs in the ONNX model.
struct ONNXFrozenInput {
  /// ONNX TensorProto data type (1 = FLOAT, 7 = INT64, ...).
  int32_t onnxDataType = 0;
  llvm::SmallVector<int64_t> shape;
  /// Little-endian element bytes, C order (bool: one byte each).
  std::vector<char> bytes;
};

struct ONNXImportOptions {
  /// Inputs replaced by constants.
  llvm::StringMap<ONNXFrozenInput> frozenInputs;
  /// Concrete shapes for graph inputs (`--shape x=32x256`).
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Values for symbolic dimensions by name (`--dim batch=32`).
  llvm::StringMap<int64_t> symbolicDims;
  /// Values for symbolic dimensions by their position in an input's shape,
  /// for those not named in symbolicDims (the planner binds dimension 0,
  /// the batch, and with --seq-len dimension 1).
  std::map<int, int64_t> symbolicDimsByPosition;
  /// A value for the model's batch symbol (see `dopt.batch_symbol`) when
  /// symbolicDims does not name it: the planner's probe batch.
  std::optional<int64_t> batchSize;
  /// Import training-mode ops in their evaluation form: Dropout is the
  /// identity and BatchNormalization uses its running statistics (the
  /// program `train --eval-data` and `eval` run).
  bool evalForm = false;
  /// Read every weight (including external data) into `dense_resource`
  /// blobs instead of referencing it with `dopt.weight`.
  bool inlineWeights = false;
  /// Treat the input as ONNX's textual syntax rather than binary protobuf.
  /// When unset, the `.onnxtxt` extension selects text.
  std::optional<bool> textFormat;
};

/// Registers the dialects the importer produces.
void registerONNXImportDialects(mlir::DialectRegistry &registry);

/// The default-domain ONNX op types the importer supports, sorted
/// (`distopt ops`).
std::vector<std::string> supportedONNXOps();

/// Imports the ONNX model in `path`. External-data paths resolve relative to
/// the model's directory.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXFile(mlir::MLIRContext &context, llvm::StringRef path,
               const ONNXImportOptions &options);

/// Imports a model held in memory; `bufferName` names it in diagnostics and
/// external-data paths resolve relative to its directory.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXBuffer(mlir::MLIRContext &context, llvm::StringRef bytes,
                 llvm::StringRef bufferName, const ONNXImportOptions &options);

/// Reads weight data from an ONNX model file (for bundles: the importer only
/// references weights; the compiler copies them out when it writes one).
class ONNXWeightReader {
public:
  /// Parses `path` (binary, or text for .onnxtxt) and indexes its
  /// initializers and Constant-node tensors by name.
  static std::unique_ptr<ONNXWeightReader> open(llvm::StringRef path,
                                                std::string &error);
  ~ONNXWeightReader();

  /// The little-endian bytes (bool: one byte each) of the embedded tensor
  /// `name`, checked against `numElements` x `elementBytes`.
  bool readEmbedded(llvm::StringRef name, int64_t numElements,
                    int64_t elementBytes, std::vector<char> &out,
                    std::string &error) const;

private:
  ONNXWeightReader();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Parses a shape like "32x256" (or "32,256"; "" or "scalar" for rank 0).
std::optional<llvm::SmallVector<int64_t>> parseShapeSpec(llvm::StringRef spec);

/// Runs `work` in a forked child process (for third-party code that may
/// crash on hostile input: libonnx's version converter) and, on success,
/// returns std::nullopt with the bytes `work` returned in `result`. An
/// exception `work` throws becomes the returned error (its what()); a crash
/// (a signal) or an abnormal exit becomes an error that says so.
std::optional<std::string> runIsolated(std::string &result,
                                       llvm::function_ref<std::string()> work);

} // namespace distopt

#endif // DISTOPT_IMPORT_ONNX_IMPORTER_H
