//===- FrozenInputs.cpp - graph inputs bound to values at compile time ---===//

#include "distopt/Driver/Driver.h"

#include "distopt/Runtime/Tensor.h"

bool distopt::driver::readFrozenInput(llvm::StringRef file,
                                      ONNXFrozenInput &out,
                                      std::string &error) {
  runtime::Tensor t;
  if (!runtime::readTensorFile(file.str(), t, error))
    return false;
  out.onnxDataType = runtime::onnxDataType(t.dtype());
  out.shape.assign(t.shape().begin(), t.shape().end());
  const char *p = static_cast<const char *>(t.data());
  out.bytes.assign(p, p + t.byteSize());
  return true;
}
