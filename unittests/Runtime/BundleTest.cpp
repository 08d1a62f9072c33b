//===- BundleTest.cpp - weights, output names, in-process runs ------------===//

#include "distopt/Runtime/Bundle.h"
#include "distopt/Runtime/Runtime.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {
WeightSpec weight(const std::string &name, DType dtype,
                  std::vector<int64_t> shape, const std::string &file,
                  uint64_t offset) {
  WeightSpec w;
  w.name = name;
  w.dtype = dtype;
  w.shape = std::move(shape);
  w.file = file;
  w.offset = offset;
  w.length = w.byteSize();
  return w;
}

std::string weightsBlob() {
  std::string blob(256, '\0');
  for (size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<char>(i);
  return blob;
}
} // namespace

TEST(WeightStore, MapsEachFileOnceAndCopiesMisalignedWeights) {
  TempDir dir;
  writeFile(dir / "w.bin", weightsBlob());
  writeFile(dir / "other.bin", std::string("\x01\x02\x03\x04", 4));
  writeFile(dir / "empty.bin", std::string());
  Manifest m;
  m.weights = {weight("a", DType::Float32, {4}, "w.bin", 0),
               weight("b", DType::Int64, {2}, "./w.bin", 64),
               weight("c", DType::Int32, {3}, "w.bin", 6), // misaligned
               weight("d", DType::UInt8, {3}, "w.bin", 5), // bytes: fine
               weight("e", DType::Int8, {4}, dir / "other.bin", 0),
               weight("f", DType::Float32, {0}, "empty.bin", 0),
               weight("g", DType::Float16, {0, 7}, "w.bin", 256)};
  WeightStore store;
  std::string error;
  ASSERT_TRUE(store.load(m, dir.path(), error)) << error;
  ASSERT_EQ(store.size(), 7u);
  EXPECT_EQ(store.numMappedFiles(), 3u); // w.bin (twice spelled), other, empty
  EXPECT_EQ(store.numCopied(), 1u);
  std::string blob = weightsBlob();
  for (size_t i = 0; i < m.weights.size(); ++i) {
    const WeightSpec &w = m.weights[i];
    ASSERT_NE(store.data(i), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(store.data(i)) % dtypeSize(w.dtype),
              0u)
        << w.name;
    if (w.file.find("w.bin") != std::string::npos && w.length)
      EXPECT_EQ(std::memcmp(store.data(i), blob.data() + w.offset, w.length), 0)
          << w.name;
  }
  // a and b share the mapping: b is 64 bytes after a.
  EXPECT_EQ(static_cast<char *>(store.data(1)) -
                static_cast<char *>(store.data(0)),
            64);
  EXPECT_EQ(std::memcmp(store.data(4), "\x01\x02\x03\x04", 4), 0);
  int32_t c[3];
  std::memcpy(c, blob.data() + 6, sizeof(c));
  EXPECT_EQ(std::memcmp(store.data(2), c, sizeof(c)), 0);
}

TEST(WeightStore, Errors) {
  TempDir dir;
  writeFile(dir / "w.bin", weightsBlob());
  std::string error;
  auto fails = [&](WeightSpec w) {
    Manifest m;
    m.weights = {weight("ok", DType::Float32, {2}, "w.bin", 0), std::move(w)};
    WeightStore store;
    EXPECT_FALSE(store.load(m, dir.path(), error));
    return error;
  };
  EXPECT_EQ(fails(weight("x", DType::Float32, {2}, "missing.bin", 0)),
            "weight 'x': file '" + dir / "missing.bin" +
                "': cannot open: No such file or directory");
  EXPECT_EQ(fails(weight("x", DType::Float32, {8}, "w.bin", 240)),
            "weight 'x': file '" + dir / "w.bin" +
                "': bytes [240, 272) run past the end of the file (256 bytes)");
  EXPECT_EQ(fails(weight("x", DType::Int8, {1}, "w.bin", 300)),
            "weight 'x': file '" + dir / "w.bin" +
                "': bytes [300, 301) run past the end of the file (256 bytes)");
  WeightSpec wrongLength = weight("x", DType::Float32, {2}, "w.bin", 0);
  wrongLength.length = 4;
  EXPECT_EQ(fails(wrongLength),
            "weight 'x': file '" + dir / "w.bin" +
                "': length 4 does not match [2] of float32 (8 bytes)");
  ::mkdir((dir / "sub").c_str(), 0777);
  EXPECT_EQ(fails(weight("x", DType::Float32, {2}, "sub", 0)),
            "weight 'x': file '" + dir / "sub" + "': not a regular file");
}

TEST(OutputNames, SanitizedAndDistinct) {
  EXPECT_EQ(sanitizeFileName("logits"), "logits");
  EXPECT_EQ(sanitizeFileName("onnx::MatMul_12"), "onnx__MatMul_12");
  EXPECT_EQ(sanitizeFileName("model/layer.0/out:0"), "model_layer.0_out_0");
  EXPECT_EQ(sanitizeFileName(".."), "_.");
  EXPECT_EQ(sanitizeFileName(".hidden"), "_hidden");
  EXPECT_EQ(sanitizeFileName(""), "output");
  EXPECT_EQ(sanitizeFileName("a b\xc3\xa9"), "a_b__");
  EXPECT_EQ(sanitizeFileName(std::string(300, 'x')).size(), 200u);

  std::vector<TensorSpec> outs(5);
  outs[0].name = "a/b";
  outs[1].name = "a:b";
  outs[2].name = "a_b";
  outs[3].name = "a_b_2";
  outs[4].name = "c";
  EXPECT_EQ(outputFileNames(outs),
            (std::vector<std::string>{"a_b.npy", "a_b_2.npy", "a_b_3.npy",
                                      "a_b_2_2.npy", "c.npy"}));
}

TEST(CheckTensor, DTypeThenShape) {
  TensorSpec spec;
  spec.name = "x";
  spec.dtype = DType::Float32;
  spec.shape = {2, 3};
  std::string error;
  EXPECT_TRUE(
      checkTensorMatches(spec, Tensor::zeros(DType::Float32, {2, 3}), error));
  EXPECT_FALSE(
      checkTensorMatches(spec, Tensor::zeros(DType::Float64, {3}), error));
  EXPECT_EQ(error, "wrong dtype: expected float32, got float64");
  EXPECT_FALSE(
      checkTensorMatches(spec, Tensor::zeros(DType::Float32, {3, 2}), error));
  EXPECT_EQ(error, "wrong shape: expected [2, 3], got [3, 2]");
  EXPECT_FALSE(
      checkTensorMatches(spec, Tensor::zeros(DType::Float32, {}), error));
  EXPECT_EQ(error, "wrong shape: expected [2, 3], got []");
}

namespace {
/// y = x + w (float32), z = sum over x as int64.
int32_t addEntry(void **buffers) {
  const float *x = static_cast<const float *>(buffers[0]);
  const float *w = static_cast<const float *>(buffers[1]);
  float *y = static_cast<float *>(buffers[2]);
  int64_t *z = static_cast<int64_t *>(buffers[3]);
  *z = 0;
  for (int i = 0; i < 4; ++i) {
    y[i] = x[i] + w[i];
    *z += static_cast<int64_t>(x[i]);
  }
  return 0;
}
int32_t failingEntry(void **) { return dort_set_error(3, "bad thing %d", 42); }
int32_t pendingEntry(void **) {
  dort_set_pending_error(9, "kernel trouble");
  return 0;
}
} // namespace

TEST(RunEntry, InProcess) {
  TempDir dir;
  float w[4] = {10, 20, 30, 40};
  writeFile(dir / "w.bin", w, sizeof(w));
  Manifest m;
  m.inputs.resize(1);
  m.inputs[0].name = "x";
  m.inputs[0].shape = {2, 2};
  m.weights = {weight("w", DType::Float32, {2, 2}, "w.bin", 0)};
  m.outputs.resize(2);
  m.outputs[0].name = "y";
  m.outputs[0].shape = {2, 2};
  m.outputs[1].name = "z";
  m.outputs[1].dtype = DType::Int64;
  WeightStore store;
  std::string error;
  ASSERT_TRUE(store.load(m, dir.path(), error)) << error;
  float x[4] = {1, 2, 3, 4};
  std::vector<Tensor> inputs;
  inputs.push_back(Tensor::fromBytes(DType::Float32, {2, 2}, x, sizeof(x)));
  std::vector<Tensor> outputs;
  ASSERT_TRUE(runEntry(addEntry, m, inputs, store, outputs, error)) << error;
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].dataAs<float>()[3], 44.0f);
  EXPECT_EQ(outputs[1].dataAs<int64_t>()[0], 10);

  EXPECT_FALSE(runEntry(failingEntry, m, inputs, store, outputs, error));
  EXPECT_EQ(error, "dopt_entry returned 3: bad thing 42");
  EXPECT_FALSE(runEntry(pendingEntry, m, inputs, store, outputs, error));
  EXPECT_EQ(error, "a runtime call failed: kernel trouble");
  EXPECT_EQ(dort_pending_error(), nullptr); // Cleared after reporting.

  std::vector<Tensor> wrong;
  wrong.push_back(Tensor::zeros(DType::Float32, {4}));
  EXPECT_FALSE(runEntry(addEntry, m, wrong, store, outputs, error));
  EXPECT_EQ(error, "input 'x': wrong shape: expected [2, 2], got [4]");
  EXPECT_FALSE(runEntry(addEntry, m, {}, store, outputs, error));
  EXPECT_EQ(error, "expected 1 inputs, got 0");
}
