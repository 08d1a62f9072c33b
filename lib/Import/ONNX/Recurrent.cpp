//===- Recurrent.cpp - ONNX recurrent ops ---------------------------------===//
//
// The importers of RNN, GRU and LSTM.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

/// RNN, GRU and LSTM, unrolled over the (static) sequence into dopt ops,
/// as ONNX's equations define them: per direction, the input's product
/// with W for every step at once, then per step the state's product with R
/// and the gates. Written with other ops, so the gradient (through time),
/// the sharding rules (the batch splits) and every target follow.
/// sequence_lens, when given, must be constant: a sample's state stops at
/// its length and its later outputs are zeros (reverse directions start at
/// its last element).
enum class Recurrent { RNN, GRU, LSTM };

template <Recurrent kind> LogicalResult importRecurrent(NodeContext &nc) {
  const int64_t gates = kind == Recurrent::LSTM ? 4
                        : kind == Recurrent::GRU ? 3
                                                 : 1;
  TRY(x, nc.requiredInput(0));
  TRY(w, nc.requiredInput(1));
  TRY(r, nc.requiredInput(2));
  Value bias = nc.input(3), h0 = nc.input(5);
  Value c0 = kind == Recurrent::LSTM ? nc.input(6) : Value();
  Value peep = kind == Recurrent::LSTM ? nc.input(7) : Value();
  RankedTensorType xt = nc.inputType(0), wt = nc.inputType(1),
                   rt = nc.inputType(2);
  Type elt = xt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(layout, nc.intAttr("layout", 0));
  TRY(direction, nc.stringAttr("direction", "forward"));
  if (direction != "forward" && direction != "reverse" &&
      direction != "bidirectional")
    return nc.error("direction must be forward, reverse or bidirectional, "
                    "got '" + direction + "'");
  if (layout != 0 && layout != 1)
    return nc.error("layout must be 0 or 1, got " + std::to_string(layout));
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (xt.getRank() != 3 || wt.getRank() != 3 || rt.getRank() != 3)
    return nc.error("X, W and R must have rank 3");
  int64_t steps = xt.getDimSize(layout == 0 ? 0 : 1);
  if (xt.getRank() == 3 && steps == 0)
    return nc.error("a sequence of 0 steps is not supported");
  int64_t batch = xt.getDimSize(layout == 0 ? 1 : 0), in = xt.getDimSize(2);
  int64_t hidden = rt.getDimSize(2);
  TRY(hiddenAttr, nc.intAttr("hidden_size", hidden));
  auto shapeIs = [&](RankedTensorType t, ArrayRef<int64_t> want) {
    return t && t.getShape() == want;
  };
  if (hiddenAttr != hidden || !shapeIs(wt, {dirs, gates * hidden, in}) ||
      !shapeIs(rt, {dirs, gates * hidden, hidden}))
    return nc.error(
        "W " + shapeStr(wt.getShape()) + " and R " + shapeStr(rt.getShape()) +
        " do not fit " + std::to_string(dirs) + " direction(s), " +
        std::to_string(gates) + " gate(s) of hidden_size " +
        std::to_string(hiddenAttr) + " and input size " + std::to_string(in) +
        " (want W " + shapeStr({dirs, gates * hiddenAttr, in}) + ", R " +
        shapeStr({dirs, gates * hiddenAttr, hiddenAttr}) + ")");
  SmallVector<int64_t> stateShape =
      layout == 0 ? SmallVector<int64_t>{dirs, batch, hidden}
                  : SmallVector<int64_t>{batch, dirs, hidden};
  if (bias && !shapeIs(nc.inputType(3), {dirs, 2 * gates * hidden}))
    return nc.error("B " + shapeStr(nc.inputType(3).getShape()) +
                    " must be " + shapeStr({dirs, 2 * gates * hidden}));
  if (h0 && !shapeIs(nc.inputType(5), stateShape))
    return nc.error("initial_h " + shapeStr(nc.inputType(5).getShape()) +
                    " must be " + shapeStr(stateShape));
  if (c0 && !shapeIs(nc.inputType(6), stateShape))
    return nc.error("initial_c " + shapeStr(nc.inputType(6).getShape()) +
                    " must be " + shapeStr(stateShape));
  if (peep && !shapeIs(nc.inputType(7), {dirs, 3 * hidden}))
    return nc.error("P " + shapeStr(nc.inputType(7).getShape()) +
                    " must be " + shapeStr({dirs, 3 * hidden}));
  SmallVector<int64_t> lens;
  if (nc.input(4)) {
    TRY(l, nc.constantInts(4, "sequence_lens"));
    if (static_cast<int64_t>(l.size()) != batch)
      return nc.error("sequence_lens has " + std::to_string(l.size()) +
                      " entries for a batch of " + std::to_string(batch));
    for (int64_t v : l)
      if (v < 0 || v > steps)
        return nc.error("sequence_lens " + shapeStr(l) +
                        " must lie in [0, " + std::to_string(steps) + "]");
    if (llvm::any_of(l, [&](int64_t v) { return v != steps; }))
      lens = l;
  }
  std::optional<float> clip;
  if (nc.hasAttr("clip")) {
    TRY(c, nc.floatAttr("clip", 0.0f));
    if (c <= 0)
      return nc.error("clip must be positive");
    clip = c;
  }
  TRY(inputForget, nc.intAttr("input_forget", 0));
  TRY(linearBeforeReset, nc.intAttr("linear_before_reset", 0));

  // Activations, per direction (ONNX's defaults; alphas and betas in order
  // for those that take them).
  SmallVector<std::string> names;
  if (const onnx::AttributeProto *a = nc.attr("activations"))
    for (const std::string &n : a->strings())
      names.push_back(n);
  int64_t perDir = kind == Recurrent::LSTM ? 3 : kind == Recurrent::GRU ? 2 : 1;
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) {
      if (kind == Recurrent::RNN)
        names.push_back("Tanh");
      else
        names.append({"Sigmoid", "Tanh"});
      if (kind == Recurrent::LSTM)
        names.push_back("Tanh");
    }
  }
  if (static_cast<int64_t>(names.size()) != perDir * dirs)
    return nc.error("activations has " + std::to_string(names.size()) +
                    " entries, want " + std::to_string(perDir * dirs));
  SmallVector<float> alphas, betas;
  if (const onnx::AttributeProto *a = nc.attr("activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const onnx::AttributeProto *a = nc.attr("activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  size_t nextAlpha = 0, nextBeta = 0;
  auto c = [&](double v) { return constantScalar(nc, elt, v); };
  auto add = [&](Value a, Value b) { return nc.create<dopt::AddOp>(a, b); };
  auto mul = [&](Value a, Value b) { return nc.create<dopt::MulOp>(a, b); };
  using Fn = std::function<Value(Value)>;
  SmallVector<Fn> fns;
  for (std::string n : names) {
    // ONNX Runtime reads the names without regard to case.
    for (StringRef known : {"Sigmoid", "Tanh", "Relu", "LeakyRelu", "Affine",
                            "ScaledTanh", "HardSigmoid"})
      if (StringRef(n).equals_insensitive(known))
        n = known.str();
    auto param = [&](SmallVector<float> &list, size_t &next, float dflt) {
      return next < list.size() ? list[next++] : dflt;
    };
    if (n == "Sigmoid")
      fns.push_back([&](Value v) { return nc.create<dopt::SigmoidOp>(v); });
    else if (n == "Tanh")
      fns.push_back([&](Value v) { return nc.create<dopt::TanhOp>(v); });
    else if (n == "Relu")
      fns.push_back([&](Value v) { return nc.create<dopt::ReluOp>(v); });
    else if (n == "LeakyRelu") {
      float alpha = param(alphas, nextAlpha, 0.01f);
      fns.push_back([&, alpha](Value v) {
        return nc.create<dopt::LeakyReluOp>(
            v, nc.builder().getF32FloatAttr(alpha));
      });
    } else if (n == "Affine") {
      float alpha = param(alphas, nextAlpha, 1.0f);
      float beta = param(betas, nextBeta, 0.0f);
      fns.push_back([&, alpha, beta](Value v) {
        return add(mul(v, c(alpha)), c(beta));
      });
    } else if (n == "ScaledTanh") {
      float alpha = param(alphas, nextAlpha, 1.0f);
      float beta = param(betas, nextBeta, 1.0f);
      fns.push_back([&, alpha, beta](Value v) {
        return mul(c(alpha), nc.create<dopt::TanhOp>(mul(v, c(beta))));
      });
    } else if (n == "HardSigmoid") {
      float alpha = param(alphas, nextAlpha, 0.2f);
      float beta = param(betas, nextBeta, 0.5f);
      fns.push_back([&, alpha, beta](Value v) {
        return nc.create<dopt::MinOp>(
            nc.create<dopt::MaxOp>(add(mul(v, c(alpha)), c(beta)), c(0)),
            c(1));
      });
    } else
      return nc.error("activation '" + n +
                      "' is not supported (Sigmoid, Tanh, Relu, LeakyRelu, "
                      "Affine, ScaledTanh, HardSigmoid)");
  }

  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  auto along = [&](Value v, int64_t axis, int64_t start, int64_t count) {
    return strided(nc, v, {axis}, {start}, {1}, {count});
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) {
    return nc.create<dopt::TransposeOp>(v, i64s(perm));
  };
  // [T, B, I] and states [dirs, B, H].
  if (layout == 1) {
    x = transpose(x, {1, 0, 2});
    if (h0)
      h0 = transpose(h0, {1, 0, 2});
    if (c0)
      c0 = transpose(c0, {1, 0, 2});
  }
  Value zeros = floatConstant(nc, elt, {batch, hidden},
                              SmallVector<double>(batch * hidden, 0.0));
  SmallVector<Value> ys(dirs), lastH(dirs), lastC(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    // Per gate k: W_k^T and R_k^T (a product per gate, not one over all
    // gates sliced after: the planner can then split each gate's hidden
    // columns as its own product's), and the input's product with W_k for
    // every step at once.
    Value wd = reshape(nc, along(w, 0, d, 1), {gates * hidden, in});
    Value rd = reshape(nc, along(r, 0, d, 1), {gates * hidden, hidden});
    Value x2 = reshape(nc, x, {steps * batch, in});
    Value bd = bias ? reshape(nc, along(bias, 0, d, 1), {2 * gates * hidden})
                    : Value();
    SmallVector<Value> xw(gates), rT(gates), rbk(gates);
    for (int64_t k = 0; k < gates; ++k) {
      xw[k] = reshape(nc,
                      nc.create<dopt::MatMulOp>(
                          x2, transpose(along(wd, 0, k * hidden, hidden), {1, 0})),
                      {steps, batch, hidden});
      rT[k] = transpose(along(rd, 0, k * hidden, hidden), {1, 0});
      if (bd) {
        xw[k] = add(xw[k], along(bd, 0, k * hidden, hidden));
        rbk[k] = along(bd, 0, (gates + k) * hidden, hidden);
      }
    }
    Value pi, po, pf;
    if (peep) {
      Value pd = reshape(nc, along(peep, 0, d, 1), {3 * hidden});
      pi = along(pd, 0, 0, hidden);
      po = along(pd, 0, hidden, hidden);
      pf = along(pd, 0, 2 * hidden, hidden);
    }
    Fn f = fns[d * perDir], g = perDir > 1 ? fns[d * perDir + 1] : Fn(),
       h = perDir > 2 ? fns[d * perDir + 2] : Fn();
    Value hPrev = h0 ? reshape(nc, along(h0, 0, d, 1), {batch, hidden}) : zeros;
    Value cPrev = c0 ? reshape(nc, along(c0, 0, d, 1), {batch, hidden}) : zeros;
    // The state's product with gate k's R (and its bias).
    auto hr = [&](Value state, int64_t k) {
      Value v = nc.create<dopt::MatMulOp>(state, rT[k]);
      return rbk[k] ? add(v, rbk[k]) : v;
    };
    auto clipped = [&](Value v) {
      return clip ? nc.create<dopt::MinOp>(nc.create<dopt::MaxOp>(v, c(-*clip)),
                                           c(*clip))
                  : v;
    };
    SmallVector<Value> outs(steps);
    for (int64_t i = 0; i < steps; ++i) {
      int64_t t = reverse ? steps - 1 - i : i;
      SmallVector<Value> xs(gates);
      for (int64_t k = 0; k < gates; ++k)
        xs[k] = reshape(nc, along(xw[k], 0, t, 1), {batch, hidden});
      Value hNew, cNew;
      if (kind == Recurrent::RNN) {
        hNew = f(clipped(add(xs[0], hr(hPrev, 0))));
      } else if (kind == Recurrent::GRU) {
        Value z = f(clipped(add(xs[0], hr(hPrev, 0))));
        Value rg = f(clipped(add(xs[1], hr(hPrev, 1))));
        Value cand = linearBeforeReset ? add(xs[2], mul(rg, hr(hPrev, 2)))
                                       : add(xs[2], hr(mul(rg, hPrev), 2));
        Value hh = g(clipped(cand));
        hNew = add(mul(nc.create<dopt::SubOp>(c(1), z), hh), mul(z, hPrev));
      } else {
        Value pre_i = add(xs[0], hr(hPrev, 0));
        Value pre_f = add(xs[2], hr(hPrev, 2));
        if (peep) {
          pre_i = add(pre_i, mul(pi, cPrev));
          pre_f = add(pre_f, mul(pf, cPrev));
        }
        Value ig = f(clipped(pre_i));
        Value fg = inputForget ? nc.create<dopt::SubOp>(c(1), ig)
                               : f(clipped(pre_f));
        Value cc = g(clipped(add(xs[3], hr(hPrev, 3))));
        cNew = add(mul(fg, cPrev), mul(ig, cc));
        Value pre_o = add(xs[1], hr(hPrev, 1));
        if (peep)
          pre_o = add(pre_o, mul(po, cNew));
        Value og = f(clipped(pre_o));
        hNew = mul(og, h(cNew));
      }
      Value out = hNew;
      if (!lens.empty()) {
        // Samples past their length keep their state and output zeros.
        SmallVector<bool> valid;
        for (int64_t l : lens)
          valid.push_back(t < l);
        Value mask = dopt::ConstantOp::create(
            b, nc.loc(),
            DenseElementsAttr::get(RankedTensorType::get({batch, 1}, b.getI1Type()),
                                   ArrayRef<bool>(valid)));
        out = nc.create<dopt::WhereOp>(mask, hNew, zeros);
        hNew = nc.create<dopt::WhereOp>(mask, hNew, hPrev);
        if (cNew)
          cNew = nc.create<dopt::WhereOp>(mask, cNew, cPrev);
      }
      outs[t] = reshape(nc, out, {1, 1, batch, hidden});
      hPrev = hNew;
      if (cNew)
        cPrev = cNew;
      if (nc.hasFailed())
        return failure();
    }
    ys[d] = steps == 1 ? outs[0]
                       : nc.create<dopt::ConcatOp>(outs, b.getI64IntegerAttr(0));
    if (llvm::is_contained(lens, 0)) {
      // A sample of length 0 ends with zero states (ONNX Runtime's choice;
      // the spec leaves it open).
      SmallVector<bool> some;
      for (int64_t l : lens)
        some.push_back(l > 0);
      Value any = dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(RankedTensorType::get({batch, 1}, b.getI1Type()),
                                 ArrayRef<bool>(some)));
      hPrev = nc.create<dopt::WhereOp>(any, hPrev, zeros);
      if (kind == Recurrent::LSTM)
        cPrev = nc.create<dopt::WhereOp>(any, cPrev, zeros);
    }
    lastH[d] = reshape(nc, hPrev, {1, batch, hidden});
    if (kind == Recurrent::LSTM)
      lastC[d] = reshape(nc, cPrev, {1, batch, hidden});
  }
  auto joined = [&](SmallVector<Value> &v, int64_t axis) {
    return v.size() == 1 ? v[0]
                         : nc.create<dopt::ConcatOp>(v, b.getI64IntegerAttr(axis));
  };
  Value y = joined(ys, 1), yh = joined(lastH, 0);
  Value yc = kind == Recurrent::LSTM ? joined(lastC, 0) : Value();
  if (layout == 1) {
    y = transpose(y, {2, 0, 1, 3});
    yh = transpose(yh, {1, 0, 2});
    if (yc)
      yc = transpose(yc, {1, 0, 2});
  }
  nc.setOutput(0, y);
  nc.setOutput(1, yh);
  if (kind == Recurrent::LSTM)
    nc.setOutput(2, yc);
  return failure(nc.hasFailed());
}

} // namespace

void onnximport::registerRecurrentImporters(llvm::StringMap<OpImporterFn> &t) {
  t["RNN"] = importRecurrent<Recurrent::RNN>;
  t["GRU"] = importRecurrent<Recurrent::GRU>;
  t["LSTM"] = importRecurrent<Recurrent::LSTM>;
}
