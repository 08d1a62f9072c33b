//===- OpHelpers.h - what the per-op importers share ---------*- C++ -*-===//
//
// Internal to lib/Import/ONNX: the helpers several op families use, and
// the registration of each family's importers (OpImporters.cpp builds the
// table from them).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_IMPORT_ONNX_OPHELPERS_H
#define DISTOPT_LIB_IMPORT_ONNX_OPHELPERS_H

#include "ImporterImpl.h"

/// `auto var = *expr;` of a FailureOr, returning failure() from the
/// enclosing importer where it failed (the error is already reported).
#define TRY(var, expr)                                                         \
  auto var##OrErr = (expr);                                                    \
  if (failed(var##OrErr))                                                      \
    return failure();                                                          \
  auto var = *var##OrErr;


namespace distopt::onnximport {

using mlir::ArrayRef;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::RankedTensorType;
using mlir::Type;
using mlir::Value;
using llvm::SmallVector;
using llvm::StringRef;

/// What Conv and ConvTranspose share: a 3-D (NCL) or 4-D (NCHW) input and
/// a weight of the same rank, whose kernel kernel_shape, if given, must
/// equal; strides, dilations, group. The sizes are as many as the spatial
/// axes (`axes`); x and w are lifted to 2-D already.
struct ConvNode {
  Value x, w;
  size_t axes;
  SmallVector<int64_t> inSpatial, kernel, strides, dilations;
  int64_t group;
};

std::string shapeStr(ArrayRef<int64_t> shape);

/// A 0-d dopt.constant of element type `elt` holding `v` (an integer type
/// gets v truncated, -1 being all ones).
Value constantScalar(NodeContext &nc, Type elt, double v);

/// A constant of floating-point element type `elt` and shape `shape`
/// holding `values` (rounded to `elt`).
Value floatConstant(NodeContext &nc, Type elt, ArrayRef<int64_t> shape,
                    ArrayRef<double> values);

/// `indices`, which an op reads or writes at when the program runs, through
/// a dopt.check_indices into a range of `extent` (see the op): an index
/// outside it (or negative, when `negative` is false), other than `ignore`,
/// ends the run with an error naming this node and `what` the indices
/// index. Constant indices are checked at import and need none.
Value checkedIndices(NodeContext &nc, Value indices, int64_t extent,
                     const std::string &what, bool negative = true,
                     std::optional<int64_t> ignore = std::nullopt);

/// Sets `y` as the node's output 0 (a null value: an op failed to build,
/// and said so).
LogicalResult setResult(NodeContext &nc, Value y);

/// How MLIR prints `t` ("f32", "ui8", "tensor<2x3xf32>"), for messages.
std::string typeStr(Type t);

/// `v` converted to element type `t` (`v` itself when it has it).
Value castTo(NodeContext &nc, Value v, Type t);

/// 0, 1, ..., n − 1 (i64) along `axis` of a rank-`rank` shape, 1 elsewhere.
Value iotaAlong(NodeContext &nc, int64_t n, int64_t rank, int64_t axis);

/// (x - mean) / sqrt(var + eps), the statistics over `axes` of x (kept as
/// size-1 axes): what InstanceNormalization and GroupNormalization share
/// (batch norm's training form keeps its mean and variance for the running
/// statistics, so it writes them out).
Value standardize(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
                  double eps);

/// "1 entry", "4 entries": how many a window attribute must have.
std::string entries(size_t n);

/// Resolves ONNX's auto_pad into explicit [begins..., ends...] pads for a
/// window of kernel.size() spatial axes.
FailureOr<SmallVector<int64_t>>
resolvePads(NodeContext &nc, ArrayRef<int64_t> inSpatial,
            ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
            ArrayRef<int64_t> dilations);

FailureOr<SmallVector<int64_t>> windowAttr(NodeContext &nc, StringRef name,
                                           size_t n);

/// The spatial axes of a windowed op's input: 1 (N×C×L), 2 (N×C×H×W) or
/// 3 (N×C×D×H×W). The dialect, the kernels and cuDNN see one kind of
/// convolution and pooling, 2-D: a 1-D window runs as a 2-D one of height 1
/// (liftSizes, liftPads, heightOne); a 3-D convolution as 2-D ones, one per
/// tap of its depth (conv3dByDepth), and a 3-D pooling as a reduction of
/// strided slices (poolBySlices).
FailureOr<size_t> spatialAxes(NodeContext &nc, RankedTensorType in);

/// `y` (N×M×D×H×W) plus a 1-D bias of M entries broadcast over the channels
/// (a 3-D convolution's); an error at the node, and a null value, for a
/// bias of another shape. `y` itself where there is no bias.
Value addChannelBias3D(NodeContext &nc, Value y, Value bias);

/// `x` padded along its trailing spatial axes by `begins` and `ends` with
/// `value` (no op when all are 0).
Value padSpatial(NodeContext &nc, Value x, ArrayRef<int64_t> begins,
                 ArrayRef<int64_t> ends, double value);

/// Elements [start, start + (count − 1)·step] with stride `step` of axes
/// `axes` of `x`, every other axis whole.
Value strided(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
              ArrayRef<int64_t> starts, ArrayRef<int64_t> steps,
              ArrayRef<int64_t> counts);

/// A 1-D window's sizes (kernel, strides, dilations, output padding) as a
/// 2-D one's of height 1: `fill` in front.
SmallVector<int64_t> liftSizes(ArrayRef<int64_t> v, int64_t fill);

/// 1-D pads [begin, end] as 2-D ones [0, begin, 0, end].
SmallVector<int64_t> liftPads(ArrayRef<int64_t> p);

/// N×C×L as N×C×1×L (`up`), or back (a null value stays null).
Value heightOne(NodeContext &nc, Value v, bool up);

/// Sets a windowed op's result as the node's output, back to N×C×L for a
/// 1-D window (a null value: the op failed, and said so).
LogicalResult setWindowOutput(NodeContext &nc, Value y, bool oneD);

/// The node's convolution attributes, for its inputs 0 and 1 or, where
/// given, `x` and `w` standing for them (an integer convolution's operands
/// less their zero points).
FailureOr<ConvNode> convNode(NodeContext &nc, Value x = {}, Value w = {});

/// A 3-D convolution (N×C×D×H×W) as the sum of 2-D ones, one per tap kd of
/// the kernel's depth: the input's depth slices kd·dilation, + stride, ...
/// (padded in depth first) become a batch of N·Do images of C×H×W, each
/// convolved with the weight's depth slice kd. The sum has the 3-D
/// convolution's operation count; the transposes and slices read the input
/// KD + 1 times. Autodiff, sharding and every target see 2-D convolutions.
Value conv3dByDepth(NodeContext &nc, Value x, Value w, Value bias,
                    ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                    ArrayRef<int64_t> dilations, int64_t group);

/// The node's convolution of `x` and `w` (null: its inputs 0 and 1) plus
/// `bias`: dopt.conv for 1-D (lifted to 2-D) and 2-D windows, 2-D ones over
/// depth slices for 3-D.
FailureOr<Value> convolution(NodeContext &nc, Value x, Value w, Value bias);

/// |x|^p, with x·x for p = 2 and |x| for p = 1 (their gradients are
/// PyTorch's: the power's at 0 would be 0·inf).
Value absPower(NodeContext &nc, Value x, int64_t p);

/// s^(1/p): a square root for p = 2, s itself for p = 1.
Value rootOf(NodeContext &nc, Value s, int64_t p);

/// The minimum over `axes`: the maximum of the values reflected (−x for
/// floats, ~x = all-ones − x for integers, not x for booleans), reflected
/// back.
Value reduceMinimum(NodeContext &nc, Value x, ArrayRef<int64_t> axes,
                    bool keepdims);

Value reshape(NodeContext &nc, Value x, ArrayRef<int64_t> shape);

/// Each family of ops adds its importers to the table (ONNX op type ->
/// importer).
void registerElementwiseImporters(llvm::StringMap<OpImporterFn> &t);
void registerNormalizationImporters(llvm::StringMap<OpImporterFn> &t);
void registerLinearImporters(llvm::StringMap<OpImporterFn> &t);
void registerPoolingImporters(llvm::StringMap<OpImporterFn> &t);
void registerReductionImporters(llvm::StringMap<OpImporterFn> &t);
void registerSpatialImporters(llvm::StringMap<OpImporterFn> &t);
void registerDataMovementImporters(llvm::StringMap<OpImporterFn> &t);
void registerRecurrentImporters(llvm::StringMap<OpImporterFn> &t);
void registerAttentionImporters(llvm::StringMap<OpImporterFn> &t);
void registerSignalImporters(llvm::StringMap<OpImporterFn> &t);
void registerQuantizationImporters(llvm::StringMap<OpImporterFn> &t);

} // namespace distopt::onnximport

#endif // DISTOPT_LIB_IMPORT_ONNX_OPHELPERS_H
