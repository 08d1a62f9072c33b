//===- ShardToRuntime.cpp - shard collectives -> runtime calls ------------===//
//
// See Passes.td (ConvertShardToRuntimePass). The runtime side is
// lib/Runtime/Distributed.cpp (_mlir_ciface_dort_shard_*).
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace distopt {
#define GEN_PASS_DEF_CONVERTSHARDTORUNTIMEPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

std::optional<std::string> suffixOf(Type t) {
  if (t.isF32())
    return "f32";
  if (t.isF64())
    return "f64";
  if (t.isF16())
    return "f16";
  if (t.isBF16())
    return "bf16";
  if (t.isInteger(64))
    return "i64";
  if (t.isInteger(32))
    return "i32";
  if (t.isInteger(8))
    return "i8";
  if (t.isInteger(1))
    return "i1";
  return std::nullopt;
}

/// The runtime's C-interface function `name` of `type`, declared once in
/// the module; null (after an error at `op`) when declared otherwise.
func::FuncOp runtimeFunction(ModuleOp module, Operation *op, StringRef name,
                             FunctionType type) {
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  if (!fn) {
    OpBuilder mb(module.getBodyRegion());
    mb.setInsertionPointToEnd(module.getBody());
    fn = func::FuncOp::create(mb, op->getLoc(), name, type);
    fn.setPrivate();
    fn->setAttr("llvm.emit_c_interface", mb.getUnitAttr());
  } else if (fn.getFunctionType() != type) {
    op->emitError("runtime function @") << name << " redeclared";
    return nullptr;
  }
  return fn;
}

int64_t reductionCode(shard::ReductionKind k) {
  return static_cast<int64_t>(k); // Sum=1, Max=2, Min=3, Product=4, Average=5
}

struct ConvertShardToRuntimePass
    : distopt::impl::ConvertShardToRuntimePassBase<ConvertShardToRuntimePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> collectives;
    bool ok = true;
    module.walk([&](Operation *op) {
      if (isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
              shard::AllToAllOp, shard::AllSliceOp, shard::SendOp,
              shard::RecvOp, shard::ProcessMultiIndexOp>(op))
        collectives.push_back(op);
      else if (isa<shard::ShardOp, shard::ShardingOp>(op) ||
               (op->getDialect() &&
                isa<shard::ShardDialect>(op->getDialect()) &&
                !isa<shard::GridOp>(op))) {
        op->emitError("cannot lower this shard op to the runtime (run "
                      "distopt-partition first)");
        ok = false;
      }
    });
    if (!ok)
      return signalPassFailure();
    for (Operation *op : collectives)
      if (failed(lower(module, op)))
        return signalPassFailure();
    SmallVector<shard::GridOp> grids;
    module.walk([&](shard::GridOp g) { grids.push_back(g); });
    for (shard::GridOp g : grids)
      g.erase();
  }

  /// shard.process_multi_index: this rank's coordinate on each grid axis,
  /// from the runtime (int64_t dort_grid_coord(int axis)).
  LogicalResult lowerIndex(ModuleOp module, shard::ProcessMultiIndexOp op) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    auto fnType = b.getFunctionType({b.getI32Type()}, {b.getI64Type()});
    auto fn = module.lookupSymbol<func::FuncOp>("dort_grid_coord");
    if (!fn) {
      OpBuilder mb(module.getBodyRegion());
      mb.setInsertionPointToEnd(module.getBody());
      fn = func::FuncOp::create(mb, loc, "dort_grid_coord", fnType);
      fn.setPrivate();
    }
    ArrayRef<shard::GridAxis> axes = op.getAxes();
    for (auto [i, r] : llvm::enumerate(op.getResults())) {
      Value axis = arith::ConstantOp::create(
          b, loc, b.getI32IntegerAttr(axes.empty() ? i : axes[i]));
      Value c = func::CallOp::create(b, loc, fn, ValueRange{axis}).getResult(0);
      r.replaceAllUsesWith(
          arith::IndexCastOp::create(b, loc, b.getIndexType(), c).getResult());
    }
    op.erase();
    return success();
  }

  /// A pipeline's shard.send / shard.recv to or from one peer on one grid
  /// axis: dort_shard_send_<type>(in, axis, peer) (the send's result is its
  /// input: the runtime copies what it sends), dort_shard_recv_<type>(out,
  /// axis, peer) into a new buffer.
  LogicalResult lowerPointToPoint(ModuleOp module, Operation *op) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    bool send = isa<shard::SendOp>(op);
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    std::optional<std::string> suffix = suffixOf(type.getElementType());
    if (!suffix)
      return op->emitError("messages of ")
             << type.getElementType() << " are not supported";
    auto axes = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
    ArrayRef<int64_t> peer;
    if (auto s = dyn_cast<shard::SendOp>(op))
      peer = s.getDestination();
    else if (auto source = cast<shard::RecvOp>(op).getSource())
      peer = *source;
    if (!axes || axes.size() != 1 || peer.size() != 1 ||
        !op->getOperands().drop_front().empty())
      return op->emitError("a send or receive needs one grid axis and a "
                           "static peer on it");
    std::string callee =
        std::string("dort_shard_") + (send ? "send_" : "recv_") + *suffix;
    Type elt = type.getElementType();
    auto unranked = UnrankedMemRefType::get(elt, 0);
    func::FuncOp fn = runtimeFunction(
        module, op, callee,
        b.getFunctionType({unranked, b.getI64Type(), b.getI64Type()}, {}));
    if (!fn)
      return failure();
    Value buf;
    if (send) {
      SmallVector<int64_t> dynStrides(type.getRank(), ShapedType::kDynamic);
      auto bufType = MemRefType::get(
          type.getShape(), elt,
          StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                                 dynStrides));
      buf = bufferization::ToBufferOp::create(b, loc, bufType,
                                              op->getOperand(0),
                                              /*read_only=*/true);
    } else {
      buf = memref::AllocOp::create(b, loc, MemRefType::get(type.getShape(), elt));
    }
    Value u = memref::CastOp::create(b, loc, unranked, buf);
    Value axis = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(axes[0]));
    Value to = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(peer[0]));
    func::CallOp::create(b, loc, fn, ValueRange{u, axis, to});
    Value result = send ? op->getOperand(0)
                        : Value(bufferization::ToTensorOp::create(
                              b, loc, type, buf, /*restrict=*/true,
                              /*writable=*/true));
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
    return success();
  }

  LogicalResult lower(ModuleOp module, Operation *op) {
    if (auto index = dyn_cast<shard::ProcessMultiIndexOp>(op))
      return lowerIndex(module, index);
    if (isa<shard::SendOp, shard::RecvOp>(op))
      return lowerPointToPoint(module, op);
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value input = op->getOperand(0);
    auto inType = cast<RankedTensorType>(input.getType());
    auto outType = cast<RankedTensorType>(op->getResult(0).getType());
    std::optional<std::string> suffix = suffixOf(inType.getElementType());
    if (!suffix)
      return op->emitError("collectives on ")
             << inType.getElementType() << " are not supported";
    auto axes = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
    if (!axes || axes.size() != 1)
      return op->emitError("collectives over ")
             << (axes ? axes.size() : 0)
             << " grid axes are not supported (exactly one)";
    std::string name;
    SmallVector<int64_t> ints{axes[0]};
    // An all-reduce marked dopt.async (distopt-sync-gradients' buckets)
    // starts here and is waited for where its result is first read.
    bool async = false;
    if (auto r = dyn_cast<shard::AllReduceOp>(op)) {
      async = op->hasAttr("dopt.async");
      name = async ? "start_all_reduce" : "all_reduce";
      ints.push_back(reductionCode(r.getReduction()));
      if (async) {
        auto bucket = op->getAttrOfType<IntegerAttr>("dopt.bucket");
        ints.push_back(bucket ? bucket.getInt() : -1);
      }
    } else if (auto g = dyn_cast<shard::AllGatherOp>(op)) {
      name = "all_gather";
      ints.push_back(g.getGatherAxis().getSExtValue());
    } else if (auto s = dyn_cast<shard::ReduceScatterOp>(op)) {
      async = op->hasAttr("dopt.async");
      name = async ? "start_reduce_scatter" : "reduce_scatter";
      ints.push_back(reductionCode(s.getReduction()));
      ints.push_back(s.getScatterAxis().getSExtValue());
      if (async) {
        auto bucket = op->getAttrOfType<IntegerAttr>("dopt.bucket");
        ints.push_back(bucket ? bucket.getInt() : -1);
      }
    } else if (auto a = dyn_cast<shard::AllToAllOp>(op)) {
      name = "all_to_all";
      ints.push_back(a.getSplitAxis().getSExtValue());
      ints.push_back(a.getConcatAxis().getSExtValue());
    } else {
      name = "all_slice";
      ints.push_back(cast<shard::AllSliceOp>(op).getSliceAxis().getSExtValue());
    }
    std::string callee = "dort_shard_" + name + "_" + *suffix;
    Type elt = inType.getElementType();
    auto unranked = UnrankedMemRefType::get(elt, 0);
    SmallVector<Type> argTypes{unranked, unranked};
    argTypes.append(ints.size(), b.getI64Type());
    func::FuncOp fn = runtimeFunction(
        module, op, callee,
        b.getFunctionType(argTypes,
                          async ? TypeRange{b.getI64Type()} : TypeRange{}));
    if (!fn)
      return failure();
    // Any layout for the input: the runtime reads strides.
    SmallVector<int64_t> dynStrides(inType.getRank(), ShapedType::kDynamic);
    auto inBufType = MemRefType::get(
        inType.getShape(), elt,
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               dynStrides));
    Value inBuf = bufferization::ToBufferOp::create(b, loc, inBufType, input,
                                                    /*read_only=*/true);
    auto outBufType = MemRefType::get(outType.getShape(), elt);
    Value outBuf = memref::AllocOp::create(b, loc, outBufType);
    Value inU = memref::CastOp::create(b, loc, unranked, inBuf);
    Value outU = memref::CastOp::create(b, loc, unranked, outBuf);
    SmallVector<Value> args{inU, outU};
    for (int64_t v : ints)
      args.push_back(arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v)));
    auto call = func::CallOp::create(b, loc, fn, args);
    if (async) {
      // The wait goes before the first op that reads the result (the
      // result's users, as ops of this block), or before the terminator.
      Block *block = op->getBlock();
      Operation *first = block->getTerminator();
      for (Operation *user : op->getResult(0).getUsers())
        if (Operation *at = block->findAncestorOpInBlock(*user))
          if (at->isBeforeInBlock(first))
            first = at;
      b.setInsertionPoint(first);
      func::FuncOp wait = module.lookupSymbol<func::FuncOp>("dort_shard_wait");
      if (!wait) {
        OpBuilder mb(module.getBodyRegion());
        mb.setInsertionPointToEnd(module.getBody());
        wait = func::FuncOp::create(
            mb, loc, "dort_shard_wait",
            mb.getFunctionType({mb.getI64Type()}, {}));
        wait.setPrivate();
      }
      func::CallOp::create(b, loc, wait, call.getResult(0));
    }
    Value result = bufferization::ToTensorOp::create(
        b, loc, outType, outBuf, /*restrict=*/true, /*writable=*/true);
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
    return success();
  }
};

} // namespace
