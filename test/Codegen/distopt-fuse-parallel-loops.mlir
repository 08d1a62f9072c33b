// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops,distopt-fuse-parallel-loops))' | FileCheck %s
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(distopt-fuse-parallel-loops))' | FileCheck %s --check-prefix=OPAQUE

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#bcast = affine_map<(d0, d1, d2) -> (d0, d1, 0)>

// Softmax-like: the fill, the max reduction, exp(x - max) and a square all
// fuse over the rows (d0, d1), through the expand_shape view of the row
// maxima; the view moves above the loop.
// CHECK-LABEL: func.func @softmax
// CHECK: memref.expand_shape
// CHECK-NEXT: scf.parallel (%[[I:[a-z0-9]+]], %[[J:[a-z0-9]+]]) = (%{{.*}}, %{{.*}}) to (%c4, %c8)
// CHECK-NOT: scf.parallel ({{.*}}, {{.*}})
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK: scf.for
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c16)
// CHECK: memref.load %{{.*}}[%[[I]], %[[J]], %c0] : memref<4x8x1xf32>
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c16)
// CHECK: scf.reduce
// CHECK-NEXT: }
// CHECK-NEXT: scf.reduce
// CHECK-NEXT: }
// CHECK-NEXT: return
func.func @softmax(%x: memref<4x8x16xf32>, %y: memref<4x8x16xf32>, %max: memref<4x8xf32>, %e: memref<4x8x16xf32>) {
  %ninf = arith.constant -3.4e38 : f32
  linalg.fill ins(%ninf : f32) outs(%max : memref<4x8xf32>)
  linalg.generic {indexing_maps = [#id3, #row3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<4x8x16xf32>) outs(%max : memref<4x8xf32>) {
  ^bb0(%a: f32, %m: f32):
    %r = arith.maximumf %a, %m : f32
    linalg.yield %r : f32
  }
  %mx = memref.expand_shape %max [[0], [1, 2]] output_shape [4, 8, 1] : memref<4x8xf32> into memref<4x8x1xf32>
  linalg.generic {indexing_maps = [#id3, #bcast, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mx : memref<4x8x16xf32>, memref<4x8x1xf32>) outs(%e : memref<4x8x16xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %d = arith.subf %a, %m : f32
    %r = math.exp %d : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%e : memref<4x8x16xf32>) outs(%y : memref<4x8x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %a : f32
    linalg.yield %r : f32
  }
  return
}

// A transpose reads rows the first loop writes in other iterations: the
// loops stay apart.
// CHECK-LABEL: func.func @transpose_not_fused
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK: scf.parallel
func.func @transpose_not_fused(%x: memref<8x8xf32>, %t: memref<8x8xf32>, %y: memref<8x8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x8xf32>) outs(%t : memref<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %a : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<8x8xf32>) outs(%y : memref<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}

// A write in between (a call that may touch memory) ends the run, and loops
// over different bounds do not fuse.
// CHECK-LABEL: func.func @barriers
// CHECK: scf.parallel
// CHECK: call @opaque
// CHECK: scf.parallel
// CHECK: scf.parallel
func.func private @opaque(memref<8x8xf32>)
func.func @barriers(%x: memref<8x8xf32>, %y: memref<8x8xf32>, %z: memref<4x8xf32>) {
  %one = arith.constant 1.0 : f32
  linalg.fill ins(%one : f32) outs(%x : memref<8x8xf32>)
  func.call @opaque(%x) : (memref<8x8xf32>) -> ()
  linalg.fill ins(%one : f32) outs(%y : memref<8x8xf32>)
  linalg.fill ins(%one : f32) outs(%z : memref<4x8xf32>)
  return
}

// The allocation of a buffer that the second loop writes (bufferization
// puts it right before its first writer) moves above the first loop and
// does not stop the fusion.
// CHECK-LABEL: func.func @alloc_between
// CHECK: memref.alloc
// CHECK-NEXT: scf.parallel
// CHECK-NOT: scf.parallel (%{{[a-z0-9]+}}, %{{[a-z0-9]+}})
// CHECK: return
func.func @alloc_between(%x: memref<8x8xf32>, %y: memref<8x8xf32>) {
  %one = arith.constant 1.0 : f32
  linalg.fill ins(%one : f32) outs(%y : memref<8x8xf32>)
  %t = memref.alloc() : memref<8x8xf32>
  linalg.copy ins(%x : memref<8x8xf32>) outs(%t : memref<8x8xf32>)
  return
}

// A linalg op on buffers inside a loop touches memory through its region:
// its effects count (here: rows filled by one loop, columns read by the
// next), and the loops stay apart.
// OPAQUE-LABEL: func.func @opaque_writer
// OPAQUE: scf.parallel
// OPAQUE: linalg.fill
// OPAQUE: scf.reduce
// OPAQUE: scf.parallel
func.func @opaque_writer(%x: memref<4x4xf32>, %y: memref<4x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    %row = memref.subview %x[%i, 0] [1, 4] [1, 1] : memref<4x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    linalg.fill ins(%one : f32) outs(%row : memref<1x4xf32, strided<[4, 1], offset: ?>>)
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    scf.for %j = %c0 to %c4 step %c1 {
      %v = memref.load %x[%j, %i] : memref<4x4xf32>
      memref.store %v, %y[%i, %j] : memref<4x4xf32>
    }
    scf.reduce
  }
  return
}

// A memref of another origin (reinterpret_cast: the same memory with other
// strides) is not taken for a buffer of its own: no fusion.
// CHECK-LABEL: func.func @reinterpreted
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK: scf.parallel
func.func @reinterpreted(%x: memref<4x4xf32>, %y: memref<4x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %one = arith.constant 1.0 : f32
  %t = memref.reinterpret_cast %x to offset: [0], sizes: [4, 4], strides: [1, 4] : memref<4x4xf32> to memref<4x4xf32, strided<[1, 4]>>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c4) step (%c1, %c1) {
    memref.store %one, %x[%i, %j] : memref<4x4xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c4) step (%c1, %c1) {
    %v = memref.load %t[%i, %j] : memref<4x4xf32, strided<[1, 4]>>
    memref.store %v, %y[%i, %j] : memref<4x4xf32>
    scf.reduce
  }
  return
}

// A subview keeps the index of every dimension it does not shift or
// stride: filling a padded buffer and copying into its interior (offset 1
// in the spatial dimensions) fuse over (n, c).
// CHECK-LABEL: func.func @pad_interior
// CHECK: scf.parallel (%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) = (%{{.*}}, %{{.*}}) to (%c2, %c3)
// CHECK: scf.parallel (%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) = (%{{.*}}, %{{.*}}) to (%c6, %c6)
// CHECK: scf.parallel (%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) = (%{{.*}}, %{{.*}}) to (%c4, %c4)
// CHECK: scf.reduce
// CHECK-NEXT: }
// CHECK-NEXT: scf.reduce
// CHECK-NEXT: }
// CHECK-NEXT: return
func.func @pad_interior(%x: memref<2x3x4x4xf32>, %padded: memref<2x3x6x6xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%padded : memref<2x3x6x6xf32>)
  %interior = memref.subview %padded[0, 0, 1, 1] [2, 3, 4, 4] [1, 1, 1, 1] : memref<2x3x6x6xf32> to memref<2x3x4x4xf32, strided<[108, 36, 6, 1], offset: 7>>
  linalg.copy ins(%x : memref<2x3x4x4xf32>) outs(%interior : memref<2x3x4x4xf32, strided<[108, 36, 6, 1], offset: 7>>)
  return
}

// A subview shifted along the fused dimension (row i+1 read by iteration i
// of a loop with the same bounds) does not fuse.
// CHECK-LABEL: func.func @shifted_rows
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK: scf.parallel
func.func @shifted_rows(%x: memref<9x8xf32>, %y: memref<8x8xf32>) {
  %one = arith.constant 1.0 : f32
  %head = memref.subview %x[0, 0] [8, 8] [1, 1] : memref<9x8xf32> to memref<8x8xf32, strided<[8, 1]>>
  linalg.fill ins(%one : f32) outs(%head : memref<8x8xf32, strided<[8, 1]>>)
  %next = memref.subview %x[1, 0] [8, 8] [1, 1] : memref<9x8xf32> to memref<8x8xf32, strided<[8, 1], offset: 8>>
  linalg.copy ins(%next : memref<8x8xf32, strided<[8, 1], offset: 8>>) outs(%y : memref<8x8xf32>)
  return
}
