//===- Attention.cpp - ONNX attention ops ---------------------------------===//
//
// The importers of Attention, RotaryEmbedding, CausalConvWithState,
// LinearAttention.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include <numeric>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

/// Attention (opset 23-25; what torch's exporter writes for
/// scaled_dot_product_attention from opset 23), written with other ops as
/// ONNX's function body and reference define it: 3-D inputs split into
/// heads; Q and K each scaled by sqrt(scale); the past keys and values in
/// front of the new ones (present_key/value); grouped-query heads repeated;
/// softcap; a bias from the mask (boolean: 0 or -inf; a mask shorter than
/// the keys padded), the causal frontier (bottom-right: offset by the past
/// length, or per sample by nonpad_kv_seqlen), the sliding window and the
/// padding of nonpad_kv_seqlen -- those three known at import, one
/// constant; softmax (in softmax_precision), rows whose bias is all -inf
/// zero; the product with V. The four qk_matmul_output modes.
LogicalResult importAttention(NodeContext &nc) {
  TRY(q, nc.requiredInput(0));
  TRY(k, nc.requiredInput(1));
  TRY(v, nc.requiredInput(2));
  Value mask = nc.input(3), pastK = nc.input(4), pastV = nc.input(5);
  RankedTensorType qt = nc.inputType(0);
  Type elt = qt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs floating-point Q, K and V");
  int64_t rank = qt.getRank();
  if ((rank != 3 && rank != 4) || nc.inputType(1).getRank() != rank ||
      nc.inputType(2).getRank() != rank)
    return nc.error("Q, K and V must all have rank 3 or all rank 4");
  if (!pastK != !pastV)
    return nc.error("past_key and past_value must be given together");
  SmallVector<int64_t> nonpad;
  if (nc.input(6)) {
    if (pastK)
      return nc.error("nonpad_kv_seqlen cannot be combined with past_key");
    TRY(l, nc.constantInts(6, "nonpad_kv_seqlen"));
    nonpad = l;
  }
  TRY(isCausal, nc.intAttr("is_causal", 0));
  TRY(mode, nc.intAttr("qk_matmul_output_mode", 0));
  TRY(softcap, nc.floatAttr("softcap", 0.0f));
  TRY(left, nc.intAttr("left_window_size", -1));
  TRY(right, nc.intAttr("right_window_size", -1));
  if (mode < 0 || mode > 3)
    return nc.error("qk_matmul_output_mode must be 0 to 3, got " +
                    std::to_string(mode));
  if (left < -1 || right < -1)
    return nc.error("window sizes must be -1 or non-negative");
  OpBuilder &b = nc.builder();
  auto i64s = [&](ArrayRef<int64_t> x) { return b.getDenseI64ArrayAttr(x); };
  auto c = [&](double x) { return constantScalar(nc, elt, x); };
  auto mul = [&](Value x, Value y) { return nc.create<dopt::MulOp>(x, y); };
  auto add = [&](Value x, Value y) { return nc.create<dopt::AddOp>(x, y); };
  auto shapeOf = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getShape();
  };
  int64_t batch = qt.getDimSize(0);
  // [B, S, heads * d] -> [B, heads, S, d].
  auto heads = [&](Value x, int64_t n, StringRef what) -> FailureOr<Value> {
    auto sh = shapeOf(x);
    if (n <= 0 || sh[2] % n != 0)
      return nc.error(what + " hidden size " + std::to_string(sh[2]) +
                      " does not split into " + std::to_string(n) + " heads");
    return nc.create<dopt::TransposeOp>(
        reshape(nc, x, {sh[0], sh[1], n, sh[2] / n}), i64s({0, 2, 1, 3}));
  };
  if (rank == 3) {
    if (!nc.hasAttr("q_num_heads") || !nc.hasAttr("kv_num_heads"))
      return nc.error("3-D inputs need q_num_heads and kv_num_heads");
    TRY(qh, nc.intAttr("q_num_heads", 0));
    TRY(kvh, nc.intAttr("kv_num_heads", 0));
    TRY(q4, heads(q, qh, "Q"));
    TRY(k4, heads(k, kvh, "K"));
    TRY(v4, heads(v, kvh, "V"));
    q = q4, k = k4, v = v4;
  }
  int64_t qHeads = shapeOf(q)[1], kvHeads = shapeOf(k)[1];
  int64_t sq = shapeOf(q)[2], d = shapeOf(q)[3];
  if (shapeOf(k)[0] != batch || shapeOf(v)[0] != batch ||
      shapeOf(k)[3] != d || shapeOf(v)[1] != kvHeads)
    return nc.error("Q, K and V do not agree on batch, heads and head size");
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (nc.hasAttr("scale")) {
    TRY(sc, nc.floatAttr("scale", 1.0f));
    scale = sc;
  }
  // Both operands scaled by sqrt(scale), rounded to the input type (the
  // function body's order).
  Value rootScale = c(std::sqrt(scale));
  if (pastK) {
    k = nc.create<dopt::ConcatOp>(SmallVector<Value>{pastK, k},
                                  b.getI64IntegerAttr(2));
    v = nc.create<dopt::ConcatOp>(SmallVector<Value>{pastV, v},
                                  b.getI64IntegerAttr(2));
    if (nc.hasFailed())
      return failure();
  }
  Value presentK = k, presentV = v;
  int64_t skv = shapeOf(k)[2];
  int64_t past = pastK ? nc.inputType(4).getDimSize(2) : 0;
  if (!nonpad.empty() && static_cast<int64_t>(nonpad.size()) != batch)
    return nc.error("nonpad_kv_seqlen has " + std::to_string(nonpad.size()) +
                    " entries for a batch of " + std::to_string(batch));

  // The bias the attributes define: causal frontier, window, padding -- 0
  // where a query may attend a key, -inf where not; [B or 1, 1, Sq, Skv],
  // built from index vectors (folded at import when small; a long context
  // computes it in the program instead of holding Sq x Skv constants).
  bool perSample = !nonpad.empty();
  bool structural = isCausal || left >= 0 || right >= 0 || perSample;
  int64_t bs = perSample ? batch : 1;
  Value fixedBias;
  if (structural) {
    Type i64 = b.getI64Type();
    auto ints = [&](ArrayRef<int64_t> v, ArrayRef<int64_t> shape) -> Value {
      return dopt::ConstantOp::create(
          b, nc.loc(),
          DenseElementsAttr::get(RankedTensorType::get(shape, i64), v));
    };
    auto iota = [](int64_t n) {
      SmallVector<int64_t> v(n);
      std::iota(v.begin(), v.end(), 0);
      return v;
    };
    auto scalarInt = [&](int64_t v) { return ints({v}, {}); };
    // diff[s, i, j] = i + offset[s] - j: how far key j lies before query i.
    SmallVector<int64_t> offsets;
    for (int64_t s = 0; s < bs; ++s)
      offsets.push_back(perSample ? nonpad[s] - sq : past);
    Value j = ints(iota(skv), {1, 1, skv});
    Value diff = nc.create<dopt::SubOp>(
        nc.create<dopt::AddOp>(ints(iota(sq), {1, sq, 1}),
                               ints(offsets, {bs, 1, 1})),
        j);
    Value ok;
    auto both = [&](Value cond) {
      ok = ok ? nc.create<dopt::AndOp>(ok, cond) : cond;
    };
    if (isCausal)
      both(nc.create<dopt::GreaterEqualOp>(diff, scalarInt(0)));
    if (left >= 0)
      both(nc.create<dopt::LessEqualOp>(diff, scalarInt(left)));
    if (right >= 0)
      both(nc.create<dopt::GreaterEqualOp>(diff, scalarInt(-right)));
    if (perSample)
      both(nc.create<dopt::LessOp>(j, ints(nonpad, {bs, 1, 1})));
    fixedBias = nc.create<dopt::WhereOp>(ok, c(0), c(-INFINITY));
    if (nc.hasFailed())
      return failure();
    // Right-aligned against the scores [B, heads, Sq, Skv].
    fixedBias = reshape(nc, nc.create<dopt::ExpandOp>(fixedBias, i64s({bs, sq, skv})),
                        {bs, 1, sq, skv});
  }
  Value bias;
  if (mask) {
    RankedTensorType mt = nc.inputType(3);
    bool boolean = mt.getElementType().isInteger(1);
    if (!boolean && mt.getElementType() != elt)
      return nc.error("attn_mask must be boolean or of Q's element type");
    int64_t mr = mt.getRank();
    if (mr < 1 || mr > 4)
      return nc.error("attn_mask must have rank 1 to 4, got " +
                      std::to_string(mr));
    int64_t last = mt.getDimSize(mr - 1);
    if (last > skv)
      return nc.error("attn_mask's last dimension " + std::to_string(last) +
                      " is longer than the keys (" + std::to_string(skv) + ")");
    Value m = mask;
    if (boolean)
      m = nc.create<dopt::WhereOp>(m, c(0), c(-INFINITY));
    if (last < skv) {
      SmallVector<int64_t> pads(2 * mr, 0);
      pads[2 * mr - 1] = skv - last;
      m = nc.create<dopt::PadOp>(m, i64s(pads), b.getStringAttr("constant"),
                                 b.getF64FloatAttr(-INFINITY));
    }
    bias = m;
  }
  if (fixedBias)
    bias = bias ? add(bias, fixedBias) : fixedBias;
  // Grouped-query attention: each key/value head serves q/kv query heads
  // ([h0, h0, h1, h1, ...]).
  if (qHeads != kvHeads) {
    if (qHeads % kvHeads != 0)
      return nc.error(std::to_string(qHeads) + " query heads do not share " +
                      std::to_string(kvHeads) + " key/value heads evenly");
    int64_t rep = qHeads / kvHeads;
    auto repeat = [&](Value x) {
      auto sh = shapeOf(x);
      Value e = nc.create<dopt::ExpandOp>(
          reshape(nc, x, {sh[0], sh[1], 1, sh[2], sh[3]}),
          i64s({sh[0], sh[1], rep, sh[2], sh[3]}));
      return reshape(nc, e, {sh[0], sh[1] * rep, sh[2], sh[3]});
    };
    k = repeat(k);
    v = repeat(v);
  }
  Value raw = nc.create<dopt::MatMulOp>(
      mul(q, rootScale),
      nc.create<dopt::TransposeOp>(mul(k, rootScale), i64s({0, 1, 3, 2})));
  Value scores = raw;
  if (softcap > 0)
    scores = mul(nc.create<dopt::TanhOp>(nc.create<dopt::DivOp>(raw, c(softcap))),
                 c(softcap));
  Value biased = bias ? add(scores, bias) : scores;
  // Mode 0: the product itself (the function body's QKAttnWeight; ONNX's
  // Python reference gives the softcapped one); 1: after softcap; 2: with
  // the bias; 3: the probabilities.
  Value qkOut = mode == 0 ? raw : mode == 2 ? biased : scores;
  Value logits = biased;
  Type smElt = elt;
  if (nc.hasAttr("softmax_precision")) {
    TRY(sp, nc.intAttr("softmax_precision", 1));
    smElt = convertDataType(nc.context(), sp);
    if (!smElt || !isa<FloatType>(smElt))
      return nc.error("softmax_precision must be a floating-point type");
    if (smElt != elt)
      logits = nc.create<dopt::CastOp>(logits, TypeAttr::get(smElt));
  }
  Value probs = nc.create<dopt::SoftmaxOp>(logits, b.getI64IntegerAttr(3));
  if (smElt != elt)
    probs = nc.create<dopt::CastOp>(probs, TypeAttr::get(elt));
  // A query whose every key is masked attends to nothing: zeros (decided on
  // the bias, as ONNX's reference does, not on NaN logits).
  if (bias) {
    Value rowMax = nc.create<dopt::ReduceMaxOp>(bias, i64s({static_cast<int64_t>(
                                                          shapeOf(bias).size() - 1)}),
                                                b.getBoolAttr(true));
    Value none = nc.create<dopt::EqualOp>(rowMax, c(-INFINITY));
    probs = nc.create<dopt::WhereOp>(none, c(0), probs);
  }
  if (mode == 3)
    qkOut = probs;
  Value y = nc.create<dopt::MatMulOp>(probs, v);
  if (rank == 3 && !nc.hasFailed()) {
    auto sh = shapeOf(y);
    y = reshape(nc, nc.create<dopt::TransposeOp>(y, i64s({0, 2, 1, 3})),
                {sh[0], sh[2], sh[1] * sh[3]});
  }
  nc.setOutput(0, y);
  nc.setOutput(1, presentK);
  nc.setOutput(2, presentV);
  nc.setOutput(3, qkOut);
  return failure(nc.hasFailed());
}

/// RotaryEmbedding (opset 23): the first rotary_embedding_dim features of
/// each head rotated by the angles of its position, as pairs (x1, x2) →
/// (cos·x1 − sin·x2, sin·x1 + cos·x2): the halves of those features, or
/// their even and odd elements (`interleaved`). The input is [B, H, S, D],
/// or [B, S, H·D] with num_heads; cos and sin are [B, S, r/2], or rows of a
/// [positions, r/2] cache taken at position_ids [B, S] (a Gather).
LogicalResult importRotaryEmbedding(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(cosCache, nc.requiredInput(1));
  TRY(sinCache, nc.requiredInput(2));
  Value positions = nc.input(3);
  RankedTensorType in = nc.inputType(0);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input");
  TRY(interleaved, nc.intAttr("interleaved", 0));
  TRY(numHeads, nc.intAttr("num_heads", 0));
  TRY(rotaryAttr, nc.intAttr("rotary_embedding_dim", 0));
  int64_t rank = in.getRank();
  if (rank != 3 && rank != 4)
    return nc.error("input must have rank 3 [batch, sequence, hidden] or 4 "
                    "[batch, heads, sequence, head size], got rank " +
                    std::to_string(rank));
  int64_t batch = in.getDimSize(0);
  int64_t seq = in.getDimSize(rank == 4 ? 2 : 1);
  int64_t headSize;
  Value v = x;
  if (rank == 3) {
    int64_t hidden = in.getDimSize(2);
    if (numHeads <= 0 || hidden % numHeads != 0)
      return nc.error("a 3-D input needs num_heads dividing its hidden size " +
                      std::to_string(hidden) + ", got num_heads = " +
                      std::to_string(numHeads));
    headSize = hidden / numHeads;
    v = reshape(nc, x, {batch, seq, numHeads, headSize});
  } else {
    headSize = in.getDimSize(3);
  }
  int64_t r = rotaryAttr == 0 ? headSize : rotaryAttr;
  if (r <= 0 || r % 2 != 0 || r > headSize)
    return nc.error("rotary_embedding_dim must be even and at most the head "
                    "size " + std::to_string(headSize) + ", got " +
                    std::to_string(r));
  int64_t half = r / 2;
  SmallVector<int64_t> angles{batch, seq, half};
  OpBuilder &b = nc.builder();
  auto anglesOf = [&](Value cache, int i, StringRef what) -> Value {
    RankedTensorType t = nc.inputType(i);
    if (t.getElementType() != elt) {
      (void)nc.error(what + " must have the input's element type");
      return {};
    }
    if (positions) {
      if (t.getRank() != 2 || t.getDimSize(1) != half) {
        (void)nc.error(what + " must be [positions, " + std::to_string(half) +
                       "] with position_ids, got " + shapeStr(t.getShape()));
        return {};
      }
      int64_t rows = t.getDimSize(0);
      Value at = checkedIndices(nc, positions, rows,
                                "position_ids into the " + what.str() +
                                    "'s " + std::to_string(rows) + " positions",
                                /*negative=*/false);
      return nc.create<dopt::GatherOp>(cache, at, b.getI64IntegerAttr(0));
    }
    if (t.getShape() != ArrayRef<int64_t>(angles)) {
      (void)nc.error(what + " must be " + shapeStr(angles) +
                     " without position_ids, got " + shapeStr(t.getShape()));
      return {};
    }
    return cache;
  };
  if (positions) {
    RankedTensorType pt = nc.inputType(3);
    if (pt.getShape() != ArrayRef<int64_t>({batch, seq}))
      return nc.error("position_ids must be [" + std::to_string(batch) + "," +
                      std::to_string(seq) + "], got " +
                      shapeStr(pt.getShape()));
  }
  Value cos = anglesOf(cosCache, 1, "cos_cache");
  if (!cos)
    return failure();
  Value sin = anglesOf(sinCache, 2, "sin_cache");
  if (!sin)
    return failure();
  // [B, 1, S, r/2] against [B, H, S, D]; [B, S, 1, r/2] against [B, S, H, D].
  SmallVector<int64_t> view = rank == 4 ? SmallVector<int64_t>{batch, 1, seq, half}
                                        : SmallVector<int64_t>{batch, seq, 1, half};
  cos = reshape(nc, cos, view);
  sin = reshape(nc, sin, view);
  Value rotated = r == headSize ? v : strided(nc, v, {3}, {0}, {1}, {r});
  Value x1 = interleaved ? strided(nc, rotated, {3}, {0}, {2}, {half})
                         : strided(nc, rotated, {3}, {0}, {1}, {half});
  Value x2 = interleaved ? strided(nc, rotated, {3}, {1}, {2}, {half})
                         : strided(nc, rotated, {3}, {half}, {1}, {half});
  Value re = nc.create<dopt::SubOp>(nc.create<dopt::MulOp>(cos, x1),
                                    nc.create<dopt::MulOp>(sin, x2));
  Value im = nc.create<dopt::AddOp>(nc.create<dopt::MulOp>(sin, x1),
                                    nc.create<dopt::MulOp>(cos, x2));
  auto shape4 = [&](int64_t last) {
    SmallVector<int64_t> s(cast<RankedTensorType>(v.getType()).getShape());
    s.back() = last;
    return s;
  };
  Value y;
  if (interleaved) {
    SmallVector<int64_t> pairs = shape4(half);
    pairs.push_back(1);
    y = nc.create<dopt::ConcatOp>(
        ValueRange{reshape(nc, re, pairs), reshape(nc, im, pairs)},
        b.getI64IntegerAttr(4));
    y = reshape(nc, y, shape4(r));
  } else {
    y = nc.create<dopt::ConcatOp>(ValueRange{re, im}, b.getI64IntegerAttr(3));
  }
  if (r < headSize)
    y = nc.create<dopt::ConcatOp>(
        ValueRange{y, strided(nc, v, {3}, {r}, {1}, {headSize - r})},
        b.getI64IntegerAttr(3));
  if (rank == 3)
    y = reshape(nc, y, in.getShape());
  return setResult(nc, y);
}

/// Defines output `i` when something reads it, built by `make` only then
/// (a null value: an op failed to build, and said so).
template <typename Fn> LogicalResult setIfUsed(NodeContext &nc, int i, Fn make) {
  if (!nc.outputUsed(i))
    return success();
  Value v = make();
  if (!v)
    return failure();
  nc.setOutput(i, v);
  return success();
}

/// The compute type of an op whose definition computes in float32 whatever
/// its inputs (16-bit floats widened); f64 stays f64.
Type widened(NodeContext &nc, Type elt) {
  return elt.getIntOrFloatBitWidth() < 32 ? Type(nc.builder().getF32Type())
                                          : elt;
}

/// CausalConvWithState (opset 27; Mamba's and Gated DeltaNet's short
/// convolution): a depthwise convolution over [past_state (zeros when
/// absent), input] along the length, kernel k: output[b, c, t] =
/// Σ_j w[c, 0, j]·padded[b, c, t + j] (+ bias), then SiLU if asked;
/// present_state is the padded sequence's last k − 1 positions. The k taps
/// are k strided products: k is small (3 or 4), and the gradient is that of
/// slices and products. 16-bit inputs are summed in f32 and rounded to
/// their type, as the definition's reference does.
LogicalResult importCausalConvWithState(NodeContext &nc) {
  TRY(x, nc.requiredInput(0));
  TRY(w, nc.requiredInput(1));
  Value bias = nc.input(2), past = nc.input(3);
  TRY(activation, nc.stringAttr("activation", "none"));
  if (activation != "none" && activation != "silu" && activation != "swish")
    return nc.error("activation must be none, silu or swish, got '" +
                    activation + "'");
  RankedTensorType in = nc.inputType(0), wt = nc.inputType(1);
  Type elt = in.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs a floating-point input, got " + typeStr(elt));
  if (in.getRank() != 3)
    return nc.error("input must be [batch, channels, length], got " +
                    shapeStr(in.getShape()));
  int64_t batch = in.getDimSize(0), channels = in.getDimSize(1),
          length = in.getDimSize(2);
  if (wt.getElementType() != elt || wt.getRank() != 3 ||
      wt.getDimSize(0) != channels || wt.getDimSize(1) != 1)
    return nc.error("weight must be [" + std::to_string(channels) +
                    ", 1, k] of the input's type, got " +
                    shapeStr(wt.getShape()) + " " +
                    typeStr(wt.getElementType()));
  int64_t k = wt.getDimSize(2);
  if (k < 1)
    return nc.error("the kernel must have at least one tap");
  if (bias) {
    RankedTensorType bt = nc.inputType(2);
    if (bt.getElementType() != elt || bt.getShape() != ArrayRef<int64_t>{channels})
      return nc.error("bias must be [" + std::to_string(channels) +
                      "] of the input's type, got " + shapeStr(bt.getShape()));
  }
  SmallVector<int64_t> stateShape{batch, channels, k - 1};
  if (past) {
    RankedTensorType pt = nc.inputType(3);
    if (pt.getElementType() != elt || pt.getShape() != ArrayRef<int64_t>(stateShape))
      return nc.error("past_state must be " + shapeStr(stateShape) +
                      " of the input's type, got " + shapeStr(pt.getShape()));
  }
  if (k == 1 && nc.outputUsed(1))
    return nc.error("a kernel of one tap leaves present_state empty (distopt "
                    "has no empty tensors)");
  OpBuilder &b = nc.builder();
  Value padded = x;
  if (k > 1)
    padded = past ? nc.create<dopt::ConcatOp>(ValueRange{past, x},
                                              b.getI64IntegerAttr(2))
                  : padSpatial(nc, x, {k - 1}, {0}, 0.0);
  Type ct = widened(nc, elt);
  Value xs = castTo(nc, padded, ct), ws = castTo(nc, w, ct);
  Value y;
  for (int64_t j = 0; j < k; ++j) {
    Value tap = reshape(nc, strided(nc, ws, {2}, {j}, {1}, {1}), {1, channels, 1});
    Value term = nc.create<dopt::MulOp>(tap, strided(nc, xs, {2}, {j}, {1}, {length}));
    y = y ? nc.create<dopt::AddOp>(y, term) : term;
  }
  if (bias)
    y = nc.create<dopt::AddOp>(y, reshape(nc, castTo(nc, bias, ct), {1, channels, 1}));
  y = castTo(nc, y, elt);
  if (activation != "none") {
    Value yw = castTo(nc, y, ct);
    y = castTo(nc, nc.create<dopt::MulOp>(yw, nc.create<dopt::SigmoidOp>(yw)),
               elt);
  }
  if (!y)
    return failure();
  nc.setOutput(0, y);
  return setIfUsed(nc, 1, [&] {
    return strided(nc, padded, {2}, {length}, {1}, {k - 1});
  });
}

/// LinearAttention (opset 27): the recurrent state S [B, H_kv, d_k, d_v] of
/// linear attention, updated token by token and read by the queries:
///   linear       S ← S + k ⊗ v
///   gated        S ← exp(g)·S + k ⊗ v
///   delta        S ← S + k ⊗ β(v − Sᵀk)
///   gated_delta  S ← exp(g)·S, then as delta
///   o = scale · qᵀS (query head h reads KV head h / (H_q / H_kv)).
/// The recurrence is unrolled over the sequence: a prefill of T tokens is T
/// steps of products and updates (the definition's own sequential
/// semantics; a chunk-parallel form would need fewer, larger ops). Computed
/// in f32 for 16-bit inputs, as the definition's reference does;
/// present_state takes past_state's type (the query's without one).
LogicalResult importLinearAttention(NodeContext &nc) {
  TRY(query, nc.requiredInput(0));
  TRY(key, nc.requiredInput(1));
  TRY(value, nc.requiredInput(2));
  Value past = nc.input(3), decay = nc.input(4), beta = nc.input(5);
  if (!nc.hasAttr("q_num_heads") || !nc.hasAttr("kv_num_heads"))
    return nc.error("q_num_heads and kv_num_heads are required");
  TRY(qHeads, nc.intAttr("q_num_heads", 0));
  TRY(kvHeads, nc.intAttr("kv_num_heads", 0));
  TRY(scaleAttr, nc.floatAttr("scale", 0.0f));
  TRY(rule, nc.stringAttr("update_rule", "gated_delta"));
  if (rule != "linear" && rule != "gated" && rule != "delta" &&
      rule != "gated_delta")
    return nc.error("update_rule must be linear, gated, delta or "
                    "gated_delta, got '" + rule + "'");
  if (qHeads <= 0 || kvHeads <= 0 || qHeads % kvHeads != 0)
    return nc.error("q_num_heads (" + std::to_string(qHeads) +
                    ") must be a positive multiple of kv_num_heads (" +
                    std::to_string(kvHeads) + ")");
  bool gated = rule == "gated" || rule == "gated_delta";
  bool delta = rule == "delta" || rule == "gated_delta";
  if (gated != static_cast<bool>(decay))
    return nc.error("update_rule '" + rule + "' " +
                    (gated ? "requires" : "takes no") + " decay input");
  if (delta != static_cast<bool>(beta))
    return nc.error("update_rule '" + rule + "' " +
                    (delta ? "requires" : "takes no") + " beta input");
  RankedTensorType qt = nc.inputType(0), kt = nc.inputType(1),
                   vt = nc.inputType(2);
  Type elt = qt.getElementType();
  if (!isa<FloatType>(elt))
    return nc.error("needs floating-point inputs, got " + typeStr(elt));
  for (auto [t, name] : {std::pair{qt, "query"}, {kt, "key"}, {vt, "value"}})
    if (t.getRank() != 3 || t.getElementType() != elt)
      return nc.error(std::string(name) + " must be [batch, sequence, heads * "
                      "size] of the query's type, got " +
                      shapeStr(t.getShape()) + " " +
                      typeStr(t.getElementType()));
  int64_t batch = qt.getDimSize(0), steps = qt.getDimSize(1);
  for (RankedTensorType t : {kt, vt})
    if (t.getDimSize(0) != batch || t.getDimSize(1) != steps)
      return nc.error("query, key and value must share batch and sequence, "
                      "got " + shapeStr(qt.getShape()) + ", " +
                      shapeStr(kt.getShape()) + " and " +
                      shapeStr(vt.getShape()));
  if (qt.getDimSize(2) % qHeads != 0)
    return nc.error("the query's last dimension " +
                    std::to_string(qt.getDimSize(2)) +
                    " is not a multiple of q_num_heads " +
                    std::to_string(qHeads));
  int64_t dk = qt.getDimSize(2) / qHeads;
  if (kt.getDimSize(2) != kvHeads * dk)
    return nc.error("key's last dimension must be kv_num_heads * d_k = " +
                    std::to_string(kvHeads * dk) + ", got " +
                    std::to_string(kt.getDimSize(2)));
  if (vt.getDimSize(2) % kvHeads != 0)
    return nc.error("value's last dimension " +
                    std::to_string(vt.getDimSize(2)) +
                    " is not a multiple of kv_num_heads " +
                    std::to_string(kvHeads));
  int64_t dv = vt.getDimSize(2) / kvHeads, group = qHeads / kvHeads;
  SmallVector<int64_t> stateShape{batch, kvHeads, dk, dv};
  Type stateElt = elt;
  if (past) {
    RankedTensorType pt = nc.inputType(3);
    stateElt = pt.getElementType();
    if (!isa<FloatType>(stateElt) || pt.getShape() != ArrayRef<int64_t>(stateShape))
      return nc.error("past_state must be " + shapeStr(stateShape) +
                      " of a floating-point type, got " +
                      shapeStr(pt.getShape()) + " " + typeStr(stateElt));
  }
  bool perKey = false;
  if (decay) {
    RankedTensorType dt = nc.inputType(4);
    int64_t last = dt.getRank() == 3 ? dt.getDimSize(2) : -1;
    perKey = last == kvHeads * dk;
    if (dt.getElementType() != elt || dt.getRank() != 3 ||
        dt.getDimSize(0) != batch || dt.getDimSize(1) != steps ||
        (last != kvHeads && !perKey))
      return nc.error("decay must be [" + std::to_string(batch) + ", " +
                      std::to_string(steps) + ", kv_num_heads or kv_num_heads "
                      "* d_k] of the query's type, got " +
                      shapeStr(dt.getShape()));
  }
  int64_t betaHeads = 1;
  if (beta) {
    RankedTensorType bt = nc.inputType(5);
    betaHeads = bt.getRank() == 3 ? bt.getDimSize(2) : -1;
    if (bt.getElementType() != elt || bt.getRank() != 3 ||
        bt.getDimSize(0) != batch || bt.getDimSize(1) != steps ||
        (betaHeads != kvHeads && betaHeads != 1))
      return nc.error("beta must be [" + std::to_string(batch) + ", " +
                      std::to_string(steps) + ", kv_num_heads or 1] of the "
                      "query's type, got " + shapeStr(bt.getShape()));
  }
  Type ct = widened(nc, elt);
  double scale = scaleAttr == 0.0f ? 1.0 / std::sqrt(double(dk)) : scaleAttr;
  OpBuilder &b = nc.builder();
  // Token t of x [B, T, ...]: its row, reshaped.
  auto token = [&](Value x, int64_t t, ArrayRef<int64_t> shape) {
    return reshape(nc, strided(nc, x, {1}, {t}, {1}, {1}), shape);
  };
  Value q = castTo(nc, query, ct), k = castTo(nc, key, ct),
        v = castTo(nc, value, ct);
  Value g = decay ? nc.create<dopt::ExpOp>(castTo(nc, decay, ct)) : Value();
  Value be = beta ? castTo(nc, beta, ct) : Value();
  Value s = past ? castTo(nc, past, ct) : Value(); // null: zeros
  Value scaleV = constantScalar(nc, ct, scale);
  SmallVector<Value> outputs;
  for (int64_t t = 0; t < steps; ++t) {
    Value kT = token(k, t, {batch, kvHeads, dk, 1});
    Value vT = token(v, t, {batch, kvHeads, 1, dv});
    if (gated && s)
      s = nc.create<dopt::MulOp>(
          s, token(g, t, perKey ? SmallVector<int64_t>{batch, kvHeads, dk, 1}
                                : SmallVector<int64_t>{batch, kvHeads, 1, 1}));
    if (delta) {
      // v ← β(v − Sᵀk): [B, H, 1, d_k] · [B, H, d_k, d_v].
      Value corrected = vT;
      if (s)
        corrected = nc.create<dopt::SubOp>(
            vT, nc.create<dopt::MatMulOp>(
                    token(k, t, {batch, kvHeads, 1, dk}), s));
      vT = nc.create<dopt::MulOp>(token(be, t, {batch, betaHeads, 1, 1}),
                                  corrected);
    }
    Value outer = nc.create<dopt::MulOp>(kT, vT);
    s = s ? nc.create<dopt::AddOp>(s, outer) : outer;
    // [B, H_kv, G, d_k] · [B, H_kv, d_k, d_v]: query head h = kv·G + g.
    Value o = nc.create<dopt::MatMulOp>(token(q, t, {batch, kvHeads, group, dk}), s);
    outputs.push_back(reshape(nc, nc.create<dopt::MulOp>(o, scaleV),
                              {batch, 1, qHeads * dv}));
    if (nc.hasFailed())
      return failure();
  }
  Value out = outputs.size() == 1
                  ? outputs.front()
                  : nc.create<dopt::ConcatOp>(outputs, b.getI64IntegerAttr(1));
  out = castTo(nc, out, elt);
  if (!out)
    return failure();
  nc.setOutput(0, out);
  return setIfUsed(nc, 1, [&] { return castTo(nc, s, stateElt); });
}

} // namespace

void onnximport::registerAttentionImporters(llvm::StringMap<OpImporterFn> &t) {
  t["CausalConvWithState"] = importCausalConvWithState;
  t["LinearAttention"] = importLinearAttention;
  t["Attention"] = importAttention;
  t["RotaryEmbedding"] = importRotaryEmbedding;
}
