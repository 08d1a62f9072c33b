//===- RuntimeReaders.h - one input to each reader of files a run gets ---*- C++ -*-===//
//
// What the runtime-readers fuzzer (RuntimeFuzzer.cpp) feeds, shared with the
// unit test that replays the inputs that once broke it
// (unittests/Runtime/RobustnessTest.cpp): the first byte of an input picks
// the reader, the rest is the file. Every reader must succeed or return an
// error; a crash, an ASan report or a hang is a bug. Readers:
//   0  .npy in memory (decodeNpy)
//   1  .npy mapped from a file (MappedNpy, the training loader's path)
//   2  ONNX TensorProto (decodeTensorProto)
//   3  JSON (parseJson)
//   4  manifest.json (parseManifest; what it accepts must write and read
//      back the same)
//   5  a checkpoint's meta.json, with one weight `w` [2, 3] (w.npy beside it)
//      and one state tensor `s` [4] split over a grid of two (its parts)
//   6  a file of either tensor format, by content (readTensorFile)
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_FUZZ_RUNTIMEREADERS_H
#define DISTOPT_FUZZ_RUNTIMEREADERS_H

#include "TrainInternal.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace distopt::fuzz {

constexpr int kRuntimeReaders = 7;

inline void writeFile(const std::string &path, const std::string &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

/// A directory of its own for this process's files (with the checkpoint's
/// w.npy), made once.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/distopt-fuzz-runtime.XXXXXX";
    const char *made = mkdtemp(tmpl);
    if (!made)
      std::abort();
    std::string d = made;
    ::mkdir((d + "/checkpoint").c_str(), 0700);
    // The checkpoint's weight file, which every meta.json input may name.
    float w[6] = {1, 2, 3, 4, 5, 6};
    writeFile(d + "/checkpoint/w.npy",
              distopt::runtime::encodeNpy(distopt::runtime::DType::Float32,
                                          {2, 3}, w));
    return d;
  }();
  return dir;
}

/// Feeds `data` (its first byte picks the reader) to one reader.
inline void readRuntimeInput(const uint8_t *data, size_t size) {
  using namespace distopt::runtime;
  using namespace distopt::runtime::train;
  if (size == 0)
    return;
  int reader = data[0] % kRuntimeReaders;
  std::string bytes(reinterpret_cast<const char *>(data) + 1, size - 1);
  std::string error;
  Tensor t;
  switch (reader) {
  case 0:
    (void)decodeNpy(bytes.data(), bytes.size(), t, error);
    break;
  case 1: {
    std::string path = scratchDir() + "/mapped.npy";
    writeFile(path, bytes);
    MappedNpy m;
    bool mappable = false;
    if (m.open(path, error, mappable)) {
      // Touch every byte the mapping claims, as the loader would.
      size_t n = 1;
      for (int64_t d : m.shape())
        n *= static_cast<size_t>(d);
      n *= dtypeSize(m.dtype());
      volatile unsigned char sum = 0;
      for (size_t i = 0; i < n; ++i)
        sum += static_cast<const unsigned char *>(m.data())[i];
      (void)sum;
    }
    break;
  }
  case 2:
    (void)decodeTensorProto(bytes.data(), bytes.size(), t, error);
    break;
  case 3: {
    JsonValue v;
    (void)parseJson(bytes, v, error);
    break;
  }
  case 4: {
    Manifest m;
    if (!parseManifest(bytes, m, error))
      break;
    Manifest again;
    std::string json = m.toJson();
    if (!parseManifest(json, again, error) || again.toJson() != json)
      std::abort(); // what is read must write and read back the same
    break;
  }
  case 5: {
    std::string root = scratchDir();
    writeFile(root + "/checkpoint/meta.json", bytes);
    Tensor wt, st;
    if (!Tensor::create(DType::Float32, {2, 3}, wt, error) ||
        !Tensor::create(DType::Float32, {2}, st, error))
      std::abort();
    // The state `s` [4] is this rank's block [2] of a split over two ranks
    // (grid [1, 2, 1], rank 0 at [0, 0, 0]).
    static TensorSpec split = [] {
      TensorSpec s;
      s.name = "s";
      s.dtype = DType::Float32;
      s.shape = {2};
      s.globalShape = {4};
      s.splitAxes = {{1}};
      return s;
    }();
    gJob.grid = {1, 2, 1};
    gJob.coords = {0, 0, 0};
    Named wn{"w", &wt}, sn{"s", &st};
    sn.split = &split;
    int64_t step = 0;
    (void)readCheckpoint(root, step, {wn}, {sn}, error);
    break;
  }
  case 6: {
    std::string path = scratchDir() + "/tensor.bin";
    writeFile(path, bytes);
    (void)readTensorFile(path, t, error);
    break;
  }
  }
}

} // namespace distopt::fuzz

#endif // DISTOPT_FUZZ_RUNTIMEREADERS_H
