// RUN: distopt-opt %s --distopt-approximate-math | FileCheck %s

// exp/log/tanh/erf on f32 become inline arithmetic; sqrt (an LLVM intrinsic
// that vectorises anyway) stays.
// CHECK-LABEL: func.func @f
// CHECK-NOT: math.exp
// CHECK-NOT: math.log
// CHECK-NOT: math.tanh
// CHECK-NOT: math.erf
// CHECK: math.sqrt
func.func @f(%x: f32) -> (f32, f32, f32, f32, f32) {
  %a = math.exp %x : f32
  %b = math.log %x : f32
  %c = math.tanh %x : f32
  %d = math.erf %x : f32
  %e = math.sqrt %x : f32
  return %a, %b, %c, %d, %e : f32, f32, f32, f32, f32
}
