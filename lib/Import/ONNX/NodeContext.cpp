//===- NodeContext.cpp - what a per-op importer sees of its node ----------===//
//
// Typed access to a node's inputs and attributes, errors at its location,
// and its outputs defined, over the graph being imported (GraphState).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

GraphState::~GraphState() = default;

NodeContext::NodeContext(GraphState &importer, const onnx::NodeProto &node,
                         Location loc, int64_t opset)
    : importer_(importer), node_(node), loc_(loc), opset_(opset) {}

OpBuilder &NodeContext::builder() { return importer_.builder(); }
MLIRContext *NodeContext::context() { return importer_.context(); }

Value NodeContext::input(int i) const {
  if (i >= node_.input_size() || node_.input(i).empty())
    return {};
  FailureOr<Value> v = importer_.lookup(node_.input(i));
  return succeeded(v) ? *v : Value();
}

FailureOr<Value> NodeContext::requiredInput(int i) {
  Value v = input(i);
  if (!v) {
    (void)error("missing required input " + std::to_string(i));
    return failure();
  }
  return v;
}

RankedTensorType NodeContext::inputType(int i) const {
  Value v = input(i);
  return v ? cast<RankedTensorType>(v.getType()) : RankedTensorType();
}

std::string NodeContext::label() const {
  return "ONNX node '" + cast<NameLoc>(loc_).getName().getValue().str() +
         "' (" + node_.op_type() + ")";
}

InFlightDiagnostic NodeContext::emitError() {
  return mlir::emitError(loc_) << label() << ": ";
}

LogicalResult NodeContext::error(const llvm::Twine &msg) {
  return emitError() << msg;
}

FailureOr<DenseElementsAttr> NodeContext::constantInput(int i,
                                                        StringRef what) {
  Value v = input(i);
  if (!v) {
    (void)error("missing required input " + std::to_string(i) + " (" + what +
                ")");
    return failure();
  }
  DenseElementsAttr attr;
  if (auto c = v.getDefiningOp<dopt::ConstantOp>())
    attr = dyn_cast<DenseElementsAttr>(c.getValue());
  return attr;
}

FailureOr<SmallVector<int64_t>> NodeContext::constantInts(int i,
                                                          StringRef what) {
  FailureOr<DenseElementsAttr> attr = constantInput(i, what);
  if (failed(attr))
    return failure();
  if (!*attr || !isa<IntegerType>(attr->getElementType())) {
    (void)error(what + " (input " + std::to_string(i) +
                ") must be an integer constant after shape folding; distopt "
                "needs it to compute static shapes");
    return failure();
  }
  SmallVector<int64_t> out;
  for (APInt x : attr->getValues<APInt>())
    out.push_back(x.getSExtValue());
  return out;
}

bool NodeContext::evalForm() const { return importer_.options().evalForm; }

FailureOr<double> NodeContext::constantScalar(int i, StringRef what) {
  FailureOr<DenseElementsAttr> found = constantInput(i, what);
  if (failed(found))
    return failure();
  DenseElementsAttr attr = *found;
  if (!attr || attr.getNumElements() != 1) {
    (void)error(what + " (input " + std::to_string(i) +
                ") must be a constant scalar after shape folding; distopt "
                "compiles it into the program");
    return failure();
  }
  if (isa<FloatType>(attr.getElementType()))
    return (*attr.getValues<APFloat>().begin()).convertToDouble();
  APInt x = *attr.getValues<APInt>().begin();
  return attr.getElementType().isUnsignedInteger() || x.getBitWidth() == 1
             ? (double)x.getZExtValue()
             : (double)x.getSExtValue();
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node_.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool NodeContext::hasAttr(StringRef name) const { return attr(name); }

FailureOr<int64_t> NodeContext::intAttr(StringRef name, int64_t dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt;
  if (a->type() != onnx::AttributeProto::INT &&
      !(a->type() == onnx::AttributeProto::UNDEFINED && a->has_i()))
    return error("attribute '" + name + "' must be an int");
  return a->i();
}

FailureOr<float> NodeContext::floatAttr(StringRef name, float dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt;
  if (a->type() != onnx::AttributeProto::FLOAT &&
      !(a->type() == onnx::AttributeProto::UNDEFINED && a->has_f()))
    return error("attribute '" + name + "' must be a float");
  return a->f();
}

FailureOr<std::string> NodeContext::stringAttr(StringRef name,
                                               StringRef dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::string(dflt);
  if (a->type() != onnx::AttributeProto::STRING &&
      !(a->type() == onnx::AttributeProto::UNDEFINED && a->has_s()))
    return error("attribute '" + name + "' must be a string");
  return a->s();
}

FailureOr<std::optional<SmallVector<int64_t>>>
NodeContext::intsAttr(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::optional<SmallVector<int64_t>>();
  if (a->type() != onnx::AttributeProto::INTS &&
      a->type() != onnx::AttributeProto::UNDEFINED)
    return error("attribute '" + name + "' must be a list of ints");
  return std::optional<SmallVector<int64_t>>(
      SmallVector<int64_t>(a->ints().begin(), a->ints().end()));
}

bool NodeContext::outputUsed(int i) const {
  return i < node_.output_size() && !node_.output(i).empty() &&
         importer_.isConsumed(node_.output(i));
}

void NodeContext::setOutput(int i, Value value) {
  if (i < node_.output_size() && !node_.output(i).empty())
    importer_.define(node_.output(i), value);
}

FailureOr<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank,
                                              StringRef what) {
  if (axis < -rank || axis >= rank) {
    (void)error(what + " " + std::to_string(axis) +
                " is out of range for rank " + std::to_string(rank));
    return failure();
  }
  return axis < 0 ? axis + rank : axis;
}

FailureOr<int64_t> NodeContext::axisAttr(int64_t dflt, int64_t rank) {
  FailureOr<int64_t> axis = intAttr("axis", dflt);
  if (failed(axis))
    return failure();
  return normalizeAxis(*axis, rank);
}

Value NodeContext::finishCreate(
    OperationState &state,
    function_ref<LogicalResult(SmallVectorImpl<Type> &)> infer) {
  for (Value v : state.operands)
    if (!v) {
      failed_ = true;
      return {};
    }
  SmallVector<Type> types;
  if (mlir::failed(infer(types))) {
    failed_ = true;
    return {};
  }
  state.types.assign(types.begin(), types.end());
  Operation *op = builder().create(state);
  // Full verification (ODS constraints too: element types, attribute kinds)
  // before folding: the folders trust a verified op.
  if (mlir::failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    failed_ = true;
    return {};
  }
  SmallVector<Value, 1> folded;
  if (succeeded(builder().tryFold(op, folded)) && !folded.empty()) {
    op->erase();
    return folded.front();
  }
  return op->getResult(0);
}

DenseElementsAttr NodeContext::constantValues(int i) {
  Value v = input(i);
  if (!v)
    return {};
  if (auto c = v.getDefiningOp<dopt::ConstantOp>())
    return dyn_cast<DenseElementsAttr>(c.getValue());
  if (auto w = v.getDefiningOp<dopt::WeightOp>())
    if (!cast<RankedTensorType>(w.getType()).getElementType().isInteger(1))
      return importer_.weightValues(w);
  return {};
}

FailureOr<Value> NodeContext::tensorValue(const onnx::TensorProto &t,
                                          StringRef name,
                                          int64_t inlineFloats) {
  return importer_.tensorValue(t, name, loc_, inlineFloats);
}

Value NodeContext::constantI64(ArrayRef<int64_t> values,
                               ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, builder().getI64Type());
  return dopt::ConstantOp::create(builder(), loc_,
                                  DenseElementsAttr::get(type, values));
}
