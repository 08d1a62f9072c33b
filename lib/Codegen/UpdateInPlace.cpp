//===- UpdateInPlace.cpp - a step's updates into their old buffers ------===//
//
// distopt-update-in-place (Passes.td) and the rule it shares with the
// driver (InPlaceUpdates.h).
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/InPlaceUpdates.h"
#include "distopt/Codegen/Passes.h"

#include "FunctionBody.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

namespace distopt {
#define GEN_PASS_DEF_UPDATEINPLACEPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

SmallVector<distopt::InPlaceUpdate> distopt::inPlaceUpdates(func::FuncOp func) {
  SmallVector<InPlaceUpdate> updates;
  if (!func->hasAttr(kUpdateInPlaceAttr))
    return updates;
  llvm::StringMap<unsigned> weights, named;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (auto w = func.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight")) {
      if (auto name = w.getAs<StringAttr>("name"))
        weights.try_emplace(name.getValue(), i);
    } else if (auto name = func.getArgAttrOfType<StringAttr>(i, "dopt.name")) {
      named.try_emplace(name.getValue(), i);
    }
  }
  llvm::DenseSet<unsigned> taken;
  for (unsigned r = 0; r < func.getNumResults(); ++r) {
    std::optional<unsigned> arg;
    StringAttr target =
        func.getResultAttrOfType<StringAttr>(r, "dopt.updates_weight");
    auto &args = target ? weights : named;
    if (!target)
      target = func.getResultAttrOfType<StringAttr>(r, "dopt.updates");
    if (target)
      if (auto it = args.find(target.getValue()); it != args.end())
        arg = it->second;
    if (!arg || func.getArgument(*arg).getType() != func.getResultTypes()[r] ||
        !taken.insert(*arg).second)
      continue;
    updates.push_back({r, *arg, target});
  }
  return updates;
}

namespace {

/// Gives the op computing `value` (through reshapes) the argument `arg`
/// as its destination, reshaped as the value is on its way to the return.
/// Nothing when that op is not a linalg op writing a fresh tensor it does
/// not read.
void tieDestination(Value value, Value arg) {
  SmallVector<Operation *> reshapes; // from the returned value back
  while (Operation *def = value.getDefiningOp()) {
    if (!isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(def))
      break;
    reshapes.push_back(def);
    value = def->getOperand(0);
  }
  auto producer = value.getDefiningOp<linalg::LinalgOp>();
  if (!producer || !producer.hasPureTensorSemantics())
    return;
  OpOperand *init =
      producer.getDpsInitOperand(cast<OpResult>(value).getResultNumber());
  if (!init->get().getDefiningOp<tensor::EmptyOp>() ||
      producer.payloadUsesValueFromOperand(init))
    return;
  OpBuilder b(producer);
  Value dest = arg;
  for (Operation *r : reshapes) {
    // The opposite reshape of `dest`: one the function already has before
    // the producer (the optimizer reads the weight flattened alike), so
    // that bufferization sees the producer read and write one value.
    bool expand = isa<tensor::ExpandShapeOp>(r);
    Type type = r->getOperand(0).getType();
    auto reassociation = r->getAttrOfType<ArrayAttr>("reassociation");
    Value found;
    for (Operation *user : dest.getUsers())
      if ((expand ? isa<tensor::CollapseShapeOp>(user)
                  : isa<tensor::ExpandShapeOp>(user)) &&
          user->getResult(0).getType() == type &&
          user->getAttr("reassociation") == reassociation &&
          user->getBlock() == producer->getBlock() &&
          user->isBeforeInBlock(producer)) {
        found = user->getResult(0);
        break;
      }
    if (found) {
      dest = found;
      continue;
    }
    Location loc = r->getLoc();
    if (auto e = dyn_cast<tensor::ExpandShapeOp>(r))
      dest = tensor::CollapseShapeOp::create(b, loc, e.getSrcType(), dest,
                                             e.getReassociationIndices());
    else {
      auto c = cast<tensor::CollapseShapeOp>(r);
      dest = tensor::ExpandShapeOp::create(b, loc, c.getSrcType(), dest,
                                           c.getReassociationIndices());
    }
  }
  if (dest.getType() == init->get().getType())
    init->set(dest);
}

struct UpdateInPlacePass
    : distopt::impl::UpdateInPlacePassBase<UpdateInPlacePass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func::ReturnOp ret = distopt::singleBlockReturn(func);
    if (!ret)
      return;
    // Sums a function adds to (a micro-batch's gradients): into the buffer
    // of the sum it takes. A caller still reading the old sum gets a copy
    // (one-shot bufferization's analysis).
    for (unsigned r = 0; r < func.getNumResults(); ++r)
      if (auto arg =
              func.getResultAttrOfType<IntegerAttr>(r, "dopt.accumulates"))
        if (arg.getInt() >= 0 && arg.getInt() < func.getNumArguments())
          tieDestination(ret.getOperand(r), func.getArgument(arg.getInt()));
    SmallVector<distopt::InPlaceUpdate> updates = distopt::inPlaceUpdates(func);
    MLIRContext *ctx = func.getContext();
    for (auto [result, argument, target] : updates) {
      Value arg = func.getArgument(argument);
      func.setArgAttr(argument, "bufferization.writable",
                      BoolAttr::get(ctx, true));
      func.setResultAttr(result, "dopt.in_place_of",
                         IntegerAttr::get(IntegerType::get(ctx, 64), argument));
      tieDestination(ret.getOperand(result), arg);
    }
  }
};

} // namespace
