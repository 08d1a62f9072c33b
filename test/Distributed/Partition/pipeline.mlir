// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// Three pipeline stages on 2 micro-batches: @main becomes one function per
// stage; the batch dimension is a micro-batch; an activation made in stage
// 0 and read in stage 2 passes through stage 1; the model input read by
// stages 0 and 2 is an argument of both.

module attributes {dopt.plan = {dp = 1 : i64, microbatch_size = 4 : i64, microbatches = 2 : i64, pp = 3 : i64, recompute = "off", tp = 1 : i64}} {
  shard.grid @dopt_grid(shape = 3x1x1)
  func.func @main(%x: tensor<8x16xf32> {dopt.name = "x"}) -> (tensor<8x16xf32> {dopt.name = "y"}) {
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %xs = shard.shard %x to %rep {dopt.batch_dim = 0 : i64} : tensor<8x16xf32>
    %a = dopt.neg %xs {dopt.stage = 0 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %as = shard.shard %a to %rep {dopt.batch_dim = 0 : i64} : tensor<8x16xf32>
    %b = dopt.exp %as {dopt.stage = 1 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %bs = shard.shard %b to %rep {dopt.batch_dim = 0 : i64} : tensor<8x16xf32>
    %c = dopt.add %as, %bs {dopt.stage = 2 : i64} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    %cs = shard.shard %c to %rep {dopt.batch_dim = 0 : i64} : tensor<8x16xf32>
    %d = dopt.mul %cs, %xs {dopt.stage = 2 : i64} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    %ds = shard.shard %d to %rep {dopt.batch_dim = 0 : i64} : tensor<8x16xf32>
    return %ds : tensor<8x16xf32>
  }
}

// CHECK: module attributes {dopt.partitioned, dopt.pipeline = {microbatches = 2 : i64, stages = 3 : i64}
// CHECK-NOT: func.func @main
// CHECK: func.func @dopt_stage_0(%[[X0:.*]]: tensor<4x16xf32> {{{.*}}dopt.model_input = 0 : i64{{.*}}}) -> (tensor<4x16xf32> {dopt.activation = 0 : i64})
// CHECK:   %[[A:.*]] = dopt.neg %[[X0]]
// CHECK:   return %[[A]]
// CHECK: func.func @dopt_stage_1(%[[A1:.*]]: tensor<4x16xf32> {dopt.activation = 0 : i64}) -> (tensor<4x16xf32> {dopt.activation = 0 : i64}, tensor<4x16xf32> {dopt.activation = 1 : i64})
// CHECK:   %[[B:.*]] = dopt.exp %[[A1]]
// CHECK:   return %[[A1]], %[[B]]
// CHECK: func.func @dopt_stage_2(%[[X2:.*]]: tensor<4x16xf32> {{{.*}}dopt.model_input = 0 : i64{{.*}}}, %[[A2:.*]]: tensor<4x16xf32> {dopt.activation = 0 : i64}, %[[B2:.*]]: tensor<4x16xf32> {dopt.activation = 1 : i64}) -> (tensor<4x16xf32> {{{.*}}dopt.model_output = 0 : i64{{.*}}})
// CHECK:   %[[C:.*]] = dopt.add %[[A2]], %[[B2]]
// CHECK:   %[[D:.*]] = dopt.mul %[[C]], %[[X2]]
// CHECK:   return %[[D]]
