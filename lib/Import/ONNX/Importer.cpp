//===- Importer.cpp - ONNX model -> dopt module ---------------------------===//
//
// The graph driver: parses the model, checks opsets and unsupported nodes up
// front (one error listing all of them), builds `func.func @main` from the
// graph inputs (specialising symbolic dimensions), turns initializers into
// `dopt.weight` references (or small inline constants), imports each node
// through the op table (OpImporters.cpp), and checks the graph outputs.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

/// Bytes per element in ONNX's raw_data encoding (bool: one byte).
static int64_t rawElementBytes(Type elt) {
  return elt.isInteger(1) ? 1 : (elt.getIntOrFloatBitWidth() + 7) / 8;
}

std::optional<SmallVector<int64_t>> distopt::parseShapeSpec(StringRef spec) {
  SmallVector<int64_t> dims;
  spec = spec.trim();
  if (spec.empty() || spec == "scalar")
    return dims;
  SmallVector<StringRef> parts;
  spec.split(parts, spec.contains(',') ? ',' : 'x');
  for (StringRef p : parts) {
    int64_t d;
    if (p.trim().getAsInteger(10, d) || d < 0)
      return std::nullopt;
    dims.push_back(d);
  }
  return dims;
}

std::vector<std::string> distopt::supportedONNXOps() {
  std::vector<std::string> ops;
  for (const auto &entry : onnximport::opImporters())
    ops.push_back(entry.getKey().str());
  llvm::sort(ops);
  return ops;
}

void distopt::registerONNXImportDialects(DialectRegistry &registry) {
  registry.insert<dopt::DoptDialect, func::FuncDialect>();
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

namespace distopt::onnximport {

class GraphImporter : public GraphState {
public:
  GraphImporter(MLIRContext &ctx, const onnx::ModelProto &model,
                StringRef fileName, const ONNXImportOptions &options)
      : ctx_(ctx), builder_(&ctx), model_(model), fileName_(fileName),
        options_(options),
        fileLoc_(FileLineColLoc::get(&ctx, fileName, 0, 0)) {
    SmallString<256> dir(fileName);
    llvm::sys::path::remove_filename(dir);
    modelDir_ = std::string(dir.str());
  }

  OwningOpRef<ModuleOp> run();

  OpBuilder &builder() override { return builder_; }
  MLIRContext *context() override { return &ctx_; }
  const ONNXImportOptions &options() const override { return options_; }

  FailureOr<Value> lookup(StringRef name) override;
  void define(StringRef name, Value v) override { values_[name] = v; }
  bool isConsumed(StringRef name) const override {
    return consumed_.contains(name);
  }

  FailureOr<Value> tensorValue(const onnx::TensorProto &tensor,
                               StringRef name, Location loc,
                               int64_t inlineFloats = 1) override;

  Location nameLoc(StringRef name) {
    return NameLoc::get(StringAttr::get(&ctx_, name), fileLoc_);
  }

  DenseElementsAttr weightValues(dopt::WeightOp w) override {
    auto it = initializers_.find(w.getName());
    auto type = cast<RankedTensorType>(w.getType());
    if (it == initializers_.end() || type.getNumElements() > 4096)
      return {};
    FailureOr<std::vector<char>> bytes =
        readTensorBytes(*it->second, type, w.getLoc());
    if (failed(bytes))
      return {};
    return DenseElementsAttr::getFromRawBuffer(type, *bytes);
  }

private:
  LogicalResult checkModel();
  LogicalResult checkSupported();
  FailureOr<RankedTensorType> inputType(const onnx::ValueInfoProto &vi,
                                        llvm::StringSet<> &usedShapes,
                                        llvm::StringSet<> &usedDims,
                                        SmallVectorImpl<std::string> &errors);
  LogicalResult importNode(const onnx::NodeProto &node, int index);
  FailureOr<std::vector<char>> readTensorBytes(const onnx::TensorProto &t,
                                               RankedTensorType type,
                                               Location loc);
  FailureOr<std::vector<char>> readExternalBytes(const onnx::TensorProto &t,
                                                 RankedTensorType type,
                                                 Location loc);
  /// Defines a frozen graph input as a constant.
  LogicalResult freezeInput(const onnx::ValueInfoProto &vi,
                            const ONNXFrozenInput &frozen);
  /// Merges duplicate constants and erases unused dopt ops.
  static void eraseDeadOps(Block &block);

  MLIRContext &ctx_;
  OpBuilder builder_;
  const onnx::ModelProto &model_;
  std::string fileName_;
  std::string modelDir_;
  const ONNXImportOptions &options_;
  Location fileLoc_;
  int64_t opset_ = 0;
  llvm::StringMap<int64_t> domainOpsets_;
  llvm::StringMap<Value> values_;
  llvm::StringMap<const onnx::TensorProto *> initializers_;
  llvm::StringSet<> consumed_;
  /// The symbolic input dimension that is the batch ("" if none).
  std::string batchSymbol_;
};

/// The batch of a model is one of its symbolic input dimensions: the first
/// whose name says so ("batch", "batch_size", "N"), else the symbol of the
/// first input's dimension 0. Seq-first exports ([seq, batch, d], as
/// torch.nn.Transformer without batch_first) name it, so the batch is found
/// at dimension 1.
static std::string findBatchSymbol(const onnx::GraphProto &graph) {
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &t : graph.initializer())
    initializers.insert(t.name());
  std::string dim0;
  for (const onnx::ValueInfoProto &vi : graph.input()) {
    if (initializers.contains(vi.name()) || !vi.type().has_tensor_type() ||
        !vi.type().tensor_type().has_shape())
      continue;
    const auto &shape = vi.type().tensor_type().shape();
    for (int d = 0; d < shape.dim_size(); ++d) {
      if (!shape.dim(d).has_dim_param())
        continue;
      std::string name = llvm::StringRef(shape.dim(d).dim_param()).lower();
      if (llvm::StringRef(name).contains("batch") || name == "n")
        return shape.dim(d).dim_param();
      if (d == 0 && dim0.empty())
        dim0 = shape.dim(d).dim_param();
    }
  }
  return dim0;
}

} // namespace distopt::onnximport

static bool isDefaultDomain(StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

LogicalResult GraphImporter::checkModel() {
  if (!model_.has_graph())
    return emitError(fileLoc_)
           << "not an ONNX model: the file holds no graph (is it empty, or "
              "another kind of protobuf?)";
  if (model_.ir_version() <= 0)
    return emitError(fileLoc_) << "not an ONNX model: missing ir_version";
  for (const onnx::OperatorSetIdProto &o : model_.opset_import()) {
    if (isDefaultDomain(o.domain()))
      opset_ = o.version();
    domainOpsets_[o.domain()] = o.version();
  }
  if (opset_ == 0)
    return emitError(fileLoc_)
           << "the model imports no default-domain (ai.onnx) opset";
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    return emitError(fileLoc_)
           << "default-domain opset " << opset_
           << " is not supported: distopt imports opsets " << kMinOpset
           << " to " << kMaxOpset
           << " (convert older models with onnx.version_converter)";
  return success();
}

LogicalResult GraphImporter::checkSupported() {
  const auto &table = opImporters();
  std::string list;
  int count = 0;
  int index = 0;
  for (const onnx::NodeProto &node : model_.graph().node()) {
    ++index;
    StringRef domain = node.domain();
    if (isDefaultDomain(domain) && table.count(node.op_type()))
      continue;
    ++count;
    int64_t version = isDefaultDomain(domain)
                          ? opset_
                          : domainOpsets_.lookup(node.domain());
    std::string name =
        node.name().empty() ? "#" + std::to_string(index) : node.name();
    list += "\n  " + node.op_type() + " (domain " +
            (domain.empty() ? std::string("ai.onnx") : node.domain()) +
            ", opset " + std::to_string(version) + ") in node '" + name + "'";
  }
  if (!count)
    return success();
  return emitError(fileLoc_) << count << " unsupported ONNX node"
                             << (count == 1 ? "" : "s") << ":" << list;
}

FailureOr<Value> GraphImporter::lookup(StringRef name) {
  auto it = values_.find(name);
  if (it != values_.end())
    return it->second;
  auto init = initializers_.find(name);
  if (init == initializers_.end())
    return Value();
  FailureOr<Value> v = tensorValue(*init->second, name, nameLoc(name));
  if (failed(v))
    return failure();
  values_[name] = *v;
  return *v;
}

/// Where a tensor's external data lie: its file (relative to the model),
/// byte offset and length (-1: the tensor's size).
struct ExternalData {
  std::string location;
  int64_t offset = 0, length = -1;
};

/// The external-data entries of tensor `t` (called `name`); an error when an
/// offset or length is not an integer.
static FailureOr<ExternalData> externalData(const onnx::TensorProto &t,
                                            StringRef name, Location loc) {
  ExternalData d;
  for (const onnx::StringStringEntryProto &kv : t.external_data()) {
    if (kv.key() == "location")
      d.location = kv.value();
    else if ((kv.key() == "offset" &&
              StringRef(kv.value()).getAsInteger(10, d.offset)) ||
             (kv.key() == "length" &&
              StringRef(kv.value()).getAsInteger(10, d.length)))
      return emitError(loc)
             << "tensor '" << name << "': external-data " << kv.key() << " '"
             << kv.value() << "' is not an integer";
  }
  return d;
}

FailureOr<std::vector<char>>
GraphImporter::readExternalBytes(const onnx::TensorProto &t,
                                 RankedTensorType type, Location loc) {
  FailureOr<ExternalData> external = externalData(t, t.name(), loc);
  if (failed(external))
    return failure();
  auto [location, offset, length] = *external;
  SmallString<256> path(modelDir_);
  llvm::sys::path::append(path, location);
  int64_t need = type.getNumElements() * rawElementBytes(type.getElementType());
  uint64_t fileSize = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, fileSize))
    return emitError(loc) << "tensor '" << t.name()
                          << "': cannot open external-data file '" << path
                          << "': " << ec.message();
  if (length < 0)
    length = need;
  if (length != need)
    return emitError(loc) << "tensor '" << t.name() << "': external-data "
                          << "length " << length << " does not match the "
                          << need << " bytes of " << type;
  if (offset < 0 || (uint64_t)(offset + length) > fileSize)
    return emitError(loc) << "tensor '" << t.name() << "': bytes [" << offset
                          << ", " << offset + length << ") lie outside '"
                          << path << "' (" << fileSize << " bytes)";
  auto buf = llvm::MemoryBuffer::getFileSlice(path, length, offset);
  if (!buf)
    return emitError(loc) << "tensor '" << t.name() << "': cannot read '"
                          << path << "': " << buf.getError().message();
  StringRef bytes = (*buf)->getBuffer();
  return std::vector<char>(bytes.begin(), bytes.end());
}

/// Decodes the data embedded in `t` (raw_data or the typed fields) into
/// little-endian bytes, `eltBytes` per element (bool: one byte). Returns an
/// error message, or std::nullopt on success.
static std::optional<std::string> decodeEmbedded(const onnx::TensorProto &t,
                                                 int64_t n, int64_t eltBytes,
                                                 std::vector<char> &bytes) {
  if (t.has_raw_data()) {
    if ((int64_t)t.raw_data().size() != n * eltBytes)
      return "tensor '" + t.name() + "' has " +
             std::to_string(t.raw_data().size()) +
             " bytes of raw data, expected " + std::to_string(n * eltBytes);
    bytes.assign(t.raw_data().begin(), t.raw_data().end());
    return std::nullopt;
  }
  auto appendAll = [&](const auto &field,
                       auto convert) -> std::optional<std::string> {
    if (field.size() != n)
      return "tensor '" + t.name() + "' has " + std::to_string(field.size()) +
             " values, expected " + std::to_string(n);
    bytes.resize(n * eltBytes);
    for (int64_t i = 0; i < n; ++i) {
      auto v = convert(field.Get(i));
      std::memcpy(bytes.data() + i * eltBytes, &v, eltBytes);
    }
    return std::nullopt;
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    return appendAll(t.float_data(), [](float v) { return v; });
  case onnx::TensorProto::DOUBLE:
    return appendAll(t.double_data(), [](double v) { return v; });
  case onnx::TensorProto::INT64:
    return appendAll(t.int64_data(), [](int64_t v) { return v; });
  case onnx::TensorProto::INT32:
    return appendAll(t.int32_data(), [](int32_t v) { return v; });
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return appendAll(t.int32_data(), [](int32_t v) { return (uint16_t)v; });
  // uint32 and uint64 values are in uint64_data.
  case onnx::TensorProto::UINT32:
    return appendAll(t.uint64_data(), [](uint64_t v) { return (uint32_t)v; });
  case onnx::TensorProto::UINT64:
    return appendAll(t.uint64_data(), [](uint64_t v) { return v; });
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return appendAll(t.int32_data(), [](int32_t v) { return (uint8_t)v; });
  default:
    return "tensor '" + t.name() + "' has unsupported " +
           dataTypeName(t.data_type());
  }
}

FailureOr<std::vector<char>>
GraphImporter::readTensorBytes(const onnx::TensorProto &t,
                               RankedTensorType type, Location loc) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return readExternalBytes(t, type, loc);
  std::vector<char> bytes;
  if (std::optional<std::string> err =
          decodeEmbedded(t, type.getNumElements(),
                         rawElementBytes(type.getElementType()), bytes))
    return emitError(loc) << *err << " for " << type;
  return bytes;
}

FailureOr<Value> GraphImporter::tensorValue(const onnx::TensorProto &t,
                                            StringRef name, Location loc,
                                            int64_t inlineFloats) {
  Type elt = convertDataType(&ctx_, t.data_type());
  if (!elt)
    return emitError(loc) << "tensor '" << name << "' has unsupported "
                          << dataTypeName(t.data_type());
  SmallVector<int64_t> dims;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return emitError(loc) << "tensor '" << name << "' has negative "
                            << "dimension " << d;
    dims.push_back(d);
  }
  if (!fitsInMemory(dims, rawElementBytes(elt)))
    return emitError(loc) << "tensor '" << name << "' of shape "
                          << shapeString(dims) << " is too large";
  auto type = RankedTensorType::get(dims, elt);
  int64_t n = type.getNumElements();
  bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  // Small tensors (scalars, shape vectors, index lists, masks) are part of
  // the graph's logic and fold: keep them inline. Model weights stay out of
  // the IR text.
  bool smallLogic = n <= std::max<int64_t>(1, inlineFloats) ||
                    (isa<IntegerType>(elt) && n <= 4096);
  if (!external && smallLogic) {
    FailureOr<std::vector<char>> bytes = readTensorBytes(t, type, loc);
    if (failed(bytes))
      return failure();
    DenseElementsAttr attr;
    if (elt.isInteger(1)) {
      SmallVector<bool> bits;
      for (char c : *bytes)
        bits.push_back(c != 0);
      attr = DenseElementsAttr::get(type, bits);
    } else {
      attr = DenseElementsAttr::getFromRawBuffer(type, *bytes);
    }
    return dopt::ConstantOp::create(builder_, loc, attr).getResult();
  }
  if (options_.inlineWeights) {
    FailureOr<std::vector<char>> bytes = readTensorBytes(t, type, loc);
    if (failed(bytes))
      return failure();
    AsmResourceBlob blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(
        *bytes, alignof(uint64_t));
    auto attr = DenseResourceElementsAttr::get(type, name, std::move(blob));
    return dopt::ConstantOp::create(builder_, loc, attr).getResult();
  }
  StringAttr location;
  IntegerAttr offset, length;
  if (external) {
    FailureOr<ExternalData> data = externalData(t, name, loc);
    if (failed(data))
      return failure();
    auto [path, off, len] = *data;
    if (path.empty())
      return emitError(loc) << "tensor '" << name
                            << "': external data without a location";
    // ONNX's rule: the path is relative to the model and stays inside its
    // directory.
    if (llvm::sys::path::is_absolute(path) ||
        llvm::is_contained(llvm::make_range(llvm::sys::path::begin(path),
                                            llvm::sys::path::end(path)),
                           ".."))
      return emitError(loc) << "tensor '" << name << "': external-data path '"
                            << path << "' must be relative to the model and "
                            << "stay inside its directory";
    int64_t need = n * rawElementBytes(elt);
    if (len < 0)
      len = need;
    if (off < 0 || len != need)
      return emitError(loc) << "tensor '" << name << "': external-data "
                            << "offset " << off << " / length " << len
                            << " do not describe the " << need
                            << " bytes of " << type;
    location = builder_.getStringAttr(path);
    offset = builder_.getI64IntegerAttr(off);
    length = builder_.getI64IntegerAttr(len);
  } else {
    // Check the embedded data now so that later stages can trust it.
    int64_t have = t.has_raw_data() ? (int64_t)t.raw_data().size()
                                    : -1;
    if (have >= 0 && have != n * rawElementBytes(elt))
      return emitError(loc) << "tensor '" << name << "' has " << have
                            << " bytes of raw data, expected "
                            << n * rawElementBytes(elt) << " for " << type;
  }
  return dopt::WeightOp::create(builder_, loc, builder_.getStringAttr(name),
                                TypeAttr::get(type), location, offset, length,
                                /*constant=*/UnitAttr(), /*data_type=*/TypeAttr())
      .getResult();
}

FailureOr<RankedTensorType>
GraphImporter::inputType(const onnx::ValueInfoProto &vi,
                         llvm::StringSet<> &usedShapes,
                         llvm::StringSet<> &usedDims,
                         SmallVectorImpl<std::string> &errors) {
  Location loc = nameLoc(vi.name());
  if (!vi.type().has_tensor_type())
    return emitError(loc) << "graph input '" << vi.name()
                          << "' is not a tensor (sequences, maps and "
                             "optionals are not supported)";
  const onnx::TypeProto::Tensor &tt = vi.type().tensor_type();
  Type elt = convertDataType(&ctx_, tt.elem_type());
  if (!elt)
    return emitError(loc) << "graph input '" << vi.name()
                          << "' has unsupported element type "
                          << dataTypeName(tt.elem_type());
  auto forced = options_.inputShapes.find(vi.name());
  if (forced != options_.inputShapes.end()) {
    usedShapes.insert(vi.name());
    if (tt.has_shape() && tt.shape().dim_size() != (int)forced->second.size())
      return emitError(loc) << "--shape " << vi.name() << " has rank "
                            << forced->second.size() << " but the input has "
                            << "rank " << tt.shape().dim_size();
    if (tt.has_shape())
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto &d = tt.shape().dim(i);
        if (d.has_dim_value() && d.dim_value() != forced->second[i])
          return emitError(loc)
                 << "--shape " << vi.name() << " sets dimension " << i
                 << " to " << forced->second[i] << " but the model fixes it "
                 << "at " << d.dim_value();
      }
    if (!fitsInMemory(forced->second, rawElementBytes(elt)))
      return emitError(loc) << "--shape " << vi.name() << " "
                            << shapeString(forced->second) << " is too large";
    return RankedTensorType::get(forced->second, elt);
  }
  if (!tt.has_shape()) {
    errors.push_back("input '" + vi.name() +
                     "' has no shape: give one with --shape " + vi.name() +
                     "=AxBx...");
    return RankedTensorType();
  }
  SmallVector<int64_t> dims;
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto &d = tt.shape().dim(i);
    if (d.has_dim_value() && d.dim_value() >= 0) {
      dims.push_back(d.dim_value());
      continue;
    }
    if (d.has_dim_param() && options_.symbolicDims.count(d.dim_param())) {
      usedDims.insert(d.dim_param());
      dims.push_back(options_.symbolicDims.lookup(d.dim_param()));
      continue;
    }
    if (d.has_dim_param() && options_.batchSize &&
        d.dim_param() == batchSymbol_) {
      dims.push_back(*options_.batchSize);
      continue;
    }
    if (d.has_dim_param() && options_.symbolicDimsByPosition.count(i)) {
      dims.push_back(options_.symbolicDimsByPosition.at(i));
      continue;
    }
    std::string what = d.has_dim_param() ? "symbolic ('" + d.dim_param() + "')"
                                         : std::string("unknown");
    std::string fix = d.has_dim_param() ? "--dim " + d.dim_param() + "=N or "
                                        : std::string();
    errors.push_back("input '" + vi.name() + "' dimension " +
                     std::to_string(i) + " is " + what + ": specialise it " +
                     "with " + fix + "--shape " + vi.name() + "=AxBx...");
    dims.push_back(ShapedType::kDynamic);
  }
  SmallVector<int64_t> known;
  for (int64_t d : dims)
    if (d != ShapedType::kDynamic)
      known.push_back(d);
  if (!fitsInMemory(known, rawElementBytes(elt)))
    return emitError(loc) << "graph input '" << vi.name() << "' of shape "
                          << shapeString(dims) << " is too large";
  return RankedTensorType::get(dims, elt);
}

LogicalResult GraphImporter::freezeInput(const onnx::ValueInfoProto &vi,
                                         const ONNXFrozenInput &frozen) {
  Location loc = nameLoc(vi.name());
  Type elt = convertDataType(&ctx_, frozen.onnxDataType);
  if (!elt)
    return emitError(loc) << "--freeze " << vi.name() << ": unsupported "
                          << dataTypeName(frozen.onnxDataType);
  if (vi.type().has_tensor_type()) {
    const auto &tt = vi.type().tensor_type();
    if (tt.elem_type() != frozen.onnxDataType)
      return emitError(loc) << "--freeze " << vi.name() << ": the input is "
                            << dataTypeName(tt.elem_type()) << ", the value "
                            << dataTypeName(frozen.onnxDataType);
    if (tt.has_shape()) {
      bool ok = tt.shape().dim_size() == (int)frozen.shape.size();
      for (int i = 0; ok && i < tt.shape().dim_size(); ++i)
        ok = !tt.shape().dim(i).has_dim_value() ||
             tt.shape().dim(i).dim_value() == frozen.shape[i];
      if (!ok)
        return emitError(loc) << "--freeze " << vi.name() << ": value shape "
                              << shapeString(frozen.shape)
                              << " does not match the input's declared shape";
    }
  }
  if (!fitsInMemory(frozen.shape, rawElementBytes(elt)))
    return emitError(loc) << "--freeze " << vi.name() << ": shape too large";
  auto type = RankedTensorType::get(frozen.shape, elt);
  if ((int64_t)frozen.bytes.size() !=
      type.getNumElements() * rawElementBytes(elt))
    return emitError(loc) << "--freeze " << vi.name() << ": "
                          << frozen.bytes.size() << " bytes of data for "
                          << type;
  DenseElementsAttr attr;
  if (elt.isInteger(1)) {
    SmallVector<bool> bits;
    for (char c : frozen.bytes)
      bits.push_back(c != 0);
    attr = DenseElementsAttr::get(type, bits);
  } else {
    attr = DenseElementsAttr::getFromRawBuffer(type, frozen.bytes);
  }
  values_[vi.name()] = dopt::ConstantOp::create(builder_, loc, attr);
  return success();
}

void GraphImporter::eraseDeadOps(Block &block) {
  // Exporters repeat the same scalar constants (2.0 for Pow, epsilons, 0.5
  // for GELU, ...); keep the first of each. All ops share one block, so the
  // first dominates every later use.
  llvm::DenseMap<std::pair<Attribute, Type>, Value> constants;
  for (Operation &op : llvm::make_early_inc_range(block)) {
    auto c = dyn_cast<dopt::ConstantOp>(op);
    if (!c)
      continue;
    auto [it, inserted] =
        constants.try_emplace({c.getValueAttr(), c.getType()}, c.getResult());
    if (!inserted) {
      c.getResult().replaceAllUsesWith(it->second);
      c.erase();
    }
  }
  // Unused ops go, except the updates of weights that training keeps
  // (batch norm's running statistics, marked dopt.updates_weight: an
  // inference program's canonicalisation drops them later).
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() && op.getDialect() &&
        isa<dopt::DoptDialect>(op.getDialect()) && isMemoryEffectFree(&op) &&
        !op.hasAttr("dopt.updates_weight"))
      op.erase();
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node,
                                        int index) {
  std::string name =
      node.name().empty() ? node.op_type() + "#" + std::to_string(index)
                          : node.name();
  Location loc = nameLoc(name);
  NodeContext nc(*this, node, loc, opset_);
  // Every ONNX operator has at least one output; per-op importers rely on it.
  if (node.output_size() == 0)
    return nc.error("has no outputs");
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty())
      continue;
    FailureOr<Value> v = lookup(node.input(i));
    if (failed(v))
      return failure();
    if (!*v)
      return nc.error("input '" + node.input(i) +
                      "' is not defined before this node (the graph is not "
                      "topologically sorted, or refers to an outer scope)");
  }
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.type() == onnx::AttributeProto::GRAPH ||
        a.type() == onnx::AttributeProto::GRAPHS)
      return nc.error("subgraph attribute '" + a.name() +
                      "' is not supported");
  if (failed(opImporters().lookup(node.op_type())(nc)) || nc.hasFailed())
    return failure();
  for (int i = 0; i < node.output_size(); ++i)
    if (!node.output(i).empty() && !values_.count(node.output(i)) &&
        nc.outputUsed(i))
      return nc.error("output " + std::to_string(i) + " ('" + node.output(i) +
                      "') is not supported by distopt, but the graph uses it");
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  if (failed(checkModel()) || failed(checkSupported()))
    return nullptr;
  const onnx::GraphProto &graph = model_.graph();
  for (const onnx::TensorProto &t : graph.initializer())
    initializers_[t.name()] = &t;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &in : node.input())
      consumed_.insert(in);
  for (const onnx::ValueInfoProto &out : graph.output())
    consumed_.insert(out.name());

  batchSymbol_ = findBatchSymbol(graph);
  // Graph inputs (an input that also has an initializer is a constant).
  SmallVector<Type> argTypes;
  SmallVector<const onnx::ValueInfoProto *> args;
  SmallVector<std::string> shapeErrors;
  llvm::StringSet<> usedShapes, usedDims, inputNames;
  for (const onnx::ValueInfoProto &vi : graph.input()) {
    inputNames.insert(vi.name());
    if (initializers_.count(vi.name()) || options_.frozenInputs.count(vi.name()))
      continue;
    FailureOr<RankedTensorType> t =
        inputType(vi, usedShapes, usedDims, shapeErrors);
    if (failed(t))
      return nullptr;
    args.push_back(&vi);
    argTypes.push_back(*t);
  }
  for (const auto &kv : options_.frozenInputs)
    if (!inputNames.contains(kv.getKey()) ||
        initializers_.count(kv.getKey())) {
      emitError(fileLoc_) << "--freeze names '" << kv.getKey()
                          << "', which is not a graph input";
      return nullptr;
    }
  for (const auto &kv : options_.inputShapes)
    if (!inputNames.contains(kv.getKey())) {
      std::string names;
      for (const onnx::ValueInfoProto *vi : args)
        names += (names.empty() ? "" : ", ") + vi->name();
      emitError(fileLoc_) << "--shape names '" << kv.getKey()
                          << "', which is not a graph input (inputs: "
                          << names << ")";
      return nullptr;
    }
  // An unused --dim is harmless (one command line may serve several
  // models) but may be a typo: warn.
  for (const auto &kv : options_.symbolicDims)
    if (!usedDims.contains(kv.getKey()))
      emitWarning(fileLoc_) << "--dim " << kv.getKey()
                            << " matches no symbolic dimension of the graph "
                               "inputs";
  if (!shapeErrors.empty()) {
    auto diag = emitError(fileLoc_)
                << "distopt compiles static shapes; specialise the graph's "
                   "symbolic input dimensions:";
    for (const std::string &e : shapeErrors)
      diag << "\n  " << e;
    return nullptr;
  }

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc_);
  module->getOperation()->setAttr("dopt.source",
                                  builder_.getStringAttr(fileName_));
  module->getOperation()->setAttr("dopt.opset",
                                  builder_.getI64IntegerAttr(opset_));
  if (!batchSymbol_.empty())
    module->getOperation()->setAttr("dopt.batch_symbol",
                                    builder_.getStringAttr(batchSymbol_));
  if (!model_.producer_name().empty())
    module->getOperation()->setAttr(
        "dopt.producer",
        builder_.getStringAttr(model_.producer_name() +
                               (model_.producer_version().empty()
                                    ? ""
                                    : " " + model_.producer_version())));
  builder_.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder_, nameLoc(graph.name()), "main",
                                   builder_.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  for (size_t i = 0; i < args.size(); ++i) {
    func.setArgAttr(i, "dopt.name", builder_.getStringAttr(args[i]->name()));
    // Which dimensions the model left symbolic (and --dim/--shape or the
    // planner bound): the planner takes the batch from a symbolic dim 0.
    if (args[i]->type().tensor_type().has_shape()) {
      const auto &shape = args[i]->type().tensor_type().shape();
      SmallVector<Attribute> names;
      bool anySymbolic = false;
      for (int d = 0; d < shape.dim_size(); ++d) {
        bool symbolic = !shape.dim(d).has_dim_value() ||
                        shape.dim(d).dim_value() < 0;
        anySymbolic |= symbolic;
        names.push_back(builder_.getStringAttr(
            symbolic ? (shape.dim(d).has_dim_param()
                            ? shape.dim(d).dim_param()
                            : std::string("?"))
                     : std::string()));
      }
      if (anySymbolic && !options_.inputShapes.count(args[i]->name()))
        func.setArgAttr(i, "dopt.symbolic_dims", builder_.getArrayAttr(names));
    }
    values_[args[i]->name()] = body->getArgument(i);
  }
  builder_.setInsertionPointToEnd(body);
  for (const onnx::ValueInfoProto &vi : graph.input())
    if (auto it = options_.frozenInputs.find(vi.name());
        it != options_.frozenInputs.end())
      if (failed(freezeInput(vi, it->second)))
        return nullptr;

  int index = 0;
  for (const onnx::NodeProto &node : graph.node())
    if (failed(importNode(node, index++)))
      return nullptr;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const onnx::ValueInfoProto &out : graph.output()) {
    Location loc = nameLoc(out.name());
    FailureOr<Value> v = lookup(out.name());
    if (failed(v))
      return nullptr;
    if (!*v) {
      emitError(loc) << "graph output '" << out.name()
                     << "' is not produced by any node";
      return nullptr;
    }
    auto type = cast<RankedTensorType>(v->getType());
    if (out.type().has_tensor_type()) {
      const auto &tt = out.type().tensor_type();
      Type elt = convertDataType(&ctx_, tt.elem_type());
      if (tt.elem_type() != 0 && elt != type.getElementType()) {
        emitError(loc) << "graph output '" << out.name() << "' is declared "
                       << dataTypeName(tt.elem_type()) << " but computes "
                       << type.getElementType();
        return nullptr;
      }
      if (tt.has_shape()) {
        bool rankOk = tt.shape().dim_size() == type.getRank();
        for (int i = 0; rankOk && i < tt.shape().dim_size(); ++i) {
          const auto &d = tt.shape().dim(i);
          rankOk = !d.has_dim_value() || d.dim_value() == type.getDimSize(i);
        }
        if (!rankOk) {
          emitError(loc) << "graph output '" << out.name()
                         << "' is declared with a shape that does not "
                            "match the computed "
                         << type;
          return nullptr;
        }
      }
    }
    results.push_back(*v);
    resultTypes.push_back(type);
  }
  func::ReturnOp::create(builder_, fileLoc_, results);
  func.setType(builder_.getFunctionType(argTypes, resultTypes));
  for (int i = 0; i < graph.output_size(); ++i)
    func.setResultAttr(i, "dopt.name",
                       builder_.getStringAttr(graph.output(i).name()));
  eraseDeadOps(*body);
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/// Parses binary protobuf or ONNX text; returns an error message on failure.
static std::optional<std::string> parseModel(StringRef bytes, bool text,
                                             onnx::ModelProto &model) {
  if (bytes.empty())
    return std::string("the file is empty, not an ONNX model");
  if (text) {
    std::string copy(bytes); // the parser wants a NUL-terminated string
    onnx::OnnxParser parser(copy.c_str());
    onnx::Common::Status status;
    // libonnx's parser throws (std::out_of_range, ...) on numbers it cannot
    // represent instead of returning a status.
    try {
      status = parser.Parse(model);
    } catch (const std::exception &e) {
      return std::string("cannot parse ONNX text: ") + e.what();
    }
    if (!status.IsOK())
      return "cannot parse ONNX text: " + status.ErrorMessage();
    // The parser accepts a graph without a model header; a model always
    // needs an ir_version, so give the textual form the current one.
    if (model.ir_version() == 0)
      model.set_ir_version(onnx::IR_VERSION);
    return std::nullopt;
  }
  if (bytes.size() > (size_t)INT_MAX)
    return std::string("the model file is over 2 GiB; store the weights as "
                       "ONNX external data");
  if (!model.ParseFromArray(bytes.data(), (int)bytes.size()))
    return std::string("cannot parse the ONNX protobuf: the file is "
                       "truncated, corrupt, or not an ONNX model");
  return std::nullopt;
}

/// The default-domain opset a model imports (0 when none).
static int64_t defaultOpset(const onnx::ModelProto &model) {
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    if (isDefaultDomain(o.domain()))
      return o.version();
  return 0;
}

/// The bytes an initializer holds or refers to, by name: what a conversion
/// must keep.
static llvm::StringMap<std::string>
initializerData(const onnx::ModelProto &model) {
  llvm::StringMap<std::string> data;
  for (const onnx::TensorProto &t : model.graph().initializer()) {
    onnx::TensorProto copy = t;
    copy.clear_name();
    copy.clear_doc_string();
    data[t.name()] = copy.SerializeAsString();
  }
  return data;
}

std::optional<std::string>
distopt::runIsolated(std::string &result,
                     llvm::function_ref<std::string()> work) {
  int fds[2];
  if (pipe(fds) != 0)
    return std::string("cannot create a pipe: ") + std::strerror(errno);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::string("cannot fork: ") + std::strerror(errno);
  }
  if (pid == 0) {
    close(fds[0]);
    // A crash ends the child at once (no crash handler's stack dump, no
    // sanitizer or fuzzer report): the parent reports it.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
      std::signal(sig, SIG_DFL);
    // One status byte ('R' result, 'E' error), then the bytes.
    std::string out;
    try {
      out = "R" + work();
    } catch (const std::exception &e) {
      out = std::string("E") + e.what();
    } catch (...) {
      out = "Eunknown exception";
    }
    for (size_t done = 0; done < out.size();) {
      ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        _exit(3);
      done += (size_t)n;
    }
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got.append(buf, (size_t)n);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return std::string("it crashed (signal ") +
           std::to_string(WTERMSIG(status)) + ", " +
           strsignal(WTERMSIG(status)) + ")";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got.empty())
    return std::string("it exited abnormally (status ") +
           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
  if (got[0] == 'E')
    return got.substr(1);
  result = got.substr(1);
  return std::nullopt;
}

/// A model below distopt's lowest opset, converted up to it by ONNX's own
/// version converter (its adapters rewrite each op whose definition
/// changed: attributes that became inputs, Dropout's ratio, ...). Fails,
/// saying why, when the converter cannot or changes an initializer.
static LogicalResult convertOldOpset(onnx::ModelProto &model,
                                     Location fileLoc) {
  int64_t from = defaultOpset(model);
  if (from == 0 || from >= kMinOpset)
    return success();
  auto refuse = [&](const std::string &why) {
    return emitError(fileLoc)
           << "default-domain opset " << from
           << " is not supported: distopt imports opsets " << kMinOpset
           << " to " << kMaxOpset << ", and ONNX's version converter could "
           << "not convert the model to opset " << kMinOpset << ": " << why;
  };
  // libonnx's adapters trust the model (a Softmax without an input crashes
  // them): each default-domain node checked against its schema by ONNX's
  // checker (which throws), and every input defined before it is read.
  onnx::checker::CheckerContext checkerContext;
  checkerContext.set_ir_version((int)model.ir_version());
  std::unordered_map<std::string, int> opsets;
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    opsets[o.domain()] = (int)o.version();
  checkerContext.set_opset_imports(opsets);
  onnx::checker::LexicalScopeContext scope;
  llvm::StringSet<> defined;
  for (const onnx::ValueInfoProto &vi : model.graph().input())
    defined.insert(vi.name());
  for (const onnx::TensorProto &t : model.graph().initializer())
    defined.insert(t.name());
  for (const onnx::NodeProto &node : model.graph().node()) {
    for (const std::string &in : node.input())
      if (!in.empty() && !defined.contains(in))
        return refuse("node '" + node.name() + "' (" + node.op_type() +
                      ") reads '" + in + "' before it is defined");
    if (isDefaultDomain(node.domain())) {
      try {
        onnx::checker::check_node(node, checkerContext, scope);
      } catch (const std::exception &e) {
        return refuse(std::string("ONNX's checker rejects node '") +
                      node.name() + "' (" + node.op_type() + "): " + e.what());
      }
    }
    for (const std::string &out : node.output())
      defined.insert(out);
  }
  for (const onnx::ValueInfoProto &vi : model.graph().output())
    if (!defined.contains(vi.name()))
      return refuse("graph output '" + vi.name() +
                    "' is not produced by any node");
  // Some adapters need ranks (Softmax's before opset 13 flattened to 2-D):
  // the converter sees ONNX's shape inference; the model keeps its own
  // value_info.
  onnx::ModelProto shaped = model;
  // The converter drops external-data references: such initializers pass
  // through it without data and are put back after.
  for (onnx::TensorProto &t : *shaped.mutable_graph()->mutable_initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      t.clear_external_data();
      t.clear_data_location();
    }
  // Shape inference and the converter run in a child process: the checks
  // above cover the crashes found so far, but libonnx's C++ trusts its input
  // and a crash there must end as an error, not take distopt down with it.
  std::string convertedBytes;
  if (std::optional<std::string> err =
          runIsolated(convertedBytes, [&]() -> std::string {
            onnx::ModelProto input = shaped;
            try {
              onnx::shape_inference::InferShapes(input);
            } catch (const std::exception &) {
              input = shaped; // what inference could not do, the converter may say
            }
            // libonnx reports what it cannot convert by throwing.
            return onnx::version_conversion::ConvertVersion(input, kMinOpset)
                .SerializeAsString();
          }))
    return refuse(*err);
  onnx::ModelProto converted;
  if (!converted.ParseFromString(convertedBytes))
    return refuse("its result could not be read back");
  *converted.mutable_graph()->mutable_value_info() = model.graph().value_info();
  llvm::StringMap<const onnx::TensorProto *> external;
  for (const onnx::TensorProto &t : model.graph().initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      external[t.name()] = &t;
  for (onnx::TensorProto &t : *converted.mutable_graph()->mutable_initializer())
    if (auto it = external.find(t.name()); it != external.end())
      t = *it->second;
  llvm::StringMap<std::string> before = initializerData(model),
                               after = initializerData(converted);
  for (const auto &[name, bytes] : before) {
    auto it = after.find(name);
    if (it == after.end() || it->second != bytes)
      return refuse("it " + std::string(it == after.end() ? "dropped" : "changed") +
                    " the initializer '" + name.str() + "'");
  }
  model = std::move(converted);
  emitRemark(fileLoc) << "the model's default-domain opset " << from
                      << " was converted to " << kMinOpset
                      << " by ONNX's version converter";
  return success();
}

OwningOpRef<ModuleOp> distopt::importONNXBuffer(MLIRContext &context,
                                                StringRef bytes,
                                                StringRef bufferName,
                                                const ONNXImportOptions &opts) {
  context.loadDialect<dopt::DoptDialect, func::FuncDialect>();
  Location fileLoc = FileLineColLoc::get(&context, bufferName, 0, 0);
  bool text = opts.textFormat.value_or(bufferName.ends_with(".onnxtxt"));
  onnx::ModelProto model;
  if (std::optional<std::string> err = parseModel(bytes, text, model)) {
    emitError(fileLoc) << *err;
    return nullptr;
  }
  if (failed(convertOldOpset(model, fileLoc)))
    return nullptr;
  GraphImporter importer(context, model, bufferName, opts);
  return importer.run();
}

OwningOpRef<ModuleOp> distopt::importONNXFile(MLIRContext &context,
                                              StringRef path,
                                              const ONNXImportOptions &opts) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    emitError(FileLineColLoc::get(&context, path, 0, 0))
        << "cannot open '" << path << "': " << buf.getError().message();
    return nullptr;
  }
  return importONNXBuffer(context, (*buf)->getBuffer(), path, opts);
}

//===----------------------------------------------------------------------===//
// ONNXWeightReader
//===----------------------------------------------------------------------===//

struct ONNXWeightReader::Impl {
  onnx::ModelProto model;
  llvm::StringMap<const onnx::TensorProto *> tensors;
};

ONNXWeightReader::ONNXWeightReader() : impl(std::make_unique<Impl>()) {}
ONNXWeightReader::~ONNXWeightReader() = default;

std::unique_ptr<ONNXWeightReader>
ONNXWeightReader::open(StringRef path, std::string &error) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    error = "cannot open '" + path.str() + "': " + buf.getError().message();
    return nullptr;
  }
  std::unique_ptr<ONNXWeightReader> reader(new ONNXWeightReader());
  if (std::optional<std::string> err = parseModel(
          (*buf)->getBuffer(), path.ends_with(".onnxtxt"), reader->impl->model)) {
    error = path.str() + ": " + *err;
    return nullptr;
  }
  const onnx::GraphProto &g = reader->impl->model.graph();
  for (const onnx::TensorProto &t : g.initializer())
    reader->impl->tensors[t.name()] = &t;
  // Constant nodes' values are found by their output name, as the importer
  // names them.
  for (const onnx::NodeProto &n : g.node())
    if (n.op_type() == "Constant" && n.output_size() == 1)
      for (const onnx::AttributeProto &a : n.attribute())
        if (a.name() == "value" && a.has_t())
          reader->impl->tensors.try_emplace(n.output(0), &a.t());
  return reader;
}

bool ONNXWeightReader::readEmbedded(StringRef name, int64_t numElements,
                                    int64_t elementBytes,
                                    std::vector<char> &out,
                                    std::string &error) const {
  auto it = impl->tensors.find(name);
  if (it == impl->tensors.end()) {
    error = "the model has no initializer or constant named '" + name.str() +
            "'";
    return false;
  }
  if (it->second->data_location() == onnx::TensorProto::EXTERNAL) {
    error = "tensor '" + name.str() + "' is stored as external data";
    return false;
  }
  if (std::optional<std::string> err =
          decodeEmbedded(*it->second, numElements, elementBytes, out)) {
    error = *err;
    return false;
  }
  return true;
}
