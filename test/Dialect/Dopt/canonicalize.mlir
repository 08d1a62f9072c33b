// RUN: distopt-opt %s --canonicalize --split-input-file | FileCheck %s
// RUN: %python %S/Inputs/large_constants.py | distopt-opt --canonicalize | FileCheck %s --check-prefix=LARGE

// The dopt folders (DoptFolds.cpp) under --canonicalize: constant
// evaluation of every folding op, identity folds, and the cases that must
// not fold (runtime errors, undefined conversions, large results).
// Constants the canonicalizer materialises are hoisted to the top of the
// function. The LARGE run feeds in non-splat constants too big to write
// here (Inputs/large_constants.py).

//===----------------------------------------------------------------------===//
// The exporter's shape subgraph
//===----------------------------------------------------------------------===//

// Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1) * Gather(Shape(x), -1))))
// as PyTorch's exporter writes x.view(x.size(0), -1): the importer resolves
// the shape tensor with these folders; here it is returned so that it is
// kept, and must become one constant. The reshape of x (after an earlier
// flattening reshape) must become a single static reshape.

// CHECK-LABEL: func.func @exporter_shape_subgraph
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NOT: dopt.shape
// CHECK-NOT: dopt.gather
// CHECK-NOT: dopt.concat
// CHECK: %[[SHAPE:.*]] = dopt.constant {value = dense<[2, 12]> : tensor<2xi64>} : () -> tensor<2xi64>
// CHECK-NOT: dopt.shape
// CHECK-NOT: dopt.gather
// CHECK-NOT: dopt.concat
// CHECK: %[[R:.*]] = dopt.reshape %[[X]] {shape = array<i64: 2, 12>} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
// CHECK-NOT: dopt.
// CHECK: return %[[R]], %[[SHAPE]]
func.func @exporter_shape_subgraph(%x: tensor<2x3x4xf32>) -> (tensor<2x12xf32>, tensor<2xi64>) {
  %s = dopt.shape %x {start = 0 : i64, end = 3 : i64} : (tensor<2x3x4xf32>) -> tensor<3xi64>
  %i0 = dopt.constant {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %i1 = dopt.constant {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %im1 = dopt.constant {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %d0 = dopt.gather %s, %i0 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %d1 = dopt.gather %s, %i1 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %d2 = dopt.gather %s, %im1 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %p = dopt.mul %d1, %d2 : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %u0 = dopt.reshape %d0 {shape = array<i64: 1>} : (tensor<i64>) -> tensor<1xi64>
  %u1 = dopt.reshape %p {shape = array<i64: 1>} : (tensor<i64>) -> tensor<1xi64>
  %cat = dopt.concat %u0, %u1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %flat = dopt.reshape %x {shape = array<i64: 24>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %r = dopt.reshape %flat {shape = array<i64: 2, 12>} : (tensor<24xf32>) -> tensor<2x12xf32>
  return %r, %cat : tensor<2x12xf32>, tensor<2xi64>
}

// -----

// Where(Equal(shape, -1), Shape(x), shape): the exporter's resolution of -1
// entries, with a slice of the shape and a cast of it to f32.

// CHECK-LABEL: func.func @exporter_where_equal
// CHECK-NEXT: %[[A:.*]] = dopt.constant {value = dense<[4, 5, 6]> : tensor<3xi64>} : () -> tensor<3xi64>
// CHECK-NEXT: %[[B:.*]] = dopt.constant {value = dense<[5.000000e+00, 6.000000e+00]> : tensor<2xf32>} : () -> tensor<2xf32>
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @exporter_where_equal(%x: tensor<4x5x6xf16>) -> (tensor<3xi64>, tensor<2xf32>) {
  %t = dopt.constant {value = dense<[4, -1, 6]> : tensor<3xi64>} : () -> tensor<3xi64>
  %m1 = dopt.constant {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %eq = dopt.equal %t, %m1 : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %s = dopt.shape %x {start = 0 : i64, end = 3 : i64} : (tensor<4x5x6xf16>) -> tensor<3xi64>
  %w = dopt.where %eq, %s, %t : (tensor<3xi1>, tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %tail = dopt.slice %w {starts = array<i64: 1>, ends = array<i64: 3>, steps = array<i64: 1>} : (tensor<3xi64>) -> tensor<2xi64>
  %f = dopt.cast %tail {to = f32} : (tensor<2xi64>) -> tensor<2xf32>
  return %w, %f : tensor<3xi64>, tensor<2xf32>
}

//===----------------------------------------------------------------------===//
// Binary arithmetic
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @int_arith
// CHECK-DAG: %[[ADD:.*]] = dopt.constant {value = dense<{{\[}}[11, 22, 33], [14, 25, 36]]> : tensor<2x3xi64>}
// CHECK-DAG: %[[SUB:.*]] = dopt.constant {value = dense<{{\[}}[9, 18, 27], [6, 15, 24]]> : tensor<2x3xi64>}
// CHECK-DAG: %[[MUL:.*]] = dopt.constant {value = dense<{{\[}}[10, 40, 90], [40, 100, 180]]> : tensor<2x3xi64>}
// Integer division truncates toward zero.
// CHECK-DAG: %[[DIV:.*]] = dopt.constant {value = dense<[-3, 3, 3, -3]> : tensor<4xi64>}
// CHECK-DAG: %[[MAX:.*]] = dopt.constant {value = dense<{{\[}}[3, 3, 3], [5, 5, 6]]> : tensor<2x3xi64>}
// CHECK-DAG: %[[MIN:.*]] = dopt.constant {value = dense<{{\[}}[1, 2, 3], [4, 5, 5]]> : tensor<2x3xi64>}
// CHECK: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MAX]], %[[MIN]]
func.func @int_arith() -> (tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<4xi64>, tensor<2x3xi64>, tensor<2x3xi64>) {
  %a = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %b = dopt.constant {value = dense<[10, 20, 30]> : tensor<3xi64>} : () -> tensor<3xi64>
  %0 = dopt.add %a, %b : (tensor<2x3xi64>, tensor<3xi64>) -> tensor<2x3xi64>
  %1 = dopt.sub %b, %a : (tensor<3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  %2 = dopt.mul %a, %b : (tensor<2x3xi64>, tensor<3xi64>) -> tensor<2x3xi64>
  %n = dopt.constant {value = dense<[-7, 7, -7, 7]> : tensor<4xi64>} : () -> tensor<4xi64>
  %d = dopt.constant {value = dense<[2, 2, -2, -2]> : tensor<4xi64>} : () -> tensor<4xi64>
  %3 = dopt.div %n, %d : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %c = dopt.constant {value = dense<[[3], [5]]> : tensor<2x1xi64>} : () -> tensor<2x1xi64>
  %4 = dopt.max %a, %c : (tensor<2x3xi64>, tensor<2x1xi64>) -> tensor<2x3xi64>
  %5 = dopt.min %c, %a : (tensor<2x1xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<4xi64>, tensor<2x3xi64>, tensor<2x3xi64>
}

// -----

// Integer results wrap at the element width, as the hardware does.

// CHECK-LABEL: func.func @int_wrap
// CHECK-DAG: %[[I8:.*]] = dopt.constant {value = dense<[-128, 126]> : tensor<2xi8>}
// CHECK-DAG: %[[U8:.*]] = dopt.constant {value = dense<[254, 0]> : tensor<2xui8>}
// CHECK-DAG: %[[I64:.*]] = dopt.constant {value = dense<-9223372036854775808> : tensor<i64>}
// CHECK-DAG: %[[MUL:.*]] = dopt.constant {value = dense<0> : tensor<i64>}
// CHECK-DAG: %[[I32:.*]] = dopt.constant {value = dense<-2147483648> : tensor<i32>}
// CHECK: return %[[I8]], %[[U8]], %[[I64]], %[[MUL]], %[[I32]]
func.func @int_wrap() -> (tensor<2xi8>, tensor<2xui8>, tensor<i64>, tensor<i64>, tensor<i32>) {
  %a = dopt.constant {value = dense<[127, -1]> : tensor<2xi8>} : () -> tensor<2xi8>
  %b = dopt.constant {value = dense<[1, 127]> : tensor<2xi8>} : () -> tensor<2xi8>
  %0 = dopt.add %a, %b : (tensor<2xi8>, tensor<2xi8>) -> tensor<2xi8>
  %c = dopt.constant {value = dense<[3, 255]> : tensor<2xui8>} : () -> tensor<2xui8>
  %d = dopt.constant {value = dense<[5, 255]> : tensor<2xui8>} : () -> tensor<2xui8>
  %1 = dopt.sub %c, %d : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %max = dopt.constant {value = dense<9223372036854775807> : tensor<i64>} : () -> tensor<i64>
  %one = dopt.constant {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %2 = dopt.add %max, %one : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %big = dopt.constant {value = dense<4294967296> : tensor<i64>} : () -> tensor<i64>
  %3 = dopt.mul %big, %big : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %min32 = dopt.constant {value = dense<-2147483648> : tensor<i32>} : () -> tensor<i32>
  %4 = dopt.neg %min32 : (tensor<i32>) -> tensor<i32>
  return %0, %1, %2, %3, %4 : tensor<2xi8>, tensor<2xui8>, tensor<i64>, tensor<i64>, tensor<i32>
}

// -----

// Division by zero and the one overflowing division are runtime matters.

// CHECK-LABEL: func.func @int_div_no_fold
// CHECK: %[[A:.*]] = dopt.div
// CHECK: %[[B:.*]] = dopt.div
// CHECK: %[[C:.*]] = dopt.div
// CHECK: return %[[A]], %[[B]], %[[C]]
func.func @int_div_no_fold() -> (tensor<2xi32>, tensor<i64>, tensor<i8>) {
  %a = dopt.constant {value = dense<[6, 7]> : tensor<2xi32>} : () -> tensor<2xi32>
  %z = dopt.constant {value = dense<[2, 0]> : tensor<2xi32>} : () -> tensor<2xi32>
  %0 = dopt.div %a, %z : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  %min = dopt.constant {value = dense<-9223372036854775808> : tensor<i64>} : () -> tensor<i64>
  %m1 = dopt.constant {value = dense<-1> : tensor<i64>} : () -> tensor<i64>
  %1 = dopt.div %min, %m1 : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %min8 = dopt.constant {value = dense<-128> : tensor<i8>} : () -> tensor<i8>
  %m18 = dopt.constant {value = dense<-1> : tensor<i8>} : () -> tensor<i8>
  %2 = dopt.div %min8, %m18 : (tensor<i8>, tensor<i8>) -> tensor<i8>
  return %0, %1, %2 : tensor<2xi32>, tensor<i64>, tensor<i8>
}

// -----

// Unsigned values are not sign-extended: 200 / 2 = 100, max(200, 2) = 200,
// 1 < 200.

// CHECK-LABEL: func.func @unsigned
// CHECK-DAG: %[[DIV:.*]] = dopt.constant {value = dense<[100, 0]> : tensor<2xui8>}
// CHECK-DAG: %[[MAX:.*]] = dopt.constant {value = dense<[200, 255]> : tensor<2xui8>}
// CHECK-DAG: %[[LT:.*]] = dopt.constant {value = dense<[true, false]> : tensor<2xi1>}
// CHECK: return %[[DIV]], %[[MAX]], %[[LT]]
func.func @unsigned() -> (tensor<2xui8>, tensor<2xui8>, tensor<2xi1>) {
  %a = dopt.constant {value = dense<[200, 1]> : tensor<2xui8>} : () -> tensor<2xui8>
  %b = dopt.constant {value = dense<[2, 255]> : tensor<2xui8>} : () -> tensor<2xui8>
  %0 = dopt.div %a, %b : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %1 = dopt.max %a, %b : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %c = dopt.constant {value = dense<1> : tensor<ui8>} : () -> tensor<ui8>
  %2 = dopt.less %c, %a : (tensor<ui8>, tensor<2xui8>) -> tensor<2xi1>
  return %0, %1, %2 : tensor<2xui8>, tensor<2xui8>, tensor<2xi1>
}

// -----

// CHECK-LABEL: func.func @float_arith
// CHECK-DAG: %[[ADD:.*]] = dopt.constant {value = dense<[1.500000e+00, -2.500000e-01]> : tensor<2xf32>}
// CHECK-DAG: %[[SUB:.*]] = dopt.constant {value = dense<[-5.000000e-01, 1.750000e+00]> : tensor<2xf32>}
// CHECK-DAG: %[[MUL:.*]] = dopt.constant {value = dense<[5.000000e-01, -7.500000e-01]> : tensor<2xf32>}
// Float division by zero is IEEE: +-inf.
// CHECK-DAG: %[[DIV:.*]] = dopt.constant {value = dense<[0x7F800000, 0xFF800000]> : tensor<2xf32>}
// CHECK-DAG: %[[MAX:.*]] = dopt.constant {value = dense<[1.000000e+00, 7.500000e-01]> : tensor<2xf64>}
// CHECK-DAG: %[[MIN:.*]] = dopt.constant {value = dense<[5.000000e-01, -1.000000e+00]> : tensor<2xf64>}
// CHECK: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MAX]], %[[MIN]]
func.func @float_arith() -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf64>, tensor<2xf64>) {
  %a = dopt.constant {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %b = dopt.constant {value = dense<[0.5, 0.75]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = dopt.sub %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %2 = dopt.mul %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = dopt.constant {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %3 = dopt.div %a, %z : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  %c = dopt.constant {value = dense<[1.0, -1.0]> : tensor<2xf64>} : () -> tensor<2xf64>
  %d = dopt.constant {value = dense<[0.5, 0.75]> : tensor<2xf64>} : () -> tensor<2xf64>
  %4 = dopt.max %c, %d : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  %5 = dopt.min %c, %d : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  return %0, %1, %2, %3, %4, %5 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf64>, tensor<2xf64>
}

// -----

// f16 and bf16 results are rounded to their type after each op:
// 2048 + 1 = 2048 in f16 (spacing 2 there), 256 + 1 = 256 in bf16.

// CHECK-LABEL: func.func @half_precision
// CHECK-DAG: %[[H:.*]] = dopt.constant {value = dense<[2.048000e+03, 1.000980e+00, 1.750000e+00]> : tensor<3xf16>}
// CHECK-DAG: %[[HM:.*]] = dopt.constant {value = dense<[3.072000e+03, 9.765620e-04, 3.750000e-01]> : tensor<3xf16>}
// CHECK-DAG: %[[HD:.*]] = dopt.constant {value = dense<[2.048000e+03, 1.024000e+03, 6.000000e+00]> : tensor<3xf16>}
// CHECK-DAG: %[[B:.*]] = dopt.constant {value = dense<[2.560000e+02, 4.000000e+00]> : tensor<2xbf16>}
// CHECK-DAG: %[[BN:.*]] = dopt.constant {value = dense<[-2.560000e+02, -3.000000e+00]> : tensor<2xbf16>}
// CHECK-DAG: %[[HEQ:.*]] = dopt.constant {value = dense<[true, false, false]> : tensor<3xi1>}
// CHECK: return %[[H]], %[[HM]], %[[HD]], %[[B]], %[[BN]], %[[HEQ]]
func.func @half_precision() -> (tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<2xbf16>, tensor<2xbf16>, tensor<3xi1>) {
  %a = dopt.constant {value = dense<[2048.0, 1.0, 1.5]> : tensor<3xf16>} : () -> tensor<3xf16>
  %b = dopt.constant {value = dense<[1.0, 0.0009765625, 0.25]> : tensor<3xf16>} : () -> tensor<3xf16>
  %0 = dopt.add %a, %b : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xf16>
  %c = dopt.constant {value = dense<[1.5, 0.0009765625, 0.25]> : tensor<3xf16>} : () -> tensor<3xf16>
  %1 = dopt.mul %a, %c : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xf16>
  %d = dopt.constant {value = dense<[1.0, 0.0009765625, 0.25]> : tensor<3xf16>} : () -> tensor<3xf16>
  %2 = dopt.div %a, %d : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xf16>
  %e = dopt.constant {value = dense<[256.0, 3.0]> : tensor<2xbf16>} : () -> tensor<2xbf16>
  %one = dopt.constant {value = dense<1.0> : tensor<bf16>} : () -> tensor<bf16>
  %3 = dopt.add %e, %one : (tensor<2xbf16>, tensor<bf16>) -> tensor<2xbf16>
  %4 = dopt.neg %e : (tensor<2xbf16>) -> tensor<2xbf16>
  // Compared after rounding: 2048 + 1 == 2048.
  %5 = dopt.equal %0, %a : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xi1>
  return %0, %1, %2, %3, %4, %5 : tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<2xbf16>, tensor<2xbf16>, tensor<3xi1>
}

// -----

// Operands that are not (both) constants are left alone; commutative ops get
// their constant operand on the right.

// CHECK-LABEL: func.func @no_fold_non_constant
// CHECK-SAME: (%[[X:.*]]: tensor<2xf32>)
// CHECK: %[[C:.*]] = dopt.constant {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}
// CHECK: %[[A:.*]] = dopt.add %[[X]], %[[C]] : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK: %[[S:.*]] = dopt.sub %[[C]], %[[X]] : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK: return %[[A]], %[[S]]
func.func @no_fold_non_constant(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c = dopt.constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.add %c, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = dopt.sub %c, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// dense_resource constants (inlined weights) are not read by the folders.

// CHECK-LABEL: func.func @no_fold_resource
// CHECK: %[[C:.*]] = dopt.constant {value = dense_resource<blob> : tensor<2xf32>}
// CHECK: %[[A:.*]] = dopt.add %[[C]], %[[C]]
// CHECK: return %[[A]]
func.func @no_fold_resource() -> tensor<2xf32> {
  %c = dopt.constant {value = dense_resource<blob> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.add %c, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

{-#
  dialect_resources: {
    builtin: {
      blob: "0x040000000000803F00000040"
    }
  }
#-}

// -----

// A result over 65536 elements is not materialised, even from small or
// splat operands.

// CHECK-LABEL: func.func @no_fold_large_result
// CHECK: dopt.add {{.*}} -> tensor<2x40000xi64>
// CHECK: dopt.expand {{.*}} -> tensor<40000x2xi64>
// CHECK: dopt.gather {{.*}} -> tensor<70000xi64>
func.func @no_fold_large_result() -> (tensor<2x40000xi64>, tensor<40000x2xi64>, tensor<70000xi64>) {
  %a = dopt.constant {value = dense<[[1], [2]]> : tensor<2x1xi64>} : () -> tensor<2x1xi64>
  %b = dopt.constant {value = dense<1> : tensor<1x40000xi64>} : () -> tensor<1x40000xi64>
  %0 = dopt.add %a, %b : (tensor<2x1xi64>, tensor<1x40000xi64>) -> tensor<2x40000xi64>
  %c = dopt.constant {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %1 = dopt.expand %c {shape = array<i64: 40000, 1>} : (tensor<2xi64>) -> tensor<40000x2xi64>
  %i = dopt.constant {value = dense<1> : tensor<70000xi64>} : () -> tensor<70000xi64>
  %2 = dopt.gather %c, %i {axis = 0 : i64} : (tensor<2xi64>, tensor<70000xi64>) -> tensor<70000xi64>
  return %0, %1, %2 : tensor<2x40000xi64>, tensor<40000x2xi64>, tensor<70000xi64>
}

//===----------------------------------------------------------------------===//
// Comparisons and logic
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @compare
// CHECK-DAG: %[[EQ:.*]] = dopt.constant {value = dense<[false, true, false]> : tensor<3xi1>}
// CHECK-DAG: %[[LT:.*]] = dopt.constant {value = dense<[true, false, false]> : tensor<3xi1>}
// CHECK-DAG: %[[LE:.*]] = dopt.constant {value = dense<[true, true, false]> : tensor<3xi1>}
// CHECK-DAG: %[[GT:.*]] = dopt.constant {value = dense<[false, false, true]> : tensor<3xi1>}
// CHECK-DAG: %[[GE:.*]] = dopt.constant {value = dense<{{\[}}[false, true, true], [true, true, true]]> : tensor<2x3xi1>}
// CHECK-DAG: %[[FEQ:.*]] = dopt.constant {value = dense<[true, false]> : tensor<2xi1>}
// CHECK: return %[[EQ]], %[[LT]], %[[LE]], %[[GT]], %[[GE]], %[[FEQ]]
func.func @compare() -> (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<2x3xi1>, tensor<2xi1>) {
  %a = dopt.constant {value = dense<[1, 2, 3]> : tensor<3xi32>} : () -> tensor<3xi32>
  %two = dopt.constant {value = dense<2> : tensor<i32>} : () -> tensor<i32>
  %0 = dopt.equal %a, %two : (tensor<3xi32>, tensor<i32>) -> tensor<3xi1>
  %1 = dopt.less %a, %two : (tensor<3xi32>, tensor<i32>) -> tensor<3xi1>
  %2 = dopt.less_equal %a, %two : (tensor<3xi32>, tensor<i32>) -> tensor<3xi1>
  %3 = dopt.greater %a, %two : (tensor<3xi32>, tensor<i32>) -> tensor<3xi1>
  %col = dopt.constant {value = dense<[[2], [1]]> : tensor<2x1xi32>} : () -> tensor<2x1xi32>
  %4 = dopt.greater_equal %a, %col : (tensor<3xi32>, tensor<2x1xi32>) -> tensor<2x3xi1>
  %f = dopt.constant {value = dense<[0.5, -0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = dopt.constant {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %5 = dopt.equal %f, %g : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
  return %0, %1, %2, %3, %4, %5 : tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<2x3xi1>, tensor<2xi1>
}

// -----

// CHECK-LABEL: func.func @logic
// CHECK-DAG: %[[AND:.*]] = dopt.constant {value = dense<{{\[}}[true, false], [false, false]]> : tensor<2x2xi1>}
// CHECK-DAG: %[[OR:.*]] = dopt.constant {value = dense<{{\[}}[true, true], [true, false]]> : tensor<2x2xi1>}
// CHECK-DAG: %[[EQ:.*]] = dopt.constant {value = dense<{{\[}}[true, false], [false, true]]> : tensor<2x2xi1>}
// CHECK: return %[[AND]], %[[OR]], %[[EQ]]
func.func @logic() -> (tensor<2x2xi1>, tensor<2x2xi1>, tensor<2x2xi1>) {
  %a = dopt.constant {value = dense<[[true], [false]]> : tensor<2x1xi1>} : () -> tensor<2x1xi1>
  %b = dopt.constant {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %0 = dopt.and %a, %b : (tensor<2x1xi1>, tensor<2xi1>) -> tensor<2x2xi1>
  %1 = dopt.or %a, %b : (tensor<2x1xi1>, tensor<2xi1>) -> tensor<2x2xi1>
  %2 = dopt.equal %a, %b : (tensor<2x1xi1>, tensor<2xi1>) -> tensor<2x2xi1>
  return %0, %1, %2 : tensor<2x2xi1>, tensor<2x2xi1>, tensor<2x2xi1>
}

// -----

// Bitwise on integers: the bits of the values, unsigned ones too (0xF0 =
// 240 as ui8); not of i8 is ~x, of i1 logical; xor and not of booleans
// (both [false, true], one constant).
// CHECK-LABEL: func.func @bitwise
// CHECK-DAG: %[[AND:.*]] = dopt.constant {value = dense<[16, 0]> : tensor<2xui8>}
// CHECK-DAG: %[[OR:.*]] = dopt.constant {value = dense<[255, 15]> : tensor<2xui8>}
// CHECK-DAG: %[[XOR:.*]] = dopt.constant {value = dense<[239, 15]> : tensor<2xui8>}
// CHECK-DAG: %[[NOT:.*]] = dopt.constant {value = dense<[-6, 0]> : tensor<2xi8>}
// CHECK-DAG: %[[B:.*]] = dopt.constant {value = dense<[false, true]> : tensor<2xi1>}
// CHECK: return %[[AND]], %[[OR]], %[[XOR]], %[[NOT]], %[[B]], %[[B]]
func.func @bitwise() -> (tensor<2xui8>, tensor<2xui8>, tensor<2xui8>, tensor<2xi8>, tensor<2xi1>, tensor<2xi1>) {
  %a = dopt.constant {value = dense<[240, 0]> : tensor<2xui8>} : () -> tensor<2xui8>
  %b = dopt.constant {value = dense<[31, 15]> : tensor<2xui8>} : () -> tensor<2xui8>
  %0 = dopt.and %a, %b : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %1 = dopt.or %a, %b : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %2 = dopt.xor %a, %b : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xui8>
  %c = dopt.constant {value = dense<[5, -1]> : tensor<2xi8>} : () -> tensor<2xi8>
  %3 = dopt.not %c : (tensor<2xi8>) -> tensor<2xi8>
  %t = dopt.constant {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %u = dopt.constant {value = dense<true> : tensor<i1>} : () -> tensor<i1>
  %4 = dopt.xor %t, %u : (tensor<2xi1>, tensor<i1>) -> tensor<2xi1>
  %5 = dopt.not %t : (tensor<2xi1>) -> tensor<2xi1>
  return %0, %1, %2, %3, %4, %5 : tensor<2xui8>, tensor<2xui8>, tensor<2xui8>, tensor<2xi8>, tensor<2xi1>, tensor<2xi1>
}

// -----

// Bitcast folds to the same bits (1.0f is 0x3F800000; -2 as ui8 is 254); a
// boolean's byte is 0 or 1, and a byte other than 0 reads as true. A
// bitcast to its own type is its input.
// CHECK-LABEL: func.func @bitcast
// CHECK-DAG: %[[F:.*]] = dopt.constant {value = dense<[1065353216, 0]> : tensor<2xi32>}
// CHECK-DAG: %[[U:.*]] = dopt.constant {value = dense<[254, 3]> : tensor<2xui8>}
// CHECK-DAG: %[[B:.*]] = dopt.constant {value = dense<[1, 0]> : tensor<2xui8>}
// CHECK-DAG: %[[T:.*]] = dopt.constant {value = dense<[true, false, true]> : tensor<3xi1>}
// CHECK: return %[[F]], %[[U]], %[[B]], %[[T]], %arg0
func.func @bitcast(%arg0: tensor<2xf32>) -> (tensor<2xi32>, tensor<2xui8>, tensor<2xui8>, tensor<3xi1>, tensor<2xf32>) {
  %f = dopt.constant {value = dense<[1.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.bitcast %f {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %i = dopt.constant {value = dense<[-2, 3]> : tensor<2xi8>} : () -> tensor<2xi8>
  %1 = dopt.bitcast %i {to = ui8} : (tensor<2xi8>) -> tensor<2xui8>
  %t = dopt.constant {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %2 = dopt.bitcast %t {to = ui8} : (tensor<2xi1>) -> tensor<2xui8>
  %u = dopt.constant {value = dense<[7, 0, 1]> : tensor<3xui8>} : () -> tensor<3xui8>
  %3 = dopt.bitcast %u {to = i1} : (tensor<3xui8>) -> tensor<3xi1>
  %4 = dopt.bitcast %arg0 {to = f32} : (tensor<2xf32>) -> tensor<2xf32>
  return %0, %1, %2, %3, %4 : tensor<2xi32>, tensor<2xui8>, tensor<2xui8>, tensor<3xi1>, tensor<2xf32>
}

//===----------------------------------------------------------------------===//
// Unary, where, cast
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @neg
// CHECK-DAG: %[[I:.*]] = dopt.constant {value = dense<[-1, 0, 127, -128]> : tensor<4xi8>}
// CHECK-DAG: %[[F:.*]] = dopt.constant {value = dense<[-1.500000e+00, -0.000000e+00]> : tensor<2xf32>}
// CHECK-DAG: %[[L:.*]] = dopt.constant {value = dense<-9223372036854775808> : tensor<i64>}
// CHECK: return %[[I]], %[[F]], %[[L]]
func.func @neg() -> (tensor<4xi8>, tensor<2xf32>, tensor<i64>) {
  %a = dopt.constant {value = dense<[1, 0, -127, -128]> : tensor<4xi8>} : () -> tensor<4xi8>
  %0 = dopt.neg %a : (tensor<4xi8>) -> tensor<4xi8>
  %b = dopt.constant {value = dense<[1.5, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %1 = dopt.neg %b : (tensor<2xf32>) -> tensor<2xf32>
  %c = dopt.constant {value = dense<-9223372036854775808> : tensor<i64>} : () -> tensor<i64>
  %2 = dopt.neg %c : (tensor<i64>) -> tensor<i64>
  return %0, %1, %2 : tensor<4xi8>, tensor<2xf32>, tensor<i64>
}

// -----

// CHECK-LABEL: func.func @where
// CHECK-SAME: (%[[C:.*]]: tensor<3xi1>, %[[X:.*]]: tensor<3xf32>, %[[Y:.*]]: tensor<3xf32>)
// CHECK-DAG: %[[W0:.*]] = dopt.constant {value = dense<{{\[}}[1, 20, 3], [10, 20, 30]]> : tensor<2x3xi64>}
// CHECK-DAG: %[[W1:.*]] = dopt.constant {value = dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf16>}
// Same value on both sides: the condition does not matter.
// CHECK-DAG: %[[W3:.*]] = dopt.where %[[C]], %[[X]], %[[Y]]
// CHECK: return %[[W0]], %[[W1]], %[[X]], %[[W3]]
func.func @where(%c: tensor<3xi1>, %x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xi64>, tensor<2xf16>, tensor<3xf32>, tensor<3xf32>) {
  %cond = dopt.constant {value = dense<[[true, false, true], [false, false, false]]> : tensor<2x3xi1>} : () -> tensor<2x3xi1>
  %a = dopt.constant {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
  %b = dopt.constant {value = dense<[[10, 20, 30]]> : tensor<1x3xi64>} : () -> tensor<1x3xi64>
  %0 = dopt.where %cond, %a, %b : (tensor<2x3xi1>, tensor<3xi64>, tensor<1x3xi64>) -> tensor<2x3xi64>
  %t = dopt.constant {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %one = dopt.constant {value = dense<1.0> : tensor<f16>} : () -> tensor<f16>
  %zero = dopt.constant {value = dense<0.0> : tensor<f16>} : () -> tensor<f16>
  %1 = dopt.where %t, %one, %zero : (tensor<2xi1>, tensor<f16>, tensor<f16>) -> tensor<2xf16>
  %2 = dopt.where %c, %x, %x : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  // A non-constant condition with different values: no fold.
  %3 = dopt.where %c, %x, %y : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0, %1, %2, %3 : tensor<2x3xi64>, tensor<2xf16>, tensor<3xf32>, tensor<3xf32>
}

// -----

// Same values, but the condition broadcasts them to a larger shape: no fold.

// CHECK-LABEL: func.func @where_broadcast_same_value
// CHECK: %[[W:.*]] = dopt.where
// CHECK: return %[[W]]
func.func @where_broadcast_same_value(%c: tensor<2x3xi1>, %x: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = dopt.where %c, %x, %x : (tensor<2x3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @cast
// CHECK-SAME: (%[[X:.*]]: tensor<3xf32>)
// Float -> int truncates toward zero.
// CHECK-DAG: %[[C0:.*]] = dopt.constant {value = dense<[2, -2, 0, 0]> : tensor<4xi32>}
// CHECK-DAG: %[[C1:.*]] = dopt.constant {value = dense<[255, 0, 0]> : tensor<3xui8>}
// Int -> narrower int wraps.
// CHECK-DAG: %[[C2:.*]] = dopt.constant {value = dense<[44, 127]> : tensor<2xi8>}
// CHECK-DAG: %[[C3:.*]] = dopt.constant {value = dense<[true, false, true]> : tensor<3xi1>}
// CHECK-DAG: %[[C4:.*]] = dopt.constant {value = dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf32>}
// CHECK-DAG: %[[C5:.*]] = dopt.constant {value = dense<[false, true, true]> : tensor<3xi1>}
// f32 -> f16 rounds to nearest even; 1e5 overflows to inf.
// CHECK-DAG: %[[C6:.*]] = dopt.constant {value = dense<[1.000000e+00, 2.048000e+03, 0x7C00]> : tensor<3xf16>}
// CHECK-DAG: %[[C7:.*]] = dopt.constant {value = dense<[200, 255]> : tensor<2xi64>}
// CHECK: return %[[C0]], %[[C1]], %[[C2]], %[[C3]], %[[C4]], %[[C5]], %[[C6]], %[[C7]], %[[X]]
func.func @cast(%x: tensor<3xf32>) -> (tensor<4xi32>, tensor<3xui8>, tensor<2xi8>, tensor<3xi1>, tensor<2xf32>, tensor<3xi1>, tensor<3xf16>, tensor<2xi64>, tensor<3xf32>) {
  %a = dopt.constant {value = dense<[2.7, -2.7, 0.5, -0.5]> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = dopt.cast %a {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %b = dopt.constant {value = dense<[255.9, 0.0, -0.9]> : tensor<3xf64>} : () -> tensor<3xf64>
  %1 = dopt.cast %b {to = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  %c = dopt.constant {value = dense<[300, 127]> : tensor<2xi64>} : () -> tensor<2xi64>
  %2 = dopt.cast %c {to = i8} : (tensor<2xi64>) -> tensor<2xi8>
  %d = dopt.constant {value = dense<[-3, 0, 7]> : tensor<3xi32>} : () -> tensor<3xi32>
  %3 = dopt.cast %d {to = i1} : (tensor<3xi32>) -> tensor<3xi1>
  %e = dopt.constant {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
  %4 = dopt.cast %e {to = f32} : (tensor<2xi1>) -> tensor<2xf32>
  %f = dopt.constant {value = dense<[0.0, 0.25, -2.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %5 = dopt.cast %f {to = i1} : (tensor<3xf32>) -> tensor<3xi1>
  %g = dopt.constant {value = dense<[1.0, 2049.0, 1.0e5]> : tensor<3xf32>} : () -> tensor<3xf32>
  %6 = dopt.cast %g {to = f16} : (tensor<3xf32>) -> tensor<3xf16>
  // ui8 -> i64 zero-extends.
  %h = dopt.constant {value = dense<[200, 255]> : tensor<2xui8>} : () -> tensor<2xui8>
  %7 = dopt.cast %h {to = i64} : (tensor<2xui8>) -> tensor<2xi64>
  // A cast to the operand's own type is the operand.
  %8 = dopt.cast %x {to = f32} : (tensor<3xf32>) -> tensor<3xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<4xi32>, tensor<3xui8>, tensor<2xi8>, tensor<3xi1>, tensor<2xf32>, tensor<3xi1>, tensor<3xf16>, tensor<2xi64>, tensor<3xf32>
}

// -----

// Float -> int of a value the target cannot hold is undefined (ONNX): left
// for the runtime, whole tensor unfolded.

// CHECK-LABEL: func.func @cast_out_of_range
// CHECK-COUNT-6: dopt.cast
// CHECK: return
func.func @cast_out_of_range() -> (tensor<i32>, tensor<2xui8>, tensor<2xui8>, tensor<i8>, tensor<i64>, tensor<i64>) {
  %a = dopt.constant {value = dense<3.0e9> : tensor<f32>} : () -> tensor<f32>
  %0 = dopt.cast %a {to = i32} : (tensor<f32>) -> tensor<i32>
  %b = dopt.constant {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %1 = dopt.cast %b {to = ui8} : (tensor<2xf32>) -> tensor<2xui8>
  %c = dopt.constant {value = dense<[1.0, 256.0]> : tensor<2xf16>} : () -> tensor<2xf16>
  %2 = dopt.cast %c {to = ui8} : (tensor<2xf16>) -> tensor<2xui8>
  %d = dopt.constant {value = dense<-129.0> : tensor<bf16>} : () -> tensor<bf16>
  %3 = dopt.cast %d {to = i8} : (tensor<bf16>) -> tensor<i8>
  %e = dopt.constant {value = dense<9.3e18> : tensor<f64>} : () -> tensor<f64>
  %4 = dopt.cast %e {to = i64} : (tensor<f64>) -> tensor<i64>
  %f = dopt.constant {value = dense<0x7FC00000> : tensor<f32>} : () -> tensor<f32>
  %5 = dopt.cast %f {to = i64} : (tensor<f32>) -> tensor<i64>
  return %0, %1, %2, %3, %4, %5 : tensor<i32>, tensor<2xui8>, tensor<2xui8>, tensor<i8>, tensor<i64>, tensor<i64>
}

// -----

// The edges of the ranges do fold: -128.9 -> -128 (i8), -2^63 (i64).

// CHECK-LABEL: func.func @cast_range_edges
// CHECK-DAG: %[[A:.*]] = dopt.constant {value = dense<[-128, 127]> : tensor<2xi8>}
// CHECK-DAG: %[[B:.*]] = dopt.constant {value = dense<-9223372036854775808> : tensor<i64>}
// CHECK: return %[[A]], %[[B]]
func.func @cast_range_edges() -> (tensor<2xi8>, tensor<i64>) {
  %a = dopt.constant {value = dense<[-128.9, 127.9]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.cast %a {to = i8} : (tensor<2xf32>) -> tensor<2xi8>
  %b = dopt.constant {value = dense<-9223372036854775808.0> : tensor<f64>} : () -> tensor<f64>
  %1 = dopt.cast %b {to = i64} : (tensor<f64>) -> tensor<i64>
  return %0, %1 : tensor<2xi8>, tensor<i64>
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @reshape
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-DAG: %[[C:.*]] = dopt.constant {value = dense<{{\[}}[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi64>}
// CHECK-DAG: %[[R:.*]] = dopt.reshape %[[X]] {shape = array<i64: 6>} : (tensor<2x3xf32>) -> tensor<6xf32>
// CHECK-DAG: %[[S:.*]] = dopt.constant {value = dense<7> : tensor<1000x1000xi32>}
// CHECK: return %[[X]], %[[C]], %[[R]], %[[X]], %[[S]]
func.func @reshape(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xi64>, tensor<6xf32>, tensor<2x3xf32>, tensor<1000x1000xi32>) {
  // To the same shape: the input.
  %0 = dopt.reshape %x {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %1 = dopt.reshape %c {shape = array<i64: 3, 2>} : (tensor<2x3xi64>) -> tensor<3x2xi64>
  // Reshape of reshape: one reshape.
  %r0 = dopt.reshape %x {shape = array<i64: 3, 1, 2>} : (tensor<2x3xf32>) -> tensor<3x1x2xf32>
  %r1 = dopt.reshape %r0 {shape = array<i64: 1, 6>} : (tensor<3x1x2xf32>) -> tensor<1x6xf32>
  %2 = dopt.reshape %r1 {shape = array<i64: 6>} : (tensor<1x6xf32>) -> tensor<6xf32>
  // ... and back to the original shape: nothing.
  %r2 = dopt.reshape %x {shape = array<i64: 6, 1>} : (tensor<2x3xf32>) -> tensor<6x1xf32>
  %3 = dopt.reshape %r2 {shape = array<i64: 2, 3>} : (tensor<6x1xf32>) -> tensor<2x3xf32>
  // A splat costs nothing to reshape, however large.
  %s = dopt.constant {value = dense<7> : tensor<1000000xi32>} : () -> tensor<1000000xi32>
  %4 = dopt.reshape %s {shape = array<i64: 1000, 1000>} : (tensor<1000000xi32>) -> tensor<1000x1000xi32>
  return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<3x2xi64>, tensor<6xf32>, tensor<2x3xf32>, tensor<1000x1000xi32>
}

// -----

// CHECK-LABEL: func.func @transpose
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-DAG: %[[C2:.*]] = dopt.constant {value = dense<{{\[}}[1, 4], [2, 5], [3, 6]]> : tensor<3x2xi64>}
// CHECK-DAG: %[[C3:.*]] = dopt.constant {value = dense<{{\[}}{{\[}}[0.000000e+00, 3.000000e+00], [6.000000e+00, 9.000000e+00]], {{\[}}[1.000000e+00, 4.000000e+00], [7.000000e+00, 1.000000e+01]], {{\[}}[2.000000e+00, 5.000000e+00], [8.000000e+00, 1.100000e+01]]]> : tensor<3x2x2xf16>}
// CHECK-DAG: %[[T:.*]] = dopt.transpose %[[X]] {perm = array<i64: 1, 0>}
// CHECK: return %[[X]], %[[C2]], %[[C3]], %[[T]]
func.func @transpose(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xi64>, tensor<3x2x2xf16>, tensor<3x2xf32>) {
  %0 = dopt.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %1 = dopt.transpose %c {perm = array<i64: 1, 0>} : (tensor<2x3xi64>) -> tensor<3x2xi64>
  // in[i][j][k] = 6i + 3j + k with shape 2x2x3; out[k][i][j] = in[i][j][k].
  %d = dopt.constant {value = dense<[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]]> : tensor<2x2x3xf16>} : () -> tensor<2x2x3xf16>
  %2 = dopt.transpose %d {perm = array<i64: 2, 0, 1>} : (tensor<2x2x3xf16>) -> tensor<3x2x2xf16>
  %3 = dopt.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<3x2xi64>, tensor<3x2x2xf16>, tensor<3x2xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_rank0
// CHECK-SAME: (%[[X:.*]]: tensor<i1>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_rank0(%x: tensor<i1>) -> tensor<i1> {
  %0 = dopt.transpose %x {perm = array<i64>} : (tensor<i1>) -> tensor<i1>
  return %0 : tensor<i1>
}

// -----

// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[Y:.*]]: tensor<2x1xf32>)
// CHECK-DAG: %[[C0:.*]] = dopt.constant {value = dense<[1, 2, 3, 4, 5]> : tensor<5xi64>}
// CHECK-DAG: %[[C1:.*]] = dopt.constant {value = dense<{{\[}}[1.000000e+00, 2.000000e+00, 5.000000e+00], [3.000000e+00, 4.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>}
// CHECK-DAG: %[[C2:.*]] = dopt.constant {value = dense<{{\[}}[true], [false], [true]]> : tensor<3x1xi1>}
// CHECK-DAG: %[[CAT:.*]] = dopt.concat %[[X]], %[[Y]] {axis = 1 : i64}
// CHECK: return %[[C0]], %[[C1]], %[[C2]], %[[X]], %[[CAT]]
func.func @concat(%x: tensor<2x3xf32>, %y: tensor<2x1xf32>) -> (tensor<5xi64>, tensor<2x3xf32>, tensor<3x1xi1>, tensor<2x3xf32>, tensor<2x4xf32>) {
  %a = dopt.constant {value = dense<[1, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %e = dopt.constant {value = dense<> : tensor<0xi64>} : () -> tensor<0xi64>
  %b = dopt.constant {value = dense<[3, 4, 5]> : tensor<3xi64>} : () -> tensor<3xi64>
  %0 = dopt.concat %a, %e, %b {axis = 0 : i64} : (tensor<2xi64>, tensor<0xi64>, tensor<3xi64>) -> tensor<5xi64>
  %c = dopt.constant {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %d = dopt.constant {value = dense<[[5.0], [6.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %1 = dopt.concat %c, %d {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %t = dopt.constant {value = dense<[[true], [false]]> : tensor<2x1xi1>} : () -> tensor<2x1xi1>
  %u = dopt.constant {value = dense<true> : tensor<1x1xi1>} : () -> tensor<1x1xi1>
  %2 = dopt.concat %t, %u {axis = 0 : i64} : (tensor<2x1xi1>, tensor<1x1xi1>) -> tensor<3x1xi1>
  // A single input is the result.
  %3 = dopt.concat %x {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = dopt.concat %x, %y {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x4xf32>
  return %0, %1, %2, %3, %4 : tensor<5xi64>, tensor<2x3xf32>, tensor<3x1xi1>, tensor<2x3xf32>, tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @slice
// CHECK-SAME: (%[[X:.*]]: tensor<4x5xf32>)
// CHECK-DAG: %[[C0:.*]] = dopt.constant {value = dense<{{\[}}[6, 8], [11, 13]]> : tensor<2x2xi64>}
// CHECK-DAG: %[[C1:.*]] = dopt.constant {value = dense<[9, 7, 5]> : tensor<3xi32>}
// CHECK-DAG: %[[C2:.*]] = dopt.constant {value = dense<> : tensor<0x5xi64>}
// CHECK-DAG: %[[S:.*]] = dopt.slice %[[X]] {ends = array<i64: 4, 5>, starts = array<i64: 0, 0>, steps = array<i64: 1, 2>}
// CHECK: return %[[X]], %[[C0]], %[[C1]], %[[C2]], %[[S]]
func.func @slice(%x: tensor<4x5xf32>) -> (tensor<4x5xf32>, tensor<2x2xi64>, tensor<3xi32>, tensor<0x5xi64>, tensor<4x3xf32>) {
  // The whole tensor, unit steps: the input.
  %0 = dopt.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 4, 5>, steps = array<i64: 1, 1>} : (tensor<4x5xf32>) -> tensor<4x5xf32>
  // c[i][j] = 5i + j.
  %c = dopt.constant {value = dense<[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]> : tensor<4x5xi64>} : () -> tensor<4x5xi64>
  %1 = dopt.slice %c {starts = array<i64: 1, 1>, ends = array<i64: 3, 5>, steps = array<i64: 1, 2>} : (tensor<4x5xi64>) -> tensor<2x2xi64>
  // Negative step: [9:2:-2].
  %v = dopt.constant {value = dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]> : tensor<10xi32>} : () -> tensor<10xi32>
  %2 = dopt.slice %v {starts = array<i64: 9>, ends = array<i64: 4>, steps = array<i64: -2>} : (tensor<10xi32>) -> tensor<3xi32>
  %3 = dopt.slice %c {starts = array<i64: 2, 0>, ends = array<i64: 2, 5>, steps = array<i64: 1, 1>} : (tensor<4x5xi64>) -> tensor<0x5xi64>
  %4 = dopt.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 4, 5>, steps = array<i64: 1, 2>} : (tensor<4x5xf32>) -> tensor<4x3xf32>
  return %0, %1, %2, %3, %4 : tensor<4x5xf32>, tensor<2x2xi64>, tensor<3xi32>, tensor<0x5xi64>, tensor<4x3xf32>
}

// -----

// A full reversal has the input's type but is not the identity.

// CHECK-LABEL: func.func @slice_reverse
// CHECK-DAG: %[[C:.*]] = dopt.constant {value = dense<[3, 2, 1]> : tensor<3xi64>}
// CHECK-DAG: %[[S:.*]] = dopt.slice %arg0 {ends = array<i64: -1>, starts = array<i64: 2>, steps = array<i64: -1>}
// CHECK: return %[[C]], %[[S]]
func.func @slice_reverse(%x: tensor<3xf32>) -> (tensor<3xi64>, tensor<3xf32>) {
  %c = dopt.constant {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
  %0 = dopt.slice %c {starts = array<i64: 2>, ends = array<i64: -1>, steps = array<i64: -1>} : (tensor<3xi64>) -> tensor<3xi64>
  %1 = dopt.slice %x {starts = array<i64: 2>, ends = array<i64: -1>, steps = array<i64: -1>} : (tensor<3xf32>) -> tensor<3xf32>
  return %0, %1 : tensor<3xi64>, tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @gather
// CHECK-DAG: %[[G0:.*]] = dopt.constant {value = dense<[30, 10]> : tensor<2xi64>}
// Negative indices count from the end.
// CHECK-DAG: %[[G1:.*]] = dopt.constant {value = dense<{{\[}}[3.000000e+00, 1.000000e+00], [6.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>}
// CHECK-DAG: %[[G2:.*]] = dopt.constant {value = dense<{{\[}}[4, 5, 6], [1, 2, 3]]> : tensor<2x3xi32>}
// A rank-0 index removes the axis.
// CHECK-DAG: %[[G3:.*]] = dopt.constant {value = dense<20> : tensor<i64>}
// CHECK: return %[[G0]], %[[G1]], %[[G2]], %[[G3]]
func.func @gather() -> (tensor<2xi64>, tensor<2x2xf32>, tensor<2x3xi32>, tensor<i64>) {
  %v = dopt.constant {value = dense<[10, 20, 30]> : tensor<3xi64>} : () -> tensor<3xi64>
  %i = dopt.constant {value = dense<[2, 0]> : tensor<2xi32>} : () -> tensor<2xi32>
  %0 = dopt.gather %v, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi32>) -> tensor<2xi64>
  %m = dopt.constant {value = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %j = dopt.constant {value = dense<[-1, 0]> : tensor<2xi64>} : () -> tensor<2xi64>
  %1 = dopt.gather %m, %j {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x2xf32>
  %n = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>} : () -> tensor<2x3xi32>
  %k = dopt.constant {value = dense<[-1, -2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %2 = dopt.gather %n, %k {axis = 0 : i64} : (tensor<2x3xi32>, tensor<2xi64>) -> tensor<2x3xi32>
  %s = dopt.constant {value = dense<-2> : tensor<i64>} : () -> tensor<i64>
  %3 = dopt.gather %v, %s {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %0, %1, %2, %3 : tensor<2xi64>, tensor<2x2xf32>, tensor<2x3xi32>, tensor<i64>
}

// -----

// An out-of-range index is a runtime error, not a fold.

// CHECK-LABEL: func.func @gather_out_of_range
// CHECK: %[[A:.*]] = dopt.gather
// CHECK: %[[B:.*]] = dopt.gather
// CHECK: return %[[A]], %[[B]]
func.func @gather_out_of_range() -> (tensor<2xi64>, tensor<i64>) {
  %v = dopt.constant {value = dense<[10, 20, 30]> : tensor<3xi64>} : () -> tensor<3xi64>
  %i = dopt.constant {value = dense<[0, 3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %0 = dopt.gather %v, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %j = dopt.constant {value = dense<-4> : tensor<i32>} : () -> tensor<i32>
  %1 = dopt.gather %v, %j {axis = 0 : i64} : (tensor<3xi64>, tensor<i32>) -> tensor<i64>
  return %0, %1 : tensor<2xi64>, tensor<i64>
}

// -----

// CHECK-LABEL: func.func @expand
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-DAG: %[[E0:.*]] = dopt.constant {value = dense<{{\[}}[1, 2, 3], [1, 2, 3]]> : tensor<2x3xi64>}
// CHECK-DAG: %[[E1:.*]] = dopt.constant {value = dense<{{\[}}[true, true], [false, false]]> : tensor<2x2xi1>}
// Splats are resized, however large.
// CHECK-DAG: %[[E2:.*]] = dopt.constant {value = dense<5.000000e-01> : tensor<1000x1000xbf16>}
// CHECK-DAG: %[[E3:.*]] = dopt.expand %[[X]] {shape = array<i64: 4, 1, 1>}
// CHECK: return %[[X]], %[[E0]], %[[E1]], %[[E2]], %[[E3]]
func.func @expand(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x2xi1>, tensor<1000x1000xbf16>, tensor<4x2x3xf32>) {
  // A shape that changes nothing: the input.
  %0 = dopt.expand %x {shape = array<i64: 1, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = dopt.constant {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
  %1 = dopt.expand %c {shape = array<i64: 2, 1>} : (tensor<3xi64>) -> tensor<2x3xi64>
  %b = dopt.constant {value = dense<[[true], [false]]> : tensor<2x1xi1>} : () -> tensor<2x1xi1>
  %2 = dopt.expand %b {shape = array<i64: 2>} : (tensor<2x1xi1>) -> tensor<2x2xi1>
  %s = dopt.constant {value = dense<0.5> : tensor<bf16>} : () -> tensor<bf16>
  %3 = dopt.expand %s {shape = array<i64: 1000, 1000>} : (tensor<bf16>) -> tensor<1000x1000xbf16>
  %4 = dopt.expand %x {shape = array<i64: 4, 1, 1>} : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
  return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<2x3xi64>, tensor<2x2xi1>, tensor<1000x1000xbf16>, tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @shape
// CHECK-NOT: dopt.shape
// CHECK-DAG: %[[S0:.*]] = dopt.constant {value = dense<[2, 3, 4]> : tensor<3xi64>}
// CHECK-DAG: %[[S1:.*]] = dopt.constant {value = dense<3> : tensor<1xi64>}
// CHECK-DAG: %[[S2:.*]] = dopt.constant {value = dense<> : tensor<0xi64>}
// CHECK-NOT: dopt.shape
// CHECK: return %[[S0]], %[[S1]], %[[S2]], %[[S2]]
func.func @shape(%x: tensor<2x3x4xf32>, %s: tensor<i1>) -> (tensor<3xi64>, tensor<1xi64>, tensor<0xi64>, tensor<0xi64>) {
  %0 = dopt.shape %x {start = 0 : i64, end = 3 : i64} : (tensor<2x3x4xf32>) -> tensor<3xi64>
  %1 = dopt.shape %x {start = 1 : i64, end = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<1xi64>
  %2 = dopt.shape %x {start = 2 : i64, end = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<0xi64>
  %3 = dopt.shape %s {start = 0 : i64, end = 0 : i64} : (tensor<i1>) -> tensor<0xi64>
  return %0, %1, %2, %3 : tensor<3xi64>, tensor<1xi64>, tensor<0xi64>, tensor<0xi64>
}

// -----

// Empty tensors fold like any other (no element is read).

// CHECK-LABEL: func.func @empty_tensors
// CHECK-DAG: %[[A:.*]] = dopt.constant {value = dense<> : tensor<3x0xf32>}
// CHECK-DAG: %[[B:.*]] = dopt.constant {value = dense<> : tensor<0x3xi64>}
// CHECK-DAG: %[[C:.*]] = dopt.constant {value = dense<> : tensor<0xi64>}
// CHECK-DAG: %[[D:.*]] = dopt.constant {value = dense<> : tensor<2x0xf32>}
// CHECK-DAG: %[[E:.*]] = dopt.constant {value = dense<> : tensor<0x3xi1>}
// CHECK-DAG: %[[F:.*]] = dopt.constant {value = dense<> : tensor<0xf32>}
// CHECK-NOT: dopt.
// CHECK: return %[[A]], %[[B]], %[[C]], %[[D]], %[[E]], %[[F]]
func.func @empty_tensors() -> (tensor<3x0xf32>, tensor<0x3xi64>, tensor<0xi64>, tensor<2x0xf32>, tensor<0x3xi1>, tensor<0xf32>) {
  %e = dopt.constant {value = dense<> : tensor<0x3xf32>} : () -> tensor<0x3xf32>
  %v = dopt.constant {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = dopt.add %e, %v : (tensor<0x3xf32>, tensor<3xf32>) -> tensor<0x3xf32>
  %1 = dopt.transpose %0 {perm = array<i64: 1, 0>} : (tensor<0x3xf32>) -> tensor<3x0xf32>
  %i = dopt.constant {value = dense<> : tensor<0xi64>} : () -> tensor<0xi64>
  %d = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %2 = dopt.gather %d, %i {axis = 0 : i64} : (tensor<2x3xi64>, tensor<0xi64>) -> tensor<0x3xi64>
  %j = dopt.constant {value = dense<> : tensor<0xi32>} : () -> tensor<0xi32>
  %3 = dopt.gather %i, %j {axis = 0 : i64} : (tensor<0xi64>, tensor<0xi32>) -> tensor<0xi64>
  %4 = dopt.slice %1 {starts = array<i64: 0, -1>, ends = array<i64: 2, -1>, steps = array<i64: 1, -1>} : (tensor<3x0xf32>) -> tensor<2x0xf32>
  %c = dopt.constant {value = dense<> : tensor<0x3xi1>} : () -> tensor<0x3xi1>
  %w = dopt.where %c, %e, %v : (tensor<0x3xi1>, tensor<0x3xf32>, tensor<3xf32>) -> tensor<0x3xf32>
  %5 = dopt.equal %w, %v : (tensor<0x3xf32>, tensor<3xf32>) -> tensor<0x3xi1>
  %n = dopt.neg %e : (tensor<0x3xf32>) -> tensor<0x3xf32>
  %r = dopt.reshape %n {shape = array<i64: 0>} : (tensor<0x3xf32>) -> tensor<0xf32>
  %6 = dopt.concat %r, %r {axis = 0 : i64} : (tensor<0xf32>, tensor<0xf32>) -> tensor<0xf32>
  return %1, %2, %3, %4, %5, %6 : tensor<3x0xf32>, tensor<0x3xi64>, tensor<0xi64>, tensor<2x0xf32>, tensor<0x3xi1>, tensor<0xf32>
}

// -----

// Ops without folders are kept as they are, even on constants.

// CHECK-LABEL: func.func @no_folder
// CHECK: dopt.pow
// CHECK: dopt.relu
// CHECK: dopt.pad
// CHECK: dopt.reduce_sum
func.func @no_folder() -> (tensor<2xf32>, tensor<2xf32>, tensor<4xf32>, tensor<1xf32>) {
  %c = dopt.constant {value = dense<[-1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = dopt.pow %c, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = dopt.relu %c : (tensor<2xf32>) -> tensor<2xf32>
  %3 = dopt.pad %c {pads = array<i64: 1, 1>} : (tensor<2xf32>) -> tensor<4xf32>
  %4 = dopt.reduce_sum %c {axes = array<i64: 0>} : (tensor<2xf32>) -> tensor<1xf32>
  return %0, %1, %3, %4 : tensor<2xf32>, tensor<2xf32>, tensor<4xf32>, tensor<1xf32>
}

// Non-splat constants over the size limit are not copied by any folder
// (input from Inputs/large_constants.py).

// LARGE-LABEL: func.func @large_non_splat
// LARGE-NEXT: %[[C:.*]] = dopt.constant {value = dense<"0x000102
// LARGE-NEXT: %[[R:.*]] = dopt.reshape %[[C]] {shape = array<i64: 65537, 1>}
// LARGE-NEXT: dopt.transpose %[[R]]
// LARGE-NEXT: dopt.neg %[[C]]
// LARGE-NEXT: dopt.slice %[[C]]
// LARGE-NEXT: return

// -----

// Float max/min fold with NaN propagation (as ONNX, NumPy and the lowering
// through arith.maximumf/minimumf do).
// CHECK-LABEL: func.func @max_min_nan
// CHECK-DAG: dopt.constant {value = dense<[0x7FF8000000000000, 3.000000e+00]> : tensor<2xf64>}
// CHECK-DAG: dopt.constant {value = dense<[0x7FF8000000000000, 1.000000e+00]> : tensor<2xf64>}
func.func @max_min_nan() -> (tensor<2xf64>, tensor<2xf64>) {
  %a = dopt.constant {value = dense<[0x7FF8000000000000, 1.0]> : tensor<2xf64>} : () -> tensor<2xf64>
  %b = dopt.constant {value = dense<[2.0, 3.0]> : tensor<2xf64>} : () -> tensor<2xf64>
  %0 = dopt.max %a, %b : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  %1 = dopt.min %a, %b : (tensor<2xf64>, tensor<2xf64>) -> tensor<2xf64>
  return %0, %1 : tensor<2xf64>, tensor<2xf64>
}

// -----

// A check of constant indices in range folds away (the gather then folds
// too); out of range (or negative where they may not be) it stays, to
// report them when the program runs. The ignore index is in range.
// CHECK-LABEL: func.func @check_indices
// CHECK-DAG: dopt.constant {value = dense<[7, 9]> : tensor<2xi64>}
// CHECK-DAG: %[[OUT:.*]] = dopt.constant {value = dense<[1, 3]> : tensor<2xi64>}
// CHECK-DAG: %[[NEG:.*]] = dopt.constant {value = dense<[-1, 0]> : tensor<2xi64>}
// CHECK-DAG: %[[IGN:.*]] = dopt.constant {value = dense<[-100, 2]> : tensor<2xi64>}
// CHECK-DAG: dopt.check_indices %[[OUT]] {extent = 3 : i64
// CHECK-DAG: dopt.check_indices %[[NEG]] {extent = 3 : i64, negative = false
// CHECK-NOT: dopt.check_indices %[[IGN]]
func.func @check_indices() -> (tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) {
  %data = dopt.constant {value = dense<[7, 8, 9]> : tensor<3xi64>} : () -> tensor<3xi64>
  %in = dopt.constant {value = dense<[0, -1]> : tensor<2xi64>} : () -> tensor<2xi64>
  %out = dopt.constant {value = dense<[1, 3]> : tensor<2xi64>} : () -> tensor<2xi64>
  %neg = dopt.constant {value = dense<[-1, 0]> : tensor<2xi64>} : () -> tensor<2xi64>
  %ign = dopt.constant {value = dense<[-100, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %0 = dopt.check_indices %in {extent = 3 : i64, what = "in"} : (tensor<2xi64>) -> tensor<2xi64>
  %1 = dopt.gather %data, %0 {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %2 = dopt.check_indices %out {extent = 3 : i64, what = "out"} : (tensor<2xi64>) -> tensor<2xi64>
  %3 = dopt.check_indices %neg {extent = 3 : i64, negative = false, what = "neg"} : (tensor<2xi64>) -> tensor<2xi64>
  %4 = dopt.check_indices %ign {extent = 3 : i64, negative = false, ignore = -100 : i64, what = "ign"} : (tensor<2xi64>) -> tensor<2xi64>
  return %1, %2, %3, %4 : tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>
}

// -----

// A constant split folds into its pieces (torch's repeat_interleave splits a
// constant shape before concatenating it into an Expand's shape).
// CHECK-LABEL: func.func @split_constant
// CHECK-NOT: dopt.split
// CHECK-DAG: dopt.constant {value = dense<{{\[\[}}1], [4]]> : tensor<2x1xi64>}
// CHECK-DAG: dopt.constant {value = dense<{{\[\[}}2, 3], [5, 6]]> : tensor<2x2xi64>}
func.func @split_constant() -> (tensor<2x1xi64>, tensor<2x2xi64>) {
  %c = dopt.constant {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>} : () -> tensor<2x3xi64>
  %0:2 = dopt.split %c {axis = 1 : i64, sizes = array<i64: 1, 2>} : (tensor<2x3xi64>) -> (tensor<2x1xi64>, tensor<2x2xi64>)
  return %0#0, %0#1 : tensor<2x1xi64>, tensor<2x2xi64>
}
