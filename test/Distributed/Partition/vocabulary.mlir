// RUN: distopt-opt %s --distopt-partition | FileCheck %s

// A table split over its gathered rows (vocabulary-parallel embedding): the
// rank looks up the indices in its rows (offset by its place on the tensor
// axis), contributes zeros for the others, and the partial sums meet in an
// all_reduce.

module {
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%i: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
    %rows = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %w = dopt.weight {name = "wte", type = tensor<100x8xf32>} : () -> tensor<100x8xf32>
    %ws = shard.shard %w to %rows : tensor<100x8xf32>
    %g = dopt.gather %ws, %i {axis = 0 : i64} : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    %gs = shard.shard %g to %rep {dopt.partial = "sum"} : tensor<2x4x8xf32>
    %y = shard.shard %gs to %rep annotate_for_users : tensor<2x4x8xf32>
    %n = dopt.neg %y : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %n : tensor<2x4x8xf32>
  }
}


// CHECK: %[[W:.*]] = dopt.weight {dopt.global_type = tensor<100x8xf32>, dopt.split_axes = {{\[\[}}2], []], name = "wte", type = tensor<50x8xf32>}
// CHECK: %[[C:.*]] = shard.process_multi_index on @dopt_grid axes = [2] : index
// CHECK: %[[CI:.*]] = arith.index_cast %[[C]] : index to i64
// CHECK: %[[LO:.*]] = arith.muli %[[CI]], %{{.*}} : i64
// CHECK: %[[LOT:.*]] = tensor.from_elements %[[LO]] : tensor<i64>
// CHECK: %[[SH:.*]] = dopt.sub %arg0, %[[LOT]]
// CHECK: %[[GE:.*]] = dopt.greater_equal %[[SH]]
// CHECK: %[[LT:.*]] = dopt.less %[[SH]]
// CHECK: %[[IN:.*]] = dopt.and %[[GE]], %[[LT]]
// CHECK: %[[SAFE:.*]] = dopt.where %[[IN]], %[[SH]]
// CHECK: %[[G:.*]] = dopt.gather %[[W]], %[[SAFE]] {axis = 0 : i64} : (tensor<50x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[M:.*]] = dopt.reshape %[[IN]] {shape = array<i64: 2, 4, 1>}
// CHECK: %[[Z:.*]] = dopt.where %[[M]], %[[G]]
// CHECK: %[[S:.*]] = shard.all_reduce %[[Z]] on @dopt_grid grid_axes = [2] : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
// CHECK: dopt.neg %[[S]]
