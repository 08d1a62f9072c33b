// RUN: distopt-opt %s --distopt-convert-dopt-to-linalg --split-input-file | FileCheck %s

// dopt.check_indices: a reduction to the flat position of the first index
// outside [low, high] (INT64_MAX when none) -- per row, then over the rows
// --, the pair [position, index there], and one call of the runtime's dort_index_fault on that pair's
// buffer, the shape and the message (constant globals). The gather reads
// the indices themselves, clamped.
// CHECK-DAG: memref.global "private" constant @__dopt_index_check_0_shape : memref<2xi64> = dense<[2, 3]>
// CHECK-DAG: memref.global "private" constant @__dopt_index_check_0_text : memref<{{[0-9]+}}xi8>
// CHECK-LABEL: func.func @gather(
// CHECK-SAME: %[[X:.*]]: tensor<10x4xf32>, %[[I:.*]]: tensor<2x3xi32>
// CHECK: %[[MAX:.*]] = arith.constant 9223372036854775807 : i64
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[MAX]] : i64) outs(%{{.*}} : tensor<2xi64>)
// CHECK: %[[ROWS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%[[I]] : tensor<2x3xi32>) outs(%[[INIT]] : tensor<2xi64>)
// CHECK: arith.extsi
// CHECK: arith.cmpi slt, {{.*}}, %c-10_i64
// CHECK: arith.cmpi sgt, {{.*}}, %c9_i64
// CHECK: arith.minsi
// CHECK: %[[FIRST:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} ins(%[[ROWS]] : tensor<2xi64>) outs(%{{.*}} : tensor<i64>)
// CHECK: arith.minsi
// CHECK: %[[PAIR:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]{{.*}} ins(%[[FIRST]] : tensor<i64>) outs(%{{.*}} : tensor<2xi64>)
// CHECK: tensor.extract %[[I]]
// CHECK: %[[SHAPE:.*]] = memref.get_global @__dopt_index_check_0_shape
// CHECK: %[[TEXT:.*]] = memref.get_global @__dopt_index_check_0_text
// CHECK: %[[BUF:.*]] = bufferization.to_buffer %[[PAIR]] read_only
// CHECK: call @dort_index_fault(%{{.*}}, %{{.*}}, %{{.*}}, %c-10_i64{{.*}}, %c9_i64{{.*}})
// CHECK: linalg.generic {{.*}} ins(%[[I]] : tensor<2x3xi32>)
// CHECK: func.func private @dort_index_fault(memref<?xi64, strided<[?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?xi8, strided<[?], offset: ?>>, i64, i64) attributes {llvm.emit_c_interface}
func.func @gather(%x: tensor<10x4xf32>, %i: tensor<2x3xi32>) -> tensor<2x3x4xf32> {
  %c = dopt.check_indices %i {extent = 10 : i64, what = "ONNX node 'g' (Gather): the indices"} : (tensor<2x3xi32>) -> tensor<2x3xi32>
  %0 = dopt.gather %x, %c {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

// Indices that may not be negative, with an ignore index: [0, high], the
// ignore index never out of range. No indices: nothing to check.
// CHECK-LABEL: func.func @target(
// CHECK: arith.cmpi slt, {{.*}}, %c0_i64
// CHECK: arith.cmpi sgt, {{.*}}, %c4_i64
// CHECK: arith.cmpi ne, {{.*}}, %c-100_i64
// CHECK: arith.andi
// CHECK: call @dort_index_fault
// CHECK-NOT: call @dort_index_fault
// CHECK: return
func.func @target(%t: tensor<4xi64>, %e: tensor<0xi64>) -> (tensor<4xi64>, tensor<0xi64>) {
  %0 = dopt.check_indices %t {extent = 5 : i64, negative = false, ignore = -100 : i64, what = "t"} : (tensor<4xi64>) -> tensor<4xi64>
  %1 = dopt.check_indices %e {extent = 5 : i64, what = "e"} : (tensor<0xi64>) -> tensor<0xi64>
  return %0, %1 : tensor<4xi64>, tensor<0xi64>
}
