// RUN: distopt-opt %s -split-input-file -verify-diagnostics

// One case per error the dopt ops can report: ODS type constraints (checked
// first), wrong explicit result types, then every check in DoptOps.cpp
// (inferReturnTypes). A failed inference is always followed by MLIR's own
// "failed to infer returned types" on the same op.

//===----------------------------------------------------------------------===//
// ODS type constraints
//===----------------------------------------------------------------------===//

func.func @dynamic_shape(%a: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error@+1 {{'dopt.add' op operand #0 must be statically shaped tensor of}}
  %0 = dopt.add %a, %a : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

func.func @unranked(%a: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error@+1 {{'dopt.relu' op operand #0 must be statically shaped tensor of}}
  %0 = dopt.relu %a : (tensor<*xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

func.func @float_op_on_integers(%a: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'dopt.exp' op operand #0 must be statically shaped tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<4xi32>'}}
  %0 = dopt.exp %a : (tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @arithmetic_on_i1(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error@+1 {{'dopt.add' op operand #0 must be statically shaped tensor of}}
  %0 = dopt.add %a, %a : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @unsupported_element_type(%a: tensor<4xi4>) -> tensor<4xi4> {
  // expected-error@+1 {{'dopt.neg' op operand #0 must be statically shaped tensor of}}
  %0 = dopt.neg %a : (tensor<4xi4>) -> tensor<4xi4>
  return %0 : tensor<4xi4>
}

// -----

func.func @not_on_float(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dopt.not' op operand #0 must be statically shaped tensor of 1-bit signless integer or 8-bit signless integer or 16-bit signless integer or 32-bit signless integer or 64-bit signless integer or 8-bit unsigned integer or 16-bit unsigned integer or 32-bit unsigned integer or 64-bit unsigned integer values, but got 'tensor<4xf32>'}}
  %0 = dopt.not %a : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @comparison_result_not_i1(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dopt.less' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = dopt.less %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gather_float_indices(%a: tensor<4xf32>, %i: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'dopt.gather' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = dopt.gather %a, %i {axis = 0 : i64} : (tensor<4xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @where_condition_not_i1(%c: tensor<4xi8>, %a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dopt.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = dopt.where %c, %a, %a : (tensor<4xi8>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @shape_result_i32(%a: tensor<4xf32>) -> tensor<1xi32> {
  // expected-error@+1 {{'dopt.shape' op result #0 must be statically shaped tensor of 64-bit signless integer values, but got 'tensor<1xi32>'}}
  %0 = dopt.shape %a {start = 0 : i64, end = 1 : i64} : (tensor<4xf32>) -> tensor<1xi32>
  return %0 : tensor<1xi32>
}

// -----

func.func @missing_attribute(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dopt.softmax' op requires attribute 'axis'}}
  %0 = dopt.softmax %a : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @wrong_attribute_type(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'dopt.softmax' op attribute 'axis' failed to satisfy constraint: 64-bit signless integer attribute}}
  %0 = dopt.softmax %a {axis = 0 : i32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gemm_too_many_operands(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {
  // expected-error@+1 {{'dopt.gemm' op operand group starting at #2 requires 0 or 1 element, but found 2}}
  %0 = "dopt.gemm"(%a, %a, %a, %a) : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

func.func @wrong_operand_count(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'dopt.add' op expected 2 operands, but found 1}}
  %0 = "dopt.add"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

//===----------------------------------------------------------------------===//
// Wrong explicit result types
//===----------------------------------------------------------------------===//

// -----

func.func @wrong_result_shape(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  // expected-error@+2 {{'dopt.add' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x3xf32>'}}
  // expected-error@+1 {{'dopt.add' op failed to infer returned types}}
  %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

func.func @bitcast_width(%a: tensor<2xf32>) -> tensor<2xf64> {
  // expected-error@+2 {{'dopt.bitcast' op reinterprets f32 (32 bits) as f64 (64 bits): the widths must be equal}}
  // expected-error@+1 {{'dopt.bitcast' op failed to infer returned types}}
  %0 = dopt.bitcast %a {to = f64} : (tensor<2xf32>) -> tensor<2xf64>
  return %0 : tensor<2xf64>
}

// -----

func.func @wrong_result_element_type(%a: tensor<2x3xf32>) -> tensor<2x3xf16> {
  // expected-error@+2 {{'dopt.cast' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf16>'}}
  // expected-error@+1 {{'dopt.cast' op failed to infer returned types}}
  %0 = dopt.cast %a {to = f32} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}

// -----

func.func @wrong_result_count(%a: tensor<6xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.split' op inferred type(s) 'tensor<3xf32>', 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error@+1 {{'dopt.split' op failed to infer returned types}}
  %0 = dopt.split %a {axis = 0 : i64, sizes = array<i64: 3, 3>} : (tensor<6xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @wrong_constant_type() -> tensor<2xi32> {
  // expected-error@+2 {{'dopt.constant' op inferred type(s) 'tensor<2xi64>' are incompatible with return type(s) of operation 'tensor<2xi32>'}}
  // expected-error@+1 {{'dopt.constant' op failed to infer returned types}}
  %0 = dopt.constant {value = dense<[2, 4]> : tensor<2xi64>} : () -> tensor<2xi32>
  return %0 : tensor<2xi32>
}

// -----

func.func @wrong_weight_type() -> tensor<4x4xf16> {
  // expected-error@+2 {{'dopt.weight' op inferred type(s) 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf16>'}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4x4xf32>} : () -> tensor<4x4xf16>
  return %0 : tensor<4x4xf16>
}

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

// -----

func.func @constant_vector_value() -> tensor<2xf32> {
  // expected-error@+2 {{'dopt.constant' op value must be a statically shaped tensor}}
  // expected-error@+1 {{'dopt.constant' op failed to infer returned types}}
  %0 = dopt.constant {value = dense<1.0> : vector<2xf32>} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @weight_data_type_narrower() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op data_type bf16 must be a float type wider than the weight's f32}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4xf32>, data_type = bf16} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_type_not_tensor() -> tensor<f32> {
  // expected-error@+2 {{'dopt.weight' op type must be a statically shaped tensor type}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = f32} : () -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @weight_type_dynamic() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op type must be a statically shaped tensor type}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<?xf32>} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_type_complex() -> tensor<2xf32> {
  // Used to crash (bit width of a complex element type).
  // expected-error@+2 {{'dopt.weight' op type tensor<2xcomplex<f32>> does not have a dopt element type}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<2xcomplex<f32>>, location = "w.bin", length = 16} : () -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @weight_type_index() -> tensor<2xi64> {
  // expected-error@+2 {{'dopt.weight' op type tensor<2xindex> does not have a dopt element type}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<2xindex>} : () -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @weight_empty_name() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op requires a non-empty name}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "", type = tensor<4xf32>} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_empty_location() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op external-data location must not be empty}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4xf32>, location = ""} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_negative_offset() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op external-data offset must be non-negative}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4xf32>, location = "w.bin", offset = -8} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_short_length() -> tensor<4x4xbf16> {
  // expected-error@+2 {{'dopt.weight' op external-data length 31 is smaller than the 32 bytes of tensor<4x4xbf16>}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4x4xbf16>, location = "w.bin", length = 31} : () -> tensor<4x4xbf16>
  return %0 : tensor<4x4xbf16>
}

// -----

func.func @weight_short_length_i1() -> tensor<9xi1> {
  // i1 data takes one byte per element.
  // expected-error@+2 {{'dopt.weight' op external-data length 2 is smaller than the 9 bytes of tensor<9xi1>}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "mask", type = tensor<9xi1>, location = "w.bin", length = 2} : () -> tensor<9xi1>
  return %0 : tensor<9xi1>
}

// -----

func.func @weight_offset_without_location() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op offset/length need an external-data location}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4xf32>, offset = 0} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @weight_length_without_location() -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.weight' op offset/length need an external-data location}}
  // expected-error@+1 {{'dopt.weight' op failed to infer returned types}}
  %0 = dopt.weight {name = "w", type = tensor<4xf32>, length = 16} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

func.func @not_broadcastable(%a: tensor<2x3xf32>, %b: tensor<2xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.add' op operand shapes are not broadcast-compatible: tensor<2x3xf32> tensor<2xf32>}}
  // expected-error@+1 {{'dopt.add' op failed to infer returned types}}
  %0 = dopt.add %a, %b : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @zero_does_not_broadcast_with_two(%a: tensor<0xf32>, %b: tensor<2xf32>) -> tensor<0xi1> {
  // expected-error@+2 {{'dopt.equal' op operand shapes are not broadcast-compatible: tensor<0xf32> tensor<2xf32>}}
  // expected-error@+1 {{'dopt.equal' op failed to infer returned types}}
  %0 = dopt.equal %a, %b : (tensor<0xf32>, tensor<2xf32>) -> tensor<0xi1>
  return %0 : tensor<0xi1>
}

// -----

func.func @element_types_differ(%a: tensor<3xf32>, %b: tensor<3xf16>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.mul' op operand element types differ: f32 and f16}}
  // expected-error@+1 {{'dopt.mul' op failed to infer returned types}}
  %0 = dopt.mul %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @compare_element_types_differ(%a: tensor<3xi32>, %b: tensor<3xi64>) -> tensor<3xi1> {
  // expected-error@+2 {{'dopt.greater_equal' op operand element types differ: i32 and i64}}
  // expected-error@+1 {{'dopt.greater_equal' op failed to infer returned types}}
  %0 = dopt.greater_equal %a, %b : (tensor<3xi32>, tensor<3xi64>) -> tensor<3xi1>
  return %0 : tensor<3xi1>
}

// -----

func.func @pow_not_broadcastable(%a: tensor<3xf32>, %b: tensor<4xi64>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.pow' op operand shapes are not broadcast-compatible: tensor<3xf32> tensor<4xi64>}}
  // expected-error@+1 {{'dopt.pow' op failed to infer returned types}}
  %0 = dopt.pow %a, %b : (tensor<3xf32>, tensor<4xi64>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @gelu_approximate(%a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.gelu' op approximate must be "none" or "tanh", got "erf"}}
  // expected-error@+1 {{'dopt.gelu' op failed to infer returned types}}
  %0 = dopt.gelu %a {approximate = "erf"} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @where_value_types_differ(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<3xi32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.where' op value element types differ: f32 and i32}}
  // expected-error@+1 {{'dopt.where' op failed to infer returned types}}
  %0 = dopt.where %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<3xi32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @where_not_broadcastable(%c: tensor<2xi1>, %a: tensor<3xf32>, %b: tensor<f32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.where' op operand shapes are not broadcast-compatible: tensor<2xi1> tensor<3xf32> tensor<f32>}}
  // expected-error@+1 {{'dopt.where' op failed to infer returned types}}
  %0 = dopt.where %c, %a, %b : (tensor<2xi1>, tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @cast_to_non_dopt_type(%a: tensor<3xf32>) -> tensor<3xi8> {
  // (A result type of tensor<3xi4> would fail the ODS result constraint first.)
  // expected-error@+2 {{'dopt.cast' op cannot cast to i4: not a dopt element type}}
  // expected-error@+1 {{'dopt.cast' op failed to infer returned types}}
  %0 = dopt.cast %a {to = i4} : (tensor<3xf32>) -> tensor<3xi8>
  return %0 : tensor<3xi8>
}

// -----

func.func @cast_to_signed_i8(%a: tensor<3xf32>) -> tensor<3xi8> {
  // expected-error@+2 {{'dopt.cast' op cannot cast to si8: not a dopt element type}}
  // expected-error@+1 {{'dopt.cast' op failed to infer returned types}}
  %0 = dopt.cast %a {to = si8} : (tensor<3xf32>) -> tensor<3xi8>
  return %0 : tensor<3xi8>
}

// -----

func.func @cast_to_tensor_type(%a: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.cast' op cannot cast to tensor<3xf32>: not a dopt element type}}
  // expected-error@+1 {{'dopt.cast' op failed to infer returned types}}
  %0 = dopt.cast %a {to = tensor<3xf32>} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

// -----

func.func @softmax_axis_out_of_range(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.softmax' op axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.softmax' op failed to infer returned types}}
  %0 = dopt.softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @log_softmax_negative_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // Axes are canonical (non-negative) in dopt.
  // expected-error@+2 {{'dopt.log_softmax' op axis -1 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.log_softmax' op failed to infer returned types}}
  %0 = dopt.log_softmax %a {axis = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @batch_norm_rank(%a: tensor<3xf32>, %p: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.batch_norm' op input must have rank >= 2 (N, C, ...), got tensor<3xf32>}}
  // expected-error@+1 {{'dopt.batch_norm' op failed to infer returned types}}
  %0 = dopt.batch_norm %a, %p, %p, %p, %p {epsilon = 1.0e-5 : f32} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @batch_norm_channels(%a: tensor<2x3x4x4xf32>, %p: tensor<3xf32>, %q: tensor<4xf32>) -> tensor<2x3x4x4xf32> {
  // expected-error@+2 {{'dopt.batch_norm' op mean must be 1-D with 3 channels, got tensor<4xf32>}}
  // expected-error@+1 {{'dopt.batch_norm' op failed to infer returned types}}
  %0 = dopt.batch_norm %a, %p, %p, %q, %p {epsilon = 1.0e-5 : f32} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  return %0 : tensor<2x3x4x4xf32>
}

// -----

func.func @batch_norm_param_rank(%a: tensor<2x3xf32>, %p: tensor<3xf32>, %q: tensor<1x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.batch_norm' op scale must be 1-D with 3 channels, got tensor<1x3xf32>}}
  // expected-error@+1 {{'dopt.batch_norm' op failed to infer returned types}}
  %0 = dopt.batch_norm %a, %q, %p, %p, %p {epsilon = 1.0e-5 : f32} : (tensor<2x3xf32>, tensor<1x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @batch_norm_element_type(%a: tensor<2x3xf16>, %p: tensor<3xf16>, %q: tensor<3xf32>) -> tensor<2x3xf16> {
  // expected-error@+2 {{'dopt.batch_norm' op var element type f32 differs from the input's f16}}
  // expected-error@+1 {{'dopt.batch_norm' op failed to infer returned types}}
  %0 = dopt.batch_norm %a, %p, %p, %p, %q {epsilon = 1.0e-5 : f32} : (tensor<2x3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf16>, tensor<3xf32>) -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}

// -----

func.func @layer_norm_axis(%a: tensor<2x3xf32>, %s: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.layer_norm' op axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @layer_norm_scale_shape(%a: tensor<2x3x4xf32>, %s: tensor<3xf32>) -> tensor<2x3x4xf32> {
  // expected-error@+2 {{'dopt.layer_norm' op scale of type tensor<3xf32> does not broadcast to the normalised shape [3, 4]}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @layer_norm_scale_rank(%a: tensor<2x3x4xf32>, %s: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  // The scale may not have more dimensions than are normalised.
  // expected-error@+2 {{'dopt.layer_norm' op scale of type tensor<3x4xf32> does not broadcast to the normalised shape [4]}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @layer_norm_bias_shape(%a: tensor<2x4xf32>, %s: tensor<4xf32>, %b: tensor<2xf32>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.layer_norm' op bias of type tensor<2xf32> does not broadcast to the normalised shape [4]}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<2xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @layer_norm_scale_element_type(%a: tensor<2x4xf16>, %s: tensor<4xf32>) -> tensor<2x4xf16> {
  // expected-error@+2 {{'dopt.layer_norm' op scale element type f32 differs from the input's f16}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x4xf16>, tensor<4xf32>) -> tensor<2x4xf16>
  return %0 : tensor<2x4xf16>
}

// -----

func.func @layer_norm_bias_element_type(%a: tensor<2x4xf32>, %s: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.layer_norm' op bias element type bf16 differs from the input's f32}}
  // expected-error@+1 {{'dopt.layer_norm' op failed to infer returned types}}
  %0 = dopt.layer_norm %a, %s, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xbf16>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_rank0(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error@+2 {{'dopt.matmul' op operands must have rank >= 1}}
  // expected-error@+1 {{'dopt.matmul' op failed to infer returned types}}
  %0 = dopt.matmul %a, %b : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @matmul_element_types(%a: tensor<2x3xf32>, %b: tensor<3x4xf16>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.matmul' op operand element types differ: f32 and f16}}
  // expected-error@+1 {{'dopt.matmul' op failed to infer returned types}}
  %0 = dopt.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf16>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error@+2 {{'dopt.matmul' op contracting dimensions differ: tensor<2x3xf32> and tensor<4x5xf32>}}
  // expected-error@+1 {{'dopt.matmul' op failed to infer returned types}}
  %0 = dopt.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_vector_contraction(%a: tensor<3xf32>, %b: tensor<4xf32>) -> tensor<f32> {
  // expected-error@+2 {{'dopt.matmul' op contracting dimensions differ: tensor<3xf32> and tensor<4xf32>}}
  // expected-error@+1 {{'dopt.matmul' op failed to infer returned types}}
  %0 = dopt.matmul %a, %b : (tensor<3xf32>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @matmul_batch(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) -> tensor<2x4x5xf32> {
  // expected-error@+2 {{'dopt.matmul' op batch dimensions are not broadcast-compatible: tensor<2x4x3xf32> and tensor<3x3x5xf32>}}
  // expected-error@+1 {{'dopt.matmul' op failed to infer returned types}}
  %0 = dopt.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x5xf32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

func.func @gemm_rank(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error@+2 {{'dopt.gemm' op A and B must be 2-D, got tensor<2x3x4xf32> and tensor<4x5xf32>}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @gemm_element_types(%a: tensor<2x3xf32>, %b: tensor<3x4xbf16>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.gemm' op A and B element types differ}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b : (tensor<2x3xf32>, tensor<3x4xbf16>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gemm_contraction(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x4xf32> {
  // trans_b is missing: op(B) is 4x3.
  // expected-error@+2 {{'dopt.gemm' op contracting dimensions differ: op(A) is 2x3, op(B) is 4x3}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gemm_contraction_trans_a(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error@+2 {{'dopt.gemm' op contracting dimensions differ: op(A) is 3x2, op(B) is 3x4}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b {trans_a = true} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

func.func @gemm_c_element_type(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<4xf16>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.gemm' op C element type differs from A's}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b, %c : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf16>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gemm_c_shape(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<2xf32>) -> tensor<2x4xf32> {
  // C broadcasts to the result in one direction only: 2 against the trailing 4 fails.
  // expected-error@+2 {{'dopt.gemm' op C of type tensor<2xf32> does not broadcast to the result shape [2, 4]}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b, %c : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<2xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gemm_c_larger_than_result(%a: tensor<1x3xf32>, %b: tensor<3x4xf32>, %c: tensor<2x4xf32>) -> tensor<1x4xf32> {
  // expected-error@+2 {{'dopt.gemm' op C of type tensor<2x4xf32> does not broadcast to the result shape [1, 4]}}
  // expected-error@+1 {{'dopt.gemm' op failed to infer returned types}}
  %0 = dopt.gemm %a, %b, %c : (tensor<1x3xf32>, tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

// -----

func.func @conv_rank(%x: tensor<1x3x8xf32>, %w: tensor<4x3x3xf32>) -> tensor<1x4x6xf32> {
  // expected-error@+2 {{'dopt.conv' op input and weight must be 4-D (NCHW, MCkHkW), got tensor<1x3x8xf32> and tensor<4x3x3xf32>}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8xf32>, tensor<4x3x3xf32>) -> tensor<1x4x6xf32>
  return %0 : tensor<1x4x6xf32>
}

// -----

func.func @conv_element_types(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf16>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op input and weight element types differ}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf16>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_empty_kernel(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x0x3xf32>) -> tensor<1x4x9x6xf32> {
  // expected-error@+2 {{'dopt.conv' op weight tensor<4x3x0x3xf32> has an empty kernel}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x0x3xf32>) -> tensor<1x4x9x6xf32>
  return %0 : tensor<1x4x9x6xf32>
}

// -----

func.func @conv_strides_count(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op strides must have 2 entries, got 1}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_strides_zero(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op strides must be positive, got [1, 0]}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 0>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_dilations(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op dilations must be positive, got [-1, 1]}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: -1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_dilations_count(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op dilations must have 2 entries, got 3}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_pads_count(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error@+2 {{'dopt.conv' op pads must have 4 entries, got 2}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return %0 : tensor<1x4x8x8xf32>
}

// -----

func.func @conv_pads_negative(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op pads must be non-negative, got [0, -1, 0, 0]}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, -1, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_group_zero(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op group 0 must be positive and divide the 4 input and 4 output channels}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 0 : i64} : (tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_group_divides_output(%x: tensor<1x4x8x8xf32>, %w: tensor<6x1x3x3xf32>) -> tensor<1x6x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op group 4 must be positive and divide the 4 input and 6 output channels}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<6x1x3x3xf32>) -> tensor<1x6x6x6xf32>
  return %0 : tensor<1x6x6x6xf32>
}

// -----

func.func @conv_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op weight has 4 input channels per group, expected 4/2}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}

// -----

func.func @conv_bias_shape(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op bias must be 1-D with 4 entries, got tensor<3xf32>}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_bias_element_type(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf16>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{'dopt.conv' op bias element type f16 differs from the input's f32}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf16>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

func.func @conv_kernel_too_big(%x: tensor<1x3x4x4xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32> {
  // Dilation 2 makes the 3x3 kernel span 5x5.
  // expected-error@+2 {{'dopt.conv' op kernel tensor<4x3x3x3xf32> does not fit input tensor<1x3x4x4xf32> with pads [0, 0, 0, 0]}}
  // expected-error@+1 {{'dopt.conv' op failed to infer returned types}}
  %0 = dopt.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 2, 2>, group = 1 : i64} : (tensor<1x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x1x1xf32>
  return %0 : tensor<1x4x1x1xf32>
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

// -----

func.func @pool_rank(%x: tensor<1x3x8xf32>) -> tensor<1x3x4xf32> {
  // expected-error@+2 {{'dopt.max_pool' op input must be a 4-D (NCHW) tensor, got tensor<1x3x8xf32>}}
  // expected-error@+1 {{'dopt.max_pool' op failed to infer returned types}}
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<1x3x8xf32>) -> tensor<1x3x4xf32>
  return %0 : tensor<1x3x4xf32>
}

// -----

func.func @pool_kernel_count(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'dopt.avg_pool' op kernel_shape must have 2 entries, got 1}}
  // expected-error@+1 {{'dopt.avg_pool' op failed to infer returned types}}
  %0 = dopt.avg_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_kernel_zero(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'dopt.max_pool' op kernel_shape must be positive, got [0, 2]}}
  // expected-error@+1 {{'dopt.max_pool' op failed to infer returned types}}
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 0, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_strides(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'dopt.avg_pool' op strides must be positive, got [2, -2]}}
  // expected-error@+1 {{'dopt.avg_pool' op failed to infer returned types}}
  %0 = dopt.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, -2>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_dilations(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'dopt.max_pool' op dilations must have 2 entries, got 0}}
  // expected-error@+1 {{'dopt.max_pool' op failed to infer returned types}}
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_pads_negative(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  // expected-error@+2 {{'dopt.avg_pool' op pads must be non-negative, got [0, 0, -1, 0]}}
  // expected-error@+1 {{'dopt.avg_pool' op failed to infer returned types}}
  %0 = dopt.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, -1, 0>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  return %0 : tensor<1x3x4x4xf32>
}

// -----

func.func @pool_pads_not_smaller_than_kernel(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x5x5xf32> {
  // expected-error@+2 {{'dopt.max_pool' op pads [0, 0, 2, 0] must be smaller than the kernel [2, 2]}}
  // expected-error@+1 {{'dopt.max_pool' op failed to infer returned types}}
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 2, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x5x5xf32>
  return %0 : tensor<1x3x5x5xf32>
}

// -----

func.func @pool_window_too_big(%x: tensor<1x3x4x4xf32>) -> tensor<1x3x1x1xf32> {
  // expected-error@+2 {{'dopt.avg_pool' op window [5, 5] does not fit input tensor<1x3x4x4xf32>}}
  // expected-error@+1 {{'dopt.avg_pool' op failed to infer returned types}}
  %0 = dopt.avg_pool %x {kernel_shape = array<i64: 5, 5>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x1x1xf32>
  return %0 : tensor<1x3x1x1xf32>
}

// -----

func.func @pool_dilated_window_too_big(%x: tensor<1x3x4x4xf32>) -> tensor<1x3x1x1xf32> {
  // A 3x3 window with dilation 2 spans 5x5.
  // expected-error@+2 {{'dopt.max_pool' op window [3, 3] does not fit input tensor<1x3x4x4xf32>}}
  // expected-error@+1 {{'dopt.max_pool' op failed to infer returned types}}
  %0 = dopt.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x1x1xf32>
  return %0 : tensor<1x3x1x1xf32>
}

// -----

func.func @global_avg_pool_rank(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.global_avg_pool' op input must have rank >= 3 (N, C, spatial...)}}
  // expected-error@+1 {{'dopt.global_avg_pool' op failed to infer returned types}}
  %0 = dopt.global_avg_pool %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_axis_out_of_range(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.reduce_sum' op axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.reduce_sum' op failed to infer returned types}}
  %0 = dopt.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @reduce_negative_axis(%x: tensor<2x3xf32>) -> tensor<2x1xf32> {
  // expected-error@+2 {{'dopt.reduce_mean' op axis -1 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.reduce_mean' op failed to infer returned types}}
  %0 = dopt.reduce_mean %x {axes = array<i64: -1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// -----

func.func @reduce_unsorted_axes(%x: tensor<2x3xf32>) -> tensor<1x1xf32> {
  // expected-error@+2 {{'dopt.reduce_max' op axes must be sorted and unique, got [1, 0]}}
  // expected-error@+1 {{'dopt.reduce_max' op failed to infer returned types}}
  %0 = dopt.reduce_max %x {axes = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<1x1xf32>
  return %0 : tensor<1x1xf32>
}

// -----

func.func @reduce_duplicate_axes(%x: tensor<2x3xf32>) -> tensor<1x3xf32> {
  // expected-error@+2 {{'dopt.reduce_sum' op axes must be sorted and unique, got [0, 0]}}
  // expected-error@+1 {{'dopt.reduce_sum' op failed to infer returned types}}
  %0 = dopt.reduce_sum %x {axes = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) -> tensor<4x2xf32> {
  // expected-error@+2 {{'dopt.reshape' op cannot reshape tensor<2x3xf32> (6 elements) to [4, 2] (8 elements)}}
  // expected-error@+1 {{'dopt.reshape' op failed to infer returned types}}
  %0 = dopt.reshape %x {shape = array<i64: 4, 2>} : (tensor<2x3xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @reshape_unresolved(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  // ONNX's -1 placeholder is resolved at import.
  // expected-error@+2 {{'dopt.reshape' op shape [-1] must be fully resolved (no negative sizes)}}
  // expected-error@+1 {{'dopt.reshape' op failed to infer returned types}}
  %0 = dopt.reshape %x {shape = array<i64: -1>} : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

func.func @reshape_two_negatives(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  // -1 x -6 = 6 elements, but negative sizes are rejected before counting.
  // expected-error@+2 {{'dopt.reshape' op shape [-1, -6] must be fully resolved (no negative sizes)}}
  // expected-error@+1 {{'dopt.reshape' op failed to infer returned types}}
  %0 = dopt.reshape %x {shape = array<i64: -1, -6>} : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

func.func @transpose_perm_size(%x: tensor<2x3x4xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.transpose' op perm [1, 0] must have 3 entries}}
  // expected-error@+1 {{'dopt.transpose' op failed to infer returned types}}
  %0 = dopt.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3x4xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @transpose_not_permutation(%x: tensor<2x3x4xf32>) -> tensor<3x3x2xf32> {
  // expected-error@+2 {{'dopt.transpose' op perm [1, 1, 0] is not a permutation of 0..2}}
  // expected-error@+1 {{'dopt.transpose' op failed to infer returned types}}
  %0 = dopt.transpose %x {perm = array<i64: 1, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<3x3x2xf32>
  return %0 : tensor<3x3x2xf32>
}

// -----

func.func @transpose_out_of_range(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.transpose' op perm [2, 0] is not a permutation of 0..1}}
  // expected-error@+1 {{'dopt.transpose' op failed to infer returned types}}
  %0 = dopt.transpose %x {perm = array<i64: 2, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @concat_no_inputs() -> tensor<0xf32> {
  // expected-error@+2 {{'dopt.concat' op needs at least one input}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat {axis = 0 : i64} : () -> tensor<0xf32>
  return %0 : tensor<0xf32>
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) -> tensor<2x6xf32> {
  // expected-error@+2 {{'dopt.concat' op axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat %a, %a {axis = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @concat_rank0(%a: tensor<f32>) -> tensor<2xf32> {
  // expected-error@+2 {{'dopt.concat' op axis 0 is out of range for rank 0}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat %a, %a {axis = 0 : i64} : (tensor<f32>, tensor<f32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @concat_element_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<2x6xf32> {
  // expected-error@+2 {{'dopt.concat' op inputs have different element types: tensor<2x3xf32> and tensor<2x3xf16>}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @concat_ranks(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x6xf32> {
  // expected-error@+2 {{'dopt.concat' op inputs have different ranks: tensor<2x3xf32> and tensor<3xf32>}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) -> tensor<2x6xf32> {
  // expected-error@+2 {{'dopt.concat' op inputs differ in dimension 0 (not the concat axis): tensor<2x3xf32> and tensor<3x3xf32>}}
  // expected-error@+1 {{'dopt.concat' op failed to infer returned types}}
  %0 = dopt.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @split_axis(%a: tensor<4xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  // expected-error@+2 {{'dopt.split' op axis 1 is out of range for rank 1}}
  // expected-error@+1 {{'dopt.split' op failed to infer returned types}}
  %0:2 = dopt.split %a {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<4xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<2xf32>
}

// -----

func.func @split_no_sizes(%a: tensor<4xf32>) {
  // expected-error@+2 {{'dopt.split' op sizes must not be empty}}
  // expected-error@+1 {{'dopt.split' op failed to infer returned types}}
  dopt.split %a {axis = 0 : i64, sizes = array<i64>} : (tensor<4xf32>) -> ()
  return
}

// -----

func.func @split_negative_size(%a: tensor<4xf32>) -> (tensor<6xf32>, tensor<2xf32>) {
  // expected-error@+2 {{'dopt.split' op sizes must be non-negative, got [6, -2]}}
  // expected-error@+1 {{'dopt.split' op failed to infer returned types}}
  %0:2 = dopt.split %a {axis = 0 : i64, sizes = array<i64: 6, -2>} : (tensor<4xf32>) -> (tensor<6xf32>, tensor<2xf32>)
  return %0#0, %0#1 : tensor<6xf32>, tensor<2xf32>
}

// -----

func.func @split_sizes_sum(%a: tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  // expected-error@+2 {{'dopt.split' op sizes [2, 2] add up to 4, but dimension 1 has 5}}
  // expected-error@+1 {{'dopt.split' op failed to infer returned types}}
  %0:2 = dopt.split %a {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)
  return %0#0, %0#1 : tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

func.func @slice_entries(%a: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.slice' op starts, ends and steps must have one entry per dimension (2)}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 0>, ends = array<i64: 2>, steps = array<i64: 1>} : (tensor<4x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @slice_zero_step(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.slice' op steps must be non-zero}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 0>, ends = array<i64: 4>, steps = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @slice_end_past_dim(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // ONNX clamps ends to the dimension; dopt requires that done at import.
  // expected-error@+2 {{'dopt.slice' op slice [0:5:1] of dimension 1 (size 4) is not normalised}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 0, 0>, ends = array<i64: 4, 5>, steps = array<i64: 1, 1>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @slice_negative_start(%a: tensor<4xf32>) -> tensor<1xf32> {
  // expected-error@+2 {{'dopt.slice' op slice [-1:4:1] of dimension 0 (size 4) is not normalised}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: -1>, ends = array<i64: 4>, steps = array<i64: 1>} : (tensor<4xf32>) -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

func.func @slice_end_before_start(%a: tensor<4xf32>) -> tensor<0xf32> {
  // An empty forward slice is written start = end.
  // expected-error@+2 {{'dopt.slice' op slice [3:1:1] of dimension 0 (size 4) is not normalised}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 3>, ends = array<i64: 1>, steps = array<i64: 1>} : (tensor<4xf32>) -> tensor<0xf32>
  return %0 : tensor<0xf32>
}

// -----

func.func @slice_reverse_start(%a: tensor<4xf32>) -> tensor<4xf32> {
  // For a negative step the start is at most dim - 1.
  // expected-error@+2 {{'dopt.slice' op slice [4:-1:-1] of dimension 0 (size 4) is not normalised}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 4>, ends = array<i64: -1>, steps = array<i64: -1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @slice_reverse_end(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.slice' op slice [3:-2:-1] of dimension 0 (size 4) is not normalised}}
  // expected-error@+1 {{'dopt.slice' op failed to infer returned types}}
  %0 = dopt.slice %a {starts = array<i64: 3>, ends = array<i64: -2>, steps = array<i64: -1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gather_axis(%a: tensor<4x3xf32>, %i: tensor<2xi64>) -> tensor<4x2xf32> {
  // expected-error@+2 {{'dopt.gather' op axis 2 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.gather' op failed to infer returned types}}
  %0 = dopt.gather %a, %i {axis = 2 : i64} : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @gather_negative_axis(%a: tensor<4x3xf32>, %i: tensor<2xi64>) -> tensor<4x2xf32> {
  // expected-error@+2 {{'dopt.gather' op axis -1 is out of range for rank 2}}
  // expected-error@+1 {{'dopt.gather' op failed to infer returned types}}
  %0 = dopt.gather %a, %i {axis = -1 : i64} : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @expand_negative(%a: tensor<3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{'dopt.expand' op shape [-1, 3] must be non-negative}}
  // expected-error@+1 {{'dopt.expand' op failed to infer returned types}}
  %0 = dopt.expand %a {shape = array<i64: -1, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @expand_incompatible(%a: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error@+2 {{'dopt.expand' op cannot expand tensor<3xf32> to [2, 4]}}
  // expected-error@+1 {{'dopt.expand' op failed to infer returned types}}
  %0 = dopt.expand %a {shape = array<i64: 2, 4>} : (tensor<3xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @pad_count(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'dopt.pad' op pads must have 4 entries, got 2}}
  // expected-error@+1 {{'dopt.pad' op failed to infer returned types}}
  %0 = dopt.pad %a {pads = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @pad_negative(%a: tensor<2x3xf32>) -> tensor<2x2xf32> {
  // ONNX's negative pads (cropping) become dopt.slice at import.
  // expected-error@+2 {{'dopt.pad' op pads must be non-negative, got [0, 0, 0, -1]}}
  // expected-error@+1 {{'dopt.pad' op failed to infer returned types}}
  %0 = dopt.pad %a {pads = array<i64: 0, 0, 0, -1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

func.func @pad_mode(%a: tensor<2x3xf32>) -> tensor<2x5xf32> {
  // expected-error@+2 {{'dopt.pad' op mode must be "constant", "reflect" or "edge", got "wrap"}}
  // expected-error@+1 {{'dopt.pad' op failed to infer returned types}}
  %0 = dopt.pad %a {pads = array<i64: 0, 1, 0, 1>, mode = "wrap"} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @pad_reflect_too_far(%a: tensor<2x3xf32>) -> tensor<2x6xf32> {
  // Reflection cannot repeat the edge element, so a pad must be < the size.
  // expected-error@+2 {{'dopt.pad' op reflect padding of dimension 1 must be smaller than its size 3}}
  // expected-error@+1 {{'dopt.pad' op failed to infer returned types}}
  %0 = dopt.pad %a {pads = array<i64: 0, 0, 0, 3>, mode = "reflect"} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// -----

func.func @pad_edge_of_empty(%a: tensor<0x3xf32>) -> tensor<1x3xf32> {
  // expected-error@+2 {{'dopt.pad' op edge padding of the empty dimension 0}}
  // expected-error@+1 {{'dopt.pad' op failed to infer returned types}}
  %0 = dopt.pad %a {pads = array<i64: 1, 0, 0, 0>, mode = "edge"} : (tensor<0x3xf32>) -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

// -----

func.func @shape_range(%a: tensor<2x3xf32>) -> tensor<3xi64> {
  // expected-error@+2 {{'dopt.shape' op [start, end) = [0, 3) is not a range within rank 2}}
  // expected-error@+1 {{'dopt.shape' op failed to infer returned types}}
  %0 = dopt.shape %a {start = 0 : i64, end = 3 : i64} : (tensor<2x3xf32>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @shape_reversed_range(%a: tensor<2x3xf32>) -> tensor<1xi64> {
  // expected-error@+2 {{'dopt.shape' op [start, end) = [2, 1) is not a range within rank 2}}
  // expected-error@+1 {{'dopt.shape' op failed to infer returned types}}
  %0 = dopt.shape %a {start = 2 : i64, end = 1 : i64} : (tensor<2x3xf32>) -> tensor<1xi64>
  return %0 : tensor<1xi64>
}

// -----

func.func @shape_negative_start(%a: tensor<2x3xf32>) -> tensor<1xi64> {
  // expected-error@+2 {{'dopt.shape' op [start, end) = [-1, 0) is not a range within rank 2}}
  // expected-error@+1 {{'dopt.shape' op failed to infer returned types}}
  %0 = dopt.shape %a {start = -1 : i64, end = 0 : i64} : (tensor<2x3xf32>) -> tensor<1xi64>
  return %0 : tensor<1xi64>
}

// -----

func.func @conv_transpose_output_padding(%x: tensor<1x2x3x3xf32>, %w: tensor<2x3x3x3xf32>) -> tensor<1x3x9x7xf32> {
  // expected-error@+2 {{'dopt.conv_transpose' op output_padding [2, 0] must be non-negative and less than the stride or the dilation (strides [2, 2], dilations [1, 1])}}
  // expected-error@+1 {{'dopt.conv_transpose' op failed to infer returned types}}
  %0 = dopt.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 2, 0>} : (tensor<1x2x3x3xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x9x7xf32>
  return %0 : tensor<1x3x9x7xf32>
}

// -----

func.func @conv_transpose_weight_channels(%x: tensor<1x2x3x3xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x7x7xf32> {
  // expected-error@+2 {{'dopt.conv_transpose' op weight has 4 input channels, expected 2 (the input's)}}
  // expected-error@+1 {{'dopt.conv_transpose' op failed to infer returned types}}
  %0 = dopt.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>} : (tensor<1x2x3x3xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x7x7xf32>
  return %0 : tensor<1x3x7x7xf32>
}

// -----

func.func @conv_transpose_group(%x: tensor<1x3x3x3xf32>, %w: tensor<3x3x3x3xf32>) -> tensor<1x6x7x7xf32> {
  // expected-error@+2 {{'dopt.conv_transpose' op group 2 must be positive and divide the 3 input channels}}
  // expected-error@+1 {{'dopt.conv_transpose' op failed to infer returned types}}
  %0 = dopt.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64, output_padding = array<i64: 0, 0>} : (tensor<1x3x3x3xf32>, tensor<3x3x3x3xf32>) -> tensor<1x6x7x7xf32>
  return %0 : tensor<1x6x7x7xf32>
}

// -----

func.func @conv_transpose_missing_output_padding(%x: tensor<1x2x3x3xf32>, %w: tensor<2x3x3x3xf32>) -> tensor<1x3x7x7xf32> {
  // expected-error@+1 {{'dopt.conv_transpose' op requires attribute 'output_padding'}}
  %0 = dopt.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x3x3xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x7x7xf32>
  return %0 : tensor<1x3x7x7xf32>
}

// -----

func.func @gather_elements_rank(%a: tensor<4x3xf32>, %i: tensor<2xi64>) -> tensor<2xf32> {
  // expected-error@+2 {{'dopt.gather_elements' op indices [2] must have the data's rank (2, data [4, 3])}}
  // expected-error@+1 {{'dopt.gather_elements' op failed to infer returned types}}
  %0 = dopt.gather_elements %a, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @gather_elements_longer(%a: tensor<4x3xf32>, %i: tensor<2x5xi64>) -> tensor<2x5xf32> {
  // expected-error@+2 {{'dopt.gather_elements' op indices [2, 5] are longer than the data [4, 3] in dimension 1 (not the axis)}}
  // expected-error@+1 {{'dopt.gather_elements' op failed to infer returned types}}
  %0 = dopt.gather_elements %a, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x5xi64>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @scatter_elements_updates(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>, %u: tensor<2x2xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'dopt.scatter_elements' op updates [2, 2] must have the indices' shape [2, 3]}}
  // expected-error@+1 {{'dopt.scatter_elements' op failed to infer returned types}}
  %0 = dopt.scatter_elements %a, %i, %u {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi64>, tensor<2x2xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @scatter_elements_reduction(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>, %u: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error@+2 {{'dopt.scatter_elements' op unknown reduction 'sum' (none, add, mul, max or min)}}
  // expected-error@+1 {{'dopt.scatter_elements' op failed to infer returned types}}
  %0 = dopt.scatter_elements %a, %i, %u {axis = 0 : i64, reduction = "sum"} : (tensor<4x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @top_k_too_many(%a: tensor<4x3xf32>) -> (tensor<4x5xf32>, tensor<4x5xi64>) {
  // expected-error@+2 {{'dopt.top_k' op k = 5 is outside [0, 3] (the extent of axis 1)}}
  // expected-error@+1 {{'dopt.top_k' op failed to infer returned types}}
  %v, %i = dopt.top_k %a {k = 5 : i64, axis = 1 : i64} : (tensor<4x3xf32>) -> (tensor<4x5xf32>, tensor<4x5xi64>)
  return %v, %i : tensor<4x5xf32>, tensor<4x5xi64>
}

// -----

func.func @check_indices_negative_extent(%i: tensor<2xi64>) -> tensor<2xi64> {
  // expected-error@+2 {{'dopt.check_indices' op extent -1 must not be negative}}
  // expected-error@+1 {{'dopt.check_indices' op failed to infer returned types}}
  %0 = dopt.check_indices %i {extent = -1 : i64, what = "x"} : (tensor<2xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @check_indices_float(%i: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'dopt.check_indices' op operand #0 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = dopt.check_indices %i {extent = 3 : i64, what = "x"} : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @attention_rank(%q: tensor<4xf32>, %k: tensor<4xf32>, %v: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+2 {{'dopt.attention' op query must have rank >= 2 ([..., Tq, D]), got tensor<4xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @attention_ranks(%q: tensor<2x3x4xf32>, %k: tensor<3x4xf32>, %v: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  // expected-error@+2 {{'dopt.attention' op query, key and value must have the same rank, got tensor<2x3x4xf32>, tensor<3x4xf32> and tensor<3x4xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @attention_types(%q: tensor<3x4xf32>, %k: tensor<3x4xf16>, %v: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error@+2 {{'dopt.attention' op query, key and value must have the same element type, got tensor<3x4xf32>, tensor<3x4xf16> and tensor<3x4xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<3x4xf32>, tensor<3x4xf16>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

func.func @attention_leading(%q: tensor<2x3x4xf32>, %k: tensor<1x3x4xf32>, %v: tensor<1x3x4xf32>) -> tensor<2x3x4xf32> {
  // expected-error@+2 {{'dopt.attention' op query, key and value must have the same leading dimensions, got tensor<2x3x4xf32>, tensor<1x3x4xf32> and tensor<1x3x4xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x3x4xf32>, tensor<1x3x4xf32>, tensor<1x3x4xf32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @attention_width(%q: tensor<3x4xf32>, %k: tensor<5x8xf32>, %v: tensor<5x2xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.attention' op query and key must have the same last dimension, got tensor<3x4xf32> and tensor<5x8xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<3x4xf32>, tensor<5x8xf32>, tensor<5x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @attention_keys(%q: tensor<3x4xf32>, %k: tensor<5x4xf32>, %v: tensor<6x2xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.attention' op key and value must have as many rows (keys), got tensor<5x4xf32> and tensor<6x2xf32>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<6x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @attention_keep_shape(%q: tensor<3x4xf32>, %k: tensor<5x4xf32>, %v: tensor<5x2xf32>, %m: tensor<3x4xi1>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.attention' op keep must broadcast to the scores tensor<3x5xf32>, got tensor<3x4xi1>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v keep %m {scale = 1.0 : f64} : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<5x2xf32>, tensor<3x4xi1>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @attention_bias_type(%q: tensor<3x4xf32>, %k: tensor<5x4xf32>, %v: tensor<5x2xf32>, %b: tensor<5xf16>) -> tensor<3x2xf32> {
  // expected-error@+2 {{'dopt.attention' op bias must have the query's element type, got tensor<5xf16>}}
  // expected-error@+1 {{'dopt.attention' op failed to infer returned types}}
  %0 = dopt.attention %q, %k, %v bias %b {scale = 1.0 : f64} : (tensor<3x4xf32>, tensor<5x4xf32>, tensor<5x2xf32>, tensor<5xf16>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}
