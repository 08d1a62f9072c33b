// RUN: distopt-opt %s --distopt-autodiff --split-input-file --verify-diagnostics | FileCheck %s

// Megatron's MLP on one rank of tp 2: the column-parallel matmul reads the
// replicated %x, so its adjoint share (the gemm against the weight block) is
// all-reduced over the tensor axis once, before it joins the residual's
// whole adjoint; the weight blocks' gradients need no collective, and the
// replicated %g's gradient is complete.
// CHECK-LABEL: func.func @main
// CHECK: %[[Y:.*]] = shard.all_reduce %{{.*}} on @dopt_grid grid_axes = [2]
// CHECK: %[[DZ:.*]] = dopt.add %{{[0-9]+}}, %{{[0-9]+}}
// CHECK: %[[DR:.*]] = dopt.gemm %[[DZ]], %arg3 {trans_b = true}
// CHECK: %[[DW2:.*]] = dopt.gemm %{{.*}}, %[[DZ]] {trans_a = true}
// CHECK: %[[DH:.*]] = dopt.where
// CHECK: %[[SHARE:.*]] = dopt.gemm %[[DH]], %arg2 {trans_b = true}
// CHECK: %[[DW1:.*]] = dopt.gemm %{{.*}}, %[[DH]] {trans_a = true}
// CHECK: %[[SUM:.*]] = shard.all_reduce %[[SHARE]] on @dopt_grid grid_axes = [2] {dopt.backward}
// CHECK: %[[DX:.*]] = dopt.add %[[DZ]], %[[SUM]]
// CHECK-NOT: shard.
// CHECK: return %{{.*}}, %{{.*}}, %[[DW1]], %[[DW2]]
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x0: tensor<4x8xf32>, %g: tensor<8xf32> {dopt.weight = {name = "g"}},
                  %w1: tensor<8x4xf32> {dopt.weight = {name = "w1", split_axes = [[], [2]]}},
                  %w2: tensor<4x8xf32> {dopt.weight = {name = "w2", split_axes = [[2], []]}}) -> tensor<f32> {
    %x = dopt.mul %x0, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %h = dopt.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    %r = dopt.relu %h : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %p = dopt.matmul %r, %w2 : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %y = shard.all_reduce %p on @dopt_grid grid_axes = [2] : tensor<4x8xf32> -> tensor<4x8xf32>
    %z = dopt.add %y, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %q = dopt.mul %z, %z : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %l = dopt.reduce_sum %q {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Each collective is transposed into its dual over the same axis:
// all_to_all swaps its axes, all_slice becomes all_gather (the blocks'
// adjoints make the whole one: no further sum), all_gather becomes
// all_slice.
// CHECK-LABEL: func.func @main
// CHECK: shard.all_to_all %{{.*}} on @dopt_grid grid_axes = [2] split_axis = 1 concat_axis = 0 {dopt.backward} : tensor<2x8xf32> -> tensor<4x4xf32>
// CHECK: %[[DV:.*]] = shard.all_gather %{{.*}} on @dopt_grid grid_axes = [2] gather_axis = 0 {dopt.backward} : tensor<4xf32> -> tensor<8xf32>
// CHECK: shard.all_slice %{{.*}} on @dopt_grid grid_axes = [2] slice_axis = 1 {dopt.backward} : tensor<4x8xf32> -> tensor<4x4xf32>
// CHECK-NOT: shard.all_reduce
// CHECK: return %{{.*}}, %{{.*}}, %[[DV]]
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x4xf32> {dopt.weight = {name = "w", split_axes = [[], [2]]}},
                  %v: tensor<8xf32> {dopt.weight = {name = "v"}}) -> tensor<f32> {
    %h = dopt.matmul %x, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    %y = shard.all_gather %h on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<4x4xf32> -> tensor<4x8xf32>
    %vs = shard.all_slice %v on @dopt_grid grid_axes = [2] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
    %m = dopt.mul %h, %vs : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
    %a = shard.all_to_all %m on @dopt_grid grid_axes = [2] split_axis = 0 concat_axis = 1 : tensor<4x4xf32> -> tensor<2x8xf32>
    %s1 = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
    %s2 = dopt.reduce_sum %a {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x8xf32>) -> tensor<f32>
    %s3 = shard.all_reduce %s2 on @dopt_grid grid_axes = [2] : tensor<f32> -> tensor<f32>
    %l = dopt.add %s1, %s3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A reduce-scatter's operand is a partial sum: its adjoint is the whole
// sum's, gathered.
// CHECK-LABEL: func.func @main
// CHECK: shard.reduce_scatter
// CHECK: shard.all_gather %{{.*}} on @dopt_grid grid_axes = [2] gather_axis = 1 {dopt.backward} : tensor<4x4xf32> -> tensor<4x8xf32>
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x4xf32>, %w: tensor<4x8xf32> {dopt.weight = {name = "w", split_axes = [[2], []]}}) -> tensor<f32> {
    %p = dopt.matmul %x, %w : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %y = shard.reduce_scatter %p on @dopt_grid grid_axes = [2] scatter_axis = 1 : tensor<4x8xf32> -> tensor<4x4xf32>
    %q = dopt.mul %y, %y : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %s = dopt.reduce_sum %q {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x4xf32>) -> tensor<f32>
    %l = shard.all_reduce %s on @dopt_grid grid_axes = [2] : tensor<f32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Data-parallel values do not move through gathers in a training step.
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<2x3xf32>, %w: tensor<3xf32> {dopt.weight = {name = "w"}}) -> tensor<f32> {
    %y = dopt.mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    // expected-error @+1 {{no gradient rule for shard.all_gather over the data or stage axis (only tensor-parallel collectives are differentiated)}}
    %g = shard.all_gather %y on @dopt_grid grid_axes = [1] gather_axis = 0 : tensor<2x3xf32> -> tensor<4x3xf32>
    %s = dopt.reduce_sum %g {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x3xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

// The loss must be the same on every rank of the tensor axis.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  // expected-error @+1 {{the loss differs between the tensor-parallel ranks (internal error: it must be all-reduced or gathered over the tensor axis)}}
  func.func @main(%x: tensor<2x4xf32>, %w: tensor<4xf32> {dopt.weight = {name = "w", split_axes = [[2]]}}) -> tensor<f32> {
    %y = dopt.mul %x, %w : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %s = dopt.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
    return %s : tensor<f32>
  }
}
