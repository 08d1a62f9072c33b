// RUN: distopt-opt %s --distopt-expand-attention="block=4" --split-input-file | FileCheck %s
// RUN: not distopt-opt %s --distopt-expand-attention="block=0" 2>&1 | FileCheck %s --check-prefix=BLOCK

// BLOCK: distopt-expand-attention: block must be at least 1, got 0

// 10 keys in blocks of 4: a loop of two steps over [.., 6, 4] scores (the
// keys, values and the keep mask sliced at the step's offset), then a step
// over the last 2 keys; the output is the carried sum over the running sum.
// CHECK-LABEL: func.func @blocks
// CHECK-SAME: (%[[Q:.*]]: tensor<2x6x8xf32>, %[[K:.*]]: tensor<2x10x8xf32>, %[[V:.*]]: tensor<2x10x3xf32>, %[[KEEP:.*]]: tensor<6x10xi1>)
// CHECK-DAG: %[[NINF:.*]] = dopt.constant {value = dense<0xFF800000> : tensor<2x6x1xf32>}
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[LOOP:.*]]:3 = scf.for %[[I:.*]] = %{{.*}} to %[[C2]] step %{{.*}} iter_args(%[[M:.*]] = %[[NINF]], %[[L:.*]] = %{{.*}}, %[[ACC:.*]] = %{{.*}}) -> (tensor<2x6x1xf32>, tensor<2x6x1xf32>, tensor<2x6x3xf32>)
// CHECK: %[[OFF:.*]] = arith.muli %[[I]], %[[C4]]
// CHECK: tensor.extract_slice %[[K]][0, %[[OFF]], 0] [2, 4, 8] [1, 1, 1]
// CHECK: tensor.extract_slice %[[V]][0, %[[OFF]], 0] [2, 4, 3] [1, 1, 1]
// CHECK: tensor.extract_slice %[[KEEP]][0, %[[OFF]]] [6, 4] [1, 1]
// CHECK: dopt.matmul {{.*}} -> tensor<2x6x4xf32>
// CHECK: dopt.reduce_max {{.*}} -> tensor<2x6x1xf32>
// CHECK: dopt.max %[[M]]
// CHECK: dopt.exp
// CHECK: scf.yield
// CHECK: tensor.extract_slice %[[K]][0, 8, 0] [2, 2, 8] [1, 1, 1]
// CHECK: dopt.matmul {{.*}} -> tensor<2x6x2xf32>
// CHECK: %[[OUT:.*]] = dopt.div
// CHECK: return %[[OUT]]
// CHECK-NOT: dopt.attention
func.func @blocks(%q: tensor<2x6x8xf32>, %k: tensor<2x10x8xf32>, %v: tensor<2x10x3xf32>, %keep: tensor<6x10xi1>) -> tensor<2x6x3xf32> {
  %0 = dopt.attention %q, %k, %v keep %keep {scale = 0.5 : f64} : (tensor<2x6x8xf32>, tensor<2x10x8xf32>, tensor<2x10x3xf32>, tensor<6x10xi1>) -> tensor<2x6x3xf32>
  return %0 : tensor<2x6x3xf32>
}

// -----

// At most one block of keys: one step, no loop. 16-bit operands: the
// scores and statistics in f32, the probabilities cast back for the
// product with the values, the output cast to bf16.
// CHECK-LABEL: func.func @one_step_bf16
// CHECK-NOT: scf.for
// CHECK: dopt.matmul {{.*}} -> tensor<3x4xbf16>
// CHECK: dopt.cast {{.*}} {to = f32} : (tensor<3x4xbf16>) -> tensor<3x4xf32>
// CHECK: dopt.cast {{.*}} {to = bf16} : (tensor<3x4xf32>) -> tensor<3x4xbf16>
// CHECK: dopt.matmul {{.*}} : (tensor<3x4xbf16>, tensor<4x2xbf16>) -> tensor<3x2xbf16>
// CHECK: %[[D:.*]] = dopt.div {{.*}} -> tensor<3x2xf32>
// CHECK: %[[O:.*]] = dopt.cast %[[D]] {to = bf16}
// CHECK: return %[[O]]
func.func @one_step_bf16(%q: tensor<3x5xbf16>, %k: tensor<4x5xbf16>, %v: tensor<4x2xbf16>) -> tensor<3x2xbf16> {
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<3x5xbf16>, tensor<4x5xbf16>, tensor<4x2xbf16>) -> tensor<3x2xbf16>
  return %0 : tensor<3x2xbf16>
}

// -----

// empty_rows_zero: a row that summed nothing (every key masked) is 0.
// CHECK-LABEL: func.func @empty_rows
// CHECK: %[[SUM:.*]] = dopt.add {{.*}} -> tensor<3x1xf32>
// CHECK: %[[OUT:.*]] = dopt.div %{{.*}}, %[[SUM]]
// CHECK: %[[EMPTY:.*]] = dopt.equal %[[SUM]], %{{.*}}
// CHECK: %[[Z:.*]] = dopt.where %[[EMPTY]], %{{.*}}, %[[OUT]]
// CHECK: return %[[Z]]
func.func @empty_rows(%q: tensor<3x5xf32>, %k: tensor<4x5xf32>, %v: tensor<4x2xf32>, %m: tensor<3x4xf32>) -> tensor<3x2xf32> {
  %0 = dopt.attention %q, %k, %v bias %m {scale = 1.0 : f64, empty_rows_zero} : (tensor<3x5xf32>, tensor<4x5xf32>, tensor<4x2xf32>, tensor<3x4xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}
