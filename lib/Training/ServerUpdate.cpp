//===- ServerUpdate.cpp - the update program of a parameter server --------===//
//
// See ServerUpdate.h.
//
//===----------------------------------------------------------------------===//

#include "distopt/Training/ServerUpdate.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/IR/GridAxes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

OwningOpRef<ModuleOp>
distopt::buildServerUpdate(MLIRContext &context, int64_t length,
                           int64_t servers, bool normAcrossServers) {
  context.loadDialect<dopt::DoptDialect, func::FuncDialect,
                      shard::ShardDialect>();
  OpBuilder b(&context);
  Location loc = NameLoc::get(b.getStringAttr("parameter server update"));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToStart(module->getBody());
  bool blocks = normAcrossServers && servers > 1;
  if (blocks)
    shard::GridOp::create(b, loc, grid::kName,
                          SmallVector<int64_t>{1, 1, servers});
  auto f32 = b.getF32Type();
  auto vec = RankedTensorType::get({length}, f32);
  auto scalar = RankedTensorType::get({}, f32);
  auto named = [&](StringRef name) {
    return b.getDictionaryAttr(
        {b.getNamedAttr("dopt.name", b.getStringAttr(name))});
  };
  SmallVector<NamedAttribute> weight{
      b.getNamedAttr("name", b.getStringAttr(kServerShardName))};
  if (blocks) {
    weight.push_back(b.getNamedAttr(
        "split_axes", b.getArrayAttr({b.getI64ArrayAttr({grid::kTensorAxis})})));
    weight.push_back(b.getNamedAttr(
        "global_type",
        TypeAttr::get(RankedTensorType::get({length * servers}, f32))));
  }
  SmallVector<DictionaryAttr> argAttrs{
      named("ps.grad"), named("ps.pulled"), named("ps.dc_lambda"),
      b.getDictionaryAttr(
          {b.getNamedAttr("dopt.weight", b.getDictionaryAttr(weight))})};
  auto fnType = b.getFunctionType({vec, vec, scalar, vec}, {scalar, vec});
  auto main = func::FuncOp::create(b, loc, "main", fnType);
  main.setAllArgAttrs(argAttrs);
  main.setResultAttrs(0, named("loss"));
  main.setResultAttrs(
      1, b.getDictionaryAttr(
             {b.getNamedAttr("dopt.name",
                             b.getStringAttr(("grad:" + kServerShardName).str())),
              b.getNamedAttr("dopt.grad_of", b.getStringAttr(kServerShardName))}));
  Block *body = main.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value g = body->getArgument(0), pulled = body->getArgument(1),
        lambda = body->getArgument(2), w = body->getArgument(3);
  // Delay compensation: g + λ·g⊙g⊙(w − w_pulled).
  Value drift = dopt::SubOp::create(b, loc, w, pulled);
  Value curvature = dopt::MulOp::create(
      b, loc, dopt::MulOp::create(b, loc, g, g), drift);
  Value compensated = dopt::AddOp::create(
      b, loc, g, dopt::MulOp::create(b, loc, lambda, curvature));
  Value zero = dopt::ConstantOp::create(
      b, loc, DenseElementsAttr::get(scalar, b.getF32FloatAttr(0.0f)));
  func::ReturnOp::create(b, loc, ValueRange{zero, compensated});
  return module;
}
