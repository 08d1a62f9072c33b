// RUN: distopt-opt %s --distopt-partition --split-input-file | FileCheck %s

// Per-op rules on tp = 2: a reduce_mean split along its reduced axis leaves
// partial means (all_reduce average); a convolution split by batch keeps its
// windows; softmax over an unsplit axis; transpose and expand follow their
// operands; slice keeps untouched split dimensions whole.

module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %s1 = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %xs = shard.shard %x to %s1 : tensor<4x8xf32>
    %m = dopt.reduce_mean %xs {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %ms = shard.shard %m to %rep {dopt.partial = "mean"} : tensor<4x1xf32>
    %r = shard.shard %ms to %rep annotate_for_users : tensor<4x1xf32>
    %n = dopt.neg %r : (tensor<4x1xf32>) -> tensor<4x1xf32>
    %ns = shard.shard %n to %rep : tensor<4x1xf32>
    return %ns : tensor<4x1xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK: %[[M:.*]] = dopt.reduce_mean %{{.*}} {axes = array<i64: 1>{{.*}}} : (tensor<4x4xf32>) -> tensor<4x1xf32>
// CHECK: shard.all_reduce %[[M]] on @dopt_grid grid_axes = [2] reduction = average : tensor<4x1xf32> -> tensor<4x1xf32>

// -----

module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<4x3x8x8xf32>) -> tensor<4x8x8x6xf32> {
    %b = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %b : tensor<4x3x8x8xf32>
    %w = dopt.weight {name = "w", type = tensor<6x3x3x3xf32>} : () -> tensor<6x3x3x3xf32>
    %ws = shard.shard %w to %rep : tensor<6x3x3x3xf32>
    %c = dopt.conv %xs, %ws {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<4x3x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<4x6x8x8xf32>
    %cs = shard.shard %c to %b : tensor<4x6x8x8xf32>
    %sm = dopt.softmax %cs {axis = 1 : i64} : (tensor<4x6x8x8xf32>) -> tensor<4x6x8x8xf32>
    %sms = shard.shard %sm to %b : tensor<4x6x8x8xf32>
    %t = dopt.transpose %sms {perm = array<i64: 0, 2, 3, 1>} : (tensor<4x6x8x8xf32>) -> tensor<4x8x8x6xf32>
    %ts = shard.shard %t to %b : tensor<4x8x8x6xf32>
    %sl = dopt.slice %ts {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 4, 8, 8, 6>, steps = array<i64: 1, 1, 1, 1>} : (tensor<4x8x8x6xf32>) -> tensor<4x8x8x6xf32>
    %sls = shard.shard %sl to %b : tensor<4x8x8x6xf32>
    %g = shard.shard %sls to %rep annotate_for_users : tensor<4x8x8x6xf32>
    %o = dopt.neg %g : (tensor<4x8x8x6xf32>) -> tensor<4x8x8x6xf32>
    %os = shard.shard %o to %rep : tensor<4x8x8x6xf32>
    return %os : tensor<4x8x8x6xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK: dopt.conv {{.*}} : (tensor<2x3x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<2x6x8x8xf32>
// CHECK: dopt.softmax {{.*}} : (tensor<2x6x8x8xf32>) -> tensor<2x6x8x8xf32>
// CHECK: dopt.transpose {{.*}} : (tensor<2x6x8x8xf32>) -> tensor<2x8x8x6xf32>
// CHECK: dopt.slice {{.*}}ends = array<i64: 2, 8, 8, 6>{{.*}} : (tensor<2x8x8x6xf32>) -> tensor<2x8x8x6xf32>
// CHECK: shard.all_gather %{{.*}} on @dopt_grid grid_axes = [2] gather_axis = 0 : tensor<2x8x8x6xf32> -> tensor<4x8x8x6xf32>


// -----

// A transposed convolution (weight C x M/group x kh x kw) split along its
// output channels (the weight's second dimension) computes its share of the
// channels; split along its input channels (the input's channels and the
// weight's first dimension, the contraction) it leaves partial sums.
module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%x: tensor<2x4x5x5xf32>, %x2: tensor<2x4x5x5xf32>) -> (tensor<2x6x9x9xf32>, tensor<2x6x9x9xf32>) {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %out = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %xr = shard.shard %x to %rep : tensor<2x4x5x5xf32>
    %w = dopt.weight {name = "w", type = tensor<4x6x3x3xf32>} : () -> tensor<4x6x3x3xf32>
    %wo = shard.shard %w to %out : tensor<4x6x3x3xf32>
    %y = dopt.conv_transpose %xr, %wo {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf32>, tensor<4x6x3x3xf32>) -> tensor<2x6x9x9xf32>
    %ys = shard.shard %y to %out : tensor<2x6x9x9xf32>
    %yr = shard.shard %ys to %rep annotate_for_users : tensor<2x6x9x9xf32>
    %in = shard.sharding @dopt_grid split_axes = [[], [2]] : !shard.sharding
    %xi = shard.shard %x2 to %in : tensor<2x4x5x5xf32>
    %w2 = dopt.weight {name = "w2", type = tensor<4x6x3x3xf32>} : () -> tensor<4x6x3x3xf32>
    %wc = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %wi = shard.shard %w2 to %wc : tensor<4x6x3x3xf32>
    %z = dopt.conv_transpose %xi, %wi {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf32>, tensor<4x6x3x3xf32>) -> tensor<2x6x9x9xf32>
    %zs = shard.shard %z to %rep {dopt.partial = "sum"} : tensor<2x6x9x9xf32>
    %zr = shard.shard %zs to %rep annotate_for_users : tensor<2x6x9x9xf32>
    return %yr, %zr : tensor<2x6x9x9xf32>, tensor<2x6x9x9xf32>
  }
}
// CHECK-LABEL: func.func @main
// CHECK: %[[Y:.*]] = dopt.conv_transpose {{.*}} : (tensor<2x4x5x5xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x9x9xf32>
// CHECK: shard.all_gather %[[Y]] on @dopt_grid grid_axes = [2] gather_axis = 1 : tensor<2x3x9x9xf32> -> tensor<2x6x9x9xf32>
// CHECK: %[[Z:.*]] = dopt.conv_transpose {{.*}} : (tensor<2x2x5x5xf32>, tensor<2x6x3x3xf32>) -> tensor<2x6x9x9xf32>
// CHECK: shard.all_reduce %[[Z]] on @dopt_grid grid_axes = [2] : tensor<2x6x9x9xf32> -> tensor<2x6x9x9xf32>
