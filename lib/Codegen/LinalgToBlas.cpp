//===- LinalgToBlas.cpp - linalg matmuls on buffers -> BLAS calls ---------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

#include <cmath>

namespace distopt {
#define GEN_PASS_DEF_LINALGTOBLASPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace distopt

using namespace mlir;
using namespace distopt;

namespace {

/// transA/transB of a (batch_)matmul from its indexing maps; std::nullopt
/// for layouts other than plain or transposed operands. In a batch_matmul,
/// A or B may lack the batch dimension (one matrix shared by every item).
std::optional<std::pair<bool, bool>> transposes(linalg::LinalgOp op,
                                                unsigned batchDims) {
  MLIRContext *ctx = op->getContext();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (maps.size() != 3)
    return std::nullopt;
  unsigned n = batchDims + 3;
  SmallVector<AffineExpr> batch;
  for (unsigned i = 0; i < batchDims; ++i)
    batch.push_back(getAffineDimExpr(i, ctx));
  AffineExpr m = getAffineDimExpr(batchDims, ctx),
             nn = getAffineDimExpr(batchDims + 1, ctx),
             k = getAffineDimExpr(batchDims + 2, ctx);
  auto make = [&](AffineExpr a, AffineExpr b, bool shared = false) {
    SmallVector<AffineExpr> e;
    if (!shared)
      e.append(batch);
    e.push_back(a);
    e.push_back(b);
    return AffineMap::get(n, 0, e, ctx);
  };
  if (maps[2] != make(m, nn))
    return std::nullopt;
  // Plain, transposed, or (batched only) either of them shared.
  auto orientation = [&](AffineMap map, AffineExpr r,
                         AffineExpr c) -> std::optional<bool> {
    for (bool shared : {false, true}) {
      if (shared && batchDims == 0)
        break;
      if (map == make(r, c, shared))
        return false;
      if (map == make(c, r, shared))
        return true;
    }
    return std::nullopt;
  };
  std::optional<bool> ta = orientation(maps[0], m, k);
  std::optional<bool> tb = orientation(maps[1], k, nn);
  if (!ta || !tb)
    return std::nullopt;
  return std::make_pair(*ta, *tb);
}

struct LinalgToBlasPass
    : distopt::impl::LinalgToBlasPassBase<LinalgToBlasPass> {
  using LinalgToBlasPassBase::LinalgToBlasPassBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<linalg::LinalgOp> candidates;
    module.walk([&](linalg::LinalgOp op) {
      if (isGemm(op) && op.hasPureBufferSemantics())
        candidates.push_back(op);
    });
    narrowOperands(candidates);
    for (linalg::LinalgOp op : candidates)
      rewrite(op);
  }

  //===--------------------------------------------------------------------===//
  // 16-bit operands: GEMMs of f16/bf16 values widened to f32
  //===--------------------------------------------------------------------===//

  /// An f32 buffer holding 16-bit floats widened (dopt -> linalg computes
  /// f16 and bf16 in f32): the generic that wrote it last yields
  /// `arith.extf` of a 16-bit value, and what reads it from there to its
  /// next write is GEMMs only.
  struct Widened {
    Value root;                // the f32 allocation
    linalg::GenericOp writer;  // the write
    OpOperand *init = nullptr; // the writer's output operand for it
    arith::ExtFOp ext;         // the widening the writer yields
    Type narrow;               // f16 or bf16
    SmallVector<OpOperand *> reads; // the GEMMs' operands reading it
  };

  static bool isView(Operation *op) {
    return isa<memref::CastOp, memref::ExpandShapeOp,
               memref::CollapseShapeOp>(op);
  }

  static bool isGemm(Operation *op) {
    return isa<linalg::MatmulOp, linalg::BatchMatmulOp>(op);
  }

  /// The buffer under a GEMM operand, through casts and reshapes.
  static Value viewRoot(Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (!isView(def))
        break;
      v = def->getOperand(0);
    }
    return v;
  }

  /// The uses of `v` and of the views of it, by the operation using them.
  static void finalUsers(Value v,
                         llvm::MapVector<Operation *, SmallVector<OpOperand *>>
                             &uses) {
    for (OpOperand &use : v.getUses()) {
      if (isView(use.getOwner()))
        finalUsers(use.getOwner()->getResult(0), uses);
      else
        uses[use.getOwner()].push_back(&use);
    }
  }

  /// The 16-bit buffer GEMM operand `operand` of `gemm` reads widened, if
  /// it does.
  static std::optional<Widened> widened(Operation *gemm, unsigned operand) {
    Value root = viewRoot(gemm->getOperand(operand));
    auto alloc = root.getDefiningOp<memref::AllocOp>();
    if (!alloc || !alloc.getType().getElementType().isF32() ||
        !alloc.getType().getLayout().isIdentity() ||
        !alloc.getType().hasStaticShape())
      return std::nullopt;
    llvm::MapVector<Operation *, SmallVector<OpOperand *>> uses;
    finalUsers(root, uses);
    Block *block = gemm->getBlock();
    for (auto &[user, _] : uses)
      if (user->getBlock() != block)
        return std::nullopt;
    auto onlyGemmInputs = [&](Operation *op) {
      return isGemm(op) && llvm::all_of(uses[op], [](OpOperand *u) {
               return u->getOperandNumber() < 2;
             });
    };
    // The last write before the GEMM (GEMMs reading it may come between).
    Widened w;
    w.root = root;
    for (Operation *op = gemm->getPrevNode(); op; op = op->getPrevNode()) {
      if (!uses.count(op) || onlyGemmInputs(op))
        continue;
      auto gen = dyn_cast<linalg::GenericOp>(op);
      if (!gen || !gen.hasPureBufferSemantics())
        return std::nullopt;
      for (OpOperand *u : uses[op]) {
        if (gen.isDpsInit(u) && u->get() == root && !w.init)
          w.init = u;
        else if (gen.isDpsInit(u))
          return std::nullopt; // written through a view, or twice
      }
      if (!w.init)
        return std::nullopt; // read by something else than GEMMs
      w.writer = gen;
      break;
    }
    if (!w.writer)
      return std::nullopt;
    // Its readers up to the next write: GEMMs only. The next write is a
    // linalg op that only writes it (an output whose value its body does
    // not read), or its deallocation; any other use (a read, a call, a
    // copy) keeps the f32 buffer.
    for (Operation *op = w.writer->getNextNode(); op; op = op->getNextNode()) {
      if (!uses.count(op))
        continue;
      if (onlyGemmInputs(op)) {
        w.reads.append(uses[op]);
        continue;
      }
      if (isa<memref::DeallocOp>(op))
        break;
      auto l = dyn_cast<linalg::LinalgOp>(op);
      if (!l || llvm::any_of(uses[op], [&](OpOperand *u) {
            return !l.isDpsInit(u) || l.payloadUsesValueFromOperand(u);
          }))
        return std::nullopt;
      break; // overwritten
    }
    linalg::GenericOp gen = w.writer;
    if (!gen.getMatchingIndexingMap(w.init).isIdentity())
      return std::nullopt;
    BlockArgument out = gen.getMatchingBlockArgument(w.init);
    if (!out.use_empty())
      return std::nullopt;
    Operation *yield = gen.getRegion().front().getTerminator();
    w.ext = yield->getOperand(out.getArgNumber() - gen.getNumDpsInputs())
                .getDefiningOp<arith::ExtFOp>();
    if (!w.ext)
      return std::nullopt;
    w.narrow = w.ext.getIn().getType();
    if (!w.narrow.isF16() && !w.narrow.isBF16())
      return std::nullopt;
    return w;
  }

  /// Makes the GEMMs whose operands are both widened 16-bit values of one
  /// type read the 16-bit values: their writer stores them unwidened in a
  /// 16-bit buffer (or, for a plain conversion of an entry argument, the
  /// GEMMs read the argument), and BLAS gets f16/bf16 operands with f32
  /// accumulation (cuBLAS's tensor cores on a GPU).
  void narrowOperands(ArrayRef<linalg::LinalgOp> gemms) {
    auto gemmOk = [&](Operation *op) {
      auto l = cast<linalg::LinalgOp>(op);
      auto c = cast<MemRefType>(l.getDpsInits()[0].getType());
      return c.getElementType().isF32() &&
             transposes(l, isa<linalg::BatchMatmulOp>(op) ? 1 : 0);
    };
    // The writes whose values GEMMs read, by the writer's output operand
    // (a generic may write several).
    llvm::MapVector<OpOperand *, Widened> writes;
    llvm::DenseMap<OpOperand *, OpOperand *> writerOf;
    for (linalg::LinalgOp op : gemms)
      for (unsigned i = 0; i < 2; ++i)
        if (gemmOk(op))
          if (std::optional<Widened> w = widened(op, i)) {
            writerOf[&op->getOpOperand(i)] = w->init;
            writes.insert({w->init, *w});
          }
    // Every GEMM reading a narrowed value must take both operands narrow,
    // of one type: drop writes until that holds.
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto &[writer, w] : writes) {
        bool ok = true;
        for (OpOperand *read : w.reads) {
          Operation *gemm = read->getOwner();
          OpOperand *other =
              writerOf.lookup(&gemm->getOpOperand(1 - read->getOperandNumber()));
          auto it = other ? writes.find(other) : writes.end();
          ok = ok && gemmOk(gemm) &&
               writerOf.lookup(&gemm->getOpOperand(read->getOperandNumber())) ==
                   writer &&
               it != writes.end() && it->second.narrow == w.narrow;
        }
        if (!ok) {
          writes.erase(writer);
          changed = true;
          break;
        }
      }
    }
    for (auto &[writer, w] : writes)
      narrow(w);
  }

  /// `operand`'s value (a view of `from`) as the same view of `to`, made
  /// before `at`.
  static Value viewOn(Value operand, Value from, Value to, Type narrow,
                      Operation *at) {
    if (operand == from)
      return to;
    Operation *def = operand.getDefiningOp();
    Value src = viewOn(def->getOperand(0), from, to, narrow, at);
    OpBuilder b(at);
    Operation *clone = b.clone(*def);
    clone->setOperand(0, src);
    auto t = cast<MemRefType>(operand.getType());
    MemRefType narrowed = MemRefType::Builder(t).setElementType(narrow);
    clone->getResult(0).setType(narrowed);
    return clone->getResult(0);
  }

  void narrow(Widened &w) {
    linalg::GenericOp gen = w.writer;
    auto narrowType =
        MemRefType::get(cast<MemRefType>(w.root.getType()).getShape(), w.narrow);
    BlockArgument out = gen.getMatchingBlockArgument(w.init);
    Operation *yield = gen.getRegion().front().getTerminator();
    unsigned result = out.getArgNumber() - gen.getNumDpsInputs();
    arith::ExtFOp ext = w.ext;
    // A conversion of an entry argument (read-only: nothing writes it):
    // the GEMMs read the argument, and the conversion goes.
    Value source;
    if (gen.getNumDpsInits() == 1 && gen.getNumDpsInputs() == 1 &&
        gen.getRegion().front().getOperations().size() == 2 &&
        ext.getIn() == gen.getRegion().front().getArgument(0) &&
        gen.getMatchingIndexingMap(gen.getDpsInputOperand(0)).isIdentity()) {
      auto arg = dyn_cast<BlockArgument>(gen.getDpsInputs()[0]);
      auto fn = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                    : func::FuncOp();
      auto writable =
          fn ? fn.getArgAttrOfType<BoolAttr>(arg.getArgNumber(),
                                             "bufferization.writable")
             : BoolAttr();
      if (writable && !writable.getValue() && arg.getType() == narrowType)
        source = arg;
    }
    if (!source) {
      OpBuilder b(w.root.getDefiningOp());
      source = memref::AllocOp::create(
          b, w.root.getLoc(), narrowType,
          w.root.getDefiningOp<memref::AllocOp>().getAlignmentAttr());
      w.init->set(source);
      out.setType(w.narrow);
      yield->setOperand(result, ext.getIn());
      if (ext->use_empty())
        ext->erase();
    }
    for (OpOperand *read : w.reads) {
      Value old = read->get();
      read->set(viewOn(old, w.root, source, w.narrow, read->getOwner()));
      while (old != w.root && old.use_empty()) {
        Operation *def = old.getDefiningOp();
        old = def->getOperand(0);
        def->erase();
      }
    }
    if (isa<BlockArgument>(source))
      gen->erase();
    Operation *root = w.root.getDefiningOp();
    if (llvm::all_of(root->getUsers(),
                     [](Operation *u) { return isa<memref::DeallocOp>(u); })) {
      for (Operation *u : llvm::make_early_inc_range(root->getUsers()))
        u->erase();
      root->erase();
    }
  }

  void rewrite(linalg::LinalgOp op) {
    unsigned batchDims = isa<linalg::BatchMatmulOp>(op) ? 1 : 0;
    auto cType = cast<MemRefType>(op.getDpsInits()[0].getType());
    Type elt = cType.getElementType();
    if (!elt.isF32() && !elt.isF64())
      return;
    // A and B: C's type, or both f16 or both bf16 with an f32 C.
    Type in = cast<MemRefType>(op->getOperand(0).getType()).getElementType();
    if (cast<MemRefType>(op->getOperand(1).getType()).getElementType() != in)
      return;
    if (in != elt && !(elt.isF32() && (in.isF16() || in.isBF16())))
      return;
    std::optional<std::pair<bool, bool>> t = transposes(op, batchDims);
    if (!t)
      return;
    OpBuilder b(op);
    Location loc = op.getLoc();
    int64_t rank = 2 + batchDims;
    SmallVector<int64_t> dyn(rank, ShapedType::kDynamic);
    auto layout = StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                                         dyn);
    auto genericType = MemRefType::get(dyn, elt, layout);
    auto inputType = MemRefType::get(dyn, in, layout);
    std::string name = std::string(batchDims ? "dort_batch_matmul_"
                                             : "dort_matmul_") +
                       (in.isF16()    ? "f16_f32"
                        : in.isBF16() ? "bf16_f32"
                        : elt.isF32() ? "f32"
                                      : "f64");
    Type i32 = b.getI32Type();
    func::FuncOp callee = declare(
        name, b.getFunctionType(
                  {inputType, inputType, genericType, i32, i32, elt, elt}, {}));
    SmallVector<Value> args;
    for (Value v : op->getOperands()) {
      // A shared operand becomes a batch of one, which the kernel
      // broadcasts.
      auto type = cast<MemRefType>(v.getType());
      if (type.getRank() < rank)
        v = memref::ExpandShapeOp::create(
            b, loc, SmallVector<int64_t>{1, type.getDimSize(0), type.getDimSize(1)},
            v, SmallVector<ReassociationIndices>{{0, 1}, {2}});
      MemRefType argType =
          MemRefType::Builder(genericType).setElementType(type.getElementType());
      args.push_back(memref::CastOp::create(b, loc, argType, v));
    }
    args.push_back(arith::ConstantIntOp::create(b, loc, t->first, 32));
    args.push_back(arith::ConstantIntOp::create(b, loc, t->second, 32));
    // alpha = 1, beta = 1: the product is added to the accumulator (a
    // partial sum). When the accumulator was just zero-filled, the fill
    // goes and beta = 0: BLAS writes C without reading it.
    Value one = arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 1.0));
    linalg::FillOp zeroFill = precedingZeroFill(op);
    args.push_back(one);
    args.push_back(zeroFill ? arith::ConstantOp::create(
                                  b, loc, b.getFloatAttr(elt, 0.0))
                                  .getResult()
                            : one);
    if (zeroFill)
      zeroFill->erase();
    auto call = func::CallOp::create(b, loc, callee, args);
    Value a = op->getOperand(0), bm = op->getOperand(1),
          c = op.getDpsInits()[0];
    op->erase();
    if (epilogues && zeroFill && !batchDims && elt.isF32())
      fuseEpilogue(call, a, bm, c, in);
  }

  //===--------------------------------------------------------------------===//
  // Epilogues: act(A B + bias + residual) as one call
  //===--------------------------------------------------------------------===//

  /// The elementwise step after a GEMM that the library can fuse into it
  /// (cuBLASLt's epilogues): the generic that reads the product C and
  /// writes D = act(C + bias[column] + residual).
  struct Epilogue {
    linalg::GenericOp op;
    Value product;  // the generic's operand that is C (or a view of it)
    Value bias;     // 1-D, one per column; or null
    Value residual; // same shape as D (the GEMM's beta = 1); or null
    int act = kNone;
  };
  enum { kNone = 0, kRelu = 1, kGeluTanh = 2 };

  /// A [rows..., N] view of a 2-D [M, N] buffer as the GEMM sees it:
  /// itself when 2-D, collapsed otherwise; null when the rows cannot be
  /// collapsed or the last dimension is not contiguous.
  static Value as2D(OpBuilder &b, Location loc, Value v) {
    auto type = cast<MemRefType>(v.getType());
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(type.getStridesAndOffset(strides, offset)) ||
        strides.back() != 1)
      return nullptr;
    if (type.getRank() == 2)
      return v;
    ReassociationIndices rows;
    for (int64_t i = 0; i + 1 < type.getRank(); ++i)
      rows.push_back(i);
    SmallVector<ReassociationIndices> re = {rows, {type.getRank() - 1}};
    if (!memref::CollapseShapeOp::isGuaranteedCollapsible(type, re))
      return nullptr;
    return memref::CollapseShapeOp::create(b, loc, v, re);
  }

  /// In a step on 16-bit values (`io` f16 or bf16): one of its roundings,
  /// `truncf f32 -> io` (to nearest even) or `extf io -> f32`, which the
  /// library's single rounding at the end replaces. Nothing in an f32 step.
  static bool isStepRounding(Operation *op, Type io) {
    if (io.isF32() || !op || op->getNumOperands() != 1 ||
        op->getNumResults() != 1)
      return false;
    Type from = op->getOperand(0).getType(), to = op->getResult(0).getType();
    if (auto t = dyn_cast<arith::TruncFOp>(op))
      return from.isF32() && to == io && !t.getRoundingmodeAttr();
    return isa<arith::ExtFOp>(op) && from == io && to.isF32();
  }

  /// Evaluates the body's steps from z to the yielded value at `x`: the
  /// scalar function the epilogue applies. nullopt for an op it does not
  /// know (which then is not an activation the library has).
  static std::optional<double> evaluate(Block &body, Value z,
                                        const llvm::SmallPtrSetImpl<Operation *>
                                            &skip,
                                        Type io, double x) {
    llvm::DenseMap<Value, double> env;
    env[z] = x;
    auto get = [&](Value v) -> std::optional<double> {
      auto it = env.find(v);
      if (it != env.end())
        return it->second;
      FloatAttr f;
      if (matchPattern(v, m_Constant(&f)))
        return f.getValueAsDouble();
      return std::nullopt;
    };
    for (Operation &o : body.without_terminator()) {
      if (skip.contains(&o) || o.hasTrait<OpTrait::ConstantLike>())
        continue;
      SmallVector<double> in;
      for (Value v : o.getOperands()) {
        std::optional<double> d = get(v);
        if (!d)
          return std::nullopt;
        in.push_back(*d);
      }
      double r;
      if (isa<arith::AddFOp>(o))
        r = in[0] + in[1];
      else if (isa<arith::SubFOp>(o))
        r = in[0] - in[1];
      else if (isa<arith::MulFOp>(o))
        r = in[0] * in[1];
      else if (isa<arith::DivFOp>(o))
        r = in[0] / in[1];
      else if (isa<arith::NegFOp>(o))
        r = -in[0];
      else if (isStepRounding(&o, io))
        r = in[0]; // the value, as the library computes it
      else if (isa<arith::MaximumFOp, arith::MaxNumFOp>(o))
        r = std::max(in[0], in[1]);
      else if (isa<arith::MinimumFOp, arith::MinNumFOp>(o))
        r = std::min(in[0], in[1]);
      else if (isa<math::TanhOp>(o))
        r = std::tanh(in[0]);
      else if (isa<math::ExpOp>(o))
        r = std::exp(in[0]);
      else if (isa<math::ErfOp>(o))
        r = std::erf(in[0]);
      else if (auto cmp = dyn_cast<arith::CmpFOp>(o)) {
        using P = arith::CmpFPredicate;
        switch (cmp.getPredicate()) {
        case P::OGT: case P::UGT: r = in[0] > in[1]; break;
        case P::OGE: case P::UGE: r = in[0] >= in[1]; break;
        case P::OLT: case P::ULT: r = in[0] < in[1]; break;
        case P::OLE: case P::ULE: r = in[0] <= in[1]; break;
        default: return std::nullopt;
        }
      } else if (isa<arith::SelectOp>(o))
        r = in[0] != 0 ? in[1] : in[2];
      else
        return std::nullopt;
      env[o.getResult(0)] = r;
    }
    return get(body.getTerminator()->getOperand(0));
  }

  /// Which activation the body applies to z, by evaluating it where the
  /// candidates differ: none, ReLU, or GELU's tanh form (cuBLASLt's GELU;
  /// GELU with erf differs from it by up to 5e-4 and is not fused).
  static std::optional<int> activation(Block &body, Value z,
                                       const llvm::SmallPtrSetImpl<Operation *>
                                           &chain,
                                       Type io, double geluTolerance) {
    auto gelu = [](double x) {
      return 0.5 * x *
             (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    };
    bool asNone = true, asRelu = true, asGelu = true;
    // Where they differ most (|x| < 8), and far out (a clamp there is not
    // an activation the library has).
    SmallVector<double> xs;
    for (int i = -64; i <= 64; ++i)
      xs.append({i / 8.0, i / 8.0 + 1e-3});
    for (double big : {16.0, 100.0, 1e4, 7e4, 1e8, 1e30})
      xs.append({big, -big});
    for (double x : xs) {
      std::optional<double> f = evaluate(body, z, chain, io, x);
      if (!f || std::isnan(*f))
        return std::nullopt;
      auto near = [&](double want, double tol) {
        return std::abs(*f - want) <= tol * std::max(1.0, std::abs(want));
      };
      asNone = asNone && near(x, 1e-6);
      asRelu = asRelu && near(std::max(x, 0.0), 1e-6);
      asGelu = asGelu && near(gelu(x), geluTolerance);
    }
    if (asNone)
      return kNone;
    if (asRelu)
      return kRelu;
    if (asGelu)
      return kGeluTanh;
    return std::nullopt;
  }

  /// The generic right after `call` (nothing but views and allocations in
  /// between) if it is an epilogue of the product `c` that nothing else
  /// reads.
  std::optional<Epilogue> matchEpilogue(func::CallOp call, Value a, Value bm,
                                        Value c, Type io) {
    Operation *next = call->getNextNode();
    while (next && (isa<memref::AllocOp>(next) || isMemoryEffectFree(next)))
      next = next->getNextNode();
    auto gen = dyn_cast_or_null<linalg::GenericOp>(next);
    if (!gen || !gen.hasPureBufferSemantics() || gen.getNumDpsInits() != 1 ||
        gen.getNumLoops() < 2 ||
        gen.getNumParallelLoops() != gen.getNumLoops())
      return std::nullopt;
    unsigned rank = gen.getNumLoops();
    MLIRContext *ctx = gen.getContext();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
    AffineMap column =
        AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx), ctx);
    Epilogue e;
    e.op = gen;
    Value d = gen.getDpsInits()[0];
    if (gen.getMatchingIndexingMap(gen.getDpsInitOperand(0)) != identity ||
        cast<MemRefType>(d.getType()).getElementType() != io)
      return std::nullopt;
    Block &body = gen.getRegion().front();
    if (!body.getArguments().back().use_empty())
      return std::nullopt;
    llvm::SmallPtrSet<Value, 4> leaves; // C's, the bias's, the residual's
    Value cArg;
    for (OpOperand *in : gen.getDpsInputOperands()) {
      Value v = in->get();
      AffineMap map = gen.getMatchingIndexingMap(in);
      auto type = cast<MemRefType>(v.getType());
      BlockArgument arg = gen.getMatchingBlockArgument(in);
      auto expand = v.getDefiningOp<memref::ExpandShapeOp>();
      bool isProduct =
          v == c || (expand && expand.getSrc() == c &&
                     expand.getReassociationIndices().size() == 2 &&
                     expand.getReassociationIndices()[1].size() == 1);
      // The product is f32; the rest of the step is the GEMM's operand type.
      if (type.getElementType() != (isProduct ? Type(Float32Type::get(ctx)) : io))
        return std::nullopt;
      if (isProduct && map == identity && !e.product) {
        e.product = v;
        cArg = arg;
      } else if (map == column && type.getRank() == 1 && !e.bias &&
                 !isProduct) {
        SmallVector<int64_t> strides;
        int64_t offset;
        if (failed(type.getStridesAndOffset(strides, offset)) ||
            strides[0] != 1)
          return std::nullopt;
        e.bias = v;
      } else if (map == identity && !e.residual && !isProduct) {
        e.residual = v;
      } else {
        return std::nullopt;
      }
      leaves.insert(arg);
    }
    if (!e.product)
      return std::nullopt;
    // What the epilogue writes or reads must not be what the GEMM reads or
    // writes: D is written before the product would have been read.
    Value rd = rootBuffer(d);
    for (Value v : {a, bm})
      if (rootBuffer(v) == rd)
        return std::nullopt;
    if (e.bias && rootBuffer(e.bias) == rd)
      return std::nullopt;
    if (e.residual && rootBuffer(e.residual) == rd && e.residual != d)
      return std::nullopt;
    // The product is read by this generic only, unless the generic writes
    // D in place of it (later steps then read D). Otherwise it is a buffer
    // of its own, which goes.
    if (d != c && !c.getDefiningOp<memref::AllocOp>())
      return std::nullopt;
    SmallVector<Operation *> readers;
    if (d != c)
      readers = llvm::to_vector(c.getUsers());
    for (Operation *user : readers) {
      if (user == gen.getOperation() || user == e.product.getDefiningOp())
        continue;
      auto castOp = dyn_cast<memref::CastOp>(user);
      if (castOp && llvm::all_of(castOp->getUsers(),
                                 [&](Operation *u) { return u == call; }))
        continue;
      return std::nullopt;
    }
    if (e.product != c &&
        !llvm::all_of(e.product.getUsers(),
                      [&](Operation *u) { return u == gen.getOperation(); }))
      return std::nullopt;
    // z = C + bias + residual: a tree of additions whose leaves are those
    // arguments, each once; every other step is a function of z alone.
    llvm::SmallPtrSet<Operation *, 4> chain;
    Value z = cArg;
    if (leaves.size() > 1) {
      std::function<bool(Value, llvm::SmallPtrSetImpl<Value> &,
                         llvm::SmallPtrSetImpl<Operation *> &)>
          collect = [&](Value v, llvm::SmallPtrSetImpl<Value> &seen,
                        llvm::SmallPtrSetImpl<Operation *> &ops) {
            if (leaves.contains(v))
              return seen.insert(v).second;
            // The roundings of a 16-bit step (its values are 16-bit, its
            // arithmetic f32): the library rounds once, at the end.
            Operation *def = v.getDefiningOp();
            if (isStepRounding(def, io) && def->getBlock() == &body) {
              ops.insert(def);
              return collect(def->getOperand(0), seen, ops);
            }
            auto add = v.getDefiningOp<arith::AddFOp>();
            if (!add || add->getBlock() != &body)
              return false;
            ops.insert(add);
            return collect(add.getLhs(), seen, ops) &&
                   collect(add.getRhs(), seen, ops);
          };
      z = nullptr;
      for (auto add : body.getOps<arith::AddFOp>()) {
        llvm::SmallPtrSet<Value, 4> seen;
        llvm::SmallPtrSet<Operation *, 4> ops;
        if (collect(add.getResult(), seen, ops) && seen.size() == leaves.size()) {
          z = add.getResult();
          chain = std::move(ops);
          break;
        }
      }
      if (!z)
        return std::nullopt;
    }
    // Only the chain reads the leaves, and only the chain's root leaves it.
    for (Value leaf : leaves)
      for (Operation *u : leaf.getUsers())
        if (leaf != z && !chain.contains(u))
          return std::nullopt;
    // A 16-bit output is worth a call even with nothing else to fuse: the
    // library writes it rounded.
    bool converts = io != Float32Type::get(ctx);
    for (Operation *o : chain)
      for (Operation *u : o->getResult(0).getUsers())
        if (o->getResult(0) != z && !chain.contains(u))
          return std::nullopt;
    // GELU's constants in the step's type (rounded to f16 they move it by
    // 1.4e-5, to bf16 by 3.4e-4; GELU with erf differs by 4.7e-4).
    double geluTolerance = io.isF16() ? 5e-5 : io.isBF16() ? 4e-4 : 1e-5;
    std::optional<int> act = activation(body, z, chain, io, geluTolerance);
    if (!act || (*act == kNone && !e.bias && !e.residual && !converts))
      return std::nullopt;
    e.act = *act;
    return e;
  }

  /// Replaces the GEMM `call` (beta = 0) and the epilogue that follows it by
  /// one dort_matmul_epilogue_<io> call writing the epilogue's output: f32,
  /// or f16/bf16 when the GEMM's operands and the step's values are.
  void fuseEpilogue(func::CallOp call, Value a, Value bm, Value c, Type io) {
    // An empty contraction is no GEMM for cuBLASLt.
    for (Value v : {a, bm})
      if (llvm::is_contained(cast<MemRefType>(v.getType()).getShape(), 0))
        return;
    std::optional<Epilogue> e = matchEpilogue(call, a, bm, c, io);
    if (!e)
      return;
    OpBuilder b(e->op);
    Location loc = e->op.getLoc();
    Value d = as2D(b, loc, e->op.getDpsInits()[0]);
    Value r = e->residual ? as2D(b, loc, e->residual) : d;
    if (!d || !r) {
      for (Value v : {d, r})
        if (v && v.getDefiningOp() && v.use_empty())
          v.getDefiningOp()->erase();
      return;
    }
    Type f32 = b.getF32Type(), i32 = b.getI32Type();
    auto dyn2 = MemRefType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic}, io,
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               {ShapedType::kDynamic, ShapedType::kDynamic}));
    auto dyn1 = MemRefType::get(
        {ShapedType::kDynamic}, io,
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               {ShapedType::kDynamic}));
    // Without a bias, an empty view of D stands in for it (never read).
    Value bias = e->bias;
    if (!bias)
      bias = memref::ReinterpretCastOp::create(
          b, loc,
          MemRefType::get({0}, io,
                          StridedLayoutAttr::get(b.getContext(), 0, {1})),
          d, /*offset=*/0, /*sizes=*/ArrayRef<int64_t>{0},
          /*strides=*/ArrayRef<int64_t>{1});
    func::FuncOp callee = declare(
        std::string("dort_matmul_epilogue_") +
            (io.isF16() ? "f16" : io.isBF16() ? "bf16" : "f32"),
        b.getFunctionType(
            {dyn2, dyn2, dyn2, dyn2, dyn1, i32, i32, f32, f32, i32, i32}, {}));
    auto cst = [&](int v) {
      return arith::ConstantIntOp::create(b, loc, v, 32).getResult();
    };
    SmallVector<Value> args = {
        call.getOperand(0),
        call.getOperand(1),
        memref::CastOp::create(b, loc, dyn2, d),
        memref::CastOp::create(b, loc, dyn2, r),
        memref::CastOp::create(b, loc, dyn1, bias),
        call.getOperand(3),
        call.getOperand(4),
        call.getOperand(5),
        arith::ConstantOp::create(b, loc,
                                  b.getF32FloatAttr(e->residual ? 1.0 : 0.0)),
        cst(e->act),
        cst(e->bias ? 1 : 0)};
    func::CallOp::create(b, loc, callee, args);
    Value productCast = call.getOperand(2);
    Value product = e->product;
    e->op->erase();
    call->erase();
    for (Value v : {productCast, product})
      if (v.getDefiningOp() && v.use_empty() && v != c)
        v.getDefiningOp()->erase();
    if (c.use_empty() && c.getDefiningOp())
      c.getDefiningOp()->erase();
  }

  /// The buffer a view (subview, reshape, cast) looks into.
  static Value rootBuffer(Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (isa<memref::SubViewOp, memref::CollapseShapeOp,
              memref::ExpandShapeOp, memref::CastOp,
              memref::ReinterpretCastOp>(def))
        v = def->getOperand(0);
      else
        break;
    }
    return v;
  }

  /// A linalg.fill of zero into all of op's accumulator, with nothing that
  /// touches memory between the two; null otherwise.
  static linalg::FillOp precedingZeroFill(linalg::LinalgOp op) {
    Value c = op.getDpsInits()[0];
    auto cType = cast<MemRefType>(c.getType());
    for (Operation *prev = op->getPrevNode(); prev;
         prev = prev->getPrevNode()) {
      auto fill = dyn_cast<linalg::FillOp>(prev);
      if (!fill) {
        if (isMemoryEffectFree(prev))
          continue;
        return nullptr;
      }
      if (!matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
        return nullptr;
      // The fill must cover C: fill C itself, or fill all of the buffer C
      // is all of.
      Value filled = fill.getDpsInits()[0], root = rootBuffer(c);
      if (filled == c)
        return fill;
      auto fType = dyn_cast<MemRefType>(filled.getType());
      auto rType = dyn_cast<MemRefType>(root.getType());
      if (!fType || !rType || !fType.hasStaticShape() ||
          !rType.hasStaticShape() || !cType.hasStaticShape() ||
          rootBuffer(filled) != root ||
          fType.getNumElements() != rType.getNumElements() ||
          cType.getNumElements() != rType.getNumElements())
        return nullptr;
      return fill;
    }
    return nullptr;
  }

  /// The runtime function `name` of `type` (C interface), declared once.
  func::FuncOp declare(StringRef name, FunctionType type) {
    ModuleOp module = getOperation();
    if (auto f = module.lookupSymbol<func::FuncOp>(name))
      return f;
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto f = func::FuncOp::create(b, module.getLoc(), name, type);
    f.setPrivate();
    f->setAttr("llvm.emit_c_interface", b.getUnitAttr());
    return f;
  }
};

} // namespace
