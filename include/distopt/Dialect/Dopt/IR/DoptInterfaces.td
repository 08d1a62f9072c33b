//===- DoptInterfaces.td - what every stage asks of a dopt op -*- tablegen -*-===//
//
// Per-op knowledge lives on the op: each question the stages ask (is it
// elementwise, what does it cost, ...) is an interface here, answered once
// by each op in DoptOps.td / DoptOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DOPT_IR_DOPTINTERFACES_TD
#define DISTOPT_DIALECT_DOPT_IR_DOPTINTERFACES_TD

include "mlir/IR/OpBase.td"

def Dopt_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let cppNamespace = "::distopt::dopt";
  let description = [{
    An op that computes each element of its result from the elements of its
    operands at the same position, the operands broadcast as NumPy does
    (unary and binary arithmetic, comparisons, activations, casts, select,
    dropout). What the stages make of it:
     * the planner shards it alike along every dimension of its result
       (planner::getShardingRule) and prices it by its FLOPs per element
       (planner::estimateOpCost);
     * a block layout (a fused projection's concatenated blocks) passes
       through it unchanged (distopt-partition).
    An op whose count is not one FLOP per element declares the method
    (`DeclareOpInterfaceMethods`) and defines it in DoptOps.cpp.
  }];
  let methods = [
    InterfaceMethod<
      [{FLOPs per result element: a transcendental counts as one, as in most
        FLOP counters (docs/cost-model.md).}],
      "double", "getFlopsPerElement", (ins), [{}], [{ return 1.0; }]>,
  ];
}

//===----------------------------------------------------------------------===//
// Mixed precision: what an op computes in under `distopt-autocast`
//===----------------------------------------------------------------------===//
//
// The autocast pass asks each op one question: in which precision does it
// compute when a program runs in 16 bits (bf16 or fp16)? An op answers with
// one of these traits; an op with neither follows its inputs.

// Computes in 16 bits, accumulating in fp32 (the tensor-core ops: matrix
// products and convolutions). Its floating-point operands are cast to the
// 16-bit type and so is its result.
def Dopt_Autocast16 : NativeOpTrait<"Autocast16"> {
  let cppNamespace = "::distopt::dopt::OpTrait";
}

// Stays fp32 (log-softmax, normalisation statistics, sums and means, exp,
// log, pow: where 16 bits lose range or precision that matters). (Softmax
// follows its inputs: its lowering computes max, exponentials and sum in
// fp32 whatever the storage, and its 16-bit probabilities are what the next
// matrix product reads.) Its 16-bit
// operands are cast to fp32 and its result is fp32.
def Dopt_AutocastF32 : NativeOpTrait<"AutocastF32"> {
  let cppNamespace = "::distopt::dopt::OpTrait";
}

#endif // DISTOPT_DIALECT_DOPT_IR_DOPTINTERFACES_TD
