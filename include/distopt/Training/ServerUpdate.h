//===- ServerUpdate.h - the update program of a parameter server -*- C++ -*-===//
//
// A parameter server (`--sync ps|async`) holds a shard of the trained
// weights, flattened (ServerPlacement.h), and applies gradients to it. Its
// program is built here and then made a step by distopt-optimizer, so the
// update formulas stay in one place:
//
//   @main(ps.grad: [L], ps.pulled: [L], ps.dc_lambda: [], weight ps.shard: [L])
//       -> (loss = 0, grad:ps.shard = g + λ·g⊙g⊙(w − w_pulled))
//
// ps.grad is the gradient the server applies (a worker's, or the
// synchronous step's average); ps.pulled and ps.dc_lambda are delay
// compensation (DC-ASGD, Zheng et al. 2017): the weights the worker pulled
// before computing the gradient and λ; λ = 0 applies g as it is.
//
// With `normAcrossServers` (synchronous servers, K > 1) the module carries
// a grid of the K servers and the shard is marked as a block of the whole
// parameter vector, so the optimizer's global norm (clipping) sums its
// squares over the servers.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRAINING_SERVERUPDATE_H
#define DISTOPT_TRAINING_SERVERUPDATE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace distopt {

constexpr llvm::StringLiteral kServerShardName = "ps.shard";

mlir::OwningOpRef<mlir::ModuleOp>
buildServerUpdate(mlir::MLIRContext &context, int64_t length, int64_t servers,
                  bool normAcrossServers);

} // namespace distopt

#endif // DISTOPT_TRAINING_SERVERUPDATE_H
