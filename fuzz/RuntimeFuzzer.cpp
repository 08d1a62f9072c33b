//===- RuntimeFuzzer.cpp - libFuzzer target for the runtime's readers -----===//
//
// The files a compiled program's run reads -- inputs and training data
// (.npy, TensorProto), manifest.json, checkpoints -- from arbitrary bytes:
// RuntimeReaders.h says which byte picks which reader.
//
//===----------------------------------------------------------------------===//

#include "RuntimeReaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  distopt::fuzz::readRuntimeInput(data, size);
  return 0;
}
