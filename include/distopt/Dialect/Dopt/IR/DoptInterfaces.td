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
// Questions a stage answers for the ops (external models)
//===----------------------------------------------------------------------===//
//
// The answers to these live with the stage that owns the concept and are
// attached to the ops as external models (`Op::attachInterface`), so that the
// dialect does not depend on the planner or on autodiff, and every stage
// asks the op through the interface: the planner attaches the sharding rules
// and costs (planner::registerOpModels, lib/Planner/OpModels.cpp), autodiff
// the gradients (autodiff::registerOpModels, lib/Training/AutodiffRules.cpp;
// also on the `shard` collectives). A context that plans or differentiates
// registers them; driver::registerDialects does it for the tools.

def Dopt_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::distopt::dopt";
  let description = [{
    How the op may be split over devices: its loop factors
    (planner/ShardingRules.h). The planner enumerates and prices strategies
    from the rule; the partitioner rewrites the op with the same rule.
    Elementwise ops (ElementwiseOpInterface) and dopt.expand need none: they
    split alike along every result dimension. An op with neither is only
    ever replicated.
  }];
  let methods = [
    InterfaceMethod<
      [{Writes the op's rule into `rule`; false when no rule describes the
        op's shapes (dynamic or unranked shapes, rank-1 matmul operands),
        and the op is then replicated.}],
      "bool", "getShardingRule",
      (ins "::distopt::planner::OpShardingRule &":$rule)>,
  ];
}

def Dopt_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::distopt::dopt";
  let description = [{
    The op's work on one device (planner::estimateOpCost,
    docs/cost-model.md): its FLOPs, its op class (whose achievable
    efficiency applies) and, where it reads less than its operands, the
    bytes it reads. Elementwise ops are priced by their FLOPs per element;
    a dopt op with neither is priced as data movement (its bytes).
  }];
  let methods = [
    InterfaceMethod<
      [{Completes `cost`, which holds the op's dtype and the bytes of its
        operands (read) and results (written): sets the op class and FLOPs,
        and corrects the bytes where the op reads fewer.}],
      "void", "estimateCost",
      (ins "::distopt::planner::OpCost &":$cost,
           "const ::distopt::planner::CostOptions &":$options)>,
  ];
}

def Dopt_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::distopt::dopt";
  let description = [{
    The op's vector-Jacobian product (reverse-mode autodiff, distopt-autodiff
    and the pipeline step): given the adjoints of its results, builds the
    adjoints of its operands. An op without it is not differentiable: a loss
    that depends on a weight through it is an error naming the op.
  }];
  let methods = [
    InterfaceMethod<
      [{Builds the adjoints of the operands at the builder's insertion point
        from `resultGrads` (one per result; null where a result has none),
        appending one per operand in order, or a null value where an operand
        gets none (integers, conditions, piecewise-constant functions).
        Fails with an error at the op where the op's attributes or operands
        have no rule.}],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::ImplicitLocOpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
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
