// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops,distopt-parallelize-loops))' | FileCheck %s
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops,distopt-parallelize-loops{min-work=1000000000}))' | FileCheck %s --check-prefix=SERIAL
// RUN: distopt-opt %s --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops,distopt-parallelize-loops),convert-scf-to-openmp)' | FileCheck %s --check-prefix=OMP

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1) -> (d0)>

// A big elementwise loop: rows in parallel, the contiguous dimension
// sequential (LLVM vectorises it).
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%c1024) step
// CHECK-NEXT: scf.for %[[J:.*]] = %{{.*}} to %c256 step
// CHECK: memref.load %{{.*}}[%[[I]], %[[J]]]
// CHECK-NOT: scf.parallel
// SERIAL-LABEL: func.func @elementwise
// SERIAL-NOT: scf.parallel
// SERIAL: scf.for
// SERIAL-NEXT: scf.for
// OMP-LABEL: func.func @elementwise
// OMP: omp.parallel
// OMP: omp.wsloop
// OMP: omp.loop_nest (%{{.*}}) : index = (%{{.*}}) to (%{{.*}}) step
// OMP: scf.for
func.func @elementwise(%a: memref<1024x256xf32>, %out: memref<1024x256xf32>) {
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<1024x256xf32>) outs(%out : memref<1024x256xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  return
}

// Leading dimensions are kept until there are enough parallel iterations
// for load balance (4 x 8 x 16 = 512 >= 64); the last stays sequential.
// CHECK-LABEL: func.func @heads
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %{{.*}}) = (%{{.*}}, %{{.*}}, %{{.*}}) to (%c4, %c8, %c16)
// CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %c32
func.func @heads(%a: memref<4x8x16x32xf32>, %out: memref<4x8x16x32xf32>) {
  linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : memref<4x8x16x32xf32>) outs(%out : memref<4x8x16x32xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = arith.mulf %x, %x : f32
    linalg.yield %e : f32
  }
  return
}

// A row reduction: rows in parallel, the reduction loop inside, counted in
// the work of the nest.
// CHECK-LABEL: func.func @row_sum
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%c512)
// CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %c128
// CHECK-NOT: scf.parallel
func.func @row_sum(%a: memref<512x128xf32>, %out: memref<512xf32>) {
  linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : memref<512x128xf32>) outs(%out : memref<512xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// Too little work to pay for forking threads: all sequential.
// CHECK-LABEL: func.func @small
// CHECK-NOT: scf.parallel
// CHECK: scf.for
// CHECK-NEXT: scf.for
func.func @small(%a: memref<16x16xf32>, %out: memref<16x16xf32>) {
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<16x16xf32>) outs(%out : memref<16x16xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}

// A parallel loop inside a sequential one (a reduction over the leading
// dimension) is judged by its own work: forking 2048 times for 64
// iterations each does not pay, so it runs sequentially.
// CHECK-LABEL: func.func @column_sum
// CHECK-NOT: scf.parallel
// CHECK: scf.for %{{.*}} = %{{.*}} to %c2048
// CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %c64
// CHECK-NOT: scf.parallel
func.func @column_sum(%a: memref<2048x64xf32>, %out: memref<64xf32>) {
  linalg.generic {indexing_maps = [#id2, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
      ins(%a : memref<2048x64xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  }
  return
}
