//===- DoptOps.td - the dopt dialect ------------------------*- tablegen -*-===//
//
// The dopt dialect: distopt's own tensor-level IR. ONNX nodes import into
// these ops (lib/Import/ONNX); the planner annotates them; the partitioner
// rewrites them per rank; lib/Conversion lowers them.
//
// Conventions:
//  * every operand and result is a statically shaped ranked tensor;
//  * every op infers its result types from operands and attributes
//    (InferTypeOpInterface); the same code is the op's shape verifier, so a
//    wrong explicit result type is reported as "inferred type(s) ... are
//    incompatible with return type(s)";
//  * attributes are canonical: axes are non-negative and sorted, sizes are
//    fully resolved (no ONNX -1 / 0 placeholders), per-op defaults filled in;
//  * assembly is uniform: `dopt.op %a, %b {attrs} : (types) -> types`.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTOPS_TD
#define DISTOPT_DIALECT_DOPT_IR_DOPTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "distopt/Dialect/Dopt/IR/DoptInterfaces.td"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

def Dopt_Dialect : Dialect {
  let name = "dopt";
  let cppNamespace = "::distopt::dopt";
  let summary = "distopt's tensor-level dialect (imported ONNX graphs)";
  let description = [{
    Ops on statically shaped tensors with ONNX semantics made explicit:
    broadcasting, axes and sizes are resolved at import so that every op's
    result type follows from its operands and attributes. Weights are
    `dopt.weight` references to external storage (the ONNX file or its
    external-data file), never inline data.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 0;
  let useDefaultTypePrinterParser = 0;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Dopt_FloatElt : AnyTypeOf<[F16, BF16, F32, F64]>;
def Dopt_IntElt : AnyTypeOf<[I1, I8, I16, I32, I64, UI8, UI16, UI32, UI64]>;
def Dopt_AnyElt : AnyTypeOf<[F16, BF16, F32, F64, I1, I8, I16, I32, I64, UI8, UI16, UI32, UI64]>;

def Dopt_Tensor : StaticShapeTensorOf<[F16, BF16, F32, F64, I1, I8, I16, I32,
                                       I64, UI8, UI16, UI32, UI64]>;
def Dopt_FloatTensor : StaticShapeTensorOf<[F16, BF16, F32, F64]>;
def Dopt_NumericTensor : StaticShapeTensorOf<[F16, BF16, F32, F64, I8, I16,
                                              I32, I64, UI8, UI16, UI32, UI64]>;
def Dopt_BoolTensor : StaticShapeTensorOf<[I1]>;
def Dopt_IntegerTensor : StaticShapeTensorOf<[I1, I8, I16, I32, I64, UI8, UI16,
                                              UI32, UI64]>;
def Dopt_WideIntegerTensor : StaticShapeTensorOf<[I8, I16, I32, I64, UI8, UI16,
                                                  UI32, UI64]>;
def Dopt_IndexTensor : StaticShapeTensorOf<[I32, I64]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class Dopt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dopt_Dialect, mnemonic,
         !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// The elementwise interface of an op that counts one FLOP per element.
defvar Dopt_Elementwise = Dopt_ElementwiseOpInterface;
// ... and of one that says its own count (getFlopsPerElement in DoptOps.cpp).
defvar Dopt_ElementwiseCosted =
    DeclareOpInterfaceMethods<Dopt_ElementwiseOpInterface, ["getFlopsPerElement"]>;

// Elementwise unary op whose result has the operand's type.
class Dopt_UnaryOp<string mnemonic, Type operandType, list<Trait> traits = [],
                   Trait elementwise = Dopt_Elementwise>
    : Dopt_Op<mnemonic, !listconcat(traits, [elementwise])> {
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$output);
}

// Elementwise binary op with multidirectional (NumPy) broadcasting.
class Dopt_BinaryOp<string mnemonic, Type operandType, Type resultType,
                    list<Trait> traits = []>
    : Dopt_Op<mnemonic, !listconcat(traits, [Dopt_Elementwise])> {
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs resultType:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

def Dopt_ConstantOp : Dopt_Op<"constant", [ConstantLike]> {
  let summary = "a constant tensor";
  let description = [{
    A constant given inline. Used for small constants (shape vectors, scalars,
    masks); model weights are `dopt.weight`. `value` may be a `dense` or a
    `dense_resource` attribute (the latter when weights are loaded with
    `distopt import --inline-weights`).

    ```mlir
    %c = dopt.constant {value = dense<[2, 4]> : tensor<2xi64>} : () -> tensor<2xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
}

def Dopt_WeightOp : Dopt_Op<"weight"> {
  let summary = "a reference to a named weight stored outside the IR";
  let description = [{
    A model weight (ONNX initializer). Its data lives outside the IR: in the
    ONNX file (`location` absent; looked up by `name`) or in an external-data
    file (`location`, `offset`, `length`, relative to the model's directory,
    as ONNX's external-data convention has it). Nothing reads the data until
    codegen or the runtime needs it, so a graph whose weights are absent can
    still be imported and planned.

    `constant` marks a tensor from an ONNX Constant node (kept out of the IR
    when large, as initializers are): part of the model's definition, never
    a trained parameter.

    `data_type`, when present, is the element type the data are stored in
    where it differs from the weight's: an fp32 weight of a program compiled
    in 16 bits (distopt-autocast's store-weights) has `type` f16/bf16 and
    `data_type` f32; the data are rounded to nearest-even when the bundle is
    written.

    ```mlir
    %w = dopt.weight {name = "fc1.weight", type = tensor<128x64xf32>}
           : () -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, TypeAttr:$type,
                   OptionalAttr<StrAttr>:$location,
                   OptionalAttr<I64Attr>:$offset,
                   OptionalAttr<I64Attr>:$length,
                   UnitAttr:$constant,
                   OptionalAttr<TypeAttr>:$data_type);
  let results = (outs Dopt_Tensor:$output);
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Dopt_AddOp : Dopt_BinaryOp<"add", Dopt_NumericTensor, Dopt_NumericTensor,
                               [Commutative]> {
  let summary = "elementwise addition with broadcasting";
}
def Dopt_SubOp : Dopt_BinaryOp<"sub", Dopt_NumericTensor, Dopt_NumericTensor> {
  let summary = "elementwise subtraction with broadcasting";
}
def Dopt_MulOp : Dopt_BinaryOp<"mul", Dopt_NumericTensor, Dopt_NumericTensor,
                               [Commutative]> {
  let summary = "elementwise multiplication with broadcasting";
}
def Dopt_DivOp : Dopt_BinaryOp<"div", Dopt_NumericTensor, Dopt_NumericTensor> {
  let summary = "elementwise division with broadcasting (integer: truncating)";
}
def Dopt_MaxOp : Dopt_BinaryOp<"max", Dopt_NumericTensor, Dopt_NumericTensor,
                               [Commutative]> {
  let summary = "elementwise maximum with broadcasting";
}
def Dopt_MinOp : Dopt_BinaryOp<"min", Dopt_NumericTensor, Dopt_NumericTensor,
                               [Commutative]> {
  let summary = "elementwise minimum with broadcasting";
}
def Dopt_PowOp : Dopt_Op<"pow", [Dopt_AutocastF32, Dopt_Elementwise]> {
  let summary = "elementwise power with broadcasting";
  let description = [{
    `base ^ exponent`. The exponent may have another numeric element type
    (as ONNX allows); the result has the base's element type.
  }];
  let arguments = (ins Dopt_NumericTensor:$lhs, Dopt_NumericTensor:$rhs);
  let results = (outs Dopt_NumericTensor:$output);
}

def Dopt_EqualOp : Dopt_BinaryOp<"equal", Dopt_Tensor, Dopt_BoolTensor,
                                 [Commutative]> {
  let summary = "elementwise ==, with broadcasting; result i1";
}
def Dopt_LessOp : Dopt_BinaryOp<"less", Dopt_NumericTensor, Dopt_BoolTensor> {
  let summary = "elementwise <, with broadcasting; result i1";
}
def Dopt_LessEqualOp : Dopt_BinaryOp<"less_equal", Dopt_NumericTensor,
                                     Dopt_BoolTensor> {
  let summary = "elementwise <=, with broadcasting; result i1";
}
def Dopt_GreaterOp : Dopt_BinaryOp<"greater", Dopt_NumericTensor,
                                   Dopt_BoolTensor> {
  let summary = "elementwise >, with broadcasting; result i1";
}
def Dopt_GreaterEqualOp : Dopt_BinaryOp<"greater_equal", Dopt_NumericTensor,
                                        Dopt_BoolTensor> {
  let summary = "elementwise >=, with broadcasting; result i1";
}
def Dopt_AndOp : Dopt_BinaryOp<"and", Dopt_IntegerTensor, Dopt_IntegerTensor,
                               [Commutative]> {
  let summary = "elementwise bitwise and (logical on i1), with broadcasting";
}
def Dopt_OrOp : Dopt_BinaryOp<"or", Dopt_IntegerTensor, Dopt_IntegerTensor,
                              [Commutative]> {
  let summary = "elementwise bitwise or (logical on i1), with broadcasting";
}
def Dopt_XorOp : Dopt_BinaryOp<"xor", Dopt_IntegerTensor, Dopt_IntegerTensor,
                               [Commutative]> {
  let summary = "elementwise bitwise exclusive or (logical on i1), with "
                "broadcasting";
}
def Dopt_ShiftLeftOp : Dopt_Op<"shift_left", [Dopt_Elementwise]> {
  let summary = "elementwise left shift of integers, with broadcasting";
  let description = [{
    `lhs << rhs`. A negative shift, or one by the type's width or more,
    gives 0 (ONNX's BitShift since opset 28).
  }];
  let arguments = (ins Dopt_WideIntegerTensor:$lhs, Dopt_WideIntegerTensor:$rhs);
  let results = (outs Dopt_WideIntegerTensor:$output);
}
def Dopt_ShiftRightOp : Dopt_Op<"shift_right", [Dopt_Elementwise]> {
  let summary = "elementwise right shift of integers, with broadcasting";
  let description = [{
    `lhs >> rhs`: logical (zeros shifted in) for unsigned types, arithmetic
    (the sign copied in) for signed ones. A negative shift, or one by the
    type's width or more, leaves only the sign: 0, or -1 for a negative
    signed `lhs` (ONNX's BitShift since opset 28).
  }];
  let arguments = (ins Dopt_WideIntegerTensor:$lhs, Dopt_WideIntegerTensor:$rhs);
  let results = (outs Dopt_WideIntegerTensor:$output);
}

def Dopt_NegOp : Dopt_UnaryOp<"neg", Dopt_NumericTensor> {
  let summary = "elementwise negation";
  let hasFolder = 1;
}
def Dopt_AbsOp : Dopt_UnaryOp<"abs", Dopt_NumericTensor> {
  let summary = "elementwise absolute value";
}
def Dopt_NotOp : Dopt_UnaryOp<"not", Dopt_IntegerTensor> {
  let summary = "elementwise bitwise not (logical on i1)";
  let hasFolder = 1;
}
def Dopt_SqrtOp : Dopt_UnaryOp<"sqrt", Dopt_FloatTensor> {
  let summary = "elementwise square root";
}
def Dopt_ReciprocalOp : Dopt_UnaryOp<"reciprocal", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise 1/x";
}
def Dopt_ExpOp : Dopt_UnaryOp<"exp", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise e^x";
}
def Dopt_LogOp : Dopt_UnaryOp<"log", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise natural logarithm";
}
def Dopt_TanhOp : Dopt_UnaryOp<"tanh", Dopt_FloatTensor> {
  let summary = "elementwise hyperbolic tangent";
}
def Dopt_SigmoidOp : Dopt_UnaryOp<"sigmoid", Dopt_FloatTensor, [],
                                   Dopt_ElementwiseCosted> {
  let summary = "elementwise logistic function 1/(1+e^-x)";
}
def Dopt_ErfOp : Dopt_UnaryOp<"erf", Dopt_FloatTensor> {
  let summary = "elementwise error function";
}
def Dopt_FloorOp : Dopt_UnaryOp<"floor", Dopt_FloatTensor> {
  let summary = "elementwise largest integer not above x";
  let hasFolder = 1;
}
def Dopt_CeilOp : Dopt_UnaryOp<"ceil", Dopt_FloatTensor> {
  let summary = "elementwise smallest integer not below x";
  let hasFolder = 1;
}
def Dopt_RoundOp : Dopt_UnaryOp<"round", Dopt_FloatTensor> {
  let summary = "elementwise nearest integer, halves to even (ONNX Round)";
  let hasFolder = 1;
}
def Dopt_SinOp : Dopt_UnaryOp<"sin", Dopt_FloatTensor> {
  let summary = "elementwise sine";
}
def Dopt_CosOp : Dopt_UnaryOp<"cos", Dopt_FloatTensor> {
  let summary = "elementwise cosine";
}
def Dopt_AsinOp : Dopt_UnaryOp<"asin", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise arcsine";
}
def Dopt_AcosOp : Dopt_UnaryOp<"acos", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise arccosine";
}
def Dopt_AtanOp : Dopt_UnaryOp<"atan", Dopt_FloatTensor> {
  let summary = "elementwise arctangent";
}
def Dopt_SinhOp : Dopt_UnaryOp<"sinh", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise hyperbolic sine";
}
def Dopt_CoshOp : Dopt_UnaryOp<"cosh", Dopt_FloatTensor, [Dopt_AutocastF32]> {
  let summary = "elementwise hyperbolic cosine";
}
def Dopt_AsinhOp : Dopt_UnaryOp<"asinh", Dopt_FloatTensor> {
  let summary = "elementwise inverse hyperbolic sine";
}
def Dopt_AcoshOp : Dopt_UnaryOp<"acosh", Dopt_FloatTensor> {
  let summary = "elementwise inverse hyperbolic cosine";
}
def Dopt_AtanhOp : Dopt_UnaryOp<"atanh", Dopt_FloatTensor> {
  let summary = "elementwise inverse hyperbolic tangent";
}
def Dopt_ReluOp : Dopt_UnaryOp<"relu", Dopt_NumericTensor> {
  let summary = "elementwise max(x, 0)";
}
def Dopt_LeakyReluOp : Dopt_Op<"leaky_relu", [Dopt_ElementwiseCosted]> {
  let summary = "elementwise x if x >= 0 else alpha * x";
  let arguments = (ins Dopt_FloatTensor:$input,
                   DefaultValuedAttr<F32Attr, "0.01">:$alpha);
  let results = (outs Dopt_FloatTensor:$output);
}
def Dopt_GeluOp : Dopt_Op<"gelu", [Dopt_ElementwiseCosted]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate` is `"none"` (x·Φ(x), with erf) or `"tanh"` (the tanh
    approximation), as ONNX's Gelu (opset 20).
  }];
  let arguments = (ins Dopt_FloatTensor:$input,
                   DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_WhereOp : Dopt_Op<"where", [Dopt_Elementwise]> {
  let summary = "elementwise select with three-way broadcasting";
  let arguments = (ins Dopt_BoolTensor:$condition, Dopt_Tensor:$lhs,
                   Dopt_Tensor:$rhs);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_RngKeyOp : Dopt_Op<"rng_key"> {
  let summary = "the random key of this run (fed by the runtime)";
  let description = [{
    The 64-bit key random ops of a training step draw from
    (`dopt.dropout`): the runtime computes it from the run's seed and the
    step, so masks change every step and repeat for the same (seed, step).
    `distopt-outline-weights` turns it into the input `rng.key`.

    ```mlir
    %k = dopt.rng_key : () -> tensor<i64>
    ```
  }];
  let results = (outs TensorOf<[I64]>:$key);
}

def Dopt_DropoutOp : Dopt_Op<"dropout", [Dopt_ElementwiseCosted]> {
  let summary = "inverted dropout with a counter-based mask";
  let description = [{
    `output = keep ? input / (1 - ratio) : 0`, where `keep` is
    `u >= ratio` for a uniform `u` in [0, 1) drawn by SplitMix64 at counter
    `(stream << 40) + g + 1` of the stream seeded by `key` (a `tensor<i64>`,
    `dopt.rng_key`), `g` the element's row-major index in the whole tensor
    of shape `global_shape` (default: the input's shape) at `offsets` (the
    block's first element per dimension, a `tensor<rank x i64>`; default 0):
    a mask depends on (key, stream, position in the unsplit tensor) only,
    never on how the work is split. `stream` tells a model's dropouts apart.
    The same op on the output's adjoint is its gradient.

    ```mlir
    %y = dopt.dropout %x, %k {ratio = 1.000000e-01 : f32, stream = 3 : i64}
           : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Dopt_Tensor:$input, TensorOf<[I64]>:$key,
                   Optional<TensorOf<[I64]>>:$offsets, F32Attr:$ratio,
                   I64Attr:$stream, OptionalAttr<DenseI64ArrayAttr>:$global_shape);
  let results = (outs Dopt_Tensor:$output);
  let extraClassDeclaration = [{
    /// An element's mask bit mixes key + counter * kCounterStep (mod 2^64),
    /// counter = (stream << 40) + position + 1: so stream s with `key`
    /// draws the mask stream 0 draws with key + streamKeyOffset(s).
    static constexpr uint64_t kCounterStep = 0x9E3779B97F4A7C15ull;
    static int64_t streamKeyOffset(int64_t stream) {
      return static_cast<int64_t>((static_cast<uint64_t>(stream) << 40) *
                                  kCounterStep);
    }
  }];
}

def Dopt_CastOp : Dopt_Op<"cast", [Dopt_Elementwise]> {
  let summary = "elementwise element-type conversion";
  let arguments = (ins Dopt_Tensor:$input, TypeAttr:$to);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_BitcastOp : Dopt_Op<"bitcast", [Dopt_ElementwiseCosted]> {
  let summary = "elementwise reinterpretation of the bits as another type";
  let description = [{
    Each element's bits read as `to`, a type of the same width (ONNX's
    BitCast; booleans are one byte, 0 or 1: a byte other than 0 reads as
    true). No value conversion, and no gradient.

    ```mlir
    %y = dopt.bitcast %x {to = i32} : (tensor<3xf32>) -> tensor<3xi32>
    ```
  }];
  let arguments = (ins Dopt_Tensor:$input, TypeAttr:$to);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Normalisation and activations over an axis
//===----------------------------------------------------------------------===//

def Dopt_SoftmaxOp : Dopt_Op<"softmax"> {
  let summary = "softmax along one axis";
  let arguments = (ins Dopt_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Dopt_FloatTensor:$output);
}
def Dopt_LogSoftmaxOp : Dopt_Op<"log_softmax", [Dopt_AutocastF32]> {
  let summary = "log of softmax along one axis";
  let arguments = (ins Dopt_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_BatchNormOp : Dopt_Op<"batch_norm", [Dopt_AutocastF32]> {
  let summary = "batch normalisation, inference form";
  let description = [{
    `scale * (x - mean) / sqrt(var + epsilon) + bias` over channel axis 1;
    `scale`, `bias`, `mean`, `var` are 1-D with the channel count.
  }];
  let arguments = (ins Dopt_FloatTensor:$input, Dopt_FloatTensor:$scale,
                   Dopt_FloatTensor:$bias, Dopt_FloatTensor:$mean,
                   Dopt_FloatTensor:$var, F32Attr:$epsilon);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_LayerNormOp : Dopt_Op<"layer_norm", [Dopt_AutocastF32]> {
  let summary = "layer normalisation over the trailing axes from `axis`";
  let description = [{
    Normalises over dimensions `axis..rank-1`; `scale` (and the optional
    `bias`) broadcast to those dimensions.
  }];
  let arguments = (ins Dopt_FloatTensor:$input, Dopt_FloatTensor:$scale,
                   Optional<Dopt_FloatTensor>:$bias, I64Attr:$axis,
                   F32Attr:$epsilon);
  let results = (outs Dopt_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

def Dopt_AttentionOp
    : Dopt_Op<"attention", [Dopt_Autocast16, AttrSizedOperandSegments]> {
  let summary = "scaled dot-product attention, without its score matrix";
  let description = [{
    `softmax(s) · value`, s = `scale · query · keyᵀ`, where `keep` (if
    given) is false s is -inf (`where(keep, s, -inf)`), then `bias` (if
    given) is added; the softmax is over the keys. `query` is [..., Tq, D],
    `key` [..., Tk, D], `value` [..., Tk, Dv] with the same leading
    dimensions; `keep` and `bias` broadcast to [..., Tq, Tk]. The result is
    [..., Tq, Dv] of the query's type. A query whose every key is masked
    (-inf) has no softmax: its output is NaN, as the exported softmax gives,
    or 0 with `empty_rows_zero` (ONNX Attention's rule).

    distopt-fuse-attention makes it of an exporter's chain (matmul, scale,
    where, add, softmax, matmul); its lowering (distopt-expand-attention)
    runs over blocks of keys with a running maximum and sum, as
    FlashAttention does, so a program holds [..., Tq, block] scores at a
    time, never [..., Tq, Tk].

    ```mlir
    %o = dopt.attention %q, %k, %v keep %causal {scale = 0.125 : f64}
        : (tensor<2x4x64x32xf32>, tensor<2x4x64x32xf32>,
           tensor<2x4x64x32xf32>, tensor<1x1x64x64xi1>)
        -> tensor<2x4x64x32xf32>
    ```
  }];
  let arguments = (ins Dopt_FloatTensor:$query, Dopt_FloatTensor:$key,
                   Dopt_FloatTensor:$value, Optional<Dopt_BoolTensor>:$keep,
                   Optional<Dopt_FloatTensor>:$bias, F64Attr:$scale,
                   UnitAttr:$empty_rows_zero);
  let results = (outs Dopt_FloatTensor:$output);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`keep` $keep^)? (`bias` $bias^)? attr-dict
    `:` functional-type(operands, results)
  }];
}


def Dopt_MatMulOp : Dopt_Op<"matmul", [Dopt_Autocast16]> {
  let summary = "matrix product with NumPy semantics";
  let description = [{
    As `numpy.matmul`: 1-D operands are promoted (and the added dimension
    removed from the result), leading (batch) dimensions broadcast.
  }];
  let arguments = (ins Dopt_NumericTensor:$lhs, Dopt_NumericTensor:$rhs);
  let results = (outs Dopt_NumericTensor:$output);
}

def Dopt_GemmOp : Dopt_Op<"gemm", [Dopt_Autocast16]> {
  let summary = "alpha * op(A) * op(B) + beta * C";
  let description = [{
    A and B are 2-D; `trans_a`/`trans_b` transpose them. The optional C
    broadcasts to the M×N result.
  }];
  let arguments = (ins Dopt_NumericTensor:$a, Dopt_NumericTensor:$b,
                   Optional<Dopt_NumericTensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Dopt_NumericTensor:$output);
}

def Dopt_ConvOp : Dopt_Op<"conv", [Dopt_Autocast16]> {
  let summary = "2-D convolution (NCHW), grouped, strided, dilated, padded";
  let description = [{
    input N×C×H×W, weight M×(C/group)×kH×kW, optional bias of M.
    `pads` = [top, left, bottom, right] (ONNX order: begins then ends).
  }];
  let arguments = (ins Dopt_FloatTensor:$input, Dopt_FloatTensor:$weight,
                   Optional<Dopt_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_ConvTransposeOp : Dopt_Op<"conv_transpose", [Dopt_Autocast16]> {
  let summary = "2-D transposed convolution (NCHW): the adjoint of dopt.conv";
  let description = [{
    input N×C×H×W, weight C×(M/group)×kH×kW (ONNX ConvTranspose's layout),
    optional bias of M. Each input pixel (h, w) adds input[n, c, h, w] ·
    weight[c, m, i, j] to output[n, g·M/group + m, h·sh − top + i·dh,
    w·sw − left + j·dw] (c in group g). The output is
    stride·(in − 1) + output_padding + dilation·(k − 1) + 1 − begin − end
    along each spatial dimension; `pads` = [top, left, bottom, right] crop
    the full result, `output_padding` extends its end (zeros where no input
    pixel reaches). It is the input gradient of a dopt.conv with the same
    strides, pads, dilations and group whose weight is this op's weight.
  }];
  let arguments = (ins Dopt_FloatTensor:$input, Dopt_FloatTensor:$weight,
                   Optional<Dopt_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$output_padding, I64Attr:$group);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_MaxPoolOp : Dopt_Op<"max_pool"> {
  let summary = "2-D max pooling (NCHW)";
  let arguments = (ins Dopt_NumericTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Dopt_NumericTensor:$output);
}

def Dopt_AvgPoolOp : Dopt_Op<"avg_pool"> {
  let summary = "2-D average pooling (NCHW)";
  let arguments = (ins Dopt_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Dopt_FloatTensor:$output);
}

def Dopt_GlobalAvgPoolOp : Dopt_Op<"global_avg_pool"> {
  let summary = "mean over all spatial dimensions (N×C×... -> N×C×1×...)";
  let arguments = (ins Dopt_FloatTensor:$input);
  let results = (outs Dopt_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Dopt_ReduceOp<string mnemonic, Type tensorType,
                    list<Trait> traits = []>
    : Dopt_Op<mnemonic, traits> {
  let description = [{
    Reduces over `axes` (non-negative, sorted, unique; empty means no
    reduction: the op is then the identity). `keepdims` keeps reduced
    dimensions as size 1.
  }];
  let arguments = (ins tensorType:$input, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs tensorType:$output);
}
def Dopt_ReduceSumOp : Dopt_ReduceOp<"reduce_sum", Dopt_NumericTensor,
                                         [Dopt_AutocastF32]> {
  let summary = "sum over axes";
}
def Dopt_ReduceMeanOp : Dopt_ReduceOp<"reduce_mean", Dopt_NumericTensor,
                                           [Dopt_AutocastF32]> {
  let summary = "mean over axes";
}
def Dopt_ReduceMaxOp : Dopt_ReduceOp<"reduce_max", Dopt_Tensor> {
  let summary = "maximum over axes (of booleans: any)";
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Dopt_ReshapeOp : Dopt_Op<"reshape"> {
  let summary = "reshape to a fully specified static shape";
  let description = [{
    ONNX Reshape, Flatten, Squeeze and Unsqueeze all import to this op, with
    ONNX's `0` and `-1` placeholders resolved.
  }];
  let arguments = (ins Dopt_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_TransposeOp : Dopt_Op<"transpose"> {
  let summary = "permute dimensions: output dim i = input dim perm[i]";
  let arguments = (ins Dopt_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_ConcatOp : Dopt_Op<"concat"> {
  let summary = "concatenate along an axis";
  let arguments = (ins Variadic<Dopt_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_SplitOp : Dopt_Op<"split"> {
  let summary = "split along an axis into pieces of the given sizes";
  let arguments = (ins Dopt_Tensor:$input, I64Attr:$axis,
                   DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Dopt_Tensor>:$outputs);
  let hasFolder = 1;
}

def Dopt_SliceOp : Dopt_Op<"slice"> {
  let summary = "strided slice with one (start, end, step) per dimension";
  let description = [{
    Every dimension has an entry. Values are normalised: for step > 0,
    0 <= start <= end <= dim; for step < 0, -1 <= end <= start <= dim - 1
    (end = -1 means "through index 0"). The size of dimension i is
    ceil((end - start) / step), clamped at 0.
  }];
  let arguments = (ins Dopt_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends, DenseI64ArrayAttr:$steps);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_CheckIndicesOp : Dopt_Op<"check_indices", [Dopt_ElementwiseCosted]> {
  let summary = "indices, checked at run time to lie in the range they index";
  let description = [{
    The indices, unchanged. When the program runs, an index outside
    [-extent, extent) -- [0, extent) when `negative` is false -- other than
    `ignore` (when given) ends the run with an error naming the op's ONNX
    node (its location), `what` the indices index, the index and its
    position. Ops that read or write at positions computed at run time
    (gather, gather_elements, scatter_elements) take their indices through
    one; they still clamp, so whatever the check reports, nothing is read
    or written outside a tensor. Folds away on constant indices in range.
  }];
  let arguments = (ins Dopt_IndexTensor:$indices, I64Attr:$extent,
                   DefaultValuedAttr<BoolAttr, "true">:$negative,
                   OptionalAttr<I64Attr>:$ignore, StrAttr:$what);
  let results = (outs Dopt_IndexTensor:$output);
  let hasFolder = 1;
}

def Dopt_GatherOp : Dopt_Op<"gather"> {
  let summary = "take entries along an axis (ONNX Gather)";
  let description = [{
    Result shape: data.shape[:axis] + indices.shape + data.shape[axis+1:].
    Negative indices count from the end of the axis.
  }];
  let arguments = (ins Dopt_Tensor:$data, Dopt_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_GatherElementsOp : Dopt_Op<"gather_elements"> {
  let summary = "take one element along an axis per index (ONNX GatherElements, torch.gather)";
  let description = [{
    `indices` has data's rank; the result has its shape. Each result
    element is data at the same position, except along `axis`, where the
    index says which element: result[p] = data[p with p[axis] = indices[p]].
    Along the other dimensions `indices` may be shorter than `data`.
    Negative indices count from the end of the axis; out-of-range ones are
    clamped (ONNX leaves them undefined; nothing is read out of bounds).
  }];
  let arguments = (ins Dopt_Tensor:$data, Dopt_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Dopt_Tensor:$output);
}

def Dopt_ScatterElementsOp : Dopt_Op<"scatter_elements"> {
  let summary = "write elements along an axis at indices (ONNX ScatterElements, torch.scatter)";
  let description = [{
    The result is `data` with each element of `updates` put at its own
    position, except along `axis`, where `indices` (of the updates' shape)
    says where: result[p with p[axis] = indices[p]] = updates[p], the
    updates taken in row-major order. `reduction` combines an update with
    what is there: "none" (replace: the last update of a position wins),
    "add", "mul", "max" or "min". Negative indices count from the end;
    out-of-range ones are clamped.
  }];
  let arguments = (ins Dopt_Tensor:$data, Dopt_IndexTensor:$indices,
                   Dopt_Tensor:$updates, I64Attr:$axis,
                   DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs Dopt_Tensor:$output);
}

def Dopt_TopKOp : Dopt_Op<"top_k"> {
  let summary = "the k largest (or smallest) elements along an axis and their indices (ONNX TopK)";
  let description = [{
    `values` and `indices` have the input's shape with `k` along `axis`:
    the elements in order, largest first (smallest first when `largest` is
    false); equal values in the order of their indices. 0 <= k <= the
    axis's extent.
  }];
  let arguments = (ins Dopt_NumericTensor:$input, I64Attr:$k, I64Attr:$axis,
                   DefaultValuedAttr<BoolAttr, "true">:$largest);
  let results = (outs Dopt_NumericTensor:$values,
                 StaticShapeTensorOf<[I64]>:$indices);
}

def Dopt_ExpandOp : Dopt_Op<"expand"> {
  let summary = "broadcast to a shape (ONNX Expand, bidirectional)";
  let arguments = (ins Dopt_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Dopt_Tensor:$output);
  let hasFolder = 1;
}

def Dopt_PadOp : Dopt_Op<"pad"> {
  let summary = "pad each dimension (constant, reflect or edge)";
  let description = [{
    `pads` holds 2·rank non-negative values: all begins, then all ends.
  }];
  let arguments = (ins Dopt_Tensor:$input, DenseI64ArrayAttr:$pads,
                   DefaultValuedStrAttr<StrAttr, "constant">:$mode,
                   DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Dopt_Tensor:$output);
}

def Dopt_ShapeOp : Dopt_Op<"shape"> {
  let summary = "the input's dimensions [start, end) as a 1-D i64 tensor";
  let description = [{
    Always folds (shapes are static); present so that exporters' shape
    subgraphs can be expressed and folded by the canonicaliser.
  }];
  let arguments = (ins Dopt_Tensor:$input, I64Attr:$start, I64Attr:$end);
  let results = (outs StaticShapeTensorOf<[I64]>:$output);
  let hasFolder = 1;
}

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTOPS_TD
