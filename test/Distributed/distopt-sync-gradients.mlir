// RUN: distopt-opt %s --distopt-sync-gradients='bucket-bytes=64' --split-input-file | FileCheck %s
// RUN: distopt-opt %s --distopt-sync-gradients --split-input-file | FileCheck %s --check-prefix=ONE
// RUN: distopt-opt %s --distopt-sync-gradients='grad-dtype=f16' --split-input-file | FileCheck %s --check-prefix=F16
// RUN: not distopt-opt %s --distopt-sync-gradients='grad-dtype=f8' --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: distopt-opt %s --distopt-sync-gradients='zero-stage=1 bucket-bytes=64' --split-input-file | FileCheck %s --check-prefix=ZERO
// RUN: not distopt-opt %s --distopt-sync-gradients='zero-stage=2' --split-input-file 2>&1 | FileCheck %s --check-prefix=ZERO2

// Three gradients of a 2-replica program, produced b (16 bytes), w1 (48),
// w2 (32). With 64-byte buckets, b and w1 travel together, flattened into
// one buffer whose all-reduce starts right after w1 is produced (while w2
// is computed) and is split back only before the return; w2 travels alone.
// CHECK-LABEL: func.func @main
// CHECK: %[[B:.*]] = dopt.mul %arg0, %arg0 : (tensor<4xf32>
// CHECK: %[[W1:.*]] = dopt.mul %arg1, %arg1 : (tensor<3x4xf32>
// CHECK: %[[FB:.*]] = dopt.reshape %[[B]] {shape = array<i64: 4>}
// CHECK: %[[FW:.*]] = dopt.reshape %[[W1]] {shape = array<i64: 12>}
// CHECK: %[[CAT:.*]] = dopt.concat %[[FB]], %[[FW]] {axis = 0 : i64}
// CHECK: %[[R:.*]] = shard.all_reduce %[[CAT]] on @dopt_grid grid_axes = [1] {dopt.async, dopt.bucket = 0 : i64} : tensor<16xf32> -> tensor<16xf32>
// CHECK: %[[W2:.*]] = dopt.mul %arg2, %arg2 : (tensor<8xf32>
// CHECK: %[[GW2:.*]] = shard.all_reduce %[[W2]] on @dopt_grid grid_axes = [1] {dopt.async, dopt.bucket = 1 : i64}
// CHECK: %[[P:.*]]:2 = dopt.split %[[R]] {axis = 0 : i64, sizes = array<i64: 4, 12>}
// CHECK: %[[GB:.*]] = dopt.reshape %[[P]]#0 {shape = array<i64: 4>}
// CHECK: %[[GW1:.*]] = dopt.reshape %[[P]]#1 {shape = array<i64: 3, 4>}
// CHECK: return %arg3, %[[GW2]], %[[GW1]], %[[GB]]
// The default bucket (25 MiB) takes all three, in production order.
// ONE-LABEL: func.func @main
// ONE: dopt.concat {{.*}} : (tensor<4xf32>, tensor<12xf32>, tensor<8xf32>) -> tensor<24xf32>
// ONE: shard.all_reduce {{.*}} {dopt.async, dopt.bucket = 0 : i64}
// ONE-NOT: shard.all_reduce
// In 16 bits: scaled by 1/2 (the replicas) before the sum, cast back to
// f32 and scaled by 2 after it.
// F16-LABEL: func.func @main
// F16: %[[CAT:.*]] = dopt.concat
// F16: %[[HALF:.*]] = dopt.constant {value = dense<5.000000e-01> : tensor<f32>}
// F16: %[[S:.*]] = dopt.mul %[[CAT]], %[[HALF]]
// F16: %[[H:.*]] = dopt.cast %[[S]] {to = f16} : (tensor<24xf32>) -> tensor<24xf16>
// F16: %[[R:.*]] = shard.all_reduce %[[H]] on @dopt_grid grid_axes = [1] {dopt.async, dopt.bucket = 0 : i64} : tensor<24xf16> -> tensor<24xf16>
// F16: %[[F:.*]] = dopt.cast %[[R]] {to = f32}
// F16: %[[TWO:.*]] = dopt.constant {value = dense<2.000000e+00> : tensor<f32>}
// F16: dopt.mul %[[F]], %[[TWO]]
// BAD: distopt-sync-gradients: grad-dtype must be f32, f16 or bf16, got 'f8'
// ZeRO-1: each gradient as [2 replicas, chunk] (b: 2 x 2, w1: 2 x 6),
// joined along the chunks and reduce-scattered; each result is this
// replica's chunk (dopt.zero_shard).
// ZERO-LABEL: func.func @main
// ZERO-SAME: tensor<4xf32> {dopt.grad_of = "w2", dopt.name = "grad:w2", dopt.zero_shard}
// ZERO-SAME: tensor<6xf32> {dopt.grad_of = "w1", dopt.name = "grad:w1", dopt.zero_shard}
// ZERO-SAME: tensor<2xf32> {dopt.grad_of = "b", dopt.name = "grad:b", dopt.zero_shard}
// ZERO: %[[CAT:.*]] = dopt.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x6xf32>) -> tensor<2x8xf32>
// ZERO: shard.reduce_scatter %[[CAT]] on @dopt_grid grid_axes = [1] scatter_axis = 0 {dopt.async, dopt.bucket = 0 : i64} : tensor<2x8xf32> -> tensor<1x8xf32>
// ZERO: shard.reduce_scatter %{{.*}} on @dopt_grid grid_axes = [1] scatter_axis = 0 {dopt.async, dopt.bucket = 1 : i64} : tensor<2x4xf32> -> tensor<1x4xf32>
// ZERO: dopt.split %{{.*}} {axis = 1 : i64, sizes = array<i64: 2, 6>}
// ZERO2: distopt-sync-gradients: zero-stage must be 0 or 1, got 2
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%b: tensor<4xf32>, %w1: tensor<3x4xf32>, %w2: tensor<8xf32>, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8xf32> {dopt.grad_of = "w2", dopt.name = "grad:w2"},
          tensor<3x4xf32> {dopt.grad_of = "w1", dopt.name = "grad:w1"},
          tensor<4xf32> {dopt.grad_of = "b", dopt.name = "grad:b"}) {
    %gb = dopt.mul %b, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %gw1 = dopt.mul %w1, %w1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    %gw2 = dopt.mul %w2, %w2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %l, %gw2, %gw1, %gb : tensor<f32>, tensor<8xf32>, tensor<3x4xf32>, tensor<4xf32>
  }
}

// -----

// One replica (or no grid): the gradients are whole already.
// CHECK-LABEL: func.func @main
// CHECK-NOT: shard.all_reduce
// ONE-LABEL: func.func @main
// ONE-NOT: shard.all_reduce
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%w: tensor<4xf32>) -> (tensor<4xf32> {dopt.grad_of = "w", dopt.name = "grad:w"}) {
    %g = dopt.mul %w, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %g : tensor<4xf32>
  }
}
