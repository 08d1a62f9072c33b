//===- SearchTest.cpp - sharding rules, intra-op ILP, plan search ---------===//
//
// Scenario tests assert the shape of the plans the search picks; the
// numbers behind them come from the cost model's formulas (CostModelTest).
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Search.h"

#include "distopt/Planner/PlanReport.h"
#include "distopt/Planner/PlanToIR.h"

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Planner/OpModels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <random>

using namespace distopt::planner;

namespace {

PlanOptions planOptions(PlanMode mode, int64_t globalBatch) {
  PlanOptions o;
  o.mode = mode;
  o.globalBatch = globalBatch;
  return o;
}

/// A search that must fail, saying each of `parts`.
void expectSearchFails(const PlanGraph &g, const Cluster &cluster,
                       const PlanOptions &options,
                       std::initializer_list<const char *> parts) {
  auto r = searchPlan(g, cluster, options);
  ASSERT_FALSE(static_cast<bool>(r)) << "the search found a plan";
  std::string msg = llvm::toString(r.takeError());
  for (const char *part : parts)
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

class PlannerTest : public ::testing::Test {
protected:
  PlannerTest() {
    mlir::DialectRegistry registry;
    registerOpModels(registry); // the ops' sharding rules and costs
    ctx.appendDialectRegistry(registry);
    ctx.loadDialect<mlir::func::FuncDialect, distopt::dopt::DoptDialect>();
  }

  mlir::func::FuncOp parse(const std::string &source) {
    module = mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
    if (!module) {
      ADD_FAILURE() << "cannot parse:\n" << source;
      return nullptr;
    }
    mlir::func::FuncOp f;
    module->walk([&](mlir::func::FuncOp op) { f = op; });
    return f;
  }

  /// `source` parsed and made a plan graph, probed at batch `probeBatch`;
  /// `batchSymbol`, when given, names the module's batch dimension.
  llvm::Expected<PlanGraph> graphOf(const std::string &source,
                                    int64_t probeBatch = 2,
                                    llvm::StringRef batchSymbol = {}) {
    mlir::func::FuncOp f = parse(source);
    if (!batchSymbol.empty())
      module->getOperation()->setAttr("dopt.batch_symbol",
                                      mlir::StringAttr::get(&ctx, batchSymbol));
    return buildPlanGraph(f, probeBatch, {});
  }

  mlir::Operation *first(llvm::StringRef name) {
    mlir::Operation *found = nullptr;
    module->walk([&](mlir::Operation *op) {
      if (!found && op->getName().getStringRef() == name)
        found = op;
    });
    return found;
  }

  llvm::SmallVector<mlir::Operation *> all(llvm::StringRef name) {
    llvm::SmallVector<mlir::Operation *> ops;
    module->walk([&](mlir::Operation *op) {
      if (op->getName().getStringRef() == name)
        ops.push_back(op);
    });
    return ops;
  }

  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

/// An input projection, then a residual MLP: `blocks` × (x + W2·relu(W1·x)),
/// x: [2, seq, hidden] (batch 2 is the probe batch), hidden → ffn → hidden.
/// Segments: the projection, then one per block.
std::string residualMLP(int blocks, int64_t seq, int64_t hidden, int64_t ffn,
                        llvm::StringRef elt = "f16") {
  std::string s;
  llvm::raw_string_ostream os(s);
  std::string act = "tensor<2x" + std::to_string(seq) + "x" +
                    std::to_string(hidden) + "x" + elt.str() + ">";
  std::string mid = "tensor<2x" + std::to_string(seq) + "x" +
                    std::to_string(ffn) + "x" + elt.str() + ">";
  std::string w1 = "tensor<" + std::to_string(hidden) + "x" +
                   std::to_string(ffn) + "x" + elt.str() + ">";
  std::string w2 = "tensor<" + std::to_string(ffn) + "x" +
                   std::to_string(hidden) + "x" + elt.str() + ">";
  std::string sq = "tensor<" + std::to_string(hidden) + "x" +
                   std::to_string(hidden) + "x" + elt.str() + ">";
  os << "func.func @main(%x: " << act << ") -> " << act << " {\n";
  // An input projection, so the residual stream is computed (model inputs
  // are readable by every stage and do not pin segment boundaries).
  os << "  %win = dopt.weight {name = \"win\", type = " << sq << "} : () -> "
     << sq << "\n";
  os << "  %x0 = dopt.matmul %x, %win : (" << act << ", " << sq << ") -> "
     << act << "\n";
  std::string x = "%x0";
  for (int b = 0; b < blocks; ++b) {
    std::string i = std::to_string(b);
    os << "  %w1_" << i << " = dopt.weight {name = \"w1_" << i
       << "\", type = " << w1 << "} : () -> " << w1 << "\n";
    os << "  %h_" << i << " = dopt.matmul " << x << ", %w1_" << i << " : ("
       << act << ", " << w1 << ") -> " << mid << "\n";
    os << "  %g_" << i << " = dopt.relu %h_" << i << " : (" << mid << ") -> "
       << mid << "\n";
    os << "  %w2_" << i << " = dopt.weight {name = \"w2_" << i
       << "\", type = " << w2 << "} : () -> " << w2 << "\n";
    os << "  %o_" << i << " = dopt.matmul %g_" << i << ", %w2_" << i << " : ("
       << mid << ", " << w2 << ") -> " << act << "\n";
    os << "  %r_" << i << " = dopt.add " << x << ", %o_" << i << " : (" << act
       << ", " << act << ") -> " << act << "\n";
    x = "%r_" + i;
  }
  os << "  return " << x << " : " << act << "\n}\n";
  return s;
}

/// The summary `distopt plan` would print, for failure messages.
std::string summary(const PlanGraph &g, const Cluster &c, const PlanOptions &o,
                    const PlanResult &r) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printPlanSummary(os, {g, c, o, r, PlanContext{"test", c.name}});
  return s;
}

Cluster preset(llvm::StringRef spec) {
  auto c = resolveCluster(spec);
  EXPECT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  return *c;
}

//===----------------------------------------------------------------------===//
// Sharding rules
//===----------------------------------------------------------------------===//

TEST_F(PlannerTest, MatMulRuleHasBatchRowsColumnsAndAReduction) {
  parse(R"(func.func @f(%a: tensor<4x8x16xf32>, %b: tensor<16x32xf32>) -> tensor<4x8x32xf32> {
  %0 = dopt.matmul %a, %b : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  return %0 : tensor<4x8x32xf32>
})");
  auto rule = getShardingRule(first("dopt.matmul"));
  ASSERT_TRUE(rule);
  ASSERT_EQ(rule->factors.size(), 4u); // batch, M, N, K
  int64_t k = rule->operandDims[0][2];
  EXPECT_EQ(rule->factors[k].kind, FactorKind::Reduction);
  EXPECT_EQ(rule->operandDims[1][0], k);
  int64_t n = rule->operandDims[1][1];
  EXPECT_EQ(rule->resultDims[0][2], n);
  EXPECT_EQ(rule->resultDims[0][0], rule->operandDims[0][0]);
  EXPECT_EQ(rule->resultDim(0, k), -1);
}

TEST_F(PlannerTest, ReshapeSplitsTheMajorDimensionOfAMergedGroup) {
  parse(R"(func.func @f(%a: tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32> {
  %0 = dopt.reshape %a {shape = array<i64: 2, 16, 4, 8>} : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
  return %0 : tensor<2x16x4x8xf32>
})");
  auto rule = getShardingRule(first("dopt.reshape"));
  ASSERT_TRUE(rule);
  // [.., 32] -> [.., 4, 8]: splitting 32 is splitting the 4 heads.
  EXPECT_EQ(rule->operandDims[0][2], rule->resultDims[0][2]);
  EXPECT_NE(rule->resultDims[0][3], rule->operandDims[0][2]);
  EXPECT_EQ(rule->operandDims[0][0], rule->resultDims[0][0]);
}

TEST_F(PlannerTest, ReshapeSharesOnlyAtomsMajorOnBothSides) {
  // MultiheadAttention's [T, B, D] -> [T, B*H, D/H]: the batch is the major
  // atom of B*H (shared); the heads are major in D but minor in B*H, so D
  // and D/H are not split by this op.
  parse(R"(func.func @f(%a: tensor<8x4x32xf32>, %b: tensor<64x32xf32>, %c: tensor<6x4xf32>) -> tensor<8x16x8xf32> {
  %0 = dopt.reshape %a {shape = array<i64: 8, 16, 8>} : (tensor<8x4x32xf32>) -> tensor<8x16x8xf32>
  %1 = dopt.reshape %b {shape = array<i64: 8, 8, 32>} : (tensor<64x32xf32>) -> tensor<8x8x32xf32>
  %2 = dopt.reshape %c {shape = array<i64: 4, 6>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  return %0 : tensor<8x16x8xf32>
})");
  llvm::SmallVector<mlir::Operation *> reshapes = all("dopt.reshape");
  ASSERT_EQ(reshapes.size(), 3u);
  auto heads = getShardingRule(reshapes[0]);
  ASSERT_TRUE(heads);
  EXPECT_EQ(heads->operandDims[0][0], heads->resultDims[0][0]);
  EXPECT_GE(heads->operandDims[0][1], 0);
  EXPECT_EQ(heads->operandDims[0][1], heads->resultDims[0][1]);
  EXPECT_EQ(heads->factors[heads->operandDims[0][1]].size, 4);
  EXPECT_EQ(heads->operandDims[0][2], -1);
  EXPECT_EQ(heads->resultDims[0][2], -1);
  // [T*B, D] -> [T, B, D]: B is minor in T*B: the result's B is not a
  // factor (splitting it would need a slice of a replicated operand).
  auto unfold = getShardingRule(reshapes[1]);
  ASSERT_TRUE(unfold);
  EXPECT_EQ(unfold->operandDims[0][0], unfold->resultDims[0][0]);
  EXPECT_EQ(unfold->factors[unfold->resultDims[0][0]].size, 8);
  EXPECT_EQ(unfold->resultDims[0][1], -1);
  EXPECT_EQ(unfold->operandDims[0][1], unfold->resultDims[0][2]);
  // [6, 4] -> [4, 6] has no common refinement: nothing splits.
  auto odd = getShardingRule(reshapes[2]);
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->operandDims[0], (llvm::SmallVector<int64_t, 4>{-1, -1}));
  EXPECT_EQ(odd->resultDims[0], (llvm::SmallVector<int64_t, 4>{-1, -1}));
}

TEST_F(PlannerTest, BatchIsFollowedThroughHeadFoldingReshapes) {
  // [T=4, B=2, D=32] -> [T, B*H, hd] -> [T*B, D] -> [T, B, D]: the batch is
  // the major part of B*H (4 below it), then the minor part of T*B.
  auto g = graphOf(
      R"(func.func @f(%x: tensor<4x2x32xf32> {dopt.symbolic_dims = ["seq", "batch", ""]}) -> tensor<4x2x32xf32> {
  %0 = dopt.reshape %x {shape = array<i64: 4, 8, 8>} : (tensor<4x2x32xf32>) -> tensor<4x8x8xf32>
  %1 = dopt.transpose %0 {perm = array<i64: 1, 0, 2>} : (tensor<4x8x8xf32>) -> tensor<8x4x8xf32>
  %2 = dopt.exp %1 : (tensor<8x4x8xf32>) -> tensor<8x4x8xf32>
  %3 = dopt.transpose %2 {perm = array<i64: 1, 0, 2>} : (tensor<8x4x8xf32>) -> tensor<4x8x8xf32>
  %4 = dopt.reshape %3 {shape = array<i64: 8, 32>} : (tensor<4x8x8xf32>) -> tensor<8x32xf32>
  %5 = dopt.reshape %4 {shape = array<i64: 4, 2, 32>} : (tensor<8x32xf32>) -> tensor<4x2x32xf32>
  return %5 : tensor<4x2x32xf32>
})",
      2, "batch");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->batchMixer, -1) << g->batchMixerWhy;
  auto batchOf = [&](unsigned node) {
    const PlanTensor &t = g->tensors[g->nodes[node].results[0]];
    return std::make_pair(t.batchDim, t.batchInner);
  };
  EXPECT_EQ(g->tensors[0].batchDim, 1); // the argument: dimension 1
  EXPECT_EQ(batchOf(0), std::make_pair(int64_t(1), int64_t(4)));
  EXPECT_EQ(batchOf(1), std::make_pair(int64_t(0), int64_t(4)));
  EXPECT_EQ(batchOf(4), std::make_pair(int64_t(0), int64_t(1)));
  EXPECT_EQ(batchOf(5), std::make_pair(int64_t(1), int64_t(1)));
}

TEST_F(PlannerTest, CopiesAlongAFoldedBatchAreCutLikeIt) {
  // [B=2, 4, 3] -> [B*H=8, 3], read with a mask expanded over the rows and
  // with positions expanded over them then index-checked and cast: both
  // are the same at every row, so they are cut like the batch (B*H, 4
  // below it) instead of refusing data parallelism.
  auto g = graphOf(
      R"(func.func @f(%x: tensor<2x4x3xf32> {dopt.symbolic_dims = ["batch", "", ""]}) -> (tensor<2x4x3xf32>, tensor<2x4x3xf32>) {
  %0 = dopt.reshape %x {shape = array<i64: 8, 3>} : (tensor<2x4x3xf32>) -> tensor<8x3xf32>
  %m = dopt.constant {value = dense<[1.0, 0.0, 1.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %mb = dopt.expand %m {shape = array<i64: 8, 3>} : (tensor<3xf32>) -> tensor<8x3xf32>
  %1 = dopt.mul %0, %mb : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %p = dopt.constant {value = dense<[[0, 2, 4]]> : tensor<1x3xi64>} : () -> tensor<1x3xi64>
  %pb = dopt.expand %p {shape = array<i64: 8, 3>} : (tensor<1x3xi64>) -> tensor<8x3xi64>
  %pc = dopt.check_indices %pb {extent = 5 : i64, what = "p"} : (tensor<8x3xi64>) -> tensor<8x3xi64>
  %pf = dopt.cast %pc {to = f32} : (tensor<8x3xi64>) -> tensor<8x3xf32>
  %2 = dopt.add %0, %pf : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
  %3 = dopt.reshape %1 {shape = array<i64: 2, 4, 3>} : (tensor<8x3xf32>) -> tensor<2x4x3xf32>
  %4 = dopt.reshape %2 {shape = array<i64: 2, 4, 3>} : (tensor<8x3xf32>) -> tensor<2x4x3xf32>
  return %3, %4 : tensor<2x4x3xf32>, tensor<2x4x3xf32>
})",
      2, "batch");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->batchMixer, -1) << g->batchMixerWhy;
  for (const PlanNode &n : g->nodes)
    if (llvm::isa<distopt::dopt::ExpandOp, distopt::dopt::CheckIndicesOp,
                  distopt::dopt::CastOp>(n.op)) {
      const PlanTensor &t = g->tensors[n.results[0]];
      EXPECT_EQ(std::make_pair(t.batchDim, t.batchInner),
                std::make_pair(int64_t(0), int64_t(4)))
          << n.op->getName().getStringRef().str();
    }
}

TEST_F(PlannerTest, AConstantWhoseRowsDifferAlongTheBatchIsAMixer) {
  auto g = graphOf(
      R"(func.func @f(%x: tensor<2x4x3xf32> {dopt.symbolic_dims = ["batch", "", ""]}) -> tensor<2x4x3xf32> {
  %0 = dopt.reshape %x {shape = array<i64: 8, 3>} : (tensor<2x4x3xf32>) -> tensor<8x3xf32>
  %c = dopt.constant {value = dense<[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]> : tensor<8x1xf32>} : () -> tensor<8x1xf32>
  %1 = dopt.add %0, %c : (tensor<8x3xf32>, tensor<8x1xf32>) -> tensor<8x3xf32> loc("rows")
  %2 = dopt.reshape %1 {shape = array<i64: 2, 4, 3>} : (tensor<8x3xf32>) -> tensor<2x4x3xf32>
  return %2 : tensor<2x4x3xf32>
})",
      2, "batch");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  ASSERT_GE(g->batchMixer, 0);
  EXPECT_NE(g->batchMixerWhy.find("node 'rows' ('dopt.add'): its operand 1 has "
                                  "the batch's size but does not carry the batch"),
            std::string::npos)
      << g->batchMixerWhy;
}

TEST_F(PlannerTest, ModelsThatMixSamplesAreNotSplitByBatch) {
  // [B=2, 3] -> [3, 2] scatters every sample over both rows.
  auto g = graphOf(
      R"(func.func @f(%x: tensor<2x3xf32> {dopt.symbolic_dims = ["batch", ""]}) -> tensor<3x2xf32> {
  %0 = dopt.reshape %x {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32> loc("mix")
  %w = dopt.weight {name = "w", type = tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %1 = dopt.matmul %0, %w : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
})");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  ASSERT_EQ(g->batchMixer, 0);
  EXPECT_NE(g->batchMixerWhy.find("node 'mix'"), std::string::npos)
      << g->batchMixerWhy;
  PlanOptions o = planOptions(PlanMode::Infer, 2);
  o.dp = 2;
  expectSearchFails(*g, preset("local:2"), o,
                    {"--dp 2 splits the batch, but node 'mix'"});
  // Unforced, the search offers no data parallelism and no micro-batches.
  o.dp.reset();
  auto best = searchPlan(*g, preset("local:2"), o);
  ASSERT_TRUE(static_cast<bool>(best)) << llvm::toString(best.takeError());
  EXPECT_EQ(best->best.dp, 1);
  EXPECT_EQ(best->best.microbatches, 1);
}

TEST_F(PlannerTest, SumsAndMeansOverTheBatchSplitOverReplicas) {
  // Batch norm's statistic in training form: a mean over N and the
  // features. Not a mixer: each replica reduces its samples and an
  // all-reduce completes it, priced and listed; micro-batches and a dp that
  // does not divide the batch are refused.
  auto g = graphOf(
      R"(func.func @f(%x: tensor<4x8xf32> {dopt.symbolic_dims = ["batch", ""]}) -> tensor<4x8xf32> {
  %w = dopt.weight {name = "w", type = tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %0 = dopt.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = dopt.reduce_mean %0 {axes = array<i64: 0>, keepdims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32> loc("stat")
  %2 = dopt.sub %0, %1 : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
})",
      4);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->batchMixer, -1) << g->batchMixerWhy;
  ASSERT_EQ(g->batchReductions.size(), 1u);
  const PlanNode &stat = g->nodes[g->batchReductions[0]];
  EXPECT_EQ(stat.dataReduction, PartialKind::Mean);
  EXPECT_EQ(g->tensors[stat.results[0]].batchDim, -1);
  EXPECT_NE(g->batchReductionWhy.find("node 'stat'"), std::string::npos)
      << g->batchReductionWhy;
  PlanOptions o = planOptions(PlanMode::Train, 4);
  o.dp = 2;
  auto r = searchPlan(*g, preset("local:2"), o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->best.dp, 2);
  EXPECT_EQ(r->best.microbatches, 1);
  // Forward and backward, 8 floats each.
  ASSERT_EQ(r->best.dataCollectives.size(), 2u);
  EXPECT_FALSE(r->best.dataCollectives[0].backward);
  EXPECT_TRUE(r->best.dataCollectives[1].backward);
  EXPECT_EQ(r->best.dataCollectives[0].bytes, 32.0);
  EXPECT_GT(r->best.dataCollectives[0].time, 0.0);
  // Forced micro-batches, an uneven split: refused, naming the node.
  o.dp = 1;
  o.microbatches = 2;
  expectSearchFails(*g, preset("local:2"), o,
                    {"--microbatches 2 splits the batch, but node 'stat'"});
  o.microbatches.reset();
  o.dp = 3;
  expectSearchFails(*g, preset("local:4"), o,
                    {"--dp 3 does not divide the global batch of 4"});
  // Unforced, the search never splits such a batch into micro-batches.
  o.dp.reset();
  auto best = searchPlan(*g, preset("local:4"), o);
  ASSERT_TRUE(static_cast<bool>(best)) << llvm::toString(best.takeError());
  EXPECT_EQ(best->best.microbatches, 1);
}

TEST_F(PlannerTest, NoStageBoundaryWhileABatchStatisticIsRead) {
  // After %1 one activation is live -- a cut, were it not for the mean
  // over the batch (%m) that %2 still reads: its adjoint's shares must be
  // summed where it was made, so the cut waits until after %2.
  auto g = graphOf(
      R"(func.func @f(%x: tensor<4x8xf32> {dopt.symbolic_dims = ["batch", ""]}) -> tensor<4x8xf32> {
  %w1 = dopt.weight {name = "w1", type = tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %w2 = dopt.weight {name = "w2", type = tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %w3 = dopt.weight {name = "w3", type = tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %0 = dopt.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %m = dopt.reduce_mean %0 {axes = array<i64: 0>, keepdims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %1 = dopt.matmul %0, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("after_mm")
  %2 = dopt.sub %1, %m : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32> loc("after_sub")
  %3 = dopt.matmul %2, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
})",
      4);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto nodeName = [](mlir::Location loc) {
    auto n = llvm::dyn_cast<mlir::NameLoc>(loc);
    return n ? n.getName().str() : std::string();
  };
  ASSERT_GE(g->segments.size(), 2u);
  for (const Segment &s : g->segments) {
    ASSERT_GT(s.end, 0);
    mlir::Operation *last = g->nodes[s.end - 1].op;
    EXPECT_NE(nodeName(last->getLoc()), "after_mm")
        << "a stage boundary while the batch mean is still read";
  }
  EXPECT_TRUE(llvm::any_of(g->segments, [&](const Segment &s) {
    return nodeName(g->nodes[s.end - 1].op->getLoc()) == "after_sub";
  })) << "no boundary once the mean is read";
}

TEST_F(PlannerTest, SoftmaxAxisAndConcatRules) {
  parse(R"(func.func @f(%a: tensor<2x6x8xf32>, %x: tensor<2x8x8xf32>) -> tensor<2x6x8xf32> {
  %0 = dopt.softmax %a {axis = 2 : i64} : (tensor<2x6x8xf32>) -> tensor<2x6x8xf32>
  %1:2 = dopt.split %0 {axis = 1 : i64, sizes = array<i64: 2, 4>} : (tensor<2x6x8xf32>) -> (tensor<2x2x8xf32>, tensor<2x4x8xf32>)
  %w = dopt.weight {name = "qkv", type = tensor<8x6xf32>} : () -> tensor<8x6xf32>
  %2 = dopt.matmul %x, %w : (tensor<2x8x8xf32>, tensor<8x6xf32>) -> tensor<2x8x6xf32>
  %3:2 = dopt.split %2 {axis = 2 : i64, sizes = array<i64: 2, 4>} : (tensor<2x8x6xf32>) -> (tensor<2x8x2xf32>, tensor<2x8x4xf32>)
  return %0 : tensor<2x6x8xf32>
})");
  auto softmax = getShardingRule(first("dopt.softmax"));
  ASSERT_TRUE(softmax);
  EXPECT_EQ(softmax->factors[softmax->operandDims[0][2]].kind,
            FactorKind::NeedReplication);
  llvm::SmallVector<mlir::Operation *> splits = all("dopt.split");
  ASSERT_EQ(splits.size(), 2u);
  // A softmax cannot be made in a block layout: its split keeps the axis
  // whole.
  auto fromSoftmax = getShardingRule(splits[0]);
  ASSERT_TRUE(fromSoftmax);
  EXPECT_EQ(fromSoftmax->operandDims[0][1], -1);
  // A weight GEMM can (fused QKV): parts of 2 and 4 columns, the axis factor
  // has the gcd, 2, in a block layout.
  auto fused = getShardingRule(splits[1]);
  ASSERT_TRUE(fused);
  int64_t f = fused->operandDims[0][2];
  ASSERT_GE(f, 0);
  EXPECT_EQ(fused->factors[f].size, 2);
  EXPECT_EQ(fused->resultDims[1][2], f);
}

TEST_F(PlannerTest, AttentionSplitsItsHeadsAndQueriesNotItsKeys) {
  parse(R"(func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x32x16xf32>, %v: tensor<2x4x32x6xf32>, %keep: tensor<1x1x8x32xi1>) -> tensor<2x4x8x6xf32> {
  %0 = dopt.attention %q, %k, %v keep %keep {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x6xf32>, tensor<1x1x8x32xi1>) -> tensor<2x4x8x6xf32>
  return %0 : tensor<2x4x8x6xf32>
})");
  auto rule = getShardingRule(first("dopt.attention"));
  ASSERT_TRUE(rule);
  ASSERT_EQ(rule->operandDims.size(), 4u);
  auto kind = [&](int64_t factor) { return rule->factors[factor].kind; };
  // Batch, heads, queries and the values' width: parallel, shared by the
  // operands that have them and the result.
  for (int64_t d : {0, 1, 2})
    EXPECT_EQ(kind(rule->resultDims[0][d]), FactorKind::Parallel) << d;
  EXPECT_EQ(rule->operandDims[0][1], rule->resultDims[0][1]);
  EXPECT_EQ(rule->operandDims[1][1], rule->resultDims[0][1]);
  EXPECT_EQ(rule->operandDims[2][3], rule->resultDims[0][3]);
  EXPECT_EQ(kind(rule->resultDims[0][3]), FactorKind::Parallel);
  // The keys and the contracted width: never split.
  EXPECT_EQ(kind(rule->operandDims[1][2]), FactorKind::NeedReplication);
  EXPECT_EQ(kind(rule->operandDims[0][3]), FactorKind::NeedReplication);
  // The mask broadcasts over batch and heads, follows the queries and keys.
  EXPECT_EQ(rule->operandDims[3][0], -1);
  EXPECT_EQ(rule->operandDims[3][2], rule->resultDims[0][2]);
  EXPECT_EQ(rule->operandDims[3][3], rule->operandDims[1][2]);
}

TEST_F(PlannerTest, ConcatenatedBranchesAreNotABlockLayout) {
  // Two branches concatenated along the channels and read whole by a
  // matmul (an Inception or Fire module) keep the axis whole; the same
  // concatenation split again into its parts (through an elementwise op)
  // may hold the block layout.
  parse(R"(func.func @f(%a: tensor<2x4xf32>, %b: tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x4xf32>) {
  %0 = dopt.concat %a, %b {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x8xf32>) -> tensor<2x12xf32>
  %w = dopt.weight {name = "w", type = tensor<12x3xf32>} : () -> tensor<12x3xf32>
  %1 = dopt.matmul %0, %w : (tensor<2x12xf32>, tensor<12x3xf32>) -> tensor<2x3xf32>
  %2 = dopt.concat %a, %b {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x8xf32>) -> tensor<2x12xf32>
  %3 = dopt.relu %2 : (tensor<2x12xf32>) -> tensor<2x12xf32>
  %4:2 = dopt.split %3 {axis = 1 : i64, sizes = array<i64: 4, 8>} : (tensor<2x12xf32>) -> (tensor<2x4xf32>, tensor<2x8xf32>)
  return %1, %4#0 : tensor<2x3xf32>, tensor<2x4xf32>
})");
  llvm::SmallVector<mlir::Operation *> concats = all("dopt.concat");
  ASSERT_EQ(concats.size(), 2u);
  auto branches = getShardingRule(concats[0]);
  ASSERT_TRUE(branches);
  EXPECT_EQ(branches->resultDims[0][1], -1);
  auto undone = getShardingRule(concats[1]);
  ASSERT_TRUE(undone);
  int64_t f = undone->resultDims[0][1];
  ASSERT_GE(f, 0);
  EXPECT_EQ(undone->factors[f].size, 4);
}

TEST_F(PlannerTest, EmbeddingGatherOverVocabularyIsAPartialSum) {
  parse(R"(func.func @f(%i: tensor<2x16xi64>) -> tensor<2x16x64xf32> {
  %w = dopt.weight {name = "wte", type = tensor<1000x64xf32>} : () -> tensor<1000x64xf32>
  %0 = dopt.gather %w, %i {axis = 0 : i64} : (tensor<1000x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  return %0 : tensor<2x16x64xf32>
})");
  auto rule = getShardingRule(first("dopt.gather"));
  ASSERT_TRUE(rule);
  int64_t vocab = rule->operandDims[0][0];
  EXPECT_EQ(rule->factors[vocab].kind, FactorKind::Reduction);
  EXPECT_EQ(rule->resultDims[0][2], rule->operandDims[0][1]);
  EXPECT_EQ(rule->resultDims[0][0], rule->operandDims[1][0]);
}

//===----------------------------------------------------------------------===//
// Graph: batch analysis, segments, classes
//===----------------------------------------------------------------------===//

TEST_F(PlannerTest, SegmentsAreCutWhereOneActivationIsLive) {
  auto f = parse(residualMLP(3, 4, 64, 256, "f32"));
  ASSERT_TRUE(f);
  auto g = buildPlanGraph(f, 2, {});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  // The projection, then one segment per residual block, all of one class.
  ASSERT_EQ(g->segments.size(), 4u);
  EXPECT_EQ(g->numClasses, 2u);
  for (const Segment &s : g->segments) {
    EXPECT_GE(s.output, 0);
    EXPECT_EQ(s.classId, &s == &g->segments.front() ? 0u : 1u);
  }
  EXPECT_DOUBLE_EQ(g->parameters, 64 * 64 + 3 * 2 * 64 * 256);
  // Every activation carries the batch in dimension 0; weights carry none.
  for (const PlanTensor &t : g->tensors)
    EXPECT_EQ(t.batchDim, t.shape.size() == 3 ? 0 : -1);
  // FLOPs per sample: 2 matmuls of 2·4·64·256 per block, plus the relu and
  // the add (one FLOP per element each).
  double perBlock = 2 * (2.0 * 4 * 64 * 256) + 4 * 256 + 4 * 64;
  EXPECT_DOUBLE_EQ(g->forwardFlopsPerSample(), 2.0 * 4 * 64 * 64 + 3 * perBlock);
}

TEST_F(PlannerTest, GraphErrors) {
  auto g = graphOf(R"(func.func @f(%a: tensor<3x8xf32>) -> tensor<3x8xf32> {
  return %a : tensor<3x8xf32>
})");
  ASSERT_FALSE(static_cast<bool>(g));
  EXPECT_NE(llvm::toString(g.takeError()).find("batch (size 2)"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Partitioning
//===----------------------------------------------------------------------===//

TEST(Partition, GreedyBisectionMatchesTheDynamicProgram) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.1, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    int64_t n = 1 + rng() % 14;
    int64_t parts = 1 + rng() % n;
    std::vector<double> times(n), mem(n);
    for (int64_t i = 0; i < n; ++i) {
      times[i] = time(rng);
      mem[i] = time(rng);
    }
    // Memory cap that shrinks with the part index, like 1F1B's in-flight
    // micro-batches (earlier stages hold more).
    double cap = 8 + (rng() % 20);
    auto fits = [&](int64_t k, int64_t i, int64_t j) {
      double m = 0;
      for (int64_t x = i; x < j; ++x)
        m += mem[x];
      return m * static_cast<double>(parts - k) <= cap * parts;
    };
    double dp = minMaxPartitionDP(times, parts, fits);
    std::vector<int64_t> starts;
    double greedy = minMaxPartitionGreedy(times, parts, fits, &starts);
    if (dp < 0) {
      EXPECT_LT(greedy, 0) << "trial " << trial;
      continue;
    }
    ASSERT_GE(greedy, 0) << "trial " << trial;
    EXPECT_NEAR(greedy, dp, 1e-9 * dp) << "trial " << trial;
    EXPECT_EQ(static_cast<int64_t>(starts.size()), parts);
  }
}

//===----------------------------------------------------------------------===//
// Intra-op ILP
//===----------------------------------------------------------------------===//

TEST_F(PlannerTest, MegatronMLPSplitIsColumnThenRow) {
  auto f = parse(residualMLP(1, 2048, 8192, 32768));
  ASSERT_TRUE(f);
  auto g = buildPlanGraph(f, 2, {});
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster node = preset("dgx-a100x8");
  EfficiencyProfile eff;
  IntraOpOptions io;
  io.tensorParallel = 8;
  io.microBatch = 2;
  io.batchScale = 1;
  io.cluster = &node;
  io.efficiency = &eff;
  io.kCompute = 3;
  io.kForward = 1;
  io.kBackward = 1;
  auto sol = solveSegment(*g, 1, kReplicated, kReplicated, io);
  ASSERT_TRUE(static_cast<bool>(sol)) << llvm::toString(sol.takeError());
  // The first matmul splits its output columns (N), the second its
  // contraction (K): W1 by columns, W2 by rows.
  std::vector<int64_t> matmulFactors;
  for (const NodeChoice &choice : sol->choices) {
      int64_t node = choice.node, factor = choice.factor;
    const PlanNode &n = g->nodes[node];
    if (!llvm::isa<distopt::dopt::MatMulOp>(n.op))
      continue;
    ASSERT_GE(factor, 0);
    matmulFactors.push_back(factor);
    FactorKind kind = n.rule->factors[factor].kind;
    if (matmulFactors.size() == 1) {
      EXPECT_EQ(kind, FactorKind::Parallel);
      EXPECT_EQ(n.rule->resultDim(0, factor), 2);
    } else {
      EXPECT_EQ(kind, FactorKind::Reduction);
    }
  }
  ASSERT_EQ(matmulFactors.size(), 2u);
  EXPECT_DOUBLE_EQ(sol->localParams, 2.0 * 8192 * 32768 / 8);
  EXPECT_EQ(sol->choices.size(), 6u); // 2 weights, 2 matmuls, relu, add
  // Forward: one all-reduce of the block's output (input and output are
  // replicated), backward: one all-reduce of the input's gradient —
  // Megatron's g and f operators.
  int fwd = 0, bwd = 0;
  double outBytes = 2.0 * 2048 * 8192 * 2;
  for (const PlannedCollective &c : sol->collectives) {
    EXPECT_EQ(c.kind, CollectiveKind::AllReduce);
    EXPECT_DOUBLE_EQ(c.bytes, outBytes);
    (c.backward ? bwd : fwd) += 1;
  }
  EXPECT_EQ(fwd, 1);
  EXPECT_EQ(bwd, 1);
}

TEST_F(PlannerTest, VariableEliminationMatchesTheILP) {
  // Residual MLP blocks are forests once the boundary input is fixed; a
  // block whose two branches rejoin (x·A and x·B multiplied) has a cycle.
  // Both are solved exactly by variable elimination; CBC takes a problem
  // only when elimination's tables would exceed their limit.
  auto f = parse(residualMLP(2, 64, 512, 2048));
  auto g = buildPlanGraph(f, 2, {});
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster node = preset("dgx-a100x8");
  EfficiencyProfile eff;
  int compared = 0;
  for (int64_t t : {2, 4, 8})
    for (double scale : {0.5, 1.0, 8.0})
      for (bool train : {false, true})
        for (unsigned seg = 0; seg < g->segments.size(); ++seg) {
          IntraOpOptions io;
          io.tensorParallel = t;
          io.batchScale = scale;
          io.microBatch = static_cast<int64_t>(2 * scale);
          io.cluster = &node;
          io.efficiency = &eff;
          io.kCompute = train ? 3 : 1;
          io.kBackward = train ? 1 : 0;
          for (int64_t out : boundaryStates(*g, g->segments[seg].output, io)) {
            io.solver = IntraOpSolver::ILP;
            auto ilp = solveSegment(*g, seg, kReplicated, out, io);
            io.solver = IntraOpSolver::Elimination;
            auto dp = solveSegment(*g, seg, kReplicated, out, io);
            ASSERT_TRUE(static_cast<bool>(ilp)) << llvm::toString(ilp.takeError());
            ASSERT_TRUE(static_cast<bool>(dp)) << llvm::toString(dp.takeError());
            EXPECT_NEAR(dp->objective, ilp->objective, 1e-9 * ilp->objective);
            ++compared;
          }
        }
  EXPECT_GT(compared, 50);

  auto cyclic = parse(R"(func.func @f(%x: tensor<2x64x512xf32>) -> tensor<2x64x512xf32> {
  %a = dopt.weight {name = "a", type = tensor<512x512xf32>} : () -> tensor<512x512xf32>
  %b = dopt.weight {name = "b", type = tensor<512x512xf32>} : () -> tensor<512x512xf32>
  %w = dopt.weight {name = "w", type = tensor<512x512xf32>} : () -> tensor<512x512xf32>
  %h = dopt.matmul %x, %w : (tensor<2x64x512xf32>, tensor<512x512xf32>) -> tensor<2x64x512xf32>
  %h2 = dopt.relu %h : (tensor<2x64x512xf32>) -> tensor<2x64x512xf32>
  %p = dopt.matmul %h2, %a : (tensor<2x64x512xf32>, tensor<512x512xf32>) -> tensor<2x64x512xf32>
  %q = dopt.matmul %h2, %b : (tensor<2x64x512xf32>, tensor<512x512xf32>) -> tensor<2x64x512xf32>
  %r = dopt.mul %p, %q : (tensor<2x64x512xf32>, tensor<2x64x512xf32>) -> tensor<2x64x512xf32>
  return %r : tensor<2x64x512xf32>
})");
  auto g2 = buildPlanGraph(cyclic, 2, {});
  ASSERT_TRUE(static_cast<bool>(g2));
  IntraOpOptions io;
  io.tensorParallel = 4;
  io.cluster = &node;
  io.efficiency = &eff;
  unsigned last = g2->segments.size() - 1;
  io.solver = IntraOpSolver::ILP;
  auto ilp = solveSegment(*g2, last, kReplicated, kReplicated, io);
  ASSERT_TRUE(static_cast<bool>(ilp)) << llvm::toString(ilp.takeError());
  EXPECT_TRUE(ilp->usedILP);
  io.solver = IntraOpSolver::Auto;
  auto cyclic2 = solveSegment(*g2, last, kReplicated, kReplicated, io);
  ASSERT_TRUE(static_cast<bool>(cyclic2));
  EXPECT_FALSE(cyclic2->usedILP);
  EXPECT_NEAR(cyclic2->objective, ilp->objective, 1e-9 * ilp->objective);
  // Too wide for the limit: Elimination refuses, Auto hands it to CBC.
  io.eliminationLimit = 4;
  io.solver = IntraOpSolver::Elimination;
  auto narrow = solveSegment(*g2, last, kReplicated, kReplicated, io);
  ASSERT_FALSE(static_cast<bool>(narrow));
  EXPECT_NE(llvm::toString(narrow.takeError()).find("too wide"),
            std::string::npos);
  io.solver = IntraOpSolver::Auto;
  auto any = solveSegment(*g2, last, kReplicated, kReplicated, io);
  ASSERT_TRUE(static_cast<bool>(any));
  EXPECT_TRUE(any->usedILP);
  EXPECT_NEAR(any->objective, ilp->objective, 1e-9 * ilp->objective);
}

TEST_F(PlannerTest, OneDeviceMeansEverythingReplicated) {
  auto g = graphOf(residualMLP(1, 16, 64, 256, "f32"));
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster c = preset("dgx-a100x8");
  EfficiencyProfile eff;
  IntraOpOptions io;
  io.cluster = &c;
  io.efficiency = &eff;
  auto sol = solveSegment(*g, 0, kReplicated, kReplicated, io);
  ASSERT_TRUE(static_cast<bool>(sol));
  EXPECT_TRUE(sol->collectives.empty());
  for (const NodeChoice &choice : sol->choices)
    EXPECT_EQ(choice.factor, kReplicated);
}

//===----------------------------------------------------------------------===//
// Scenarios
//===----------------------------------------------------------------------===//

PlanOptions training(int64_t batch, DType precision = DType::FP16) {
  PlanOptions o = planOptions(PlanMode::Train, batch);
  o.precision = precision;
  return o;
}

TEST_F(PlannerTest, SmallModelOnManyGPUsIsPureDataParallel) {
  auto g = graphOf(residualMLP(4, 128, 1024, 4096));
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster c = preset("8xdgx-a100x8");
  auto r = searchPlan(*g, c, training(1024));
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->best.tp, 1) << summary(*g, c, training(1024), *r);
  EXPECT_EQ(r->best.pp, 1);
  EXPECT_GE(r->best.dp, 32);
  EXPECT_TRUE(r->best.fits);
}

TEST_F(PlannerTest, MLPTooBigForOneGPUIsSplitInsideTheNode) {
  // 4 blocks of 2·16384·65536 parameters: 8.6 G parameters, 137 GB of
  // fp16 Adam state: no single 80 GB GPU holds it.
  auto g = graphOf(residualMLP(4, 512, 16384, 65536));
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster c = preset("dgx-a100x8");
  PlanOptions o = training(16);
  o.pp = 1; // the column-then-row split itself, without a pipeline
  auto r = searchPlan(*g, c, o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  const Plan &p = r->best;
  EXPECT_GE(p.tp, 2);
  EXPECT_TRUE(p.fits);
  EXPECT_LE(p.peakMemory, static_cast<double>(c.device.memoryCapacity));
  // Every block: first matmul split by columns, second by rows, and the
  // communication of one all-reduce of the block output per direction (an
  // all-reduce, or its two halves: reduce-scatter then all-gather, when the
  // residual add runs sequence-split as in Megatron-SP).
  for (size_t s = 1; s < g->segments.size(); ++s) {
    const SegmentSolution *sol = p.segmentSolutions[s];
    int matmuls = 0;
    for (const NodeChoice &choice : sol->choices) {
      int64_t node = choice.node, factor = choice.factor;
      const PlanNode &n = g->nodes[node];
      if (!llvm::isa<distopt::dopt::MatMulOp>(n.op))
        continue;
      ASSERT_GE(factor, 0);
      FactorKind kind = n.rule->factors[factor].kind;
      EXPECT_EQ(kind, matmuls == 0 ? FactorKind::Parallel
                                   : FactorKind::Reduction);
      ++matmuls;
    }
    EXPECT_EQ(matmuls, 2);
    double fwdVolume = 0;
    for (const PlannedCollective &c : sol->collectives)
      if (!c.backward)
        fwdVolume += c.kind == CollectiveKind::AllReduce ? 2 * c.bytes
                                                         : c.bytes;
    double blockOutput = (16.0 / p.dp / p.microbatches) * 512 * 16384 * 2;
    // The last block may also gather a sequence-split model output: a
    // training loss takes whole rows.
    double want = 2 * blockOutput;
    if (s + 1 == g->segments.size() && fwdVolume > 2.5 * blockOutput)
      want += blockOutput;
    EXPECT_NEAR(fwdVolume, want, 1e-6 * blockOutput) << "segment " << s;
  }
}

/// `nodes` nodes of 8 A100s joined by the link `interNode` (YAML).
llvm::Expected<Cluster> a100Nodes(llvm::StringRef name, int nodes,
                                  llvm::StringRef interNode) {
  std::string yaml =
      (llvm::Twine("name: ") + name + "\nnodes: " + llvm::Twine(nodes) + R"(
devices_per_node: 8
device:
  name: A100
  peak_flops: {fp32: 19.5e12, tf32: 156e12, bf16: 312e12, fp16: 312e12}
  memory_bandwidth: 2.039e12
  memory_capacity: 85899345920
links:
  intra_node: {bandwidth: 300e9, latency: 3.4e-6}
  inter_node: )" +
       interNode + "\n")
          .str();
  return parseCluster(yaml, (name + ".yaml").str());
}

TEST_F(PlannerTest, DeepModelOverSlowNetworkPipelinesAcrossNodes) {
  // 4 nodes of 8 GPUs joined by 10 Gb/s Ethernet.
  auto c =
      a100Nodes("slow-net", 4, "{bandwidth: 1.25e9, latency: 20e-6, nics: 1}");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  auto g = graphOf(residualMLP(32, 512, 8192, 32768));
  ASSERT_TRUE(static_cast<bool>(g));
  auto r = searchPlan(*g, *c, training(64));
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  const Plan &p = r->best;
  // Stages span the nodes; tensor parallelism stays inside one.
  EXPECT_GE(p.pp, 2);
  EXPECT_GT(p.tp, 1);
  EXPECT_LE(p.tp * p.dp, c->devicesPerNode);
  for (const StagePlan &s : p.stages)
    EXPECT_EQ(c->nodeOf(s.firstDevice),
              c->nodeOf(s.firstDevice + s.numDevices - 1));
}

TEST_F(PlannerTest, SaturatedNetworkUsesFewerMachines) {
  // Two nodes on 1 Gb/s: replicating 2 G parameters' gradients over it
  // costs far more than the second node's compute saves.
  auto c =
      a100Nodes("gigabit", 2, "{bandwidth: 0.125e9, latency: 50e-6, nics: 1}");
  ASSERT_TRUE(static_cast<bool>(c));
  auto g = graphOf(residualMLP(2, 128, 8192, 32768));
  ASSERT_TRUE(static_cast<bool>(g));
  auto r = searchPlan(*g, *c, training(64));
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_LE(r->best.devices(), c->devicesPerNode);
}

TEST_F(PlannerTest, ModelThatFitsNowhereNamesTheMemoryItNeeds) {
  auto g = graphOf(residualMLP(8, 512, 16384, 65536));
  ASSERT_TRUE(static_cast<bool>(g));
  expectSearchFails(*g, preset("local:2"), training(8, DType::FP32),
                    {"does not fit", "GiB per device"});
}

TEST_F(PlannerTest, ForcedDegreesAreObeyedOrRejectedWithTheReason) {
  auto g = graphOf(residualMLP(4, 64, 256, 1024, "f32"));
  ASSERT_TRUE(static_cast<bool>(g));
  Cluster c = preset("dgx-a100x8");
  PlanOptions o = training(8, DType::FP32);
  o.dp = 2;
  o.tp = 2;
  o.pp = 2;
  o.microbatches = 2;
  o.recompute = Recompute::Full;
  auto r = searchPlan(*g, c, o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->best.dp, 2);
  EXPECT_EQ(r->best.tp, 2);
  EXPECT_EQ(r->best.pp, 2);
  EXPECT_EQ(r->best.microbatches, 2);
  EXPECT_EQ(r->best.microbatchSize, 2);
  EXPECT_EQ(r->best.recompute, Recompute::Full);
  EXPECT_NEAR(r->best.stepTime,
              r->best.compute + r->best.communication + r->best.bubble,
              1e-12 * r->best.stepTime);

  PlanOptions bad = training(6, DType::FP32);
  bad.dp = 7;
  expectSearchFails(*g, c, bad, {"--dp 7 exceeds the global batch of 6"});
  // A forced degree may split the batch unevenly (replicas of ceil(B/dp)).
  PlanOptions uneven = training(6, DType::FP32);
  uneven.dp = 4;
  uneven.pp = 1;
  auto u = searchPlan(*g, c, uneven);
  ASSERT_TRUE(static_cast<bool>(u)) << llvm::toString(u.takeError());
  EXPECT_EQ(u->best.dp, 4);
  EXPECT_EQ(u->best.microbatches * u->best.microbatchSize, 2);
  PlanOptions tooMany = training(8, DType::FP32);
  tooMany.dp = 4;
  tooMany.tp = 4;
  expectSearchFails(*g, c, tooMany, {"need 16 devices"});
  PlanOptions deep = training(8, DType::FP32);
  deep.pp = 6;
  expectSearchFails(*g, c, deep, {"--pp 6 exceeds the 5 segments"});
}

TEST_F(PlannerTest, CollectiveCheckCatchesAProgramThatDrifted) {
  // A tensor-parallel plan prices collectives; a program without them (here
  // the unpartitioned one) must be refused, listing both sides.
  auto g = graphOf(residualMLP(1, 512, 4096, 16384));
  ASSERT_TRUE(static_cast<bool>(g));
  PlanOptions o = planOptions(PlanMode::Infer, 8);
  o.tp = 8;
  o.dp = 1;
  o.pp = 1;
  auto r = searchPlan(*g, preset("dgx-a100x8"), o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  bool priced = false;
  for (const SegmentSolution *sol : r->best.segmentSolutions)
    priced |= !sol->collectives.empty();
  ASSERT_TRUE(priced);
  llvm::Error e = checkPlannedCollectives(*module, r->best);
  ASSERT_TRUE(static_cast<bool>(e));
  std::string msg = llvm::toString(std::move(e));
  EXPECT_NE(msg.find("planned:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("program:"), std::string::npos) << msg;
}

} // namespace
