// RUN: distopt-opt %s --distopt-append-loss='kind=cross-entropy output=logits local=true counted=true' --split-input-file | FileCheck %s
// RUN: distopt-opt %s --distopt-append-loss='kind=mse output=logits local=true counted=true' --split-input-file | FileCheck %s --check-prefix=MSE

// A parameter-server worker (local=true): the loss of this replica's own
// samples. No all-reduce over the data axis; `counted` is the replica's
// count (the server weights the workers' gradients by it).

// CHECK-LABEL: func.func @main
// CHECK-SAME: dopt.name = "counted"
// CHECK-NOT: shard.all_reduce
// CHECK: return
// CHECK-SAME: tensor<f32>, tensor<f32>

// MSE-LABEL: func.func @main
// MSE-SAME: dopt.name = "counted"
// MSE-NOT: shard.all_reduce
// MSE: dopt.reduce_mean
// MSE: dopt.constant {value = dense<2.000000e+01> : tensor<f32>}
// MSE: return
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x10xf32>) -> (tensor<2x10xf32> {dopt.batch_dim = 0 : i64, dopt.global_type = tensor<4x10xf32>, dopt.name = "logits", dopt.split_axes = [[1], []]}) {
    return %x : tensor<2x10xf32>
  }
}
