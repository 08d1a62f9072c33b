//===- DataTypes.cpp - ONNX data types and tensor sizes -------------------===//
//
// ONNX's data types as MLIR element types and names, and the checks on the
// sizes of the tensors a model declares.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include <algorithm>

using namespace mlir;
using namespace distopt;
using namespace distopt::onnximport;
using llvm::SmallVector;
using llvm::StringRef;

Type onnximport::convertDataType(MLIRContext *ctx, int32_t dataType) {
  Builder b(ctx);
  switch (dataType) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::DOUBLE:
    return b.getF64Type();
  case onnx::TensorProto::FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto::BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto::INT64:
    return b.getI64Type();
  case onnx::TensorProto::INT32:
    return b.getI32Type();
  case onnx::TensorProto::INT16:
    return b.getI16Type();
  case onnx::TensorProto::INT8:
    return b.getI8Type();
  case onnx::TensorProto::UINT8:
    return IntegerType::get(ctx, 8, IntegerType::Unsigned);
  case onnx::TensorProto::UINT16:
    return IntegerType::get(ctx, 16, IntegerType::Unsigned);
  case onnx::TensorProto::UINT32:
    return IntegerType::get(ctx, 32, IntegerType::Unsigned);
  case onnx::TensorProto::UINT64:
    return IntegerType::get(ctx, 64, IntegerType::Unsigned);
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

std::string onnximport::dataTypeName(int32_t dataType) {
  if (onnx::TensorProto::DataType_IsValid(dataType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dataType));
  return "data type " + std::to_string(dataType);
}


bool onnximport::fitsInMemory(ArrayRef<int64_t> dims, int64_t eltBytes) {
  // Sizes are int64 everywhere (MLIR, the runtime): the byte count of every
  // tensor must fit, with room to spare.
  constexpr int64_t limit = int64_t(1) << 60;
  int64_t bytes = std::max<int64_t>(eltBytes, 1);
  for (int64_t d : dims) {
    if (d < 0)
      return false;
    if (d != 0 && bytes > limit / d)
      return false;
    bytes *= d;
  }
  return true;
}

std::string onnximport::shapeString(ArrayRef<int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? "," : "") + (dims[i] == ShapedType::kDynamic
                               ? std::string("?")
                               : std::to_string(dims[i]));
  return s + "]";
}
