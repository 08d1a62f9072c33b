// RUN: distopt-opt %s --distopt-append-loss='kind=cross-entropy output=logits' --split-input-file --verify-diagnostics | FileCheck %s
// RUN: distopt-opt %s --distopt-append-loss='kind=mse output=logits' --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=MSE
// RUN: distopt-opt %s --distopt-append-loss='kind=cross-entropy output=logits accuracy=true' --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=ACC

// One process: the labels are a new input, the loss the mean over the
// counted samples, nothing crosses ranks.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<4xi64> {dopt.classes = 10 : i64, dopt.name = "labels"}
// CHECK-SAME: -> (tensor<f32> {dopt.name = "loss"})
// CHECK-NOT: shard.all_reduce
// CHECK: dopt.log_softmax
// CHECK: %[[S:.*]] = dopt.reduce_sum {{.*}} -> tensor<f32>
// CHECK: %[[C:.*]] = dopt.reduce_sum {{.*}} -> tensor<f32>
// CHECK: dopt.div %[[S]], %[[C]]
// MSE-LABEL: func.func @main
// MSE-SAME: %arg1: tensor<4x10xf32> {dopt.name = "labels"}
// MSE: dopt.reduce_mean
// With accuracy (the evaluation program): the samples whose label scores
// the maximum, and the counted labels, as f32 counts.
// ACC-LABEL: func.func @main
// ACC-SAME: -> (tensor<f32> {dopt.name = "loss"}, tensor<f32> {dopt.name = "correct"}, tensor<f32> {dopt.name = "counted"})
// ACC: %[[BEST:.*]] = dopt.reduce_max %{{.*}} {axes = array<i64: 1>, keepdims = false}
// ACC: %[[GE:.*]] = dopt.greater_equal %{{.*}}, %[[BEST]]
// ACC: dopt.and %[[GE]], %{{.*}}
func.func @main(%x: tensor<4x10xf32>) -> (tensor<4x10xf32> {dopt.name = "logits"}) {
  return %x : tensor<4x10xf32>
}

// -----

// One data-parallel replica's program (2 replicas, samples split over grid
// axis 1): the labels are split like the logits, and the loss's sum and
// count are summed over the replicas, so the mean is the whole batch's.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<2xi64> {dopt.batch_dim = 0 : i64, dopt.classes = 10 : i64, dopt.global_type = tensor<4xi64>, dopt.name = "labels", dopt.split_axes = {{\[}}[1]]}
// CHECK-SAME: -> (tensor<f32> {dopt.global_type = tensor<f32>, dopt.name = "loss", dopt.split_axes = []})
// CHECK: %[[S:.*]] = dopt.reduce_sum {{.*}} -> tensor<f32>
// CHECK: %[[SA:.*]] = shard.all_reduce %[[S]] on @dopt_grid grid_axes = [1] : tensor<f32> -> tensor<f32>
// CHECK: %[[C:.*]] = dopt.reduce_sum {{.*}} -> tensor<f32>
// CHECK: %[[CA:.*]] = shard.all_reduce %[[C]] on @dopt_grid grid_axes = [1] : tensor<f32> -> tensor<f32>
// CHECK: dopt.div %[[SA]], %[[CA]]
// The squared error's mean divides the summed squares by the whole
// output's element count (4 x 10).
// MSE-LABEL: func.func @main
// MSE-SAME: %arg1: tensor<2x10xf32> {dopt.batch_dim = 0 : i64, dopt.global_type = tensor<4x10xf32>, dopt.name = "labels", dopt.split_axes = {{\[}}[1], []]}
// MSE: %[[S:.*]] = dopt.reduce_sum {{.*}} -> tensor<f32>
// MSE: %[[SA:.*]] = shard.all_reduce %[[S]] on @dopt_grid grid_axes = [1]
// MSE: %[[N:.*]] = dopt.constant {value = dense<4.000000e+01> : tensor<f32>}
// MSE: dopt.div %[[SA]], %[[N]]
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x10xf32>) -> (tensor<2x10xf32> {dopt.batch_dim = 0 : i64, dopt.global_type = tensor<4x10xf32>, dopt.name = "logits", dopt.split_axes = [[1], []]}) {
    return %x : tensor<2x10xf32>
  }
}

// -----

// Classes split across tensor-parallel ranks (a column-parallel head): a
// cross-entropy is vocabulary-parallel (Megatron) -- this rank's classes
// start at its place on the tensor axis times 5; each row's log-sum-exp of
// them is gathered ([4, 2]) and combined; the label's score is picked where
// it lives and summed over the axis; the labels count all 10 classes; the
// accuracy's best score is a max over the axis. No logits are gathered.
// An MSE takes whole rows: the logits are gathered first.
// CHECK-LABEL: shard.grid @dopt_grid(shape = 1x1x2)
// CHECK: dopt.classes = 10 : i64
// CHECK: %[[RANK:.*]] = shard.process_multi_index on @dopt_grid axes = [2]
// CHECK: %[[LSE:.*]] = dopt.add
// CHECK: %[[ALL:.*]] = shard.all_gather %[[LSE]] on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<4x1xf32> -> tensor<4x2xf32>
// CHECK: dopt.reduce_max %[[ALL]]
// CHECK: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [2] : tensor<4xf32>
// CHECK-NOT: shard.all_gather
// MSE-LABEL: shard.grid @dopt_grid(shape = 1x1x2)
// MSE: shard.all_gather %arg0 on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<4x5xf32> -> tensor<4x10xf32>
// ACC-LABEL: shard.grid @dopt_grid(shape = 1x1x2)
// ACC: shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [2] reduction = max
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x5xf32>) -> (tensor<4x5xf32> {dopt.global_type = tensor<4x10xf32>, dopt.name = "logits", dopt.split_axes = [[], [2]]}) {
    return %x : tensor<4x5xf32>
  }
}

// -----

// A tensor-axis split that is not the innermost of its dimension cannot be
// gathered into the samples' blocks.
module {
  shard.grid @dopt_grid(shape = 1x2x2)
  // expected-error @+1 {{--loss: output 'logits' is split over grid axis 2 along its dimension 0; a loss is taken of outputs split along their samples only (data parallelism)}}
  func.func @main(%x: tensor<1x10xf32>) -> (tensor<1x10xf32> {dopt.batch_dim = 0 : i64, dopt.global_type = tensor<4x10xf32>, dopt.name = "logits", dopt.split_axes = [[2, 1], []]}) {
    return %x : tensor<1x10xf32>
  }
}
