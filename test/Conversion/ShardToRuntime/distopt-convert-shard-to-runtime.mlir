// RUN: distopt-opt %s --distopt-convert-shard-to-runtime --split-input-file --verify-diagnostics | FileCheck %s

// A synchronous all-reduce: the call between the input's buffer and the
// result's tensor; an asynchronous one (a gradient bucket) starts where it
// stands and is waited for just before its result is first read, after
// the work in between.
// CHECK-LABEL: func.func @main
// CHECK: call @dort_shard_all_reduce_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (memref<*xf32>, memref<*xf32>, i64, i64) -> ()
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<8xf32>
// CHECK: %[[H:.*]] = call @dort_shard_start_all_reduce_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[TAG:.*]]) : (memref<*xf32>, memref<*xf32>, i64, i64, i64) -> i64
// CHECK: %[[MID:.*]] = dopt.mul %arg1, %arg1
// CHECK: call @dort_shard_wait(%[[H]]) : (i64) -> ()
// CHECK: %[[R:.*]] = bufferization.to_tensor %[[OUT]]
// CHECK: dopt.add %[[R]], %[[MID]]
// CHECK-DAG: func.func private @dort_shard_start_all_reduce_f32(memref<*xf32>, memref<*xf32>, i64, i64, i64) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @dort_shard_wait(i64)
// CHECK-NOT: shard.grid
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
    %s = shard.all_reduce %x on @dopt_grid grid_axes = [1] : tensor<8xf32> -> tensor<8xf32>
    %a = shard.all_reduce %s on @dopt_grid grid_axes = [1] {dopt.async, dopt.bucket = 3 : i64} : tensor<8xf32> -> tensor<8xf32>
    %m = dopt.mul %y, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %r = dopt.add %a, %m : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %s, %r : tensor<8xf32>, tensor<8xf32>
  }
}

// -----

// A result nobody reads is still waited for, before the return.
// CHECK-LABEL: func.func @main
// CHECK: %[[H:.*]] = call @dort_shard_start_all_reduce_f32
// CHECK: call @dort_shard_wait(%[[H]])
// CHECK-NEXT: bufferization.to_tensor
// CHECK-NEXT: return
module {
  shard.grid @dopt_grid(shape = 1x2x1)
  func.func @main(%x: tensor<8xf32>) {
    %a = shard.all_reduce %x on @dopt_grid grid_axes = [1] {dopt.async} : tensor<8xf32> -> tensor<8xf32>
    return
  }
}

// -----

module {
  shard.grid @dopt_grid(shape = 2x2x1)
  func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{collectives over 2 grid axes are not supported (exactly one)}}
    %a = shard.all_reduce %x on @dopt_grid grid_axes = [0, 1] : tensor<8xf32> -> tensor<8xf32>
    return %a : tensor<8xf32>
  }
}
