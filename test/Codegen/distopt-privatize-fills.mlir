// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-privatize-fills))' | FileCheck %s
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-privatize-fills),one-shot-bufferize{bufferize-function-boundaries})' | FileCheck %s --check-prefix=BUF

// Two products share one CSE'd zero accumulator: each gets its own empty
// tensor and fill, right before it, and after bufferization there is no
// copy of a zero buffer.
// CHECK-LABEL: func.func @shared_accumulator
// CHECK: %[[E0:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK-NEXT: %[[Z0:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E0]] : tensor<4x8xf32>)
// CHECK-NEXT: linalg.matmul {{.*}} outs(%[[Z0]] : tensor<4x8xf32>)
// CHECK-NEXT: %[[E1:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK-NEXT: %[[Z1:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E1]] : tensor<4x8xf32>)
// CHECK-NEXT: linalg.matmul {{.*}} outs(%[[Z1]] : tensor<4x8xf32>)
// CHECK-NEXT: return
// BUF-LABEL: func.func @shared_accumulator
// BUF-NOT: memref.copy
// BUF: return
func.func @shared_accumulator(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>, %c: tensor<16x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %x = linalg.matmul ins(%a, %b : tensor<4x16xf32>, tensor<16x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.matmul ins(%a, %c : tensor<4x16xf32>, tensor<16x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %x, %y : tensor<4x8xf32>, tensor<4x8xf32>
}

// A fill with one user, and fills of buffers, are left as they are.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-2: linalg.fill
// CHECK-NOT: linalg.fill
func.func @left_alone(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>, %m: memref<4x8xf32>) -> tensor<4x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %x = linalg.matmul ins(%a, %b : tensor<4x16xf32>, tensor<16x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
  linalg.fill ins(%zero : f32) outs(%m : memref<4x8xf32>)
  return %x : tensor<4x8xf32>
}

// Only linalg accumulators are privatised: a slice of the filled tensor
// updated in place through extract_slice/insert_slice keeps sharing it,
// while the matmul that writes all of it gets its own fill.
// CHECK-LABEL: func.func @slices_share
// CHECK: %[[Z:.*]] = linalg.fill
// CHECK: tensor.extract_slice %[[Z]]
// CHECK: tensor.insert_slice %{{.*}} into %[[Z]]
// CHECK: %[[OWN:.*]] = linalg.fill
// CHECK-NEXT: linalg.matmul {{.*}} outs(%[[OWN]] : tensor<4x8xf32>)
func.func @slices_share(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>, %s: tensor<2x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %part = tensor.extract_slice %z[0, 0] [2, 8] [1, 1] : tensor<4x8xf32> to tensor<2x8xf32>
  %sum = linalg.add ins(%part, %s : tensor<2x8xf32>, tensor<2x8xf32>) outs(%part : tensor<2x8xf32>) -> tensor<2x8xf32>
  %w = tensor.insert_slice %sum into %z[0, 0] [2, 8] [1, 1] : tensor<2x8xf32> into tensor<4x8xf32>
  %x = linalg.matmul ins(%a, %b : tensor<4x16xf32>, tensor<16x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %w, %x : tensor<4x8xf32>, tensor<4x8xf32>
}


// A tensor.empty CSE made the init of several elementwise ops: each op
// after the first gets its own (an empty's contents are undefined, so
// sharing it meant nothing but work for the bufferization analysis).
// CHECK-LABEL: func.func @shared_empty
// CHECK: %[[E0:.*]] = tensor.empty() : tensor<8xf32>
// CHECK-NEXT: %[[X:.*]] = linalg.generic {{.*}} outs(%[[E0]] : tensor<8xf32>)
// CHECK: %[[E1:.*]] = tensor.empty() : tensor<8xf32>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[X]] : tensor<8xf32>) outs(%[[E1]] : tensor<8xf32>)
// BUF-LABEL: func.func @shared_empty
// BUF-NOT: memref.copy
// BUF: return
#id = affine_map<(d0) -> (d0)>
func.func @shared_empty(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %x = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%i: f32, %o: f32):
    %n = arith.negf %i : f32
    linalg.yield %n : f32
  } -> tensor<8xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%i: f32, %o: f32):
    %m = arith.mulf %i, %i : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  return %x, %y : tensor<8xf32>, tensor<8xf32>
}
