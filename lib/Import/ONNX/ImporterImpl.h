//===- ImporterImpl.h - ONNX importer internals -----------------*- C++ -*-===//
//
// Shared between the graph driver (Importer.cpp), what a per-op importer
// sees of its node (NodeContext.cpp), the ONNX data types (DataTypes.cpp)
// and the per-op importers (OpHelpers.h and the op families). Not a public
// header.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_IMPORT_ONNX_IMPORTERIMPL_H
#define DISTOPT_LIB_IMPORT_ONNX_IMPORTERIMPL_H

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Import/ONNX/Importer.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <onnx/onnx_pb.h>

#include <functional>

namespace distopt::onnximport {

/// Lowest and highest default-domain opset the importer accepts. Below 13,
/// several ops had other semantics (Softmax's 2-D coercion, attribute forms
/// of Split/Squeeze/ReduceSum axes). Between 22 and 28 the ops distopt
/// supports changed only the element types they allow (which the importer
/// checks), so those opsets import unchanged.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 28;

/// What a node's importer may ask of the graph being imported: the builder,
/// the values of names, and the definition of its outputs. The graph driver
/// (GraphImporter, Importer.cpp) implements it; the per-op importers see
/// only this, so they do not depend on the driver.
class GraphState {
public:
  virtual ~GraphState();
  virtual mlir::OpBuilder &builder() = 0;
  virtual mlir::MLIRContext *context() = 0;
  virtual const ONNXImportOptions &options() const = 0;
  /// The value named `name`: an imported node output, a graph input, or an
  /// initializer (materialised on first use). Null if undefined; failure if
  /// materialising an initializer failed (already reported).
  virtual mlir::FailureOr<mlir::Value> lookup(llvm::StringRef name) = 0;
  virtual void define(llvm::StringRef name, mlir::Value v) = 0;
  /// Whether a later node or a graph output reads `name`.
  virtual bool isConsumed(llvm::StringRef name) const = 0;
  /// A tensor (initializer or Constant node value) as a Value: an inline
  /// dense constant when small, otherwise a `dopt.weight` reference (or a
  /// `dense_resource` constant with --inline-weights).
  virtual mlir::FailureOr<mlir::Value>
  tensorValue(const onnx::TensorProto &tensor, llvm::StringRef name,
              mlir::Location loc, int64_t inlineFloats = 1) = 0;
  /// The values of the initializer a `dopt.weight` refers to, read now (a
  /// float tensor of parameters such as Resize's scales); null for another
  /// weight or a large one.
  virtual mlir::DenseElementsAttr weightValues(dopt::WeightOp w) = 0;
};

/// What a per-op importer sees: the node, its location, typed access to its
/// inputs and attributes, and a way to define its outputs. Every error is
/// reported at the node's location and names the node.
class NodeContext {
public:
  NodeContext(GraphState &importer, const onnx::NodeProto &node,
              mlir::Location loc, int64_t opset);

  const onnx::NodeProto &node() const { return node_; }
  mlir::Location loc() const { return loc_; }
  int64_t opset() const { return opset_; }
  mlir::OpBuilder &builder();
  mlir::MLIRContext *context();

  /// Number of inputs given (trailing empty names count as given-but-empty).
  int numInputs() const { return node_.input_size(); }
  /// Input `i`, or a null Value when it is absent or has an empty name.
  mlir::Value input(int i) const;
  /// Input `i`; reports an error when it is absent.
  mlir::FailureOr<mlir::Value> requiredInput(int i);
  /// Input `i` as a ranked tensor type (null if absent).
  mlir::RankedTensorType inputType(int i) const;

  /// Input `i`'s value where it is a constant after shape folding (null
  /// where it is not); an error when the input is absent (`what` names it).
  mlir::FailureOr<mlir::DenseElementsAttr> constantInput(int i,
                                                         llvm::StringRef what);
  /// Input `i` as integer constant values. It must be a constant after shape
  /// folding; otherwise an error explains that distopt needs it static.
  mlir::FailureOr<llvm::SmallVector<int64_t>> constantInts(int i,
                                                           llvm::StringRef what);
  /// Input `i` as a float constant scalar (any float or integer type).
  mlir::FailureOr<double> constantScalar(int i, llvm::StringRef what);

  bool hasAttr(llvm::StringRef name) const;
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  mlir::FailureOr<int64_t> intAttr(llvm::StringRef name, int64_t dflt);
  mlir::FailureOr<float> floatAttr(llvm::StringRef name, float dflt);
  mlir::FailureOr<std::string> stringAttr(llvm::StringRef name,
                                          llvm::StringRef dflt);
  /// A list-of-ints attribute; `std::nullopt` when absent.
  mlir::FailureOr<std::optional<llvm::SmallVector<int64_t>>>
  intsAttr(llvm::StringRef name);

  /// Whether output `i` exists and something (a node or a graph output)
  /// reads it.
  bool outputUsed(int i) const;
  int numOutputs() const { return node_.output_size(); }
  /// Defines output `i` (ignored when the node does not name it).
  void setOutput(int i, mlir::Value value);

  /// Normalises `axis` (may be negative) against `rank`; error if out of range.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                         llvm::StringRef what = "axis");
  /// The "axis" attribute (`dflt` when absent), normalised against `rank`.
  mlir::FailureOr<int64_t> axisAttr(int64_t dflt, int64_t rank);

  /// "ONNX node 'name' (OpType)": how messages name this node.
  std::string label() const;
  /// Reports "ONNX node 'name' (OpType): msg" at the node's location.
  mlir::InFlightDiagnostic emitError();
  mlir::LogicalResult error(const llvm::Twine &msg);

  /// Builds `OpTy` (arguments as for its explicit-result-type builder, minus
  /// the type) and folds it when its operands are constants. The result type
  /// is inferred here rather than by the op's inferring builder, which
  /// aborts the process on failure: bad shapes in user models must be a
  /// diagnostic at the node. On failure the error is reported, null is
  /// returned, and the node is marked failed (later creates return null).
  template <typename OpTy, typename... Args>
  mlir::Value create(Args &&...args) {
    if (failed_)
      return {};
    mlir::OperationState state(loc_, OpTy::getOperationName());
    OpTy::build(builder(), state, mlir::Type(), std::forward<Args>(args)...);
    return finishCreate(state, [&](llvm::SmallVectorImpl<mlir::Type> &types) {
      return OpTy::inferReturnTypes(
          context(), loc_, mlir::ValueRange(state.operands),
          state.attributes.getDictionary(context()), state.getRawProperties(),
          state.regions, types);
    });
  }

  /// Whether an op of this node failed to build (error already reported).
  bool hasFailed() const { return failed_; }
  /// Training-mode ops import in their evaluation form
  /// (ONNXImportOptions::evalForm).
  bool evalForm() const;

  /// Input `i`'s values when it is a constant or a small initializer (whose
  /// dopt.weight is read for them); null otherwise.
  mlir::DenseElementsAttr constantValues(int i);

  /// A tensor attribute or initializer as a Value (see
  /// GraphState::tensorValue): inline constant or weight reference.
  /// `inlineFloats`: float tensors of up to this many elements are inline
  /// constants too (a Constant node's scales, roi: values, not weights).
  mlir::FailureOr<mlir::Value> tensorValue(const onnx::TensorProto &t,
                                           llvm::StringRef name,
                                           int64_t inlineFloats = 1);

  /// A dopt.constant holding `values` with element type i64.
  mlir::Value constantI64(llvm::ArrayRef<int64_t> values,
                          llvm::ArrayRef<int64_t> shape);

private:
  mlir::Value finishCreate(
      mlir::OperationState &state,
      llvm::function_ref<mlir::LogicalResult(llvm::SmallVectorImpl<mlir::Type> &)>
          infer);

  GraphState &importer_;
  const onnx::NodeProto &node_;
  mlir::Location loc_;
  int64_t opset_;
  bool failed_ = false;
};

using OpImporterFn = std::function<mlir::LogicalResult(NodeContext &)>;

/// The table of ONNX op types (default domain) the importer supports.
const llvm::StringMap<OpImporterFn> &opImporters();

/// ONNX TensorProto data type -> MLIR element type (null if unsupported).
mlir::Type convertDataType(mlir::MLIRContext *ctx, int32_t dataType);
/// Name of an ONNX data type for messages ("FLOAT", "INT64", ...).
std::string dataTypeName(int32_t dataType);

/// Whether a tensor of `dims` x `eltBytes` bytes has a representable size
/// (non-negative dims, byte count below 2^60).
bool fitsInMemory(llvm::ArrayRef<int64_t> dims, int64_t eltBytes);
/// "[2,3,?]" for messages.
std::string shapeString(llvm::ArrayRef<int64_t> dims);

} // namespace distopt::onnximport

#endif // DISTOPT_LIB_IMPORT_ONNX_IMPORTERIMPL_H
