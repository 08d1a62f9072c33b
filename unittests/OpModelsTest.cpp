//===- OpModelsTest.cpp - every dopt op answers what the stages ask -------===//
//
// Each question a stage asks of an op (DoptInterfaces.td) is answered by the
// op or, for the ops listed here, deliberately not: a new op fails this test
// until it answers or is listed, so adding an op cannot silently leave it
// replicated, unpriced or without a gradient (docs/adding-an-op.md).
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Driver/Driver.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringSet.h"

#include <gtest/gtest.h>

namespace dopt = distopt::dopt;

namespace {

/// Ops that are never split (the planner replicates them, or lays out a
/// weight as its readers want it).
const llvm::StringSet<> kReplicatedOnly = {"dopt.weight", "dopt.constant",
                                           "dopt.shape", "dopt.rng_key"};

/// Ops without a formula of their own: free (data in place, a view) or
/// priced as data movement, by their bytes (planner::estimateOpCost).
const llvm::StringSet<> kPricedByBytes = {
    "dopt.weight",  "dopt.constant",  "dopt.shape",           "dopt.rng_key",
    "dopt.reshape", "dopt.transpose", "dopt.concat",          "dopt.split",
    "dopt.expand",  "dopt.pad",       "dopt.scatter_elements"};

/// Ops without a gradient: boolean or integer results (comparisons, logic,
/// bits, index checks), no floating-point operands that could vary (weights,
/// constants, shapes, random keys), and batch_norm's inference form (a trained
/// BatchNormalization is imported as its statistics' ops).
const llvm::StringSet<> kNotDifferentiable = {
    "dopt.weight",     "dopt.constant",      "dopt.shape",
    "dopt.rng_key",    "dopt.check_indices", "dopt.batch_norm",
    "dopt.equal",      "dopt.less",          "dopt.less_equal",
    "dopt.greater",    "dopt.greater_equal", "dopt.and",
    "dopt.or",         "dopt.not",           "dopt.xor",
    "dopt.shift_left", "dopt.shift_right"};

class OpModelsTest : public ::testing::Test {
protected:
  OpModelsTest() {
    mlir::DialectRegistry registry;
    distopt::driver::registerDialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadDialect<dopt::DoptDialect, mlir::shard::ShardDialect>();
  }

  /// Every dopt op either answers (`answers`) or is in `exempt`, never
  /// both: what answering is (`what`), where an answer goes (`where`), and
  /// the exemption (`exemptAs`, the list's name `list`).
  void expectAnsweredOrExempt(
      llvm::function_ref<bool(mlir::RegisteredOperationName)> answers,
      const llvm::StringSet<> &exempt, llvm::StringRef what,
      llvm::StringRef where, llvm::StringRef exemptAs, llvm::StringRef list) {
    for (mlir::RegisteredOperationName op : ctx.getRegisteredOperations()) {
      if (op.getDialectNamespace() != dopt::DoptDialect::getDialectNamespace())
        continue;
      bool answered = answers(op);
      EXPECT_NE(answered, exempt.contains(op.getStringRef()))
          << op.getStringRef().str()
          << (answered
                  ? " has " + what.str() + " but is listed as " + exemptAs.str()
                  : " has no " + what.str() + ": give it one (" + where.str() +
                        ") or list it in " + list.str());
    }
  }

  mlir::MLIRContext ctx;
};

TEST_F(OpModelsTest, EveryOpHasAShardingRuleOrIsReplicated) {
  expectAnsweredOrExempt(
      [](mlir::RegisteredOperationName op) {
        return op.hasInterface<dopt::ShardingRuleOpInterface>() ||
               op.hasInterface<dopt::ElementwiseOpInterface>() ||
               op.getStringRef() == dopt::ExpandOp::getOperationName();
      },
      kReplicatedOnly, "a sharding rule", "lib/Planner/ShardingRules.cpp",
      "replicated only", "kReplicatedOnly");
}

TEST_F(OpModelsTest, EveryOpHasACostOrIsPricedByItsBytes) {
  expectAnsweredOrExempt(
      [](mlir::RegisteredOperationName op) {
        return op.hasInterface<dopt::CostOpInterface>() ||
               op.hasInterface<dopt::ElementwiseOpInterface>();
      },
      kPricedByBytes, "a cost formula", "lib/Planner/CostModel.cpp",
      "priced by its bytes", "kPricedByBytes");
}

TEST_F(OpModelsTest, EveryOpHasAGradientOrIsNotDifferentiable) {
  expectAnsweredOrExempt(
      [](mlir::RegisteredOperationName op) {
        return op.hasInterface<dopt::GradientOpInterface>();
      },
      kNotDifferentiable, "a gradient", "lib/Training/AutodiffRules.cpp",
      "not differentiable", "kNotDifferentiable");
}

TEST_F(OpModelsTest, TensorParallelCollectivesHaveGradients) {
  for (llvm::StringRef name : {mlir::shard::AllGatherOp::getOperationName(),
                               mlir::shard::AllSliceOp::getOperationName(),
                               mlir::shard::ReduceScatterOp::getOperationName(),
                               mlir::shard::AllToAllOp::getOperationName()}) {
    auto op = mlir::RegisteredOperationName::lookup(name, &ctx);
    ASSERT_TRUE(op.has_value()) << name.str();
    EXPECT_TRUE(op->hasInterface<dopt::GradientOpInterface>()) << name.str();
  }
}

} // namespace
