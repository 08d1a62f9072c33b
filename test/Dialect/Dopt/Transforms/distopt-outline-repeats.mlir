// RUN: distopt-opt %s --split-input-file --distopt-outline-repeats="min-ops=3" | FileCheck %s

// Three layers alike (matmul by the layer's weight, a shared bias, relu):
// one function called three times, each call with its weight and the
// previous layer's output; the bias constant is alike in every copy, so it
// is cloned into the function. The first layer's matmul result is also
// returned by @main: every call returns it.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x4xf32>, %[[W0:[^:]*]]: tensor<4x4xf32>, %[[W1:[^:]*]]: tensor<4x4xf32>, %[[W2:[^:]*]]: tensor<4x4xf32>)
// CHECK-NEXT: %[[C0:.*]]:2 = call @dopt_block_0(%[[X]], %[[W0]])
// CHECK-NEXT: %[[C1:.*]]:2 = call @dopt_block_0(%[[C0]]#1, %[[W1]])
// CHECK-NEXT: %[[C2:.*]]:2 = call @dopt_block_0(%[[C1]]#1, %[[W2]])
// CHECK-NEXT: return %[[C2]]#1, %[[C0]]#0
// CHECK: func.func private @dopt_block_0(%[[H:[^:]*]]: tensor<2x4xf32>, %[[W:[^:]*]]: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK-NEXT: %[[B:.*]] = dopt.constant {value = dense<1.000000e+00> : tensor<4xf32>}
// CHECK-NEXT: %[[M:.*]] = dopt.matmul %[[H]], %[[W]]
// CHECK-NEXT: %[[A:.*]] = dopt.add %[[M]], %[[B]]
// CHECK-NEXT: %[[R:.*]] = dopt.relu %[[A]]
// CHECK-NEXT: return %[[M]], %[[R]]
module {
  func.func @main(%x: tensor<2x4xf32>, %w0: tensor<4x4xf32>, %w1: tensor<4x4xf32>,
                  %w2: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    %b = dopt.constant {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
    %m0 = dopt.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a0 = dopt.add %m0, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %r0 = dopt.relu %a0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %m1 = dopt.matmul %r0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a1 = dopt.add %m1, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %r1 = dopt.relu %a1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %m2 = dopt.matmul %r1, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a2 = dopt.add %m2, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %r2 = dopt.relu %a2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %r2, %m0 : tensor<2x4xf32>, tensor<2x4xf32>
  }
}

// -----

// The same ops, but the second copy's add reads its matmul's operand rather
// than its result: the dataflow differs, nothing is outlined.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: call
// CHECK: return
// CHECK-NOT: func.func private
module {
  func.func @main(%x: tensor<2x4xf32>, %w0: tensor<4x4xf32>, %w1: tensor<4x4xf32>)
      -> tensor<2x4xf32> {
    %m0 = dopt.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a0 = dopt.add %m0, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %r0 = dopt.relu %a0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %m1 = dopt.matmul %r0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a1 = dopt.add %r0, %r0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %r1 = dopt.relu %a1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %s = dopt.add %r1, %m1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %s : tensor<2x4xf32>
  }
}

// -----

// Dropouts of different streams: stream s draws from key k the mask stream
// 0 draws from k + (s << 40) * 0x9E3779B97F4A7C15 (mod 2^64), so each
// dropout's stream becomes part of its key, a constant that differs between
// the copies and is passed to the function as an argument.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x4xf32>, %[[K:[^:]*]]: tensor<i64>)
// CHECK-NEXT: %[[S0:.*]] = dopt.constant {value = dense<0> : tensor<i64>}
// CHECK-NEXT: %[[C0:.*]] = call @dopt_block_0(%[[K]], %[[X]], %[[S0]])
// CHECK-NEXT: %[[S1:.*]] = dopt.constant {value = dense<5367187945662971904> : tensor<i64>}
// CHECK-NEXT: %[[C1:.*]] = call @dopt_block_0(%[[K]], %[[C0]], %[[S1]])
// CHECK-NEXT: return %[[C1]]
// CHECK: func.func private @dopt_block_0(%[[BK:[^:]*]]: tensor<i64>, %[[BX:[^:]*]]: tensor<2x4xf32>, %[[BS:[^:]*]]: tensor<i64>)
// CHECK-NEXT: %[[KEY:.*]] = dopt.add %[[BK]], %[[BS]]
// CHECK-NEXT: dopt.dropout %[[BX]], %[[KEY]] {ratio = 1.000000e-01 : f32, stream = 0 : i64}
module {
  func.func @main(%x: tensor<2x4xf32>, %k: tensor<i64>) -> tensor<2x4xf32> {
    %d0 = dopt.dropout %x, %k {ratio = 1.000000e-01 : f32, stream = 0 : i64} : (tensor<2x4xf32>, tensor<i64>) -> tensor<2x4xf32>
    %e0 = dopt.exp %d0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %n0 = dopt.neg %e0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %d1 = dopt.dropout %n0, %k {ratio = 1.000000e-01 : f32, stream = 1 : i64} : (tensor<2x4xf32>, tensor<i64>) -> tensor<2x4xf32>
    %e1 = dopt.exp %d1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %n1 = dopt.neg %e1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %n1 : tensor<2x4xf32>
  }
}

// -----

// Copies that differ only in constants around a call (a pipeline's
// micro-batch indices) compute nothing of their own: not outlined.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: dopt_block
// CHECK: return
module {
  func.func private @work(tensor<i64>, tensor<i64>, tensor<i64>, tensor<2x4xf32>) -> tensor<2x4xf32>
  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %a0 = dopt.constant {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %b0 = dopt.constant {value = dense<10> : tensor<i64>} : () -> tensor<i64>
    %c0 = dopt.constant {value = dense<20> : tensor<i64>} : () -> tensor<i64>
    %y0 = func.call @work(%a0, %b0, %c0, %x) : (tensor<i64>, tensor<i64>, tensor<i64>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %a1 = dopt.constant {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %b1 = dopt.constant {value = dense<11> : tensor<i64>} : () -> tensor<i64>
    %c1 = dopt.constant {value = dense<21> : tensor<i64>} : () -> tensor<i64>
    %y1 = func.call @work(%a1, %b1, %c1, %y0) : (tensor<i64>, tensor<i64>, tensor<i64>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %y1 : tensor<2x4xf32>
  }
}
