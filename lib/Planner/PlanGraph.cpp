//===- PlanGraph.cpp - the planner's view of a dopt function --------------===//

#include "distopt/Planner/PlanGraph.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"

#include <map>
#include <set>

using namespace distopt::planner;
namespace dopt = distopt::dopt;
using llvm::ArrayRef;
using llvm::SmallVector;

double PlanTensor::elements() const {
  double n = 1;
  for (int64_t d : shape)
    n *= static_cast<double>(d);
  return n;
}

double PlanGraph::forwardFlopsPerSample() const {
  double flops = 0;
  for (const PlanNode &node : nodes)
    flops += node.cost.flops / (node.batchScaled ? probeBatch : 1);
  return flops;
}

namespace {

double elemBytesOf(mlir::Type elt, const CostOptions &options) {
  if (llvm::isa<mlir::FloatType>(elt))
    return options.precision ? dtypeBytes(*options.precision)
                             : std::max(1u, elt.getIntOrFloatBitWidth() / 8);
  if (elt.isIntOrFloat())
    return std::max(1u, (elt.getIntOrFloatBitWidth() + 7) / 8);
  return 0;
}

/// The ONNX node name of an op: the first NameLoc in its location.
std::string nodeName(mlir::Location loc) {
  if (auto name = llvm::dyn_cast<mlir::NameLoc>(loc))
    return name.getName().str();
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location inner : fused.getLocations()) {
      std::string n = nodeName(inner);
      if (!n.empty())
        return n;
    }
  return "";
}

std::string commonPrefixLabel(const PlanGraph &g, const Segment &s) {
  std::optional<std::string> prefix;
  for (int64_t i = s.begin; i < s.end; ++i) {
    if (g.nodes[i].kind != NodeKind::Compute)
      continue;
    std::string name = nodeName(g.nodes[i].op->getLoc());
    if (name.empty())
      continue;
    if (!prefix) {
      prefix = name;
      continue;
    }
    size_t n = 0;
    while (n < prefix->size() && n < name.size() && (*prefix)[n] == name[n])
      ++n;
    prefix->resize(n);
  }
  if (!prefix || prefix->empty())
    return "";
  // Cut back to a path boundary unless the whole name matched.
  size_t slash = prefix->rfind('/');
  if (slash != std::string::npos && slash + 1 < prefix->size())
    prefix->resize(slash + 1);
  while (prefix->size() > 1 && prefix->back() == '/')
    prefix->pop_back();
  return *prefix;
}

llvm::hash_code attrHashWithoutNames(mlir::Operation *op) {
  if (llvm::isa<dopt::WeightOp>(op))
    return llvm::hash_value(op->getResult(0).getType().getAsOpaquePointer());
  return llvm::hash_value(op->getAttrDictionary().getAsOpaquePointer());
}

llvm::hash_code segmentHash(const PlanGraph &g, const Segment &s) {
  llvm::hash_code h = llvm::hash_value(s.end - s.begin);
  for (int64_t i = s.begin; i < s.end; ++i) {
    const PlanNode &node = g.nodes[i];
    h = llvm::hash_combine(h, node.op->getName().getAsOpaquePointer(),
                           attrHashWithoutNames(node.op));
    for (int64_t r : node.results)
      h = llvm::hash_combine(
          h, g.tensors[r].value.getType().getAsOpaquePointer());
    for (int64_t t : node.operands) {
      const PlanTensor &tensor = g.tensors[t];
      if (tensor.producer >= s.begin && tensor.producer < s.end) {
        h = llvm::hash_combine(h, 1, tensor.producer - s.begin,
                               tensor.resultIndex);
        continue;
      }
      h = llvm::hash_combine(h, 2, tensor.value.getType().getAsOpaquePointer(),
                             tensor.producer < 0 ? 0 : 1);
      if (tensor.producer >= 0 &&
          g.nodes[tensor.producer].kind != NodeKind::Compute)
        h = llvm::hash_combine(h, attrHashWithoutNames(
                                      g.nodes[tensor.producer].op));
    }
  }
  return h;
}

/// Where the batch of a reshape's operand (dimension `dim`, `inner`
/// elements below it) lands in its result: the reshape keeps the row-major
/// order, so the batch is the run of flat strides [inner * S, inner * S *
/// batch) with S the stride of `dim`; it survives when one result
/// dimension holds that whole run. Returns {dim, inner} or {-1, 0}.
std::pair<int64_t, int64_t> reshapeBatch(ArrayRef<int64_t> in,
                                         ArrayRef<int64_t> out, int64_t dim,
                                         int64_t inner, int64_t batch) {
  int64_t stride = inner;
  for (size_t d = dim + 1; d < in.size(); ++d)
    stride *= in[d];
  int64_t s = 1; // stride of result dimension e
  for (int64_t e = static_cast<int64_t>(out.size()) - 1; e >= 0; --e) {
    int64_t next = s * out[e];
    if (s <= stride && stride * batch <= next && stride % s == 0 &&
        next % (stride * batch) == 0 && out[e] != 1)
      return {e, stride / s};
    s = next;
  }
  return {-1, 0};
}

std::string batchMixerReason(mlir::Operation &op, const std::string &why) {
  std::string s = "'" + op.getName().getStringRef().str() + "'";
  std::string name = nodeName(op.getLoc());
  if (!name.empty())
    s = "node '" + name + "' (" + s + ")";
  return s + ": " + why;
}

/// Whether tensor `t` holds the same values at every index of dimension
/// `d` -- a constant uniform along it (a mask ConstantOfShape made from the
/// batch's size, folded at import), an expand along it of a tensor without
/// it (relative positions broadcast over batch x heads), or either through
/// one-operand elementwise ops (an index check, a cast) -- so that a
/// replica may take any share of it. If so, marks the tensors on the way as
/// carrying the batch there (`inner` elements below it), as the reader
/// needs them.
bool copiesAlong(PlanGraph &g, int64_t t, int64_t d, int64_t inner,
                 unsigned depth = 0) {
  PlanTensor &tensor = g.tensors[t];
  if (tensor.producer < 0 || depth > 8)
    return false;
  mlir::Operation *op = g.nodes[tensor.producer].op;
  bool copies = false;
  if (auto c = llvm::dyn_cast<dopt::ConstantOp>(op)) {
    auto value = llvm::dyn_cast<mlir::DenseElementsAttr>(c.getValue());
    copies = value && dopt::isUniformAlong(value, d);
  } else if (auto e = llvm::dyn_cast<dopt::ExpandOp>(op)) {
    auto in = llvm::cast<mlir::RankedTensorType>(e.getInput().getType());
    int64_t o = d - static_cast<int64_t>(tensor.shape.size()) + in.getRank();
    copies = o < 0 || in.getDimSize(o) == 1;
  } else if (llvm::isa<dopt::ElementwiseOpInterface>(op) &&
             op->getNumOperands() == 1 &&
             g.nodes[tensor.producer].operands.size() == 1) {
    int64_t src = g.nodes[tensor.producer].operands[0];
    copies = g.tensors[src].shape == tensor.shape &&
             (g.tensors[src].batchDim == d ||
              copiesAlong(g, src, d, inner, depth + 1));
  }
  if (copies) {
    tensor.batchDim = d;
    tensor.batchInner = inner;
  }
  return copies;
}

/// Batch analysis of one compute node: which dimension of each result
/// carries the batch, following the sharding rule (or, for reshapes, the
/// flat layout). Fails when the node reads the batch and a result no
/// longer carries it as one block.
mlir::LogicalResult propagateBatch(PlanGraph &g, PlanNode &node,
                                   int64_t probeBatch, std::string &why) {
  int64_t batchFactor = -1, inner = 1;
  int64_t first = -1;
  for (auto [i, t] : llvm::enumerate(node.operands)) {
    const PlanTensor &tensor = g.tensors[t];
    if (tensor.batchDim < 0)
      continue;
    node.batchScaled = true;
    if (first < 0) {
      first = t;
      if (node.rule) {
        batchFactor = node.rule->operandDims[i][tensor.batchDim];
        inner = tensor.batchInner;
      }
      continue;
    }
    // Every operand must hold the batch on the same loop factor: one that
    // holds it elsewhere (attention scores over a "batch" that is really
    // the sequence) combines different samples.
    if (node.rule && (node.rule->operandDims[i][tensor.batchDim] !=
                          batchFactor ||
                      tensor.batchInner != inner)) {
      why = "it combines the batch of operand " + std::to_string(i) +
            " with another dimension";
      return mlir::failure();
    }
  }
  if (first < 0) {
    // An expand of a tensor without a batch to the batch's size (BERT's
    // token types, ViT's class token, a causal mask broadcast over the
    // batch): its rows are copies, so each replica expands to its own
    // batch. The size is checked again at the real batch (rebind).
    if (!llvm::isa<dopt::ExpandOp>(node.op))
      return mlir::success();
    const PlanTensor &in = g.tensors[node.operands[0]];
    PlanTensor &out = g.tensors[node.results[0]];
    int64_t offset = static_cast<int64_t>(out.shape.size() - in.shape.size());
    for (auto [d, size] : llvm::enumerate(out.shape)) {
      int64_t o = static_cast<int64_t>(d) - offset;
      if (size == probeBatch && size > 1 && (o < 0 || in.shape[o] == 1)) {
        out.batchDim = static_cast<int64_t>(d);
        out.batchInner = 1;
        break;
      }
    }
    return mlir::success();
  }
  // Operands without the batch must not be read along the batch factor:
  // each replica would need its own slice of them -- unless the operand is
  // the same at every index there (copiesAlong): then it is cut like the
  // batch, each replica keeping its share.
  if (node.rule && batchFactor >= 0)
    for (auto [i, t] : llvm::enumerate(node.operands)) {
      int64_t d = node.rule->operandDim(i, batchFactor);
      if (g.tensors[t].batchDim >= 0 || d < 0)
        continue;
      if (g.tensors[t].shape[d] % (probeBatch * inner) == 0 &&
          copiesAlong(g, t, d, inner))
        continue;
      why = "its operand " + std::to_string(i) +
            " has the batch's size but does not carry the batch";
      return mlir::failure();
    }
  // A sum or mean over the batch (batch norm's statistics): no result keeps
  // the batch factor, a reduction whose partial results add up (or average,
  // over equal shares). Replicas reduce their own samples and all-reduce.
  if (node.rule && batchFactor >= 0 && inner == 1 &&
      !llvm::isa<dopt::ReshapeOp>(node.op)) {
    const Factor &f = node.rule->factors[batchFactor];
    bool kept = false;
    for (unsigned r = 0; r < node.results.size(); ++r)
      kept |= node.rule->resultDim(r, batchFactor) >= 0;
    if (!kept && f.kind == FactorKind::Reduction &&
        f.partial != PartialKind::Max) {
      node.dataReduction = f.partial;
      return mlir::success();
    }
  }
  bool ok = true;
  for (auto [r, t] : llvm::enumerate(node.results)) {
    PlanTensor &tensor = g.tensors[t];
    if (llvm::isa<dopt::ReshapeOp>(node.op)) {
      const PlanTensor &in = g.tensors[first];
      auto [dim, in2] = reshapeBatch(in.shape, tensor.shape, in.batchDim,
                                     in.batchInner, probeBatch);
      tensor.batchDim = dim;
      tensor.batchInner = dim >= 0 ? in2 : 1;
    } else if (batchFactor >= 0) {
      tensor.batchDim = node.rule->resultDim(r, batchFactor);
      tensor.batchInner = inner;
    } else if (!node.rule && !tensor.shape.empty() &&
               tensor.shape[0] == probeBatch) {
      tensor.batchDim = 0; // no rule: assume the batch stays in front
    }
    ok &= tensor.batchDim >= 0;
  }
  if (!ok)
    why = node.rule ? "its result does not carry the batch as one block"
                    : "distopt has no sharding rule for it";
  return mlir::success(ok);
}

} // namespace

int64_t distopt::planner::argumentBatchDim(mlir::Operation *funcOp,
                                           unsigned arg) {
  auto func = llvm::cast<mlir::func::FuncOp>(funcOp);
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(
      func.getArgument(arg).getType());
  if (!type || type.getRank() == 0)
    return -1;
  auto symbolsOf = [&](unsigned i) {
    return func.getArgAttrOfType<mlir::ArrayAttr>(i, "dopt.symbolic_dims");
  };
  auto module = func->getParentOfType<mlir::ModuleOp>();
  auto batch = module ? module->getAttrOfType<mlir::StringAttr>(
                            "dopt.batch_symbol")
                      : nullptr;
  if (batch) {
    if (auto dims = symbolsOf(arg))
      for (auto [d, name] : llvm::enumerate(dims))
        if (llvm::cast<mlir::StringAttr>(name) == batch)
          return static_cast<int64_t>(d);
    return -1;
  }
  // IR without the importer's batch symbol: dimension 0 of the inputs left
  // symbolic there, or of every input when none is.
  auto symbolicDim0 = [&](unsigned i) {
    auto dims = symbolsOf(i);
    return dims && !dims.empty() &&
           !llvm::cast<mlir::StringAttr>(dims[0]).getValue().empty();
  };
  bool any = false;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    any |= symbolicDim0(i);
  return !any || symbolicDim0(arg) ? 0 : -1;
}

llvm::Expected<PlanGraph>
distopt::planner::buildPlanGraph(mlir::Operation *funcOp, int64_t probeBatch,
                                 const CostOptions &options) {
  auto func = llvm::dyn_cast<mlir::func::FuncOp>(funcOp);
  if (!func || func.getBody().getBlocks().size() != 1)
    return llvm::createStringError(
        "the planner needs a function with one straight-line block");
  PlanGraph g;
  g.probeBatch = probeBatch;
  g.costOptions = options;
  llvm::DenseMap<mlir::Value, int64_t> tensorOf;

  auto addTensor = [&](mlir::Value v, int64_t producer,
                       unsigned resultIndex) -> llvm::Expected<int64_t> {
    auto type = llvm::dyn_cast<mlir::RankedTensorType>(v.getType());
    if (!type || !type.hasStaticShape())
      return llvm::createStringError(
          "the planner needs static shapes; bind symbolic dimensions with "
          "--dim NAME=VALUE");
    PlanTensor t;
    t.value = v;
    t.shape.assign(type.getShape().begin(), type.getShape().end());
    t.elemBytes = elemBytesOf(type.getElementType(), options);
    t.isFloat = llvm::isa<mlir::FloatType>(type.getElementType());
    t.producer = producer;
    t.resultIndex = resultIndex;
    g.tensors.push_back(std::move(t));
    int64_t id = static_cast<int64_t>(g.tensors.size()) - 1;
    tensorOf[v] = id;
    return id;
  };

  bool anyBatch = false;
  for (mlir::BlockArgument arg : func.getArguments()) {
    auto id = addTensor(arg, -1, arg.getArgNumber());
    if (!id)
      return id.takeError();
    PlanTensor &t = g.tensors[*id];
    int64_t d = argumentBatchDim(func, arg.getArgNumber());
    if (d >= 0 && t.shape[d] == probeBatch) {
      t.batchDim = d;
      anyBatch = true;
    }
  }
  if (!anyBatch)
    return llvm::createStringError(
        "no model input has the batch (size " + std::to_string(probeBatch) +
        ") as its batch dimension");

  SmallVector<int64_t> graphOutputs;
  for (mlir::Operation &op : func.getBody().front()) {
    if (llvm::isa<mlir::func::ReturnOp>(op)) {
      for (mlir::Value v : op.getOperands())
        graphOutputs.push_back(tensorOf.lookup(v));
      continue;
    }
    PlanNode node;
    node.op = &op;
    if (llvm::isa<dopt::WeightOp>(op))
      node.kind = NodeKind::Weight;
    else if (op.getNumOperands() == 0)
      node.kind = NodeKind::Constant;
    int64_t index = static_cast<int64_t>(g.nodes.size());
    for (mlir::Value v : op.getOperands()) {
      auto it = tensorOf.find(v);
      if (it == tensorOf.end())
        return llvm::createStringError("operand defined outside the function");
      node.operands.push_back(it->second);
      g.tensors[it->second].uses.push_back(
          {index, static_cast<unsigned>(node.operands.size() - 1)});
    }
    for (mlir::OpResult r : op.getResults()) {
      auto id = addTensor(r, index, r.getResultNumber());
      if (!id)
        return id.takeError();
      node.results.push_back(*id);
    }
    if (node.kind == NodeKind::Compute) {
      node.cost = estimateOpCost(&op, options);
      node.rule = getShardingRule(&op);
      // Batch analysis.
      std::string why;
      if (failed(propagateBatch(g, node, probeBatch, why)) &&
          g.batchMixer < 0) {
        g.batchMixer = index;
        g.batchMixerWhy = batchMixerReason(op, why);
      }
      if (node.dataReduction) {
        if (g.batchReductions.empty())
          g.batchReductionWhy = batchMixerReason(
              op, *node.dataReduction == PartialKind::Mean
                      ? "it averages over the batch"
                      : "it sums over the batch");
        g.batchReductions.push_back(index);
      }
      if (llvm::isa<dopt::MatMulOp, dopt::GemmOp>(op)) {
        // Operands computed from weights alone (a transposed weight) count
        // as weights.
        node.activationGemm = llvm::all_of(node.operands, [&](int64_t t) {
          return g.tensors[t].batchDim >= 0;
        });
      }
    } else if (node.kind == NodeKind::Constant) {
      // A constant of the batch's size whose samples are all the same (a
      // mask or token-type ids broadcast over the batch, folded by the
      // importer) is cut like the batch: each replica keeps its share.
      auto c = llvm::dyn_cast<dopt::ConstantOp>(op);
      PlanTensor &t = g.tensors[node.results[0]];
      if (c && probeBatch > 1 && t.shape.size() >= 2 &&
          t.shape[0] == probeBatch)
        if (auto value = llvm::dyn_cast<mlir::DenseElementsAttr>(c.getValue()))
          if (dopt::isUniformAlong(value, 0))
            t.batchDim = 0;
    } else if (node.kind == NodeKind::Weight) {
      g.parameters += g.tensors[node.results[0]].elements();
    }
    g.nodes.push_back(std::move(node));
  }

  // Segmentation: cut after node p when exactly one activation produced by
  // a compute node is live and the segment since the last cut holds a GEMM
  // or convolution. Activations are the batch-carrying tensors; model
  // inputs do not count (every stage reads them), nor do weights and what
  // is computed from weights alone.
  int64_t n = static_cast<int64_t>(g.nodes.size());
  std::vector<int64_t> lastUse(g.tensors.size(), -1);
  for (auto [id, t] : llvm::enumerate(g.tensors))
    for (auto [user, operand] : t.uses)
      lastUse[id] = std::max(lastUse[id], user);
  for (int64_t t : graphOutputs)
    lastUse[t] = n;
  g.outputs.assign(graphOutputs.begin(), graphOutputs.end());
  // The runtime splits and joins model outputs along their batch
  // dimension: the batch must be that whole dimension.
  for (auto [i, t] : llvm::enumerate(g.outputs)) {
    const PlanTensor &out = g.tensors[t];
    if (g.batchMixer < 0 && out.batchDim >= 0 &&
        out.shape[out.batchDim] != probeBatch) {
      g.batchMixer = out.producer;
      g.batchMixerWhy = "model output " + std::to_string(i) +
                        ": it holds the batch inside a merged dimension";
    }
  }
  auto isActivation = [&](int64_t t) {
    const PlanTensor &tensor = g.tensors[t];
    return tensor.producer >= 0 && tensor.batchDim >= 0 &&
           g.nodes[tensor.producer].kind == NodeKind::Compute;
  };
  // A batch statistic (a sum or mean over the batch, and what is computed
  // from such values without the batch) must not cross a stage boundary:
  // its adjoint's shares are summed over the replicas where it was made
  // (distopt-autodiff), which a stage receiving it cannot do. No cut while
  // one is read later (a model output -- batch norm's running statistics --
  // has no adjoint to sum and does not count).
  std::vector<bool> statistic(g.tensors.size(), false);
  for (int64_t p = 0; p < n; ++p) {
    const PlanNode &node = g.nodes[p];
    bool fromStatistic =
        node.dataReduction.has_value() ||
        llvm::any_of(node.operands, [&](int64_t t) { return statistic[t]; });
    if (fromStatistic)
      for (int64_t r : node.results)
        statistic[r] = g.tensors[r].batchDim < 0;
  }
  std::vector<int64_t> statisticsLive(n + 1, 0);
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (!statistic[t])
      continue;
    int64_t lastRead = -1;
    for (auto [user, operand] : g.tensors[t].uses)
      lastRead = std::max(lastRead, user);
    if (lastRead > g.tensors[t].producer) {
      statisticsLive[g.tensors[t].producer] += 1;
      statisticsLive[lastRead] -= 1;
    }
  }
  for (int64_t p = 1; p <= n; ++p)
    statisticsLive[p] += statisticsLive[p - 1];
  // live[p]: activations live after node p (defined at <= p, used > p).
  std::vector<int64_t> liveCount(n, 0), liveOne(n, -1);
  {
    std::vector<int64_t> delta(n + 1, 0);
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      if (!isActivation(t) || lastUse[t] <= g.tensors[t].producer)
        continue;
      // live after producer .. lastUse-1
      delta[g.tensors[t].producer] += 1;
      delta[lastUse[t]] -= 1;
    }
    int64_t running = 0;
    for (int64_t p = 0; p < n; ++p) {
      running += delta[p];
      liveCount[p] = running;
    }
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      if (!isActivation(t))
        continue;
      int64_t from = g.tensors[t].producer;
      for (int64_t p = from; p < std::min(lastUse[t], n); ++p)
        if (liveCount[p] == 1)
          liveOne[p] = static_cast<int64_t>(t);
    }
  }
  Segment current;
  bool heavy = false;
  for (int64_t p = 0; p < n; ++p) {
    const PlanNode &node = g.nodes[p];
    if (node.kind == NodeKind::Compute &&
        (node.cost.opClass == OpClass::Gemm || node.cost.opClass == OpClass::Conv))
      heavy = true;
    if (p + 1 < n && heavy && liveCount[p] == 1 && liveOne[p] >= 0 &&
        statisticsLive[p] == 0 && node.kind == NodeKind::Compute) {
      current.end = p + 1;
      current.output = liveOne[p];
      g.segments.push_back(current);
      current = Segment();
      current.begin = p + 1;
      current.input = liveOne[p];
      heavy = false;
    }
  }
  current.end = n;
  current.output = graphOutputs.empty() ? -1 : graphOutputs.front();
  if (!g.segments.empty() && !heavy) {
    // A tail without heavy ops joins the segment before it.
    g.segments.back().end = n;
    g.segments.back().output = current.output;
  } else {
    g.segments.push_back(current);
  }

  // Weights read in more than one segment.
  {
    std::vector<int64_t> segmentOf(n, -1);
    for (auto [si, s] : llvm::enumerate(g.segments))
      for (int64_t i = s.begin; i < s.end; ++i)
        segmentOf[i] = static_cast<int64_t>(si);
    for (PlanNode &node : g.nodes) {
      if (node.kind != NodeKind::Weight)
        continue;
      std::set<int64_t> segs;
      for (auto [user, operand] : g.tensors[node.results[0]].uses)
        segs.insert(segmentOf[user]);
      node.sharedAcrossSegments = segs.size() > 1;
    }
  }

  std::map<size_t, unsigned> classes;
  for (Segment &s : g.segments) {
    size_t h = segmentHash(g, s);
    auto [it, inserted] = classes.try_emplace(h, g.numClasses);
    if (inserted)
      ++g.numClasses;
    s.classId = it->second;
    s.label = commonPrefixLabel(g, s);
  }
  return g;
}

llvm::Expected<PlanGraph>
distopt::planner::rebindPlanGraph(const PlanGraph &graph,
                                  mlir::Operation *funcOp) {
  auto func = llvm::dyn_cast<mlir::func::FuncOp>(funcOp);
  if (!func || func.getBody().getBlocks().size() != 1)
    return llvm::createStringError("expected a function with one block");
  PlanGraph g = graph;
  std::vector<mlir::Operation *> ops;
  for (mlir::Operation &op : func.getBody().front())
    if (!llvm::isa<mlir::func::ReturnOp>(op))
      ops.push_back(&op);
  bool same = ops.size() == g.nodes.size() &&
              func.getNumArguments() ==
                  static_cast<unsigned>(llvm::count_if(
                      g.tensors, [](const PlanTensor &t) {
                        return t.producer < 0;
                      }));
  for (size_t i = 0; same && i < ops.size(); ++i)
    same = ops[i]->getName() == g.nodes[i].op->getName() &&
           ops[i]->getNumResults() == g.nodes[i].results.size();
  if (!same)
    return llvm::createStringError(
        "the model's graph changes with the batch size; cannot write the "
        "plan onto it");
  for (size_t i = 0; i < ops.size(); ++i) {
    g.nodes[i].op = ops[i];
    for (auto [r, tid] : llvm::enumerate(g.nodes[i].results))
      g.tensors[tid].value = ops[i]->getResult(r);
  }
  for (PlanTensor &t : g.tensors)
    if (t.producer < 0)
      t.value = func.getArgument(t.resultIndex);
  // The batch analysis ran at the probe batch: every tensor it says carries
  // the batch must have grown with it (an expand to a size that only
  // matched the probe would not).
  int64_t batch = -1;
  for (const PlanTensor &t : g.tensors)
    if (t.producer < 0 && t.batchDim >= 0)
      batch = llvm::cast<mlir::RankedTensorType>(t.value.getType())
                  .getDimSize(t.batchDim);
  for (const PlanTensor &t : g.tensors) {
    if (t.batchDim < 0 || batch < 0 || g.probeBatch <= 0)
      continue;
    int64_t real = llvm::cast<mlir::RankedTensorType>(t.value.getType())
                       .getDimSize(t.batchDim);
    if (t.shape[t.batchDim] % g.probeBatch != 0 ||
        real != t.shape[t.batchDim] / g.probeBatch * batch)
      return llvm::createStringError(
          "a tensor the batch analysis took for batch-carrying does not "
          "grow with the batch; the plan cannot be written onto the model");
  }
  return g;
}
