//===- PlanBuffers.cpp - static memory plan for intermediate buffers ------===//

#include "distopt/Codegen/Passes.h"

#include "FunctionBody.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

namespace distopt {
#define GEN_PASS_DEF_PLANBUFFERSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

constexpr int64_t kAlignment = 64;

struct Buffer {
  memref::AllocOp alloc;
  int64_t bytes = 0;
  int64_t begin = 0, end = 0; // live range over the body's op indices
  int64_t offset = -1;
};

struct PlanBuffersPass
    : distopt::impl::PlanBuffersPassBase<PlanBuffersPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!distopt::singleBlockReturn(func))
      return;
    Block &body = func.getBody().front();
    DenseMap<Operation *, int64_t> index;
    int64_t i = 0;
    for (Operation &op : body)
      index[&op] = i++;

    std::vector<Buffer> buffers;
    for (Operation &op : body) {
      auto alloc = dyn_cast<memref::AllocOp>(op);
      if (!alloc)
        continue;
      MemRefType type = alloc.getType();
      // Planned: static, identity layout, byte-sized elements (i1 storage
      // is left to the allocator).
      if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
          !type.getElementType().isIntOrFloat() ||
          type.getElementTypeBitWidth() % 8 != 0 ||
          type.getMemorySpace())
        continue;
      Buffer b;
      b.alloc = alloc;
      b.bytes = type.getNumElements() * (type.getElementTypeBitWidth() / 8);
      // The live range starts at the first use, not at the alloc (which
      // buffer hoisting moved to the top): contents before the first write
      // are undefined anyway.
      b.begin = std::numeric_limits<int64_t>::max();
      b.end = -1;
      if (!liveRange(alloc.getResult(), body, index, b.begin, b.end))
        continue; // escapes (returned, captured): leave it alone
      if (b.end < 0)
        continue; // unused
      buffers.push_back(b);
    }
    if (buffers.empty())
      return;

    // Largest first, each at the lowest offset free throughout its life.
    std::vector<Buffer *> order;
    for (Buffer &b : buffers)
      order.push_back(&b);
    llvm::stable_sort(order, [](Buffer *a, Buffer *b) {
      return a->bytes > b->bytes;
    });
    // The placed buffers are kept in the order of their (offset, end): a
    // new one scans them once, skipping those not alive with it (a program
    // of tens of thousands of buffers -- a pipeline's unrolled schedule --
    // is planned in seconds).
    std::vector<Buffer *> placed;
    auto byPlace = [](const Buffer *a, const Buffer *b) {
      return std::make_pair(a->offset, a->offset + a->bytes) <
             std::make_pair(b->offset, b->offset + b->bytes);
    };
    int64_t total = 0;
    for (Buffer *b : order) {
      int64_t offset = 0;
      for (Buffer *p : placed) {
        if (p->begin > b->end || b->begin > p->end)
          continue; // not alive together
        if (offset + b->bytes <= p->offset)
          break;
        offset = std::max(
            offset, (int64_t)llvm::alignTo(p->offset + p->bytes, kAlignment));
      }
      b->offset = offset;
      placed.insert(llvm::upper_bound(placed, b, byPlace), b);
      total = std::max(total, offset + b->bytes);
    }
    total = llvm::alignTo(std::max<int64_t>(total, 1), kAlignment);

    OpBuilder builder = OpBuilder::atBlockBegin(&body);
    Location loc = func.getLoc();
    auto arenaType = MemRefType::get({total}, builder.getI8Type());
    Value arena = memref::AllocOp::create(builder, loc, arenaType,
                                          builder.getI64IntegerAttr(kAlignment));
    for (Buffer &b : buffers) {
      builder.setInsertionPoint(b.alloc);
      Value offset =
          arith::ConstantIndexOp::create(builder, b.alloc.getLoc(), b.offset);
      Value view = memref::ViewOp::create(builder, b.alloc.getLoc(),
                                          b.alloc.getType(), arena, offset,
                                          ValueRange{});
      b.alloc.getResult().replaceAllUsesWith(view);
      b.alloc.erase();
    }
    func->setAttr("distopt.arena_bytes", builder.getI64IntegerAttr(total));
  }

  /// [begin, end]: the first and last body-level uses of `root` or of any
  /// view of it. Returns false when the buffer escapes the function.
  static bool liveRange(Value root, Block &body,
                        DenseMap<Operation *, int64_t> &index, int64_t &begin,
                        int64_t &end) {
    SmallVector<Value> worklist = {root};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (isa<func::ReturnOp>(user) || isa<memref::DeallocOp>(user))
          return false;
        Operation *top = body.findAncestorOpInBlock(*user);
        if (!top)
          return false;
        bool isView = isa<ViewLikeOpInterface, memref::CastOp,
                          memref::CollapseShapeOp, memref::ExpandShapeOp,
                          memref::ReinterpretCastOp>(user);
        if (!isView) {
          begin = std::min(begin, index[top]);
          end = std::max(end, index[top]);
        }
        if (auto view = dyn_cast<ViewLikeOpInterface>(user))
          if (view.getViewSource() == v)
            for (Value r : user->getResults())
              worklist.push_back(r);
        // Casts and reshapes that are not ViewLike still alias.
        if (isa<memref::CastOp, memref::CollapseShapeOp, memref::ExpandShapeOp,
                memref::ReinterpretCastOp>(user))
          for (Value r : user->getResults())
            worklist.push_back(r);
      }
    }
    return true;
  }
};

} // namespace
