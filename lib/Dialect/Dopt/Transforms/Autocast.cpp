//===- Autocast.cpp - @main in 16-bit mixed precision ---------------------===//
//
// distopt-autocast: each op computes in the precision its trait names
// (Dopt_Autocast16, Dopt_AutocastF32; DoptInterfaces.td) or follows its
// inputs. See Passes.td for the rules.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace distopt {
#define GEN_PASS_DEF_AUTOCASTPASS
#include "distopt/Dialect/Dopt/Transforms/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

RankedTensorType withElement(Type t, Type elt) {
  auto r = cast<RankedTensorType>(t);
  return RankedTensorType::get(r.getShape(), elt, r.getEncoding());
}

bool isF32Tensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && r.getElementType().isF32();
}

struct Autocaster {
  Autocaster(func::FuncOp func, Type half, Type f32)
      : func(func), half(half), f32(f32) {}

  func::FuncOp func;
  Type half, f32;
  /// Values whose type the pass changed from f32 to `half`.
  llvm::DenseSet<Value> narrowed;
  /// Values computed from weights and constants alone.
  llvm::DenseSet<Value> weightLike;
  /// One cast per (value, type), next to the value's definition; a weight
  /// or constant read by several ops: one per reader, next to it (the key's
  /// operation), so that each copy is laid out as its reader is split
  /// (readers may lie in different segments of a plan).
  llvm::DenseMap<std::tuple<Value, Type, Operation *>, Value> casts;
  llvm::DenseSet<Value> sharedSources;

  /// Was `v` an f32 tensor before the pass (whatever it is now)?
  bool wasF32(Value v) const {
    return isF32Tensor(v.getType()) || narrowed.contains(v);
  }

  Value castTo(Value v, Type elt, Operation *user) {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getElementType() == elt)
      return v;
    bool perReader = sharedSources.contains(v);
    Value &slot = casts[{v, elt, perReader ? user : nullptr}];
    if (slot)
      return slot;
    OpBuilder b(v.getContext());
    if (perReader)
      b.setInsertionPoint(user);
    else if (auto arg = dyn_cast<BlockArgument>(v))
      b.setInsertionPointToStart(arg.getOwner());
    else
      b.setInsertionPointAfter(v.getDefiningOp());
    // A small constant is rounded here (the cast folds).
    if (isa_and_nonnull<dopt::ConstantOp>(v.getDefiningOp()))
      slot = b.createOrFold<dopt::CastOp>(v.getLoc(), withElement(type, elt),
                                          v, TypeAttr::get(elt));
    else
      slot = dopt::CastOp::create(b, v.getLoc(), withElement(type, elt), v,
                                  TypeAttr::get(elt));
    return slot;
  }

  void setOperand(Operation *op, unsigned i, Type elt) {
    Value v = op->getOperand(i);
    if (cast<RankedTensorType>(v.getType()).getElementType() != elt)
      op->setOperand(i, castTo(v, elt, op));
  }

  /// The op's result types from its (changed) operands; false when the op
  /// cannot say or disagrees with a type it was built with.
  LogicalResult reinfer(Operation *op) {
    auto infer = dyn_cast<InferTypeOpInterface>(op);
    if (!infer)
      return op->emitOpError("distopt-autocast: cannot infer its result "
                             "types from 16-bit operands");
    SmallVector<Type> types;
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), types)))
      return failure();
    for (auto [r, t] : llvm::zip(op->getResults(), types)) {
      if (r.getType() == t)
        continue;
      if (isF32Tensor(r.getType()) &&
          cast<RankedTensorType>(t).getElementType() == half)
        narrowed.insert(r);
      r.setType(t);
    }
    return success();
  }

  LogicalResult visit(Operation *op) {
    // Weights and constants, and what is computed from them alone.
    if (isa<dopt::WeightOp, dopt::ConstantOp>(op) ||
        (op->getNumOperands() > 0 &&
         llvm::all_of(op->getOperands(),
                      [&](Value v) { return weightLike.contains(v); })))
      for (Value r : op->getResults())
        weightLike.insert(r);
    if (isa<dopt::WeightOp, dopt::ConstantOp, dopt::CastOp>(op))
      return success();
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, t] : llvm::enumerate(func.getResultTypes()))
        if (auto r = dyn_cast<RankedTensorType>(t))
          setOperand(op, i, r.getElementType());
      return success();
    }
    // Ops of other dialects (the partitioner's collectives) follow their
    // inputs too, element type for element type; others get back the
    // types they were built with.
    bool dopt = isa<dopt::DoptDialect>(op->getDialect());
    bool collective = op->getDialect()->getNamespace() == "shard";
    if (!dopt && !collective) {
      for (unsigned i = 0; i < op->getNumOperands(); ++i)
        if (narrowed.contains(op->getOperand(i)))
          setOperand(op, i, f32);
      return success();
    }
    // The precision the op computes in.
    Type to;
    if (op->hasTrait<dopt::OpTrait::Autocast16>()) {
      to = half;
    } else if (op->hasTrait<dopt::OpTrait::AutocastF32>()) {
      to = f32;
    } else {
      // Follow the inputs: 16 bits when every fp32-born operand not
      // computed from weights alone is 16-bit now.
      bool any = false, allHalf = true;
      for (Value v : op->getOperands()) {
        if (!wasF32(v) || weightLike.contains(v))
          continue;
        any = true;
        allHalf &= narrowed.contains(v);
      }
      to = any && allHalf ? half : f32;
      if (!any) {
        // Only weights and constants: leave it as it is.
        for (unsigned i = 0; i < op->getNumOperands(); ++i)
          if (narrowed.contains(op->getOperand(i)))
            setOperand(op, i, f32);
        return success();
      }
    }
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (wasF32(op->getOperand(i)))
        setOperand(op, i, to);
    if (dopt)
      return reinfer(op);
    // A collective: its fp32 results take the operands' precision.
    for (Value r : op->getResults())
      if (isF32Tensor(r.getType()) && to == half) {
        r.setType(withElement(r.getType(), half));
        narrowed.insert(r);
      }
    return success();
  }

  LogicalResult run() {
    func.walk([&](Operation *op) {
      if (!isa<dopt::WeightOp, dopt::ConstantOp>(op))
        return;
      llvm::SmallPtrSet<Operation *, 4> readers;
      for (Operation *user : op->getResult(0).getUsers())
        readers.insert(user);
      if (readers.size() > 1)
        sharedSources.insert(op->getResult(0));
    });
    SmallVector<Operation *> ops;
    func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op != func)
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      if (op->getNumRegions() && !isa<func::FuncOp>(op))
        return op->emitOpError("distopt-autocast: ops with regions are not "
                               "supported");
      if (failed(visit(op)))
        return failure();
    }
    return success();
  }
};

struct AutocastPass : distopt::impl::AutocastPassBase<AutocastPass> {
  using AutocastPassBase::AutocastPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Type half;
    if (precision == "bf16")
      half = BFloat16Type::get(ctx);
    else if (precision == "f16")
      half = Float16Type::get(ctx);
    else {
      module.emitError("distopt-autocast: precision must be bf16 or f16, "
                       "got '")
          << precision << "'";
      return signalPassFailure();
    }
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("distopt-autocast: no @main function");
      return signalPassFailure();
    }
    Autocaster a(main, half, Float32Type::get(ctx));
    if (failed(a.run()))
      return signalPassFailure();
    if (storeWeights)
      storeHalfWeights(main, half);
  }

  /// A weight read only through its `half` copy becomes a `half` weight.
  void storeHalfWeights(func::FuncOp main, Type half) {
    SmallVector<dopt::WeightOp> weights;
    main.walk([&](dopt::WeightOp w) { weights.push_back(w); });
    for (dopt::WeightOp w : weights) {
      auto type = cast<RankedTensorType>(w.getType());
      if (!type.getElementType().isF32() || w.getResult().use_empty() ||
          !llvm::all_of(w.getResult().getUsers(), [&](Operation *user) {
            auto c = dyn_cast<dopt::CastOp>(user);
            return c && c.getTo() == half;
          }))
        continue;
      w.setDataTypeAttr(TypeAttr::get(type.getElementType()));
      w.setTypeAttr(TypeAttr::get(withElement(type, half)));
      w.getResult().setType(withElement(type, half));
      // A partitioned weight's whole tensor is stored 16-bit as well.
      if (auto global = w->getAttrOfType<TypeAttr>("dopt.global_type"))
        w->setAttr("dopt.global_type",
                   TypeAttr::get(withElement(global.getValue(), half)));
      for (Operation *user : llvm::make_early_inc_range(
               w.getResult().getUsers())) {
        user->getResult(0).replaceAllUsesWith(w.getResult());
        user->erase();
      }
    }
  }
};

} // namespace
