// RUN: distopt-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(distopt-update-in-place))' | FileCheck %s
// RUN: distopt-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(distopt-update-in-place),one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},drop-equivalent-buffer-results,func.func(distopt-drop-in-place-results),canonicalize)' | FileCheck %s --check-prefix=BUF

// A weight's update (computed flat, reshaped back) and an optimizer
// state's: the ops computing them write into the arguments, which become
// writable; the results are marked with the argument they update. After
// bufferization the results are gone and nothing is copied.
#map = affine_map<(d0) -> (d0)>
func.func @step(%g: tensor<4xf32>,
                %m: tensor<4xf32> {dopt.name = "opt.m:w"},
                %w: tensor<2x2xf32> {dopt.weight = {name = "w"}})
    -> (tensor<f32> {dopt.name = "loss"},
        tensor<4xf32> {dopt.name = "opt.m:w", dopt.updates = "opt.m:w"},
        tensor<2x2xf32> {dopt.name = "update:w", dopt.updates_weight = "w"})
    attributes {dopt.update_in_place} {
  %loss = tensor.empty() : tensor<f32>
  %e = tensor.empty() : tensor<4xf32>
  %nm = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%m, %g : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %cw = tensor.collapse_shape %w [[0, 1]] : tensor<2x2xf32> into tensor<4xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %nw = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%cw, %nm : tensor<4xf32>, tensor<4xf32>) outs(%e2 : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %r = tensor.expand_shape %nw [[0, 1]] output_shape [2, 2] : tensor<4xf32> into tensor<2x2xf32>
  return %loss, %nm, %r : tensor<f32>, tensor<4xf32>, tensor<2x2xf32>
}
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<4xf32> {bufferization.writable = true, dopt.name = "opt.m:w"}
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<2x2xf32> {bufferization.writable = true, dopt.weight
// CHECK-SAME: dopt.in_place_of = 1 : i64
// CHECK-SAME: dopt.in_place_of = 2 : i64
// CHECK: linalg.generic {{.*}} outs(%[[M]] : tensor<4xf32>)
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %[[W]] {{\[\[}}0, 1]] : tensor<2x2xf32> into tensor<4xf32>
// CHECK: linalg.generic {{.*}} outs(%[[FLAT]] : tensor<4xf32>)

// BUF-LABEL: func.func @step
// BUF-SAME: -> (memref<f32> {dopt.name = "loss"})
// BUF-NOT: memref.copy
// BUF-NOT: memref.alloc() {{.*}} : memref<4xf32>
// BUF: return %{{.*}} : memref<f32>

// -----

// The old weight is read after the new one is computed (here: returned as
// well): bufferization cannot write in place, so the update is copied into
// the weight's buffer at the end.
#map = affine_map<(d0) -> (d0)>
func.func @late_read(%g: tensor<4xf32>, %w: tensor<4xf32> {dopt.weight = {name = "w"}})
    -> (tensor<4xf32> {dopt.name = "update:w", dopt.updates_weight = "w"}, tensor<f32>)
    attributes {dopt.update_in_place} {
  %e = tensor.empty() : tensor<4xf32>
  %nw = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%w, %g : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %z = tensor.empty() : tensor<f32>
  %sum = linalg.reduce ins(%w : tensor<4xf32>) outs(%z : tensor<f32>) dimensions = [0]
    (%in: f32, %init: f32) {
      %0 = arith.addf %in, %init : f32
      linalg.yield %0 : f32
    }
  return %nw, %sum : tensor<4xf32>, tensor<f32>
}
// BUF-LABEL: func.func @late_read
// BUF-SAME: %[[W:[a-z0-9]+]]: memref<4xf32> {dopt.weight = {name = "w"}}) -> memref<f32>
// BUF: %[[NEW:.*]] = memref.alloc() {{.*}} : memref<4xf32>
// BUF: linalg.generic {{.*}} outs(%[[NEW]] : memref<4xf32>)
// BUF: linalg.reduce ins(%[[W]]
// BUF: memref.copy %[[NEW]], %[[W]]
// BUF: return

// -----

// Unmarked functions (an evaluation program, a parameter server's) and
// results that update nothing of the function keep their results.
#map = affine_map<(d0) -> (d0)>
func.func @unmarked(%w: tensor<4xf32> {dopt.weight = {name = "w"}})
    -> (tensor<4xf32> {dopt.updates_weight = "w"}) {
  %e = tensor.empty() : tensor<4xf32>
  %nw = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%w : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %nw : tensor<4xf32>
}
// CHECK-LABEL: func.func @unmarked
// CHECK-NOT: in_place_of
// CHECK: outs(%{{.*}} : tensor<4xf32>)
// BUF-LABEL: func.func @unmarked
// BUF-SAME: -> (memref<4xf32> {dopt.updates_weight = "w"})

// -----

// A function adding to a sum it takes (a pipeline stage's backward, an
// accumulated micro-batch: dopt.accumulates names the sum's argument)
// adds into that sum's buffer: two calls share one buffer of sums.
#map = affine_map<(d0) -> (d0)>
func.func private @backward(%sum: tensor<4xf32>, %g: tensor<4xf32>)
    -> (tensor<4xf32> {dopt.accumulates = 0 : i64}) {
  %e = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%sum, %g : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %x = arith.addf %a, %b : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}
func.func @main(%g: tensor<4xf32>, %h: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %z = linalg.fill ins(%c : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s1 = call @backward(%z, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s2 = call @backward(%s1, %h) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s2 : tensor<4xf32>
}
// CHECK-LABEL: func.func private @backward
// CHECK-SAME: (%[[SUM:[a-z0-9]+]]: tensor<4xf32>
// CHECK: linalg.generic {{.*}} outs(%[[SUM]] : tensor<4xf32>)

// BUF-LABEL: func.func private @backward
// BUF-SAME: (%[[SUM:[a-z0-9]+]]: memref<4xf32>, %{{.*}}: memref<4xf32>) {
// BUF: linalg.generic {{.*}} outs(%[[SUM]] : memref<4xf32>)
// BUF-LABEL: func.func @main
// BUF: %[[SUMS:.*]] = memref.alloc
// BUF-NOT: memref.alloc
// BUF: call @backward(%[[SUMS]], %{{.*}})
// BUF: call @backward(%[[SUMS]], %{{.*}})
// BUF: return %[[SUMS]]
