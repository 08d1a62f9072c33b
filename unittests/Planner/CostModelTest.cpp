//===- CostModelTest.cpp - every cost formula against hand-computed values ===//
//
// Each expectation shows its arithmetic in a comment.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/CostModel.h"

#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Planner/OpModels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace distopt::planner;

namespace {

//===----------------------------------------------------------------------===//
// Per-op FLOPs and bytes
//===----------------------------------------------------------------------===//

class OpCostTest : public ::testing::Test {
protected:
  OpCostTest() {
    mlir::DialectRegistry registry;
    registerOpModels(registry); // the ops' sharding rules and costs
    ctx.appendDialectRegistry(registry);
    ctx.loadDialect<mlir::func::FuncDialect, mlir::scf::SCFDialect,
                    mlir::arith::ArithDialect, distopt::dopt::DoptDialect>();
  }

  /// Parses `source` (a module) and returns the cost of the first op named
  /// `opName` in it.
  OpCost costOf(llvm::StringRef opName, llvm::StringRef source,
                const CostOptions &opts = {}) {
    module = mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
    if (!module) {
      ADD_FAILURE() << "cannot parse:\n" << source.str();
      return OpCost();
    }
    mlir::Operation *found = nullptr;
    module->walk([&](mlir::Operation *op) {
      if (!found && op->getName().getStringRef() == opName)
        found = op;
    });
    if (!found) {
      ADD_FAILURE() << "no " << opName.str();
      return OpCost();
    }
    return estimateOpCost(found, opts);
  }

  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

void expectCost(const OpCost &c, double flops, double bytesRead,
                double bytesWritten) {
  EXPECT_DOUBLE_EQ(c.flops, flops);
  EXPECT_DOUBLE_EQ(c.bytesRead, bytesRead);
  EXPECT_DOUBLE_EQ(c.bytesWritten, bytesWritten);
}

TEST_F(OpCostTest, BatchedMatMul) {
  OpCost c = costOf("dopt.matmul", R"(
func.func @f(%a: tensor<4x8x16xf32>, %b: tensor<4x16x32xf32>) -> tensor<4x8x32xf32> {
  %0 = dopt.matmul %a, %b : (tensor<4x8x16xf32>, tensor<4x16x32xf32>) -> tensor<4x8x32xf32>
  return %0 : tensor<4x8x32xf32>
})");
  EXPECT_EQ(c.opClass, OpClass::Gemm);
  EXPECT_EQ(c.dtype, DType::FP32);
  // FLOPs: 2·batch·M·N·K = 2·4·8·32·16 = 32768; read: (4·8·16 + 4·16·32)·4 B
  // = (512 + 2048)·4 = 10240; written: 4·8·32·4 B = 4096.
  expectCost(c, 32768, 10240, 4096);
}

TEST_F(OpCostTest, AttentionCountsItsProductsAndSoftmaxNotItsScores) {
  OpCost c = costOf("dopt.attention", R"(
func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x32x16xf32>, %v: tensor<2x4x32x8xf32>) -> tensor<2x4x8x8xf32> {
  %0 = dopt.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x8xf32>) -> tensor<2x4x8x8xf32>
  return %0 : tensor<2x4x8x8xf32>
})");
  EXPECT_EQ(c.opClass, OpClass::Gemm);
  // S = 2·4·8·32 = 2048 scores: 2·S·16 + 2·S·8 + 5·S = 108544 FLOPs. Its
  // operands, (1024 + 4096 + 2048)·4 B, and output, 512·4 B: no scores.
  expectCost(c, 108544, 28672, 2048);
}

TEST_F(OpCostTest, BroadcastAndVectorMatMul) {
  OpCost c = costOf("dopt.matmul", R"(
func.func @f(%a: tensor<2x1x8x16xf16>, %b: tensor<3x16x4xf16>) -> tensor<2x3x8x4xf16> {
  %0 = dopt.matmul %a, %b : (tensor<2x1x8x16xf16>, tensor<3x16x4xf16>) -> tensor<2x3x8x4xf16>
  return %0 : tensor<2x3x8x4xf16>
})");
  EXPECT_EQ(c.dtype, DType::FP16);
  // Broadcast batch 2·3: 2·(2·3·8·4)·16 = 2·192·16 = 6144 FLOPs;
  // (2·8·16 + 3·16·4)·2 B = (256 + 192)·2 = 896 read; out 192·2 = 384
  expectCost(c, 6144, 896, 384);

  OpCost v = costOf("dopt.matmul", R"(
func.func @f(%a: tensor<16xf32>, %b: tensor<16x4xf32>) -> tensor<4xf32> {
  %0 = dopt.matmul %a, %b : (tensor<16xf32>, tensor<16x4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
})");
  // Vector-matrix: M = 1, N = 4, K = 16: 2·1·4·16 = 128
  EXPECT_DOUBLE_EQ(v.flops, 128);
}

TEST_F(OpCostTest, Gemm) {
  const char *src = R"(
func.func @f(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>, %c: tensor<32xf32>,
             %at: tensor<16x8xf32>, %b2: tensor<16x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>) {
  %0 = dopt.gemm %a, %b, %c {trans_b = true} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %1 = dopt.gemm %at, %b, %c {alpha = 0.5 : f32, beta = 2.0 : f32, trans_a = true, trans_b = true} : (tensor<16x8xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %2 = dopt.gemm %a, %b2 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return %0, %1, %2 : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>
})";
  module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  ASSERT_TRUE(module);
  llvm::SmallVector<OpCost> costs;
  module->walk(
      [&](distopt::dopt::GemmOp g) { costs.push_back(estimateOpCost(g)); });
  ASSERT_EQ(costs.size(), 3u);
  // M·N = 8·32 = 256, K = 16.
  // C, alpha = beta = 1: 2·256·16 + 256 (add C) = 8192 + 256 = 8448
  EXPECT_DOUBLE_EQ(costs[0].flops, 8448);
  // (8·16 + 32·16 + 32)·4 = (128 + 512 + 32)·4 = 2688
  EXPECT_DOUBLE_EQ(costs[0].bytesRead, 2688);
  // trans_a (K = A's dim 0 = 16), alpha ≠ 1, beta ≠ 1:
  // 8192 + 256 (alpha) + 256 (add C) + 256 (beta) = 8960
  EXPECT_DOUBLE_EQ(costs[1].flops, 8960);
  // No C: 2·256·16 = 8192
  EXPECT_DOUBLE_EQ(costs[2].flops, 8192);
  EXPECT_EQ(costs[2].opClass, OpClass::Gemm);
}

TEST_F(OpCostTest, Conv) {
  OpCost c = costOf("dopt.conv", R"(
func.func @f(%x: tensor<1x3x224x224xf32>, %w: tensor<64x3x7x7xf32>, %bias: tensor<64xf32>) -> tensor<1x64x112x112xf32> {
  %0 = dopt.conv %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 3, 3, 3, 3>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>, tensor<64xf32>) -> tensor<1x64x112x112xf32>
  return %0 : tensor<1x64x112x112xf32>
})");
  EXPECT_EQ(c.opClass, OpClass::Conv);
  // N·M·Ho·Wo = 1·64·112·112 = 802816; (C/g)·kh·kw = 3·7·7 = 147
  // FLOPs: 2·802816·147 + 802816 (bias) = 236027904 + 802816 = 236830720;
  // read: (3·224·224 + 64·3·7·7 + 64)·4 = (150528 + 9408 + 64)·4 = 640000;
  // written: 802816·4 = 3211264.
  expectCost(c, 236830720, 640000, 3211264);

  OpCost dw = costOf("dopt.conv", R"(
func.func @f(%y: tensor<2x32x14x14xf16>, %w: tensor<32x1x3x3xf16>) -> tensor<2x32x14x14xf16> {
  %0 = dopt.conv %y, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 32 : i64}
      : (tensor<2x32x14x14xf16>, tensor<32x1x3x3xf16>) -> tensor<2x32x14x14xf16>
  return %0 : tensor<2x32x14x14xf16>
})");
  // Depthwise: 2·(2·32·14·14)·(1·3·3) = 2·12544·9 = 225792, no bias
  EXPECT_DOUBLE_EQ(dw.flops, 225792);
  EXPECT_EQ(dw.dtype, DType::FP16);
}

TEST_F(OpCostTest, ElementwisePerElementConstants) {
  const char *src = R"(
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>) {
  %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = dopt.gelu %a {approximate = "none"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = dopt.gelu %a {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = dopt.sigmoid %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = dopt.leaky_relu %a {alpha = 0.2 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = dopt.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>
})";
  OpCost add = costOf("dopt.add", src);
  EXPECT_EQ(add.opClass, OpClass::Elementwise);
  EXPECT_DOUBLE_EQ(add.flops, 6);         // 1 per output element, 2·3
  EXPECT_DOUBLE_EQ(add.bytesRead, 36);    // (6 + 3)·4: rhs read once
  EXPECT_DOUBLE_EQ(add.bytesWritten, 24); // 6·4
  module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  ASSERT_TRUE(module);
  llvm::SmallVector<double> gelu;
  module->walk([&](distopt::dopt::GeluOp g) {
    gelu.push_back(estimateOpCost(g).flops);
  });
  ASSERT_EQ(gelu.size(), 2u);
  EXPECT_DOUBLE_EQ(gelu[0], 30);                              // erf form: 5·6
  EXPECT_DOUBLE_EQ(gelu[1], 54);                              // tanh form: 9·6
  EXPECT_DOUBLE_EQ(costOf("dopt.sigmoid", src).flops, 24);    // 4·6
  EXPECT_DOUBLE_EQ(costOf("dopt.leaky_relu", src).flops, 12); // 2·6
  OpCost less = costOf("dopt.less", src);
  EXPECT_DOUBLE_EQ(less.flops, 6);
  EXPECT_EQ(less.dtype, DType::FP32);     // from the float operands
  EXPECT_DOUBLE_EQ(less.bytesWritten, 6); // i1: one byte each
}

TEST_F(OpCostTest, SoftmaxAndNormalisation) {
  const char *src = R"(
func.func @f(%x: tensor<2x8x5xf32>, %g: tensor<5xf32>, %beta: tensor<5xf32>,
             %img: tensor<4x3x8x8xf16>, %s: tensor<3xf16>) -> (tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<4x3x8x8xf16>) {
  %0 = dopt.softmax %x {axis = 2 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  %1 = dopt.layer_norm %x, %g, %beta {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x8x5xf32>
  %2 = dopt.log_softmax %x {axis = 2 : i64} : (tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
  %3 = dopt.batch_norm %img, %s, %s, %s, %s {epsilon = 1.0e-5 : f32} : (tensor<4x3x8x8xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>) -> tensor<4x3x8x8xf16>
  return %0, %1, %2, %3 : tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<2x8x5xf32>, tensor<4x3x8x8xf16>
})";
  OpCost sm = costOf("dopt.softmax", src);
  EXPECT_EQ(sm.opClass, OpClass::Softmax);
  EXPECT_DOUBLE_EQ(sm.flops, 400); // 5 per element · 2·8·5 = 5·80
  EXPECT_DOUBLE_EQ(costOf("dopt.log_softmax", src).flops, 400);
  OpCost ln = costOf("dopt.layer_norm", src);
  EXPECT_EQ(ln.opClass, OpClass::Normalization);
  EXPECT_DOUBLE_EQ(ln.flops, 560); // 7 per element with bias · 80
  // (80 + 5 + 5)·4 = 360
  EXPECT_DOUBLE_EQ(ln.bytesRead, 360);
  OpCost bn = costOf("dopt.batch_norm", src);
  EXPECT_DOUBLE_EQ(bn.flops, 3072); // 4 · 4·3·8·8 = 4·768
  EXPECT_EQ(bn.dtype, DType::FP16);

  OpCost lnNoBias = costOf("dopt.layer_norm", R"(
func.func @f(%x: tensor<2x8x5xf32>, %g: tensor<5xf32>) -> tensor<2x8x5xf32> {
  %0 = dopt.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8x5xf32>, tensor<5xf32>) -> tensor<2x8x5xf32>
  return %0 : tensor<2x8x5xf32>
})");
  EXPECT_DOUBLE_EQ(lnNoBias.flops, 480); // 6 · 80
}

TEST_F(OpCostTest, ReductionsAndPooling) {
  const char *src = R"(
func.func @f(%x: tensor<2x8x5xf32>, %img: tensor<1x64x112x112xf32>, %y: tensor<1x4x8x8xf32>, %z: tensor<1x64x7x7xf32>)
    -> (tensor<2x1x5xf32>, tensor<2x5xf32>, tensor<1x64x56x56xf32>, tensor<1x4x4x4xf32>, tensor<1x64x1x1xf32>) {
  %0 = dopt.reduce_sum %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x8x5xf32>) -> tensor<2x1x5xf32>
  %1 = dopt.reduce_mean %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x8x5xf32>) -> tensor<2x5xf32>
  %2 = dopt.max_pool %img {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x64x112x112xf32>) -> tensor<1x64x56x56xf32>
  %3 = dopt.avg_pool %y {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %4 = dopt.global_avg_pool %z : (tensor<1x64x7x7xf32>) -> tensor<1x64x1x1xf32>
  return %0, %1, %2, %3, %4 : tensor<2x1x5xf32>, tensor<2x5xf32>, tensor<1x64x56x56xf32>, tensor<1x4x4x4xf32>, tensor<1x64x1x1xf32>
})";
  OpCost sum = costOf("dopt.reduce_sum", src);
  EXPECT_EQ(sum.opClass, OpClass::Reduction);
  EXPECT_DOUBLE_EQ(sum.flops, 70); // |in| − |out| = 80 − 10
  EXPECT_DOUBLE_EQ(costOf("dopt.reduce_mean", src).flops, 80); // 70 + 10
  OpCost mp = costOf("dopt.max_pool", src);
  EXPECT_EQ(mp.opClass, OpClass::Pooling);
  // 1·64·56·56 = 200704 outputs · (3·3 − 1) = 1605632
  EXPECT_DOUBLE_EQ(mp.flops, 1605632);
  // 1·4·4·4 = 64 outputs · 2·2 = 256
  EXPECT_DOUBLE_EQ(costOf("dopt.avg_pool", src).flops, 256);
  // 64·7·7 = 3136
  EXPECT_DOUBLE_EQ(costOf("dopt.global_avg_pool", src).flops, 3136);
}

TEST_F(OpCostTest, DataMovementIsBytesOnly) {
  const char *src = R"(
func.func @f(%a: tensor<2x3xf32>, %t: tensor<1000x16xf32>, %i: tensor<8xi64>, %s: tensor<10x4xf32>)
    -> (tensor<3x2xf32>, tensor<8x16xf32>, tensor<5x4xf32>, tensor<6xf32>) {
  %0 = dopt.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = dopt.gather %t, %i {axis = 0 : i64} : (tensor<1000x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  %2 = dopt.slice %s {starts = array<i64: 0, 0>, ends = array<i64: 10, 4>, steps = array<i64: 2, 1>} : (tensor<10x4xf32>) -> tensor<5x4xf32>
  %3 = dopt.reshape %a {shape = array<i64: 6>} : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0, %1, %2, %3 : tensor<3x2xf32>, tensor<8x16xf32>, tensor<5x4xf32>, tensor<6xf32>
})";
  OpCost tr = costOf("dopt.transpose", src);
  EXPECT_EQ(tr.opClass, OpClass::DataMovement);
  EXPECT_DOUBLE_EQ(tr.flops, 0);
  EXPECT_DOUBLE_EQ(tr.bytesRead, 24); // 6·4
  EXPECT_DOUBLE_EQ(tr.bytesWritten, 24);
  OpCost g = costOf("dopt.gather", src);
  // Only the 8 selected rows are read: 8·16·4 + 8 indices·8 = 512 + 64
  EXPECT_DOUBLE_EQ(g.bytesRead, 576);
  EXPECT_DOUBLE_EQ(g.bytesWritten, 512);
  OpCost sl = costOf("dopt.slice", src);
  EXPECT_DOUBLE_EQ(sl.bytesRead, 80); // the 5·4 selected elements·4
  EXPECT_DOUBLE_EQ(sl.bytesWritten, 80);
  OpCost rs = costOf("dopt.reshape", src);
  EXPECT_EQ(rs.opClass, OpClass::None); // a view: free
  EXPECT_DOUBLE_EQ(rs.bytes(), 0);
}

TEST_F(OpCostTest, PrecisionOverride) {
  const char *src = R"(
func.func @f(%a: tensor<4x8x16xf32>, %b: tensor<4x16x32xf32>) -> tensor<4x8x32xf32> {
  %0 = dopt.matmul %a, %b : (tensor<4x8x16xf32>, tensor<4x16x32xf32>) -> tensor<4x8x32xf32>
  return %0 : tensor<4x8x32xf32>
})";
  CostOptions bf16;
  bf16.precision = DType::BF16;
  OpCost c = costOf("dopt.matmul", src, bf16);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_DOUBLE_EQ(c.flops, 32768);       // unchanged
  EXPECT_DOUBLE_EQ(c.bytesRead, 5120);    // (512 + 2048)·2
  EXPECT_DOUBLE_EQ(c.bytesWritten, 2048); // 1024·2
  CostOptions tf32;
  tf32.precision = DType::TF32;
  OpCost t = costOf("dopt.matmul", src, tf32);
  EXPECT_EQ(t.dtype, DType::TF32);
  EXPECT_DOUBLE_EQ(t.bytesRead, 10240); // tf32 is stored in 4 bytes
}

TEST_F(OpCostTest, WalkAndParameters) {
  const char *src = R"(
func.func @main(%x: tensor<8x64xf32>) -> tensor<8x128xf32> {
  %w = dopt.weight {name = "fc.weight", type = tensor<128x64xf32>} : () -> tensor<128x64xf32>
  %b = dopt.weight {name = "fc.bias", type = tensor<128xf32>} : () -> tensor<128xf32>
  %0 = dopt.gemm %x, %w, %b {trans_b = true} : (tensor<8x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<8x128xf32>
  %1 = dopt.relu %0 : (tensor<8x128xf32>) -> tensor<8x128xf32>
  return %1 : tensor<8x128xf32>
})";
  module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  ASSERT_TRUE(module);
  auto costs = estimateCosts(module->getOperation());
  ASSERT_EQ(costs.size(), 2u); // gemm, relu; weights and return are free
  // gemm: 2·8·128·64 + 8·128 = 131072 + 1024 = 132096
  EXPECT_DOUBLE_EQ(costs[0].second.flops, 132096);
  // gemm reads x, the weight and the bias: (512 + 8192 + 128)·4 = 35328
  EXPECT_DOUBLE_EQ(costs[0].second.bytesRead, 35328);
  EXPECT_DOUBLE_EQ(costs[1].second.flops, 1024); // relu: 8·128
  // 128·64 + 128 = 8320 parameters
  EXPECT_DOUBLE_EQ(countParameters(module->getOperation()), 8320);
}

TEST_F(OpCostTest, CallsAndLoopsCountTheirBodies) {
  // A step calling one micro-batch's function in a loop of 3 trips, and
  // once more outside: its relu costs 4 times; the module as a root counts
  // the function where it is defined, once.
  const char *src = R"(
func.func @main(%x: tensor<8x128xf32>) -> tensor<8x128xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%a = %x) -> (tensor<8x128xf32>) {
    %y = func.call @micro(%a) : (tensor<8x128xf32>) -> tensor<8x128xf32>
    scf.yield %y : tensor<8x128xf32>
  }
  %z = func.call @micro(%r) : (tensor<8x128xf32>) -> tensor<8x128xf32>
  return %z : tensor<8x128xf32>
}
func.func private @micro(%x: tensor<8x128xf32>) -> tensor<8x128xf32> {
  %0 = dopt.relu %x : (tensor<8x128xf32>) -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
})";
  module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  ASSERT_TRUE(module);
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  auto costs = estimateCosts(main);
  ASSERT_EQ(costs.size(), 4u);
  double flops = 0;
  for (auto &[op, cost] : costs)
    flops += cost.flops;
  EXPECT_DOUBLE_EQ(flops, 4 * 1024);
  EXPECT_EQ(estimateCosts(module->getOperation()).size(), 1u);
}

//===----------------------------------------------------------------------===//
// Roofline and efficiency profiles
//===----------------------------------------------------------------------===//

DeviceSpec a100() {
  DeviceSpec d;
  d.name = "A100";
  d.peakFlops = {19.5e12, 156e12, 312e12, 312e12};
  d.memoryBandwidth = 2.039e12;
  d.memoryCapacity = int64_t(80) << 30;
  return d;
}

OpCost opCost(OpClass opClass, double flops, double bytesRead,
              double bytesWritten, DType dtype = DType::FP32) {
  return OpCost{flops, bytesRead, bytesWritten, opClass, dtype};
}

TEST(Roofline, ComputeBoundGemm) {
  OpCost c = opCost(OpClass::Gemm, 1e12, 0.6e9, 0.4e9, DType::BF16);
  // flops: 1e12 / (312e12 · 0.75) = 1e12 / 234e12 = 4.2735042735e-3 s
  // bytes: 1e9 / (2.039e12 · 0.80) = 1e9 / 1.6312e12 = 6.130456e-4 s
  EXPECT_NEAR(computeTime(c, a100()), 1.0 / 234.0, 1e-15);
}

TEST(Roofline, MemoryBoundElementwise) {
  OpCost c = opCost(OpClass::Elementwise, 1e9, 4e9, 4e9, DType::FP32);
  // flops: 1e9 / (19.5e12 · 0.5) = 1.0256e-4 s
  // bytes: 8e9 / (2.039e12 · 0.85) = 8e9 / 1.73315e12 = 4.61587e-3 s
  EXPECT_NEAR(computeTime(c, a100()), 8e9 / 1.73315e12, 1e-15);
}

TEST(Roofline, NoneIsFreeAndProfileChangesTime) {
  OpCost none;
  none.flops = 1e12;
  EXPECT_EQ(computeTime(none, a100()), 0);

  DeviceSpec d;
  d.peakFlops = {100, 100, 100, 100};
  d.memoryBandwidth = 10;
  OpCost c = opCost(OpClass::Reduction, 50, 5, 1);
  // defaults: flops 50 / (100·0.5) = 1.0; bytes 6 / (10·0.75) = 0.8 -> 1.0
  EXPECT_DOUBLE_EQ(computeTime(c, d), 1.0);
  auto prof = parseEfficiencyProfile(R"(op_classes:
  reduction:
    compute: {fp32: 1.0}
    memory: 0.3
)",
                                     "p.yaml");
  ASSERT_TRUE(static_cast<bool>(prof)) << llvm::toString(prof.takeError());
  // flops 50 / (100·1.0) = 0.5; bytes 6 / (10·0.3) = 2.0 -> 2.0
  EXPECT_DOUBLE_EQ(computeTime(c, d, *prof), 2.0);
}

TEST(EfficiencyProfile, DocumentedDefaults) {
  EfficiencyProfile p;
  EXPECT_DOUBLE_EQ(p.computeEfficiency(OpClass::Gemm, DType::BF16), 0.75);
  EXPECT_DOUBLE_EQ(p.computeEfficiency(OpClass::Conv, DType::FP32), 0.60);
  EXPECT_DOUBLE_EQ(p.computeEfficiency(OpClass::Elementwise, DType::FP16), 0.5);
  EXPECT_DOUBLE_EQ(p.memoryEfficiency(OpClass::Gemm), 0.80);
  EXPECT_DOUBLE_EQ(p.memoryEfficiency(OpClass::Elementwise), 0.85);
  EXPECT_DOUBLE_EQ(p.memoryEfficiency(OpClass::Normalization), 0.70);
  EXPECT_DOUBLE_EQ(p.memoryEfficiency(OpClass::Reduction), 0.75);
  EXPECT_DOUBLE_EQ(p.memoryEfficiency(OpClass::DataMovement), 0.60);
  EXPECT_DOUBLE_EQ(p.intraNodeLink, 0.80);
  EXPECT_DOUBLE_EQ(p.interNodeLink, 0.90);
  EXPECT_DOUBLE_EQ(nominalLinks().intraNodeLink, 1.0);
  EXPECT_DOUBLE_EQ(nominalLinks().interNodeLink, 1.0);
  EXPECT_EQ(opClassName(OpClass::DataMovement), "data_movement");
  EXPECT_EQ(parseOpClass("softmax"), OpClass::Softmax);
  EXPECT_FALSE(parseOpClass("none").has_value());
}

TEST(EfficiencyProfile, OverridesOnlyWhatIsGiven) {
  auto p = parseEfficiencyProfile(R"(op_classes:
  gemm:
    compute: {fp32: 0.9, bf16: 0.6}
    memory: 0.5
links:
  intra_node: 0.7
)",
                                  "p.yaml");
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_DOUBLE_EQ(p->computeEfficiency(OpClass::Gemm, DType::FP32), 0.9);
  EXPECT_DOUBLE_EQ(p->computeEfficiency(OpClass::Gemm, DType::BF16), 0.6);
  EXPECT_DOUBLE_EQ(p->computeEfficiency(OpClass::Gemm, DType::FP16), 0.75);
  EXPECT_DOUBLE_EQ(p->memoryEfficiency(OpClass::Gemm), 0.5);
  EXPECT_DOUBLE_EQ(p->memoryEfficiency(OpClass::Conv), 0.80);
  EXPECT_DOUBLE_EQ(p->intraNodeLink, 0.7);
  EXPECT_DOUBLE_EQ(p->interNodeLink, 0.9);
  // An empty profile is the base.
  auto e = parseEfficiencyProfile("", "empty.yaml");
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_DOUBLE_EQ(e->memoryEfficiency(OpClass::Gemm), 0.80);
}

TEST(EfficiencyProfile, ErrorsCarryTheLine) {
  auto err = [](const char *yaml) {
    auto p = parseEfficiencyProfile(yaml, "prof.yaml");
    if (p) {
      ADD_FAILURE() << "expected an error for:\n" << yaml;
      return std::string();
    }
    return llvm::toString(p.takeError());
  };
  // Each profile and (a part of) its error.
  const std::pair<const char *, const char *> cases[] = {
      {"op_classes:\n  gemm:\n    memory: 1.5\n",
       "prof.yaml:3:13: error: expected an efficiency in (0, 1], got '1.5'"},
      {"op_classes:\n  gemm:\n    memory: 0\n",
       "prof.yaml:3:13: error: expected an efficiency in (0, 1]"},
      {"op_classes:\n  gemm: {memory: 0.5}\n  matmul: {memory: 0.5}\n",
       "prof.yaml:3:3: error: unknown key 'matmul' (op classes are gemm, conv, "
       "elementwise, normalization, softmax, reduction, pooling and "
       "data_movement)"},
      {"op_classes:\n  gemm:\n    compute:\n      int8: 0.5\n",
       "prof.yaml:4:7: error: unknown key 'int8' (compute takes fp32, tf32, "
       "bf16 and fp16)"},
      {"op_class:\n  gemm: {memory: 0.5}\n",
       "prof.yaml:1:1: error: unknown key 'op_class' (expected op_classes and "
       "links)"},
      {"links: {intra_node: fast}\n",
       "prof.yaml:1:21: error: expected a number, got 'fast'"},
  };
  for (const auto &[yaml, want] : cases) {
    std::string e = err(yaml);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

TEST(TrainingFlops, BackwardIsTwiceForward) {
  OpCost f = opCost(OpClass::Gemm, 100, 10, 4);
  OpCost b = backwardCost(f);
  expectCost(b, 200, 20, 8);
  EXPECT_EQ(b.opClass, OpClass::Gemm);
  // F = 10: forward + backward = 3F = 30; full recomputation adds one more
  // forward: 40; selective adds only the recomputed part (2): 32.
  EXPECT_DOUBLE_EQ(trainingStepFlops(10, Recompute::Off), 30);
  EXPECT_DOUBLE_EQ(trainingStepFlops(10, Recompute::Full), 40);
  EXPECT_DOUBLE_EQ(trainingStepFlops(10, Recompute::Selective, 2), 32);
}

TEST(TrainingFlops, MatchesMegatronGPT3Formula) {
  // Narayanan et al. 2021 (Megatron-LM, SC21), §5.1: with full activation
  // recomputation one iteration costs
  //   96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs.
  // The same from our pieces: per layer forward 24·B·s·h² + 4·B·s²·h
  // (recomputed: 4×), logits forward 2·B·s·h·V (not recomputed: 3×).
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  double layersForward = B * s * l * (24 * h * h + 4 * s * h);
  double logitsForward = 2 * B * s * h * V;
  double ours = trainingStepFlops(layersForward, Recompute::Full) +
                trainingStepFlops(logitsForward, Recompute::Off);
  double megatron =
      96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(ours / megatron, 1.0, 1e-12);
  // = 4.5109707533e18 FLOPs; at the published 138 TFLOP/s on 1024 GPUs
  // that is 4.51097e18 / (1024 · 138e12) = 31.92 s per iteration.
  EXPECT_NEAR(ours, 4.5109707533231063e18, 1e6);
  EXPECT_NEAR(ours / (1024 * 138e12), 31.922, 1e-3);
}

//===----------------------------------------------------------------------===//
// Collectives: pure α–β formulas
//===----------------------------------------------------------------------===//

// α = 10 µs, β = 100 GB/s, S = 1 GB throughout: S/β = 1e-2 s.
constexpr LinkParams kLink{1e-5, 1e11};

TEST(AlphaBeta, RingAllReduce) {
  // 2·(8−1)/8·1e9/1e11 + 2·7·1e-5 = 0.0175 + 0.00014 = 0.01764
  EXPECT_NEAR(ringAllReduceTime(8, 1e9, kLink), 0.01764, 1e-15);
  // n = 2: 2·1/2·1e-2 + 2·1e-5 = 0.01002
  EXPECT_NEAR(ringAllReduceTime(2, 1e9, kLink), 0.01002, 1e-15);
  EXPECT_EQ(ringAllReduceTime(1, 1e9, kLink), 0);
}

TEST(AlphaBeta, TreeAllReduce) {
  // 2·⌈log2 8⌉·(1e-5 + 1e-2) = 6·0.01001 = 0.06006
  EXPECT_NEAR(treeAllReduceTime(8, 1e9, kLink), 0.06006, 1e-15);
  // ⌈log2 5⌉ = 3: the same
  EXPECT_NEAR(treeAllReduceTime(5, 1e9, kLink), 0.06006, 1e-15);
  // ⌈log2 2⌉ = 1: 2·0.01001 = 0.02002
  EXPECT_NEAR(treeAllReduceTime(2, 1e9, kLink), 0.02002, 1e-15);
  EXPECT_EQ(treeAllReduceTime(1, 1e9, kLink), 0);
  // Small messages favour the tree: S = 1 KB, n = 64:
  // ring 2·63/64·1e3/1e11 + 126·1e-5 = 1.96875e-8 + 1.26e-3 = 1.2600197e-3
  // tree 2·6·(1e-5 + 1e-8) = 1.2012e-4
  EXPECT_NEAR(ringAllReduceTime(64, 1e3, kLink), 1.26e-3 + 1.96875e-8, 1e-15);
  EXPECT_NEAR(treeAllReduceTime(64, 1e3, kLink), 1.2012e-4, 1e-15);
}

TEST(AlphaBeta, GatherScatterAllToAllPointToPoint) {
  // (8−1)/8·1e-2 + 7·1e-5 = 0.00875 + 0.00007 = 0.00882
  EXPECT_NEAR(ringAllGatherTime(8, 1e9, kLink), 0.00882, 1e-15);
  EXPECT_NEAR(ringReduceScatterTime(8, 1e9, kLink), 0.00882, 1e-15);
  EXPECT_NEAR(allToAllTime(8, 1e9, kLink), 0.00882, 1e-15);
  // 4 ranks: 3/4·1e-2 + 3·1e-5 = 0.0075 + 0.00003 = 0.00753
  EXPECT_NEAR(ringAllGatherTime(4, 1e9, kLink), 0.00753, 1e-15);
  // 1e-5 + 1e-2 = 0.01001
  EXPECT_NEAR(pointToPointTime(1e9, kLink), 0.01001, 1e-15);
  EXPECT_EQ(ringAllGatherTime(1, 1e9, kLink), 0);
  EXPECT_EQ(allToAllTime(1, 1e9, kLink), 0);
}

//===----------------------------------------------------------------------===//
// Collectives on a cluster
//===----------------------------------------------------------------------===//

/// 2 nodes × 4 devices; intra 100 GB/s, 2 µs; inter 50 GB/s per node over
/// 2 NICs, 5 µs.
Cluster twoNodes() {
  Cluster c;
  c.name = "two";
  c.nodes = 2;
  c.devicesPerNode = 4;
  c.device = a100();
  c.intraNode = {100e9, 2e-6};
  InterNodeLinkSpec net;
  net.bandwidth = 50e9;
  net.latency = 5e-6;
  net.nics = 2;
  c.interNode = net;
  return c;
}

constexpr int64_t kGB = 1000000000;

TEST(Collectives, PlacementAndVerification) {
  Cluster c = twoNodes();
  GroupPlacement p = placementOf(c, DeviceGroup{{0, 1, 4}});
  EXPECT_EQ(p.size, 3);
  EXPECT_EQ(p.nodes, 2);
  EXPECT_EQ(p.maxPerNode, 2);
  EXPECT_FALSE(p.uniform);
  GroupPlacement q = placementOf(c, DeviceGroup::range(0, 8));
  EXPECT_EQ(q.nodes, 2);
  EXPECT_EQ(q.maxPerNode, 4);
  EXPECT_TRUE(q.uniform);
  EXPECT_EQ(DeviceGroup::range(1, 3, 4).ranks,
            (llvm::SmallVector<int64_t>{1, 5, 9}));
  EXPECT_FALSE(static_cast<bool>(verifyGroup(c, DeviceGroup::range(0, 8))));
  llvm::Error e = verifyGroup(c, DeviceGroup{{0, 8}});
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("device 8 is not in cluster"),
            std::string::npos);
  llvm::Error d = verifyGroup(c, DeviceGroup{{3, 3}});
  ASSERT_TRUE(static_cast<bool>(d));
  EXPECT_NE(llvm::toString(std::move(d)).find("appears twice"),
            std::string::npos);
}

TEST(Collectives, LinkChoice) {
  Cluster c = twoNodes();
  // Inside one node: the intra-node link.
  LinkParams in =
      linkFor(c, placementOf(c, DeviceGroup::range(0, 4)), nominalLinks());
  EXPECT_DOUBLE_EQ(in.alpha, 2e-6);
  EXPECT_DOUBLE_EQ(in.beta, 100e9);
  // 4 devices per node across nodes: 50e9 / max(4, 2 NICs) = 12.5e9.
  LinkParams across =
      linkFor(c, placementOf(c, DeviceGroup::range(0, 8)), nominalLinks());
  EXPECT_DOUBLE_EQ(across.alpha, 5e-6);
  EXPECT_DOUBLE_EQ(across.beta, 12.5e9);
  // One device per node: it drives one of the 2 NICs: 50e9 / 2 = 25e9.
  LinkParams one =
      linkFor(c, placementOf(c, DeviceGroup{{0, 4}}), nominalLinks());
  EXPECT_DOUBLE_EQ(one.beta, 25e9);
  // Default efficiencies: 100e9·0.8 = 80e9; 25e9·0.9 = 22.5e9.
  EfficiencyProfile eff;
  EXPECT_DOUBLE_EQ(
      linkFor(c, placementOf(c, DeviceGroup::range(0, 4)), eff).beta, 80e9);
  EXPECT_DOUBLE_EQ(linkFor(c, placementOf(c, DeviceGroup{{0, 4}}), eff).beta,
                   22.5e9);
}

TEST(Collectives, AllReduceInsideANode) {
  Cluster c = twoNodes();
  DeviceGroup g = DeviceGroup::range(0, 4);
  // 2·3/4·1e9/1e11 + 2·3·2e-6 = 0.015 + 0.000012 = 0.015012
  EXPECT_NEAR(allReduceTime(c, g, kGB, CollectiveAlgo::Ring), 0.015012, 1e-15);
  // Hierarchical on one node is the ring.
  EXPECT_NEAR(allReduceTime(c, g, kGB, CollectiveAlgo::Hierarchical), 0.015012,
              1e-15);
  // 2·⌈log2 4⌉·(2e-6 + 1e-2) = 4·0.010002 = 0.040008
  EXPECT_NEAR(allReduceTime(c, g, kGB, CollectiveAlgo::Tree), 0.040008, 1e-15);
  // With the default 0.8 link efficiency: β = 80e9:
  // 2·3/4·1e9/8e10 + 0.000012 = 0.01875 + 0.000012 = 0.018762
  EXPECT_NEAR(
      allReduceTime(c, g, kGB, CollectiveAlgo::Ring, EfficiencyProfile()),
      0.018762, 1e-15);
}

TEST(Collectives, AllReduceAcrossNodes) {
  Cluster c = twoNodes();
  DeviceGroup all = DeviceGroup::range(0, 8);
  // Ring on β = 12.5e9, α = 5e-6:
  // 2·7/8·1e9/12.5e9 + 14·5e-6 = 0.14 + 0.00007 = 0.14007
  EXPECT_NEAR(allReduceTime(c, all, kGB, CollectiveAlgo::Ring), 0.14007, 1e-15);
  // Tree: 2·3·(5e-6 + 1e9/12.5e9) = 6·0.080005 = 0.48003
  EXPECT_NEAR(allReduceTime(c, all, kGB, CollectiveAlgo::Tree), 0.48003, 1e-15);
  // Hierarchical, g = 4 per node, k = 2 nodes:
  //  reduce-scatter in node: 3/4·1e9/1e11 + 3·2e-6       = 0.007506
  //  all-reduce across nodes of S/g = 2.5e8 on β = 50e9/max(4, 2) = 12.5e9:
  //    2·1/2·2.5e8/12.5e9 + 2·1·5e-6 = 0.02 + 0.00001     = 0.02001
  //  all-gather in node:                                  = 0.007506
  //  total = 0.035022
  EXPECT_NEAR(allReduceTime(c, all, kGB, CollectiveAlgo::Hierarchical),
              0.035022, 1e-15);
  auto [algo, t] = bestAllReduce(c, all, kGB);
  EXPECT_EQ(algo, CollectiveAlgo::Hierarchical);
  EXPECT_NEAR(t, 0.035022, 1e-15);
  // One device per node ({0, 4}): β = 50e9/max(1, 2) = 25e9:
  // ring 2·1/2·1e9/25e9 + 2·5e-6 = 0.04 + 0.00001 = 0.04001; hierarchical
  // with g = 1 has no intra-node part and equals it.
  DeviceGroup pair{{0, 4}};
  EXPECT_NEAR(allReduceTime(c, pair, kGB, CollectiveAlgo::Ring), 0.04001,
              1e-15);
  EXPECT_NEAR(allReduceTime(c, pair, kGB, CollectiveAlgo::Hierarchical),
              0.04001, 1e-15);
}

TEST(Collectives, GatherScatterAllToAll) {
  Cluster c = twoNodes();
  DeviceGroup all = DeviceGroup::range(0, 8);
  // 7/8·1e9/12.5e9 + 7·5e-6 = 0.07 + 0.000035 = 0.070035
  EXPECT_NEAR(allGatherTime(c, all, kGB), 0.070035, 1e-15);
  EXPECT_NEAR(reduceScatterTime(c, all, kGB), 0.070035, 1e-15);
  EXPECT_NEAR(allToAllTime(c, all, kGB), 0.070035, 1e-15);
  // In a node: 3/4·1e9/1e11 + 3·2e-6 = 0.0075 + 0.000006 = 0.007506
  DeviceGroup node = DeviceGroup::range(4, 4);
  EXPECT_NEAR(allGatherTime(c, node, kGB), 0.007506, 1e-15);
  EXPECT_NEAR(allToAllTime(c, node, kGB), 0.007506, 1e-15);
}

TEST(Collectives, PointToPoint) {
  Cluster c = twoNodes();
  // Same node: 2e-6 + 1e9/1e11 = 0.010002
  EXPECT_NEAR(pointToPointTime(c, 0, 1, kGB), 0.010002, 1e-15);
  // Across nodes, alone: β = 50e9/max(1, 2 NICs) = 25e9: 5e-6 + 0.04
  EXPECT_NEAR(pointToPointTime(c, 0, 4, kGB), 0.040005, 1e-15);
  // Across nodes with 4 devices of the node sending: β = 12.5e9: 5e-6 + 0.08
  EXPECT_NEAR(pointToPointTime(c, 0, 4, kGB, 4), 0.080005, 1e-15);
}

TEST(Collectives, DgxA100Preset) {
  auto c = resolveCluster("2xdgx-a100x8");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  // 8 GPUs of one node, 1 GB, NVLink 300 GB/s, 3.4 µs:
  // 2·7/8·1e9/3e11 + 14·3.4e-6 = 5.8333333e-3 + 4.76e-5 = 5.8809333e-3
  EXPECT_NEAR(
      allReduceTime(*c, DeviceGroup::range(0, 8), kGB, CollectiveAlgo::Ring),
      1.75 / 300 + 14 * 3.4e-6, 1e-15);
  // Both nodes, hierarchical: 2 · (7/8·1e9/3e11 + 7·3.4e-6)
  //   + ring over 2 nodes on S/8 = 1.25e8 at 200e9/max(8, 8) = 25e9, 9.6 µs:
  //     2·1/2·1.25e8/25e9 + 2·9.6e-6 = 0.005 + 0.0000192
  // = 2·(0.00291667 + 0.0000238) + 0.0050192 = 0.0109001
  double expected =
      2 * (0.875e9 / 3e11 + 7 * 3.4e-6) + 1.25e8 / 25e9 + 2 * 9.6e-6;
  EXPECT_NEAR(allReduceTime(*c, DeviceGroup::range(0, 16), kGB,
                            CollectiveAlgo::Hierarchical),
              expected, 1e-15);
  EXPECT_NEAR(expected, 0.0109001, 1e-7);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TEST(Memory, OptimizerStateBytes) {
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(Optimizer::Adam, DType::FP16),
                   12); // fp32 master 4 + m 4 + v 4
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(Optimizer::Adam, DType::BF16),
                   12);
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(Optimizer::Adam, DType::FP32),
                   8); // m + v; the weights are already fp32
  EXPECT_DOUBLE_EQ(
      optimizerStateBytesPerParam(Optimizer::Momentum, DType::BF16), 8);
  EXPECT_DOUBLE_EQ(
      optimizerStateBytesPerParam(Optimizer::Momentum, DType::TF32), 4);
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(Optimizer::SGD, DType::FP32), 0);
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(Optimizer::SGD, DType::FP16), 4);
}

TEST(Memory, ZeROPaperExample) {
  // Rajbhandari et al., ZeRO (SC20), Figure 1: Ψ = 7.5B, N_d = 64, K = 12.
  const double psi = 7.5e9;
  // Baseline (2 + 2 + K)·Ψ = 16·7.5e9 = 120 GB
  ModelStateMemory base =
      modelStateMemory(psi, DType::FP16, Optimizer::Adam, true);
  EXPECT_DOUBLE_EQ(base.weights, 15e9);
  EXPECT_DOUBLE_EQ(base.gradients, 15e9);
  EXPECT_DOUBLE_EQ(base.optimizerState, 90e9);
  EXPECT_DOUBLE_EQ(base.total(), 120e9);
  // P_os: 2Ψ + 2Ψ + KΨ/N_d = 15e9 + 15e9 + 90e9/64 = 31.40625 GB
  EXPECT_DOUBLE_EQ(
      modelStateMemory(psi, DType::FP16, Optimizer::Adam, true, 1, 64).total(),
      31.40625e9);
  // P_os+g: 2Ψ + (2 + K)Ψ/N_d = 15e9 + 105e9/64 = 16.640625 GB
  EXPECT_DOUBLE_EQ(
      modelStateMemory(psi, DType::FP16, Optimizer::Adam, true, 2, 64).total(),
      16.640625e9);
  // P_os+g+p: (2 + 2 + K)Ψ/N_d = 120e9/64 = 1.875 GB
  EXPECT_DOUBLE_EQ(
      modelStateMemory(psi, DType::FP16, Optimizer::Adam, true, 3, 64).total(),
      1.875e9);
}

TEST(Memory, InferenceAndFp32Training) {
  // Inference: weights only, 1e9·4 = 4 GB.
  ModelStateMemory inf =
      modelStateMemory(1e9, DType::FP32, Optimizer::Adam, false);
  EXPECT_DOUBLE_EQ(inf.total(), 4e9);
  EXPECT_DOUBLE_EQ(inf.gradients, 0);
  // fp32 Adam: 4 + 4 + 8 = 16 bytes/param.
  EXPECT_DOUBLE_EQ(
      modelStateMemory(1e9, DType::FP32, Optimizer::Adam, true).total(), 16e9);
  // fp32 SGD: 4 + 4 + 0 = 8.
  EXPECT_DOUBLE_EQ(
      modelStateMemory(1e9, DType::FP32, Optimizer::SGD, true).total(), 8e9);
}

TEST(Memory, TransformerLayerActivationsKorthikanti) {
  // GPT-3 175B layer: s = 2048, b = 1, h = 12288, a = 96, t = 8.
  // s·b·h = 2048·12288 = 25165824; 5·a·s/(h·t) = 5·96·2048/98304 = 10.
  // Tensor parallel: sbh·(10 + 24/8 + 10) = 25165824·23 = 578813952
  LayerActivation tp = transformerLayerActivation(2048, 1, 12288, 96, 8, false);
  EXPECT_DOUBLE_EQ(tp.stored, 578813952);
  // The 5as/h term, per tensor-parallel rank: 5·96·2048²·1/8 = 251658240
  EXPECT_DOUBLE_EQ(tp.selectiveDropped, 251658240);
  // Input: 2·sbh = 50331648
  EXPECT_DOUBLE_EQ(tp.input, 50331648);
  // + sequence parallel: sbh/8·(34 + 5·96·2048/12288) = 3145728·114
  LayerActivation sp = transformerLayerActivation(2048, 1, 12288, 96, 8, true);
  EXPECT_DOUBLE_EQ(sp.stored, 358612992);
  // Selective leaves sbh·34/t = 3145728·34 = 106954752 (the paper's row).
  EXPECT_DOUBLE_EQ(sp.stored - sp.selectiveDropped, 106954752);
  EXPECT_DOUBLE_EQ(sp.input, 6291456); // 2·sbh/8
  // No parallelism: sbh·(34 + 5as/h) = 25165824·(34 + 80) = 2868903936
  EXPECT_DOUBLE_EQ(
      transformerLayerActivation(2048, 1, 12288, 96, 1, false).stored,
      2868903936.0);
}

TEST(Memory, PipelineScheduleInFlight) {
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::GPipe, 4, 1, 8), 8);
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::OneFOneB, 4, 0, 8), 4);
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::OneFOneB, 4, 1, 8), 3);
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::OneFOneB, 4, 3, 8), 1);
  // Fewer micro-batches than stages: all of them.
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::OneFOneB, 4, 0, 2), 2);
  EXPECT_EQ(microbatchesInFlight(PipelineSchedule::GPipe, 4, 0, 0), 0);
}

TEST(Memory, RecomputationAndStageActivations) {
  const LayerActivation layers[] = {{100, 10, 30}, {200, 20, 50}};
  // Off: 100 + 200 = 300; selective: 70 + 150 = 220; full: 10 + 20 = 30.
  EXPECT_DOUBLE_EQ(stashedActivationBytes(layers, Recompute::Off), 300);
  EXPECT_DOUBLE_EQ(stashedActivationBytes(layers, Recompute::Selective), 220);
  EXPECT_DOUBLE_EQ(stashedActivationBytes(layers, Recompute::Full), 30);
  // Full recomputation rebuilds the biggest layer: 200.
  EXPECT_DOUBLE_EQ(recomputeWorkspaceBytes(layers, Recompute::Full), 200);
  EXPECT_DOUBLE_EQ(recomputeWorkspaceBytes(layers, Recompute::Off), 0);
  // 1F1B, 4 stages, stage 1, 8 micro-batches: 3 in flight.
  // Off: 3·300 = 900; selective: 3·220 = 660; full: 3·30 + 200 = 290.
  auto stage = [&](Recompute r, PipelineSchedule s) {
    return stageActivationBytes(layers, r, s, 4, 1, 8);
  };
  EXPECT_DOUBLE_EQ(stage(Recompute::Off, PipelineSchedule::OneFOneB), 900);
  EXPECT_DOUBLE_EQ(stage(Recompute::Selective, PipelineSchedule::OneFOneB),
                   660);
  EXPECT_DOUBLE_EQ(stage(Recompute::Full, PipelineSchedule::OneFOneB), 290);
  // GPipe holds all 8: 8·300 = 2400.
  EXPECT_DOUBLE_EQ(stage(Recompute::Off, PipelineSchedule::GPipe), 2400);
}

TEST(Names, Enums) {
  EXPECT_EQ(recomputeName(Recompute::Selective), "selective");
  EXPECT_EQ(collectiveAlgoName(CollectiveAlgo::Hierarchical), "hierarchical");
  EXPECT_EQ(optimizerName(Optimizer::Adam), "adam");
  EXPECT_EQ(pipelineScheduleName(PipelineSchedule::OneFOneB), "1f1b");
}

} // namespace
