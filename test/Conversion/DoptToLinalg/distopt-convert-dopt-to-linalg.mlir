// RUN: distopt-opt %s --distopt-convert-dopt-to-linalg --split-input-file | FileCheck %s

// Broadcasting add: one generic whose operand maps encode the broadcast.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @add_broadcast
// CHECK: %[[E:.*]] = tensor.empty() : tensor<2x3xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<2x3xf32>, tensor<3xf32>) outs(%[[E]] : tensor<2x3xf32>)
// CHECK: arith.addf
func.func @add_broadcast(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// f16 transcendental math is computed in f32 and rounded once.
// CHECK-LABEL: func.func @exp_f16
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT: math.exp %{{.*}} : f32
// CHECK-NEXT: arith.truncf %{{.*}} : f32 to f16
func.func @exp_f16(%h: tensor<4xf16>) -> tensor<4xf16> {
  %0 = dopt.exp %h : (tensor<4xf16>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// ui8 becomes signless i8 in the signature; comparisons and casts stay
// unsigned.
// CHECK-LABEL: func.func @unsigned(%arg0: tensor<4xi8>) -> (tensor<4xi1>, tensor<4xf32>)
// CHECK: arith.cmpi ult
// CHECK: arith.uitofp %{{.*}} : i8 to f32
func.func @unsigned(%u: tensor<4xui8>) -> (tensor<4xi1>, tensor<4xf32>) {
  %0 = dopt.less %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xi1>
  %1 = dopt.cast %u {to = f32} : (tensor<4xui8>) -> tensor<4xf32>
  return %0, %1 : tensor<4xi1>, tensor<4xf32>
}

// -----

// Gemm with transposed B: linalg.matmul with transposing indexing maps, then
// the bias add.
// CHECK-DAG: #[[MA:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[MB:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[MC:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @gemm_trans_b
// CHECK: linalg.fill
// CHECK: linalg.matmul indexing_maps = [#[[MA]], #[[MB]], #[[MC]]] ins(%arg0, %arg1 : tensor<2x4xf32>, tensor<8x4xf32>)
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @gemm_trans_b(%a: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %0 = dopt.gemm %a, %w, %b {trans_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Batched matmul with a broadcast 2-D right operand: one GEMM over all rows.
// CHECK-LABEL: func.func @matmul_rows
// CHECK: tensor.collapse_shape %arg0 {{\[}}[0, 1, 2]] : tensor<2x3x4xf32> into tensor<24xf32>
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0, 1]] output_shape [6, 4] : tensor<24xf32> into tensor<6x4xf32>
// CHECK: linalg.matmul ins(%{{.*}}, %arg1 : tensor<6x4xf32>, tensor<4x5xf32>)
func.func @matmul_rows(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = dopt.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// -----

// Both operands batched: linalg.batch_matmul.
// CHECK-LABEL: func.func @matmul_batched
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<6x4x4xf32>, tensor<6x4x4xf32>)
func.func @matmul_batched(%a: tensor<2x3x4x4xf32>, %b: tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32> {
  %0 = dopt.matmul %a, %b : (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}

// -----

// Softmax: max-reduce, exp(x - max), sum-reduce, one reciprocal per row,
// a multiplication per element.
// CHECK-LABEL: func.func @softmax
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<2x1xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.constant 1.0
// CHECK-NEXT: arith.divf %{{.*}}, %{{.*}} : f32
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<2x8xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.mulf
func.func @softmax(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = dopt.softmax %x {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// Float conv with few groups: im2col in NCHW order (a gather into
// [n, g, c, kh, kw, oh, ow]), then per group one batch (over n) of GEMMs
// with the group's weights shared, each zero-filling and writing its
// channels of the output in place; no transpose back; the bias is added in
// NCHW.
// CHECK-LABEL: func.func @conv_groups
// CHECK: %[[PAD:.*]] = tensor.pad
// CHECK: linalg.generic {{.*}} ins(%[[PAD]] : tensor<1x4x7x7xf32>) outs(%{{.*}} : tensor<1x2x2x3x3x5x5xf32>)
// CHECK: %[[ACC:.*]] = tensor.empty() : tensor<1x2x3x25xf32>
// CHECK: %[[S0:.*]] = tensor.extract_slice %[[ACC]][0, 0, 0, 0] [1, 1, 3, 25]
// CHECK: %[[Z0:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[S0]] : tensor<1x3x25xf32>)
// CHECK: %[[G0:.*]] = linalg.batch_matmul indexing_maps = [#[[SHARED:.*]], #{{.*}}, #{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<3x18xf32>, tensor<1x18x25xf32>) outs(%[[Z0]] : tensor<1x3x25xf32>)
// CHECK: %[[ACC1:.*]] = tensor.insert_slice %[[G0]] into %[[ACC]][0, 0, 0, 0] [1, 1, 3, 25]
// CHECK: %[[S1:.*]] = tensor.extract_slice %[[ACC1]][0, 1, 0, 0] [1, 1, 3, 25]
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[S1]] : tensor<1x3x25xf32>)
// CHECK: %[[G1:.*]] = linalg.batch_matmul
// CHECK: tensor.insert_slice %[[G1]] into %[[ACC1]][0, 1, 0, 0] [1, 1, 3, 25]
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
func.func @conv_groups(%x: tensor<1x4x5x5xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>) -> tensor<1x6x5x5xf32> {
  %0 = dopt.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x5x5xf32>
  return %0 : tensor<1x6x5x5xf32>
}

// -----

// Many groups (depthwise): im2col into [g, n, oh, ow, c, kh, kw], one
// batch_matmul over the groups against the transposed weights, and the
// bias added while transposing back to NCHW.
// CHECK-LABEL: func.func @conv_depthwise
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<16x2x5x5x1x3x3xf32>)
// CHECK: linalg.batch_matmul indexing_maps = {{.*}} ins(%{{.*}}, %{{.*}} : tensor<16x50x9xf32>, tensor<16x1x9xf32>)
// CHECK: linalg.generic
// CHECK: arith.addf
func.func @conv_depthwise(%x: tensor<2x16x5x5xf32>, %w: tensor<16x1x3x3xf32>, %b: tensor<16xf32>) -> tensor<2x16x5x5xf32> {
  %0 = dopt.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 16 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x16x5x5xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<2x16x5x5xf32>
  return %0 : tensor<2x16x5x5xf32>
}

// -----

// f16 conv is computed in f32 (operands widened, one rounding at the end),
// through the same im2col + GEMM route.
// CHECK-LABEL: func.func @conv_f16
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: linalg.batch_matmul
// CHECK: arith.truncf %{{.*}} : f32 to f16
func.func @conv_f16(%x: tensor<1x2x5x5xf16>, %w: tensor<3x2x3x3xf16>) -> tensor<1x3x2x2xf16> {
  %0 = dopt.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x2x5x5xf16>, tensor<3x2x3x3xf16>) -> tensor<1x3x2x2xf16>
  return %0 : tensor<1x3x2x2xf16>
}

// -----

// Negative-step slice reads through an affine map start + i * step.
// CHECK-DAG: #[[REV:.*]] = affine_map<(d0) -> (-d0 + 5)>
// CHECK-LABEL: func.func @reverse
// CHECK: linalg.generic {indexing_maps = [#[[REV]], #{{.*}}]
func.func @reverse(%x: tensor<6xf32>) -> tensor<6xf32> {
  %0 = dopt.slice %x {starts = array<i64: 5>, ends = array<i64: -1>, steps = array<i64: -1>} : (tensor<6xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// Gather: indices are the generic's input, data is read with tensor.extract
// at a clamped, wrapped index.
// CHECK-LABEL: func.func @gather
// CHECK: linalg.generic
// CHECK: arith.index_cast
// CHECK: arith.select
// CHECK: tensor.extract %arg0
func.func @gather(%data: tensor<10x4xf32>, %idx: tensor<2x3xi64>) -> tensor<2x3x4xf32> {
  %0 = dopt.gather %data, %idx {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

// GatherElements: one parallel generic over the result; the data is read at
// the result's own position with the axis coordinate taken from the index
// (wrapped, clamped).
// CHECK-LABEL: func.func @gather_elements
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK-SAME: ins(%arg1 : tensor<2x3xi64>)
// CHECK: %[[I0:.*]] = linalg.index 0 : index
// CHECK: %[[IDX:.*]] = arith.index_cast
// CHECK: %[[C:.*]] = arith.minsi %{{.*}}, %c3
// CHECK: tensor.extract %arg0[%[[I0]], %[[C]]] : tensor<3x4xf32>
func.func @gather_elements(%data: tensor<3x4xf32>, %idx: tensor<2x3xi64>) -> tensor<2x3xf32> {
  %0 = dopt.gather_elements %data, %idx {axis = 1 : i64} : (tensor<3x4xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// ScatterElements whose indices are narrower than the data off the axis:
// the data carried through one sequential loop over the updates (row-major,
// so the last duplicate wins or reductions combine in order); "add" reads
// the element first.
// CHECK-LABEL: func.func @scatter_elements_add
// CHECK: %[[R:.*]] = scf.for %[[K:.*]] = %c0 to %c6 step %c1 iter_args(%[[ACC:.*]] = %arg0) -> (tensor<4x5xf32>)
// CHECK: %[[J:.*]] = arith.remui %[[K]], %c3
// CHECK: %[[I:.*]] = arith.divui %[[K]], %c3
// CHECK: %[[U:.*]] = tensor.extract %arg2[%[[I]], %[[J]]]
// CHECK: %[[AT:.*]] = arith.minsi
// CHECK: %[[OLD:.*]] = tensor.extract %[[ACC]][%[[AT]], %[[J]]]
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %[[U]]
// CHECK: %[[INS:.*]] = tensor.insert %[[NEW]] into %[[ACC]][%[[AT]], %[[J]]]
// CHECK: scf.yield %[[INS]]
// CHECK: return %[[R]]
func.func @scatter_elements_add(%data: tensor<4x5xf32>, %idx: tensor<2x3xi32>, %upd: tensor<2x3xf32>) -> tensor<4x5xf32> {
  %0 = dopt.scatter_elements %data, %idx, %upd {axis = 0 : i64, reduction = "add"} : (tensor<4x5xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// A constant exponent of 2, 3 or 4 becomes multiplications (vectorisable)
// instead of a powf call per element; other exponents keep math.powf.
// CHECK-LABEL: func.func @pow_small_integer
// CHECK: linalg.generic
// CHECK: ^bb0(%[[X:[a-z_0-9]+]]: f32, %{{[a-z_0-9]+}}: f32):
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[X]], %[[X]] : f32
// CHECK-NEXT: %[[CUBE:.*]] = arith.mulf %[[SQ]], %[[X]] : f32
// CHECK-NEXT: linalg.yield %[[CUBE]] : f32
// CHECK-NOT: math.powf
// CHECK-LABEL: func.func @pow_other
// CHECK: math.powf
func.func @pow_small_integer(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c = dopt.constant {value = dense<3.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %0 = dopt.pow %a, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
func.func @pow_other(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c = dopt.constant {value = dense<2.500000e+00> : tensor<f32>} : () -> tensor<f32>
  %0 = dopt.pow %a, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A transposed matrix operand is read transposed (BLAS's trans flag)
// instead of being copied: a tied embedding table feeding the output
// projection...
// CHECK-LABEL: func.func @tied_projection
// CHECK: linalg.matmul indexing_maps = [#{{.*}}, #[[TB:.*]], #{{.*}}] ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<10x8xf32>)
func.func @tied_projection(%x: tensor<4x8xf32>, %w: tensor<10x8xf32>) -> tensor<4x10xf32> {
  %t = dopt.transpose %w {perm = array<i64: 1, 0>} : (tensor<10x8xf32>) -> tensor<8x10xf32>
  %y = dopt.matmul %x, %t : (tensor<4x8xf32>, tensor<8x10xf32>) -> tensor<4x10xf32>
  return %y : tensor<4x10xf32>
}

// -----

// ... and attention keys [b, s, h, d] -> [b, h, d, s]: only the row-copying
// transpose [b, h, s, d] remains, and the batch_matmul reads it transposed.
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[BT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-LABEL: func.func @attention_keys
// CHECK: linalg.transpose ins(%arg1 : tensor<2x16x4x8xf32>) outs(%{{.*}} : tensor<2x4x16x8xf32>) permutation = [0, 2, 1, 3]
// CHECK-NOT: permutation = [0, 2, 3, 1]
// CHECK: linalg.batch_matmul indexing_maps = [#[[A]], #[[BT]], #{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<8x16x8xf32>, tensor<8x16x8xf32>)
func.func @attention_keys(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x4x8xf32>) -> tensor<2x4x16x16xf32> {
  %qt = dopt.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = dopt.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x8x16xf32>
  %s = dopt.matmul %qt, %kt : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
  return %s : tensor<2x4x16x16xf32>
}

// -----

// Division by a constant is a multiplication by its reciprocal (x / 2 ->
// x * 0.5; x / sqrt(2) within an ulp); a division by a variable stays.
// CHECK-LABEL: func.func @div_by_constant
// CHECK: %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// CHECK: arith.mulf %{{.*}}, %[[HALF]] : f32
// CHECK-NOT: arith.mulf
// CHECK: arith.divf
func.func @div_by_constant(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c = dopt.constant {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %0 = dopt.div %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = dopt.div %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Inference batch norm: per channel s = gamma / sqrt(var + eps) and
// t = beta - mean * s, once; per element x * s + t (f16 computed in f32,
// rounded once).
// CHECK-LABEL: func.func @batch_norm
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<3xf32>)
// CHECK: math.sqrt
// CHECK: arith.divf
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<3xf32>)
// CHECK: arith.mulf
// CHECK: arith.subf
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<4x3x8x8xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: arith.addf
// CHECK-NEXT: linalg.yield
// CHECK: arith.truncf
func.func @batch_norm(%x: tensor<4x3x8x8xf16>, %s: tensor<3xf16>, %b: tensor<3xf16>, %m: tensor<3xf16>, %v: tensor<3xf16>) -> tensor<4x3x8x8xf16> {
  %0 = dopt.batch_norm %x, %s, %b, %m, %v {epsilon = 1.0e-5 : f32} : (tensor<4x3x8x8xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>) -> tensor<4x3x8x8xf16>
  return %0 : tensor<4x3x8x8xf16>
}

// -----

// A small float max-pooling window is unrolled: one all-parallel generic
// over the output reads each of the 2x2 window positions as its own input
// (a strided slice of the input) and takes their maximum; no reduction
// loops, no fill. Stride 1 (the slices overlap) works the same way.
// CHECK-LABEL: func.func @max_pool_2x2
// CHECK-NOT: linalg.fill
// CHECK: tensor.extract_slice %arg0[0, 0, 0, 0] [2, 3, 4, 4] [1, 1, 2, 2]
// CHECK: tensor.extract_slice %arg0[0, 0, 0, 1] [2, 3, 4, 4] [1, 1, 2, 2]
// CHECK: tensor.extract_slice %arg0[0, 0, 1, 0] [2, 3, 4, 4] [1, 1, 2, 2]
// CHECK: tensor.extract_slice %arg0[0, 0, 1, 1] [2, 3, 4, 4] [1, 1, 2, 2]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel"]
// CHECK-COUNT-3: arith.maximumf
// CHECK-NOT: arith.maximumf
// CHECK-LABEL: func.func @max_pool_stride1
// CHECK: tensor.extract_slice %arg0[0, 0, 1, 1] [1, 1, 7, 7] [1, 1, 1, 1]
func.func @max_pool_2x2(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}
func.func @max_pool_stride1(%x: tensor<1x1x8x8xf32>) -> tensor<1x1x7x7xf32> {
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x7x7xf32>
  return %0 : tensor<1x1x7x7xf32>
}

// -----

// Average pooling with a small window: an elementwise sum of the window's
// strided slices, then the division by each window's compile-time count.
// CHECK-LABEL: func.func @avg_pool_2x2
// CHECK-NOT: linalg.pooling_nchw_sum
// CHECK-COUNT-4: tensor.extract_slice %arg0
// CHECK: linalg.generic
// CHECK-COUNT-3: arith.addf
// CHECK: arith.divf
func.func @avg_pool_2x2(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
  %0 = dopt.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, ceil_mode = false, count_include_pad = false} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}

// -----

// A dropout block of a bigger tensor: each element's position in the whole
// [8, 6] tensor (linalg.index plus the block's offsets) feeds SplitMix64 at
// counter (stream << 40) + position + 1; kept elements are scaled by
// 1 / (1 - ratio).
// CHECK-LABEL: func.func @dropout
// CHECK: linalg.generic {{.*}} ins(%arg0, %arg1 : tensor<4x3xf32>, tensor<i64>)
// CHECK: ^bb0(%{{.*}}: f32, %[[K:.*]]: i64,
// CHECK: linalg.index 0
// CHECK: %[[O0:.*]] = tensor.extract %arg2[%{{.*}}] : tensor<2xi64>
// CHECK: arith.addi %{{.*}}, %[[O0]]
// CHECK: arith.muli %{{.*}}, %c6_i64
// CHECK: %[[C:.*]] = arith.addi %{{.*}}, %c8796093022209_i64
// CHECK: arith.muli %[[C]], %c-7046029254386353131_i64
// CHECK: arith.shrui %{{.*}}, %c30_i64
// CHECK: arith.uitofp
// CHECK: arith.cmpf oge, %{{.*}}, %cst
// CHECK: arith.mulf %{{.*}}, %cst_{{.*}} : f32
// CHECK: arith.select
func.func @dropout(%x: tensor<4x3xf32>, %k: tensor<i64>, %o: tensor<2xi64>) -> tensor<4x3xf32> {
  %y = dopt.dropout %x, %k, %o {global_shape = array<i64: 8, 6>, ratio = 2.500000e-01 : f32, stream = 8 : i64} : (tensor<4x3xf32>, tensor<i64>, tensor<2xi64>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// Without library-convolutions (the CPU), a transposed convolution is
// still the runtime's backward-data call (its GEMM + col2im on CPUs), not
// the convolution of the stride-dilated input; a dead one (Autodiff's
// gradient of a data input) is dropped, not called.
// CHECK-LABEL: func.func @conv_transpose_on_cpu
// CHECK-NOT: linalg.batch_matmul
// CHECK: call @dort_conv2d_backward_data_f32(
// CHECK-NOT: call
// CHECK: return {{.*}} : tensor<1x2x8x8xf32>
// CHECK: func.func private @dort_conv2d_backward_data_f32
func.func @conv_transpose_on_cpu(%x: tensor<1x4x4x4xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x2x8x8xf32> {
  %0 = dopt.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, output_padding = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x8x8xf32>
  %dead = dopt.conv_transpose %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, output_padding = array<i64: 0, 0>, group = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x8x8xf32>
}

// -----

// TopK: the ranks (a reduction along the axis counting the elements before
// each: larger ones, or equal ones at lower indices), then the element of
// each rank; no sort.
// CHECK-LABEL: func.func @top_k
// CHECK: %[[RANKS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-SAME: ins(%arg0, %arg0 : tensor<2x5xf32>, tensor<2x5xf32>)
// CHECK-DAG: arith.cmpf ogt
// CHECK-DAG: arith.cmpf oeq
// CHECK-DAG: arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECK: arith.extui
// CHECK: %[[SEL:.*]]:2 = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-SAME: ins(%arg0, %[[RANKS]] : tensor<2x5xf32>, tensor<2x5xi64>)
// CHECK-SAME: outs(%{{.*}}, %{{.*}} : tensor<2x3xf32>, tensor<2x3xi64>)
// CHECK: arith.cmpi eq
// CHECK: return %[[SEL]]#0, %[[SEL]]#1
func.func @top_k(%x: tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>) {
  %v, %i = dopt.top_k %x {k = 3 : i64, axis = 1 : i64} : (tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
  return %v, %i : tensor<2x3xf32>, tensor<2x3xi64>
}

// -----

// Smallest first, unsigned: the comparison is unsigned.
// CHECK-LABEL: func.func @top_k_smallest_unsigned
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : i8
func.func @top_k_smallest_unsigned(%x: tensor<4xui8>) -> (tensor<2xui8>, tensor<2xi64>) {
  %v, %i = dopt.top_k %x {k = 2 : i64, axis = 0 : i64, largest = false} : (tensor<4xui8>) -> (tensor<2xui8>, tensor<2xi64>)
  return %v, %i : tensor<2xui8>, tensor<2xi64>
}

// -----

// ScatterElements along a short axis with indices spanning the data off it:
// a parallel nest over the result, each element folding in order the
// updates of its column (the reduced loop runs along the updates' axis)
// whose index names it. max keeps the element where the update is not
// larger (a NaN update changes nothing).
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[OWN:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @scatter_elements_parallel
// CHECK-NOT: scf.for
// CHECK: linalg.generic {indexing_maps = [#[[COL]], #[[COL]], #[[OWN]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%arg1, %arg2 : tensor<6x3xi64>, tensor<6x3xf32>) outs(%arg0 : tensor<4x3xf32>)
// CHECK: %[[HERE:.*]] = linalg.index 0 : index
// CHECK: %[[HIT:.*]] = arith.cmpi eq, %{{.*}}, %[[HERE]] : index
// CHECK: %[[GT:.*]] = arith.cmpf ogt, %[[U:.*]], %[[OLD:.*]] : f32
// CHECK: %[[MAX:.*]] = arith.select %[[GT]], %[[U]], %[[OLD]]
// CHECK: arith.select %[[HIT]], %[[MAX]]
func.func @scatter_elements_parallel(%data: tensor<4x3xf32>, %idx: tensor<6x3xi64>, %upd: tensor<6x3xf32>) -> tensor<4x3xf32> {
  %0 = dopt.scatter_elements %data, %idx, %upd {axis = 0 : i64, reduction = "max"} : (tensor<4x3xf32>, tensor<6x3xi64>, tensor<6x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// Shifts: past the width (or negative, unsigned-compared past it) a left
// shift and an unsigned right shift give 0, a signed right shift shifts by
// width − 1 (the sign copied in); bitwise not is a xor with all ones.
// CHECK-LABEL: func.func @shifts_and_not
// CHECK: %[[W:.*]] = arith.constant 8 : i8
// CHECK: %[[FAR:.*]] = arith.cmpi uge, %[[R:.*]], %[[W]] : i8
// CHECK: %[[SHL:.*]] = arith.shli %[[L:.*]], %[[R]] : i8
// CHECK: arith.select %[[FAR]], %{{.*}}, %[[SHL]] : i8
// CHECK: %[[FAR2:.*]] = arith.cmpi uge, %[[R2:.*]], %{{.*}} : i8
// CHECK: arith.shrui %{{.*}}, %[[R2]] : i8
// CHECK: %[[FAR3:.*]] = arith.cmpi uge, %[[R3:.*]], %{{.*}} : i32
// CHECK: %[[AMT:.*]] = arith.select %[[FAR3]], %c31_i32, %[[R3]] : i32
// CHECK: arith.shrsi %{{.*}}, %[[AMT]] : i32
// CHECK: arith.xori %{{.*}}, %c-1_i16 : i16
func.func @shifts_and_not(%u: tensor<4xui8>, %s: tensor<4xi32>, %n: tensor<4xi16>) -> (tensor<4xui8>, tensor<4xui8>, tensor<4xi32>, tensor<4xi16>) {
  %0 = dopt.shift_left %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %1 = dopt.shift_right %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %2 = dopt.shift_right %s, %s : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = dopt.not %n : (tensor<4xi16>) -> tensor<4xi16>
  return %0, %1, %2, %3 : tensor<4xui8>, tensor<4xui8>, tensor<4xi32>, tensor<4xi16>
}

// -----

// Bitcast: arith.bitcast between signless types of one width (ui32 and i32
// are the same storage: no op); from a boolean its byte, to a boolean
// whether the byte is not 0.
// CHECK-LABEL: func.func @bitcasts
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK-NOT: arith.bitcast
// CHECK: arith.extui %{{.*}} : i1 to i8
// CHECK: arith.cmpi ne, %{{.*}}, %{{.*}} : i8
func.func @bitcasts(%f: tensor<4xf32>, %u: tensor<4xui32>, %b: tensor<4xi1>, %c: tensor<4xui8>) -> (tensor<4xi32>, tensor<4xi32>, tensor<4xui8>, tensor<4xi1>) {
  %0 = dopt.bitcast %f {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %1 = dopt.bitcast %u {to = i32} : (tensor<4xui32>) -> tensor<4xi32>
  %2 = dopt.bitcast %b {to = ui8} : (tensor<4xi1>) -> tensor<4xui8>
  %3 = dopt.bitcast %c {to = i1} : (tensor<4xui8>) -> tensor<4xi1>
  return %0, %1, %2, %3 : tensor<4xi32>, tensor<4xi32>, tensor<4xui8>, tensor<4xi1>
}

// -----

// A concat of more than 32 inputs is concatenated in groups of 32 first:
// one-shot bufferization's analysis of one insert_slice chain grows about
// cubically with its length (a 256-way concat took 100 s).
// CHECK-LABEL: func.func @long_concat
// CHECK: tensor.empty() : tensor<32x2xf32>
// CHECK-COUNT-32: tensor.insert_slice %{{.*}} into %{{.*}} : tensor<1x2xf32> into tensor<32x2xf32>
// CHECK: tensor.empty() : tensor<2x2xf32>
// CHECK-COUNT-2: tensor.insert_slice %{{.*}} into %{{.*}} : tensor<1x2xf32> into tensor<2x2xf32>
// CHECK: tensor.empty() : tensor<34x2xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[0, 0] [32, 2] [1, 1] : tensor<32x2xf32> into tensor<34x2xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[32, 0] [2, 2] [1, 1] : tensor<2x2xf32> into tensor<34x2xf32>
func.func @long_concat(%a0: tensor<1x2xf32>, %a1: tensor<1x2xf32>, %a2: tensor<1x2xf32>, %a3: tensor<1x2xf32>, %a4: tensor<1x2xf32>, %a5: tensor<1x2xf32>, %a6: tensor<1x2xf32>, %a7: tensor<1x2xf32>, %a8: tensor<1x2xf32>, %a9: tensor<1x2xf32>, %a10: tensor<1x2xf32>, %a11: tensor<1x2xf32>, %a12: tensor<1x2xf32>, %a13: tensor<1x2xf32>, %a14: tensor<1x2xf32>, %a15: tensor<1x2xf32>, %a16: tensor<1x2xf32>, %a17: tensor<1x2xf32>, %a18: tensor<1x2xf32>, %a19: tensor<1x2xf32>, %a20: tensor<1x2xf32>, %a21: tensor<1x2xf32>, %a22: tensor<1x2xf32>, %a23: tensor<1x2xf32>, %a24: tensor<1x2xf32>, %a25: tensor<1x2xf32>, %a26: tensor<1x2xf32>, %a27: tensor<1x2xf32>, %a28: tensor<1x2xf32>, %a29: tensor<1x2xf32>, %a30: tensor<1x2xf32>, %a31: tensor<1x2xf32>, %a32: tensor<1x2xf32>, %a33: tensor<1x2xf32>) -> tensor<34x2xf32> {
  %0 = dopt.concat %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7, %a8, %a9, %a10, %a11, %a12, %a13, %a14, %a15, %a16, %a17, %a18, %a19, %a20, %a21, %a22, %a23, %a24, %a25, %a26, %a27, %a28, %a29, %a30, %a31, %a32, %a33 {axis = 0 : i64} : (tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<34x2xf32>
  return %0 : tensor<34x2xf32>
}

// -----

// A large splat is a fill (as a constant it would be a dense global of its
// size); a small one stays a constant.
// CHECK-LABEL: func.func @large_splat
// CHECK: %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[E:.*]] = tensor.empty() : tensor<64x96x2048x1xf32>
// CHECK: linalg.fill ins(%[[NEG]] : f32) outs(%[[E]] : tensor<64x96x2048x1xf32>)
// CHECK: arith.constant dense<0xFF800000> : tensor<4x4xf32>
func.func @large_splat() -> (tensor<64x96x2048x1xf32>, tensor<4x4xf32>) {
  %big = dopt.constant {value = dense<0xFF800000> : tensor<64x96x2048x1xf32>} : () -> tensor<64x96x2048x1xf32>
  %small = dopt.constant {value = dense<0xFF800000> : tensor<4x4xf32>} : () -> tensor<4x4xf32>
  return %big, %small : tensor<64x96x2048x1xf32>, tensor<4x4xf32>
}
