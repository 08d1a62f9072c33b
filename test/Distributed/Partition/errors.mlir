// RUN: distopt-opt %s --distopt-partition --split-input-file --verify-diagnostics

// expected-error @below {{no shard.grid @dopt_grid: run `distopt plan --emit=ir` (or the planner) first}}
module {
  func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

// A pipeline stage may not read what a later stage makes.
module attributes {dopt.plan = {dp = 1 : i64, microbatch_size = 8 : i64, microbatches = 1 : i64, pp = 2 : i64, recompute = "off", tp = 1 : i64}} {
  shard.grid @dopt_grid(shape = 2x1x1)
  func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    %a = dopt.neg %x {dopt.stage = 1 : i64} : (tensor<8xf32>) -> tensor<8xf32>
    // expected-error @below {{pipeline stage 0 reads a value of the later stage 1}}
    %b = dopt.exp %a {dopt.stage = 0 : i64} : (tensor<8xf32>) -> tensor<8xf32>
    return %b : tensor<8xf32>
  }
}

// -----

module {
  shard.grid @dopt_grid(shape = 1x1x4)
  // expected-error @below {{dimension 0 of size 6 does not split evenly over 4 devices (only the batch may split unevenly, over the data axis)}}
  func.func @main(%x: tensor<6x8xf32>) -> tensor<6x8xf32> {
    %s = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %xs = shard.shard %x to %s : tensor<6x8xf32>
    %n = dopt.neg %xs : (tensor<6x8xf32>) -> tensor<6x8xf32>
    %ns = shard.shard %n to %s : tensor<6x8xf32>
    return %ns : tensor<6x8xf32>
  }
}

// -----

// A block-layout split (fused QKV) fed by something other than a column-split
// weight GEMM.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<2x12xf32>) -> tensor<2x6xf32> {
    %c = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    // expected-error @below {{a block-layout split (fused QKV) cannot be made here: its producer 'dopt.exp' cannot be made in a block layout}}
    %e = dopt.exp %x : (tensor<2x12xf32>) -> tensor<2x12xf32>
    %es = shard.shard %e to %c : tensor<2x12xf32>
    %a = shard.shard %es to %c annotate_for_users : tensor<2x12xf32>
    %p:2 = dopt.split %a {axis = 1 : i64, sizes = array<i64: 6, 6>} : (tensor<2x12xf32>) -> (tensor<2x6xf32>, tensor<2x6xf32>)
    return %p#0 : tensor<2x6xf32>
  }
}

// -----

// A concatenation along the split axis holds each part's blocks, not one
// contiguous block: it must not leave the program that way.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  // expected-error @below {{a model output in a block layout (a concatenation along a split axis) is not supported}}
  func.func @main(%a: tensor<2x4xf32>, %b: tensor<2x8xf32>) -> tensor<3x2x12xf32> {
    %s1 = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %s2 = shard.sharding @dopt_grid split_axes = [[], [], [2]] : !shard.sharding
    %as = shard.shard %a to %s1 : tensor<2x4xf32>
    %bs = shard.shard %b to %s1 : tensor<2x8xf32>
    %c = dopt.concat %as, %bs {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x8xf32>) -> tensor<2x12xf32>
    %cs = shard.shard %c to %s1 : tensor<2x12xf32>
    %e = dopt.expand %cs {shape = array<i64: 3, 2, 12>} : (tensor<2x12xf32>) -> tensor<3x2x12xf32>
    %es = shard.shard %e to %s2 : tensor<3x2x12xf32>
    return %es : tensor<3x2x12xf32>
  }
}

// -----

// An uneven batch split is padded; an op that mixes the samples (a sum over
// the batch) would mix in the padding.
module {
  shard.grid @dopt_grid(shape = 1x4x1)
  func.func @main(%x: tensor<6x8xf32>) -> tensor<1x8xf32> {
    %b = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %r = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %b {dopt.batch_dim = 0 : i64} : tensor<6x8xf32>
    // expected-error @below {{this op combines samples of an unevenly split batch (its result does not keep the batch split); use a data-parallel degree that divides the batch}}
    %s = dopt.reduce_sum %xs {axes = array<i64: 0>} : (tensor<6x8xf32>) -> tensor<1x8xf32>
    %ss = shard.shard %s to %r {dopt.partial = "sum"} : tensor<1x8xf32>
    %y = shard.shard %ss to %r annotate_for_users : tensor<1x8xf32>
    return %y : tensor<1x8xf32>
  }
}

// -----

// A model output that holds the batch inside a merged dimension ([T*B, D])
// cannot be joined by the runtime (the planner never delivers one).
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<4x2x8xf32>) -> tensor<8x8xf32> {
    %b1 = shard.sharding @dopt_grid split_axes = [[], [1]] : !shard.sharding
    %b0 = shard.sharding @dopt_grid split_axes = [[1]] : !shard.sharding
    %xs = shard.shard %x to %b1 {dopt.batch_dim = 1 : i64} : tensor<4x2x8xf32>
    %f = dopt.reshape %xs {shape = array<i64: 8, 8>} : (tensor<4x2x8xf32>) -> tensor<8x8xf32>
    %fs = shard.shard %f to %b0 {dopt.batch_dim = 0 : i64} : tensor<8x8xf32>
    // expected-error @below {{result 0 holds the batch inside a merged dimension 0; the runtime cannot join it across replicas}}
    return %fs : tensor<8x8xf32>
  }
}

// -----

// A plan that splits a softmax along its axis: local shapes would fit, the
// numbers would not. The op's sharding rule refuses it.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %c = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %xs = shard.shard %x to %c : tensor<4x8xf32>
    // expected-error @below {{the plan splits this op in a way its sharding rule does not allow: the split factor must stay whole (internal error)}}
    %y = dopt.softmax %xs {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %ys = shard.shard %y to %c : tensor<4x8xf32>
    return %ys : tensor<4x8xf32>
  }
}

// -----

// A matmul split along K must leave partial sums, not a whole result.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x6xf32> {
    %c = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %r = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %c : tensor<4x8xf32>
    %w = dopt.weight {name = "w", type = tensor<8x6xf32>} : () -> tensor<8x6xf32>
    %ws = shard.shard %w to %r : tensor<8x6xf32>
    // expected-error @below {{a split reduction must leave partial results}}
    %y = dopt.matmul %xs, %ws : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
    %ys = shard.shard %y to %rep : tensor<4x6xf32>
    return %ys : tensor<4x6xf32>
  }
}
