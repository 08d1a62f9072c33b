//===- CostModel.cpp - analytical cost model for the planner --------------===//
//
// The formulas here are documented, with their sources, in
// docs/cost-model.md; every one has a unit test with hand-computed values in
// unittests/Planner/CostModelTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/CostModel.h"

#include "YAMLDiagnostics.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLTraits.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

using namespace distopt::planner;
using distopt::planner::detail::badScalar;
using llvm::StringRef;
namespace dopt = distopt::dopt;

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

static constexpr const char *kOpClassNames[kNumOpClasses + 1] = {
    "gemm",      "conv",    "elementwise",   "normalization", "softmax",
    "reduction", "pooling", "data_movement", "none"};

StringRef distopt::planner::opClassName(OpClass cls) {
  return kOpClassNames[static_cast<unsigned>(cls)];
}

std::optional<OpClass> distopt::planner::parseOpClass(StringRef name) {
  for (unsigned i = 0; i < kNumOpClasses; ++i)
    if (name == kOpClassNames[i])
      return static_cast<OpClass>(i);
  return std::nullopt;
}

std::string distopt::planner::unknownOptimizer(StringRef name) {
  return "--optimizer: unknown optimizer '" + name.str() + "' (expected " +
         namesOf(kOptimizers) + ")";
}

//===----------------------------------------------------------------------===//
// Per-op FLOPs and bytes
//===----------------------------------------------------------------------===//

namespace {

/// Static element count of a shaped type (0 if it is not statically shaped).
double numElements(mlir::Type type) {
  auto shaped = llvm::dyn_cast<mlir::ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  double n = 1;
  for (int64_t d : shaped.getShape())
    n *= static_cast<double>(d);
  return n;
}

double numElements(mlir::Value v) { return numElements(v.getType()); }

mlir::Type elementTypeOf(mlir::Type type) {
  if (auto shaped = llvm::dyn_cast<mlir::ShapedType>(type))
    return shaped.getElementType();
  return type;
}

double elementBytes(mlir::Type elt, const CostOptions &opts) {
  if (llvm::isa<mlir::FloatType>(elt)) {
    if (opts.precision)
      return dtypeBytes(*opts.precision);
    return std::max(1u, elt.getIntOrFloatBitWidth() / 8);
  }
  if (elt.isIntOrFloat())
    return std::max(1u, (elt.getIntOrFloatBitWidth() + 7) / 8);
  return 0;
}

double valueBytes(mlir::Value v, const CostOptions &opts) {
  return numElements(v) * elementBytes(elementTypeOf(v.getType()), opts);
}

/// The dtype an op computes in: that of its first floating-point operand or
/// result (comparisons have i1 results but float operands).
DType computeDType(mlir::Operation *op, const CostOptions &opts) {
  auto fromType = [&](mlir::Type t) -> std::optional<DType> {
    mlir::Type elt = elementTypeOf(t);
    if (!llvm::isa<mlir::FloatType>(elt))
      return std::nullopt;
    if (opts.precision)
      return *opts.precision;
    if (elt.isF16())
      return DType::FP16;
    if (elt.isBF16())
      return DType::BF16;
    return DType::FP32; // f32, and f64 (no fp64 figure in cluster specs)
  };
  for (mlir::Value v : op->getOperands())
    if (auto d = fromType(v.getType()))
      return *d;
  for (mlir::Value v : op->getResults())
    if (auto d = fromType(v.getType()))
      return *d;
  return DType::FP32;
}

double resultElements(mlir::Operation *op) {
  double n = 0;
  for (mlir::Value v : op->getResults())
    n += numElements(v);
  return n;
}

// The work of each op that has its own formula (CostOpInterface): one
// overload per op, attached to the op by registerCostModels. `cost` comes
// with the op's dtype and the bytes of its operands and results.

void costOf(dopt::MatMulOp m, OpCost &cost, const CostOptions &) {
  // 2·|out|·K: |out| = batch·M·N (1-D operands promoted), K = the
  // contracted dimension, lhs's last.
  auto lhs = llvm::cast<mlir::ShapedType>(m.getLhs().getType());
  double k = lhs.getRank() ? static_cast<double>(lhs.getShape().back()) : 1.0;
  cost.opClass = OpClass::Gemm;
  cost.flops = 2 * resultElements(m) * k;
}

void costOf(dopt::GemmOp g, OpCost &cost, const CostOptions &) {
  // 2·M·N·K, + M·N if alpha ≠ 1, + M·N (add C) + M·N if beta ≠ 1.
  auto a = llvm::cast<mlir::ShapedType>(g.getA().getType());
  double k = a.getRank() == 2
                 ? static_cast<double>(a.getShape()[g.getTransA() ? 0 : 1])
                 : 1.0;
  double out = resultElements(g);
  cost.opClass = OpClass::Gemm;
  cost.flops = 2 * out * k;
  if (g.getAlpha().convertToDouble() != 1.0)
    cost.flops += out;
  if (g.getC()) {
    cost.flops += out;
    if (g.getBeta().convertToDouble() != 1.0)
      cost.flops += out;
  }
}

void costOf(dopt::ConvOp c, OpCost &cost, const CostOptions &) {
  // 2·N·M·Ho·Wo·(C/g)·kh·kw (+ N·M·Ho·Wo for the bias); the weight is
  // M × C/g × kh × kw.
  auto w = llvm::cast<mlir::ShapedType>(c.getWeight().getType());
  double perOutput = 1;
  for (int64_t i = 1; i < w.getRank(); ++i)
    perOutput *= static_cast<double>(w.getShape()[i]);
  double out = resultElements(c);
  cost.opClass = OpClass::Conv;
  cost.flops = 2 * out * perOutput + (c.getBias() ? out : 0);
}

void costOf(dopt::ConvTransposeOp c, OpCost &cost, const CostOptions &) {
  // Each input element meets (M/g)·kh·kw weights: 2·N·C·H·W·(M/g)·kh·kw
  // (+ the output for the bias); the weight is C × M/g × kh × kw.
  auto w = llvm::cast<mlir::ShapedType>(c.getWeight().getType());
  double perInput = 1;
  for (int64_t i = 1; i < w.getRank(); ++i)
    perInput *= static_cast<double>(w.getShape()[i]);
  cost.opClass = OpClass::Conv;
  cost.flops = 2 * numElements(c.getInput()) * perInput +
               (c.getBias() ? resultElements(c) : 0);
}

void costOf(dopt::AttentionOp a, OpCost &cost, const CostOptions &) {
  // The two products, 2·|scores|·D and 2·|scores|·Dv, and the softmax, 5
  // per score (|scores| = leading·Tq·Tk); it reads its operands and writes
  // its output only: the scores stay in blocks (distopt-expand-attention).
  auto q = llvm::cast<mlir::ShapedType>(a.getQuery().getType());
  auto k = llvm::cast<mlir::ShapedType>(a.getKey().getType());
  auto v = llvm::cast<mlir::ShapedType>(a.getValue().getType());
  int64_t r = q.getRank();
  double scores = numElements(a.getQuery()) / q.getDimSize(r - 1) *
                  static_cast<double>(k.getDimSize(r - 2));
  cost.opClass = OpClass::Gemm;
  cost.flops = scores * (2.0 * q.getDimSize(r - 1) +
                         2.0 * v.getDimSize(r - 1) + 5.0);
}

/// max (1), subtract (1), exp (1), sum (1), divide or subtract the log-sum
/// (1): 5 per element.
void softmaxCost(mlir::Operation *op, OpCost &cost) {
  cost.opClass = OpClass::Softmax;
  cost.flops = 5 * resultElements(op);
}
void costOf(dopt::SoftmaxOp op, OpCost &cost, const CostOptions &) {
  softmaxCost(op, cost);
}
void costOf(dopt::LogSoftmaxOp op, OpCost &cost, const CostOptions &) {
  softmaxCost(op, cost);
}

void costOf(dopt::LayerNormOp l, OpCost &cost, const CostOptions &) {
  // mean (1), x − mean (1), square (1), variance sum (1), · rstd (1),
  // · scale (1), + bias (1 if present).
  cost.opClass = OpClass::Normalization;
  cost.flops = (l.getBias() ? 7 : 6) * resultElements(l);
}

void costOf(dopt::BatchNormOp op, OpCost &cost, const CostOptions &) {
  // (x − mean) · rstd · scale + bias: 4 per element.
  cost.opClass = OpClass::Normalization;
  cost.flops = 4 * resultElements(op);
}

/// n−1 combines per output of n inputs: |in| − |out|.
void combineCost(mlir::Operation *op, mlir::Value input, OpCost &cost) {
  cost.opClass = OpClass::Reduction;
  cost.flops = std::max(0.0, numElements(input) - resultElements(op));
}
void costOf(dopt::ReduceSumOp r, OpCost &cost, const CostOptions &) {
  combineCost(r, r.getInput(), cost);
}
void costOf(dopt::ReduceMaxOp r, OpCost &cost, const CostOptions &) {
  combineCost(r, r.getInput(), cost);
}

void costOf(dopt::ReduceMeanOp r, OpCost &cost, const CostOptions &) {
  // |in| − |out| adds + |out| divides = |in|.
  cost.opClass = OpClass::Reduction;
  cost.flops = numElements(r.getInput());
}

void costOf(dopt::GlobalAvgPoolOp g, OpCost &cost, const CostOptions &) {
  cost.opClass = OpClass::Reduction;
  cost.flops = numElements(g.getInput());
}

double windowSize(llvm::ArrayRef<int64_t> kernel) {
  double window = 1;
  for (int64_t k : kernel)
    window *= static_cast<double>(k);
  return window;
}

void costOf(dopt::MaxPoolOp p, OpCost &cost, const CostOptions &) {
  // kh·kw − 1 comparisons per output.
  cost.opClass = OpClass::Pooling;
  cost.flops =
      resultElements(p) * std::max(0.0, windowSize(p.getKernelShape()) - 1);
}

void costOf(dopt::AvgPoolOp p, OpCost &cost, const CostOptions &) {
  // kh·kw − 1 adds + 1 divide per output.
  cost.opClass = OpClass::Pooling;
  cost.flops = resultElements(p) * windowSize(p.getKernelShape());
}

void costOf(dopt::GatherOp g, OpCost &cost, const CostOptions &opts) {
  // Reads only the selected rows, plus the indices.
  cost.opClass = OpClass::DataMovement;
  cost.bytesRead = cost.bytesWritten + valueBytes(g.getIndices(), opts);
}

void costOf(dopt::GatherElementsOp g, OpCost &cost, const CostOptions &opts) {
  // One element per index: reads as many as it writes, plus the indices.
  cost.opClass = OpClass::DataMovement;
  cost.bytesRead = cost.bytesWritten + valueBytes(g.getIndices(), opts);
}

void costOf(dopt::TopKOp t, OpCost &cost, const CostOptions &) {
  // The lowering's ranks: n comparisons for each of the input's elements (n
  // the axis's extent), then n selects per output.
  auto in = llvm::cast<mlir::RankedTensorType>(t.getInput().getType());
  double n = static_cast<double>(in.getDimSize(t.getAxis()));
  cost.opClass = OpClass::Reduction;
  cost.flops = (numElements(t.getInput()) + resultElements(t)) * n;
}

void costOf(dopt::SliceOp, OpCost &cost, const CostOptions &) {
  // Reads only what it keeps.
  cost.opClass = OpClass::DataMovement;
  cost.bytesRead = cost.bytesWritten;
}

template <typename OpT>
struct CostModel : dopt::CostOpInterface::ExternalModel<CostModel<OpT>, OpT> {
  void estimateCost(mlir::Operation *op, OpCost &cost,
                    const CostOptions &options) const {
    costOf(llvm::cast<OpT>(op), cost, options);
  }
};

template <typename... OpTs> void attachCosts(mlir::MLIRContext *ctx) {
  (OpTs::template attachInterface<CostModel<OpTs>>(*ctx), ...);
}

} // namespace

OpCost distopt::planner::estimateOpCost(mlir::Operation *op,
                                        const CostOptions &opts) {
  OpCost cost;
  if (op->getDialect() == nullptr ||
      !llvm::isa<dopt::DoptDialect>(op->getDialect()))
    return cost;
  if (llvm::isa<dopt::WeightOp, dopt::ConstantOp, dopt::ReshapeOp,
                dopt::ShapeOp, dopt::RngKeyOp>(op))
    return cost; // no work: data already in place, or a view

  cost.dtype = computeDType(op, opts);
  for (mlir::Value v : op->getOperands())
    cost.bytesRead += valueBytes(v, opts);
  for (mlir::Value v : op->getResults())
    cost.bytesWritten += valueBytes(v, opts);
  if (auto elementwise = llvm::dyn_cast<dopt::ElementwiseOpInterface>(op)) {
    cost.opClass = OpClass::Elementwise;
    cost.flops = elementwise.getFlopsPerElement() * resultElements(op);
    return cost;
  }

  if (auto costed = llvm::dyn_cast<dopt::CostOpInterface>(op))
    costed.estimateCost(cost, opts);
  else
    // Transposes, concatenations, splits, broadcasts, pads, and a dopt op
    // this model does not know yet: their bytes, as data movement (rather
    // than pretending they are free).
    cost.opClass = OpClass::DataMovement;
  return cost;
}

void distopt::planner::registerCostModels(mlir::DialectRegistry &registry) {
  registry.addExtension(+[](mlir::MLIRContext *ctx, dopt::DoptDialect *) {
    attachCosts<dopt::AttentionOp, dopt::MatMulOp, dopt::GemmOp, dopt::ConvOp,
                dopt::ConvTransposeOp, dopt::SoftmaxOp, dopt::LogSoftmaxOp,
                dopt::LayerNormOp, dopt::BatchNormOp, dopt::ReduceSumOp,
                dopt::ReduceMaxOp, dopt::ReduceMeanOp, dopt::GlobalAvgPoolOp,
                dopt::MaxPoolOp, dopt::AvgPoolOp, dopt::GatherOp,
                dopt::GatherElementsOp, dopt::TopKOp, dopt::SliceOp>(ctx);
  });
}

llvm::SmallVector<std::pair<mlir::Operation *, OpCost>>
distopt::planner::estimateCosts(mlir::Operation *root,
                                const CostOptions &opts) {
  llvm::SmallVector<std::pair<mlir::Operation *, OpCost>> costs;
  // A call costs its callee's ops, once per call (the function running one
  // micro-batch of an accumulated step); a root holding the callee as well
  // (a module) counts it where it is defined, not again at its calls. A
  // loop of known trips costs its body's ops once per trip.
  std::function<void(mlir::Operation *, bool, int64_t)> collect =
      [&](mlir::Operation *scope, bool followCalls, int64_t times) {
        scope->walk<mlir::WalkOrder::PreOrder>([&](mlir::Operation *op) {
          if (auto call = llvm::dyn_cast<mlir::func::CallOp>(op)) {
            if (followCalls)
              if (auto callee = mlir::SymbolTable::lookupNearestSymbolFrom<
                      mlir::func::FuncOp>(op, call.getCalleeAttr()))
                if (!callee.isExternal())
                  collect(callee, true, times);
            return mlir::WalkResult::skip();
          }
          if (auto loop = llvm::dyn_cast<mlir::scf::ForOp>(op)) {
            auto lb = mlir::getConstantIntValue(loop.getLowerBound());
            auto ub = mlir::getConstantIntValue(loop.getUpperBound());
            auto step = mlir::getConstantIntValue(loop.getStep());
            if (lb && ub && step && *step > 0) {
              int64_t trips = *ub > *lb ? (*ub - *lb + *step - 1) / *step : 0;
              for (mlir::Operation &inner :
                   loop.getBody()->without_terminator())
                collect(&inner, followCalls, times * trips);
              return mlir::WalkResult::skip();
            }
          }
          OpCost c = estimateOpCost(op, opts);
          if (c.opClass != OpClass::None)
            for (int64_t t = 0; t < times; ++t)
              costs.emplace_back(op, c);
          return mlir::WalkResult::advance();
        });
      };
  collect(root, llvm::isa<mlir::func::FuncOp>(root), 1);
  return costs;
}

double distopt::planner::countParameters(mlir::Operation *root) {
  double params = 0;
  root->walk([&](dopt::WeightOp w) { params += numElements(w.getType()); });
  return params;
}

//===----------------------------------------------------------------------===//
// Efficiency profile
//===----------------------------------------------------------------------===//

EfficiencyProfile::EfficiencyProfile() {
  // docs/cost-model.md §2.3 gives the reasoning, §5 the check against
  // eight published Megatron-LM runs.
  auto set = [&](OpClass cls, double computeEff, double memoryEff) {
    compute[static_cast<unsigned>(cls)].fill(computeEff);
    memory[static_cast<unsigned>(cls)] = memoryEff;
  };
  set(OpClass::Gemm, 0.75, 0.80);
  set(OpClass::Conv, 0.60, 0.80);
  set(OpClass::Elementwise, 0.50, 0.85);
  set(OpClass::Normalization, 0.50, 0.70);
  set(OpClass::Softmax, 0.50, 0.70);
  set(OpClass::Reduction, 0.50, 0.75);
  set(OpClass::Pooling, 0.50, 0.70);
  set(OpClass::DataMovement, 1.00, 0.60);
  intraNodeLink = 0.80;
  interNodeLink = 0.90;
}

double EfficiencyProfile::computeEfficiency(OpClass cls, DType dtype) const {
  if (cls == OpClass::None)
    return 1.0;
  return compute[static_cast<unsigned>(cls)][static_cast<unsigned>(dtype)];
}

double EfficiencyProfile::memoryEfficiency(OpClass cls) const {
  if (cls == OpClass::None)
    return 1.0;
  return memory[static_cast<unsigned>(cls)];
}

namespace {

/// An efficiency in (0, 1].
struct Fraction {
  double value = 1;
};

struct RawComputeEff {
  std::array<std::optional<Fraction>, kNumDTypes> perDType;
};
struct RawClassEff {
  std::optional<RawComputeEff> compute;
  std::optional<Fraction> memory;
};
struct RawOpClasses {
  std::array<std::optional<RawClassEff>, kNumOpClasses> perClass;
};
struct RawLinkEff {
  std::optional<Fraction> intraNode;
  std::optional<Fraction> interNode;
};
struct RawProfile {
  std::optional<RawOpClasses> opClasses;
  std::optional<RawLinkEff> links;
};

} // namespace

namespace llvm::yaml {

template <> struct ScalarTraits<Fraction> {
  static void output(const Fraction &v, void *, raw_ostream &os) {
    os << v.value;
  }
  static StringRef input(StringRef s, void *, Fraction &v) {
    double d;
    if (!llvm::to_float(s.trim(), d) || !std::isfinite(d))
      return badScalar("a number", s);
    if (!(d > 0 && d <= 1))
      return badScalar("an efficiency in (0, 1]", s);
    v.value = d;
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct MappingTraits<RawComputeEff> {
  static void mapping(IO &io, RawComputeEff &c) {
    for (unsigned i = 0; i < kNumDTypes; ++i)
      io.mapOptional(dtypeName(static_cast<DType>(i)), c.perDType[i]);
  }
  static std::string validate(IO &, RawComputeEff &) {
    distopt::planner::detail::setUnknownKeyHint(
        "compute takes fp32, tf32, bf16 and fp16");
    return {};
  }
};

template <> struct MappingTraits<RawClassEff> {
  static void mapping(IO &io, RawClassEff &c) {
    io.mapOptional("compute", c.compute);
    io.mapOptional("memory", c.memory);
  }
  static std::string validate(IO &, RawClassEff &) {
    distopt::planner::detail::setUnknownKeyHint("expected compute and memory");
    return {};
  }
};

template <> struct MappingTraits<RawOpClasses> {
  static void mapping(IO &io, RawOpClasses &c) {
    for (unsigned i = 0; i < kNumOpClasses; ++i)
      io.mapOptional(opClassName(static_cast<OpClass>(i)), c.perClass[i]);
  }
  static std::string validate(IO &, RawOpClasses &) {
    distopt::planner::detail::setUnknownKeyHint(
        "op classes are gemm, conv, elementwise, normalization, softmax, "
        "reduction, pooling and data_movement");
    return {};
  }
};

template <> struct MappingTraits<RawLinkEff> {
  static void mapping(IO &io, RawLinkEff &l) {
    io.mapOptional("intra_node", l.intraNode);
    io.mapOptional("inter_node", l.interNode);
  }
  static std::string validate(IO &, RawLinkEff &) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected intra_node and inter_node");
    return {};
  }
};

template <> struct MappingTraits<RawProfile> {
  static void mapping(IO &io, RawProfile &p) {
    io.mapOptional("op_classes", p.opClasses);
    io.mapOptional("links", p.links);
  }
  static std::string validate(IO &, RawProfile &) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected op_classes and links");
    return {};
  }
};

} // namespace llvm::yaml

llvm::Expected<EfficiencyProfile>
distopt::planner::parseEfficiencyProfile(StringRef yaml, StringRef bufferName,
                                         const EfficiencyProfile &base) {
  if (detail::isBlankYAML(yaml))
    return base;
  RawProfile raw;
  if (llvm::Error e =
          detail::readYAML(yaml, bufferName, raw, "efficiency profile"))
    return std::move(e);
  EfficiencyProfile p = base;
  if (raw.opClasses) {
    for (unsigned c = 0; c < kNumOpClasses; ++c) {
      const std::optional<RawClassEff> &cls = raw.opClasses->perClass[c];
      if (!cls)
        continue;
      if (cls->memory)
        p.memory[c] = cls->memory->value;
      if (cls->compute)
        for (unsigned d = 0; d < kNumDTypes; ++d)
          if (cls->compute->perDType[d])
            p.compute[c][d] = cls->compute->perDType[d]->value;
    }
  }
  if (raw.links) {
    if (raw.links->intraNode)
      p.intraNodeLink = raw.links->intraNode->value;
    if (raw.links->interNode)
      p.interNodeLink = raw.links->interNode->value;
  }
  return p;
}

//===----------------------------------------------------------------------===//
// Compute time
//===----------------------------------------------------------------------===//

double distopt::planner::computeTime(const OpCost &cost,
                                     const DeviceSpec &device,
                                     const EfficiencyProfile &eff) {
  if (cost.opClass == OpClass::None)
    return 0;
  double flopTime = 0, byteTime = 0;
  if (cost.flops > 0)
    flopTime = cost.flops / (device.peak(cost.dtype) *
                             eff.computeEfficiency(cost.opClass, cost.dtype));
  if (cost.bytes() > 0)
    byteTime = cost.bytes() /
               (device.memoryBandwidth * eff.memoryEfficiency(cost.opClass));
  return std::max(flopTime, byteTime);
}

OpCost distopt::planner::backwardCost(const OpCost &forward) {
  OpCost b = forward;
  b.flops = 2 * forward.flops;
  b.bytesRead = 2 * forward.bytesRead;
  b.bytesWritten = 2 * forward.bytesWritten;
  return b;
}

double distopt::planner::trainingStepFlops(double forwardFlops,
                                           Recompute recompute,
                                           double selectiveRecomputeFlops) {
  double flops = 3 * forwardFlops; // forward + backward (2×)
  switch (recompute) {
  case Recompute::Off:
    break;
  case Recompute::Selective:
    flops += selectiveRecomputeFlops;
    break;
  case Recompute::Full:
    flops += forwardFlops;
    break;
  }
  return flops;
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

static double ceilLog2(int64_t n) {
  double levels = 0;
  for (int64_t p = 1; p < n; p *= 2)
    levels += 1;
  return levels;
}

double distopt::planner::ringAllReduceTime(int64_t n, double bytes,
                                           LinkParams link) {
  if (n <= 1)
    return 0;
  double dn = static_cast<double>(n);
  return 2 * (dn - 1) / dn * bytes / link.beta + 2 * (dn - 1) * link.alpha;
}

double distopt::planner::treeAllReduceTime(int64_t n, double bytes,
                                           LinkParams link) {
  if (n <= 1)
    return 0;
  return 2 * ceilLog2(n) * (link.alpha + bytes / link.beta);
}

double distopt::planner::ringAllGatherTime(int64_t n, double bytes,
                                           LinkParams link) {
  if (n <= 1)
    return 0;
  double dn = static_cast<double>(n);
  return (dn - 1) / dn * bytes / link.beta + (dn - 1) * link.alpha;
}

double distopt::planner::ringReduceScatterTime(int64_t n, double bytes,
                                               LinkParams link) {
  return ringAllGatherTime(n, bytes, link);
}

double distopt::planner::allToAllTime(int64_t n, double bytes,
                                      LinkParams link) {
  return ringAllGatherTime(n, bytes, link);
}

double distopt::planner::pointToPointTime(double bytes, LinkParams link) {
  return link.alpha + bytes / link.beta;
}

DeviceGroup DeviceGroup::range(int64_t first, int64_t count, int64_t stride) {
  DeviceGroup g;
  for (int64_t i = 0; i < count; ++i)
    g.ranks.push_back(first + i * stride);
  return g;
}

GroupPlacement distopt::planner::placementOf(const Cluster &cluster,
                                             const DeviceGroup &group) {
  GroupPlacement p;
  p.size = group.size();
  std::map<int64_t, int64_t> perNode;
  for (int64_t r : group.ranks)
    ++perNode[cluster.nodeOf(r)];
  p.nodes = static_cast<int64_t>(perNode.size());
  for (auto &[node, count] : perNode)
    p.maxPerNode = std::max(p.maxPerNode, count);
  for (auto &[node, count] : perNode)
    p.uniform &= count == p.maxPerNode;
  return p;
}

llvm::Error distopt::planner::verifyGroup(const Cluster &cluster,
                                          const DeviceGroup &group) {
  llvm::SmallSet<int64_t, 16> seen;
  for (int64_t r : group.ranks) {
    if (r < 0 || r >= cluster.numDevices())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "device %lld is not in cluster '%s' (%lld devices)",
          static_cast<long long>(r), cluster.name.c_str(),
          static_cast<long long>(cluster.numDevices()));
    if (!seen.insert(r).second)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "device %lld appears twice in a group",
                                     static_cast<long long>(r));
  }
  return llvm::Error::success();
}

const EfficiencyProfile &distopt::planner::nominalLinks() {
  static const EfficiencyProfile nominal = [] {
    EfficiencyProfile p;
    p.intraNodeLink = 1.0;
    p.interNodeLink = 1.0;
    return p;
  }();
  return nominal;
}

static LinkParams intraLink(const Cluster &c, const EfficiencyProfile &eff) {
  return {c.intraNode.latency, c.intraNode.bandwidth * eff.intraNodeLink};
}

/// The network share of one device when `perNode` devices of its node use
/// the network at once.
static LinkParams interLinkShare(const Cluster &c, int64_t perNode,
                                 const EfficiencyProfile &eff) {
  const InterNodeLinkSpec &net = *c.interNode;
  double sharers = static_cast<double>(std::max(perNode, net.nics));
  return {net.latency, net.bandwidth * eff.interNodeLink / sharers};
}

LinkParams distopt::planner::linkFor(const Cluster &cluster,
                                     const GroupPlacement &placement,
                                     const EfficiencyProfile &eff) {
  LinkParams intra = intraLink(cluster, eff);
  if (placement.nodes <= 1 || !cluster.interNode)
    return intra;
  LinkParams inter = interLinkShare(cluster, placement.maxPerNode, eff);
  return {inter.alpha, std::min(intra.beta, inter.beta)};
}

double distopt::planner::allReduceTime(const Cluster &cluster,
                                       const DeviceGroup &group, int64_t bytes,
                                       CollectiveAlgo algo,
                                       const EfficiencyProfile &eff) {
  GroupPlacement p = placementOf(cluster, group);
  double s = static_cast<double>(bytes);
  switch (algo) {
  case CollectiveAlgo::Ring:
    return ringAllReduceTime(p.size, s, linkFor(cluster, p, eff));
  case CollectiveAlgo::Tree:
    return treeAllReduceTime(p.size, s, linkFor(cluster, p, eff));
  case CollectiveAlgo::Hierarchical: {
    if (p.nodes <= 1 || !cluster.interNode)
      return ringAllReduceTime(p.size, s, intraLink(cluster, eff));
    int64_t g = p.maxPerNode;
    LinkParams intra = intraLink(cluster, eff);
    LinkParams inter = interLinkShare(cluster, g, eff);
    return ringReduceScatterTime(g, s, intra) +
           ringAllReduceTime(p.nodes, s / static_cast<double>(g), inter) +
           ringAllGatherTime(g, s, intra);
  }
  }
  return 0;
}

std::pair<CollectiveAlgo, double>
distopt::planner::bestAllReduce(const Cluster &cluster,
                                const DeviceGroup &group, int64_t bytes,
                                const EfficiencyProfile &eff) {
  std::pair<CollectiveAlgo, double> best = {
      CollectiveAlgo::Ring,
      allReduceTime(cluster, group, bytes, CollectiveAlgo::Ring, eff)};
  for (CollectiveAlgo a :
       {CollectiveAlgo::Tree, CollectiveAlgo::Hierarchical}) {
    double t = allReduceTime(cluster, group, bytes, a, eff);
    if (t < best.second)
      best = {a, t};
  }
  return best;
}

double distopt::planner::allGatherTime(const Cluster &cluster,
                                       const DeviceGroup &group, int64_t bytes,
                                       const EfficiencyProfile &eff) {
  GroupPlacement p = placementOf(cluster, group);
  return ringAllGatherTime(p.size, static_cast<double>(bytes),
                           linkFor(cluster, p, eff));
}

double distopt::planner::reduceScatterTime(const Cluster &cluster,
                                           const DeviceGroup &group,
                                           int64_t bytes,
                                           const EfficiencyProfile &eff) {
  GroupPlacement p = placementOf(cluster, group);
  return ringReduceScatterTime(p.size, static_cast<double>(bytes),
                               linkFor(cluster, p, eff));
}

double distopt::planner::allToAllTime(const Cluster &cluster,
                                      const DeviceGroup &group, int64_t bytes,
                                      const EfficiencyProfile &eff) {
  GroupPlacement p = placementOf(cluster, group);
  return allToAllTime(p.size, static_cast<double>(bytes),
                      linkFor(cluster, p, eff));
}

double distopt::planner::pointToPointTime(const Cluster &cluster, int64_t src,
                                          int64_t dst, int64_t bytes,
                                          int64_t concurrentPerNode,
                                          const EfficiencyProfile &eff) {
  double s = static_cast<double>(bytes);
  LinkParams intra = intraLink(cluster, eff);
  if (cluster.nodeOf(src) == cluster.nodeOf(dst) || !cluster.interNode)
    return pointToPointTime(s, intra);
  LinkParams inter =
      interLinkShare(cluster, std::max<int64_t>(1, concurrentPerNode), eff);
  return pointToPointTime(s, {inter.alpha, std::min(intra.beta, inter.beta)});
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

double distopt::planner::optimizerStateBytesPerParam(Optimizer opt,
                                                     DType precision) {
  double master = isHalfPrecision(precision) ? 4 : 0; // fp32 master copy
  switch (opt) {
  case Optimizer::SGD:
    return master;
  case Optimizer::Momentum:
    return 4 + master;
  case Optimizer::Adam:
  case Optimizer::AdamW:
    return 8 + master;
  }
  return 0;
}

ModelStateMemory
distopt::planner::modelStateMemory(double params, DType precision,
                                   Optimizer opt, bool training, int zeroStage,
                                   int64_t dataParallel) {
  ModelStateMemory m;
  double bytes = dtypeBytes(precision);
  double dp = static_cast<double>(std::max<int64_t>(1, dataParallel));
  m.weights = params * bytes;
  if (!training)
    return m;
  m.gradients = params * bytes;
  m.optimizerState = params * optimizerStateBytesPerParam(opt, precision);
  if (zeroStage >= 1)
    m.optimizerState /= dp;
  if (zeroStage >= 2)
    m.gradients /= dp;
  if (zeroStage >= 3)
    m.weights /= dp;
  return m;
}

LayerActivation distopt::planner::transformerLayerActivation(
    int64_t seq, int64_t microBatch, int64_t hidden, int64_t heads,
    int64_t tensorParallel, bool sequenceParallel) {
  double s = static_cast<double>(seq), b = static_cast<double>(microBatch),
         h = static_cast<double>(hidden), a = static_cast<double>(heads),
         t = static_cast<double>(std::max<int64_t>(1, tensorParallel));
  LayerActivation l;
  double sbh = s * b * h;
  l.selectiveDropped = 5 * a * s * s * b / t;
  if (sequenceParallel) {
    l.stored = sbh / t * (34 + 5 * a * s / h);
    l.input = 2 * sbh / t;
  } else {
    l.stored = sbh * (10 + 24 / t + 5 * a * s / (h * t));
    l.input = 2 * sbh;
  }
  return l;
}

int64_t distopt::planner::microbatchesInFlight(PipelineSchedule schedule,
                                               int64_t stages,
                                               int64_t stageIndex,
                                               int64_t microbatches) {
  if (microbatches <= 0)
    return 0;
  if (schedule == PipelineSchedule::GPipe)
    return microbatches;
  return std::clamp<int64_t>(stages - stageIndex, 1, microbatches);
}

double
distopt::planner::stashedActivationBytes(llvm::ArrayRef<LayerActivation> layers,
                                         Recompute recompute) {
  double total = 0;
  for (const LayerActivation &l : layers) {
    switch (recompute) {
    case Recompute::Off:
      total += l.stored;
      break;
    case Recompute::Selective:
      total += std::max(0.0, l.stored - l.selectiveDropped);
      break;
    case Recompute::Full:
      total += l.input;
      break;
    }
  }
  return total;
}

double distopt::planner::recomputeWorkspaceBytes(
    llvm::ArrayRef<LayerActivation> layers, Recompute recompute) {
  if (recompute != Recompute::Full)
    return 0;
  double most = 0;
  for (const LayerActivation &l : layers)
    most = std::max(most, l.stored);
  return most;
}

double distopt::planner::stageActivationBytes(
    llvm::ArrayRef<LayerActivation> layers, Recompute recompute,
    PipelineSchedule schedule, int64_t stages, int64_t stageIndex,
    int64_t microbatches) {
  double inFlight = static_cast<double>(
      microbatchesInFlight(schedule, stages, stageIndex, microbatches));
  return inFlight * stashedActivationBytes(layers, recompute) +
         recomputeWorkspaceBytes(layers, recompute);
}

double distopt::planner::parameterServerExchangeTime(
    const Cluster &cluster, llvm::ArrayRef<double> shardBytes, int64_t workers,
    const EfficiencyProfile &eff) {
  int64_t servers = static_cast<int64_t>(shardBytes.size());
  // The message between worker w and server s carries s's shard; a server's
  // link carries its messages to every worker one after another, a
  // worker's its messages to every server.
  std::vector<double> serverLink(servers, 0.0), workerLink(workers, 0.0);
  for (int64_t s = 0; s < servers; ++s)
    for (int64_t w = 0; w < workers; ++w) {
      double t = pointToPointTime(
          cluster, servers + w, s,
          static_cast<int64_t>(std::llround(shardBytes[s])), 1, eff);
      serverLink[s] += t;
      workerLink[w] += t;
    }
  double slowest = 0;
  for (double t : serverLink)
    slowest = std::max(slowest, t);
  for (double t : workerLink)
    slowest = std::max(slowest, t);
  return slowest;
}
