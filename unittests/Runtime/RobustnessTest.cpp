//===- RobustnessTest.cpp - decoders on damaged input ---------------------===//
//
// Random byte flips, truncations and insertions applied to valid .npy,
// TensorProto and manifest images: every decoder must either succeed or
// return an error, never crash or hang (run under ASan/UBSan to be sure).
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Json.h"
#include "distopt/Runtime/Manifest.h"
#include "distopt/Runtime/Tensor.h"

#include "RuntimeReaders.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {
#include "Fixtures.inc"

std::string mutate(std::string s, std::mt19937 &rng) {
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    if (s.empty()) {
      s += static_cast<char>(rng());
      continue;
    }
    size_t at = rng() % s.size();
    switch (rng() % 5) {
    case 0:
      s[at] = static_cast<char>(rng());
      break;
    case 1:
      s[at] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 2:
      s.resize(at);
      break;
    case 3:
      s.insert(at, 1, static_cast<char>(rng()));
      break;
    default: {
      // Interesting bytes: varint continuation, quotes, digits.
      const char specials[] = {'\x80', '\xff', '\0', '"', '\'', '9',  ',', '(',
                               ')',    '[',    ']',  '{', '}',  '\\', '-'};
      s[at] = specials[rng() % sizeof(specials)];
    }
    }
  }
  return s;
}

/// 20000 mutations of the seeds: each decodes, or `decode` says why not;
/// some decode.
template <typename Decode>
void expectDecodesOrSaysWhy(const std::vector<std::string> &seeds,
                            std::mt19937 &rng, Decode decode) {
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string b = mutate(seeds[i % seeds.size()], rng);
    Tensor t;
    std::string error;
    if (decode(b.data(), b.size(), t, error))
      ++ok;
    else
      EXPECT_FALSE(error.empty());
  }
  EXPECT_GT(ok, 0);
}
} // namespace

TEST(Robustness, NpyDecoder) {
  std::mt19937 rng(42);
  std::vector<std::string> seeds = {
      bytes(npy_f32_2x3),         bytes(npy_bool_2x2),
      bytes(npy_f32_scalar),      bytes(npy_f32_0x3),
      bytes(npy_f32_fortran_2x3), bytes(npy_i32_bigendian_2x2),
      bytes(npy_f32_v2_2x3),      bytes(npy_structured_1)};
  expectDecodesOrSaysWhy(seeds, rng, decodeNpy);
}

TEST(Robustness, TensorProtoDecoder) {
  std::mt19937 rng(43);
  std::vector<std::string> seeds = {bytes(pb_f32_2x3_raw),
                                    bytes(pb_f32_2x2_float_data),
                                    bytes(pb_i64_3_int64_data),
                                    bytes(pb_i8_2_int32_data),
                                    bytes(pb_f64_2_double_data),
                                    bytes(pb_external),
                                    bytes(pb_string)};
  expectDecodesOrSaysWhy(
      seeds, rng,
      [](const char *data, size_t size, Tensor &t, std::string &error) {
        return decodeTensorProto(data, size, t, error);
      });
}

TEST(Robustness, ManifestParser) {
  std::mt19937 rng(44);
  std::string seed = R"({"format": 1, "model": "gpt", "ranks": 1,
 "inputs":  [{"name": "input_ids", "dtype": "int64", "shape": [2, 16]}],
 "outputs": [{"name": "logits", "dtype": "float32", "shape": [2, 16, 100]}],
 "weights": [{"name": "wte", "dtype": "float32", "shape": [100, 32], "file": "weights.bin", "offset": 0, "length": 12800}]})";
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = mutate(seed, rng);
    Manifest m;
    std::string error;
    if (parseManifest(text, m, error)) {
      ++ok;
      // What parsed serializes and parses back to the same manifest.
      Manifest again;
      ASSERT_TRUE(parseManifest(m.toJson(), again, error)) << error;
      EXPECT_EQ(again.toJson(), m.toJson());
    } else {
      EXPECT_FALSE(error.empty());
    }
  }
  EXPECT_GT(ok, 0);
}

/// The inputs that once crashed the runtime-readers fuzzer
/// (scripts/fuzz-runtime), kept in fuzz/runtime-regressions/: each is read
/// again, by the reader its first byte picks, without a crash (ASan builds
/// say more).
TEST(Robustness, RuntimeFuzzRegressions) {
  std::vector<std::string> files;
  if (DIR *d = opendir(DISTOPT_RUNTIME_FUZZ_REGRESSIONS)) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.')
        files.push_back(e->d_name);
    closedir(d);
  }
  ASSERT_FALSE(files.empty()) << "no inputs in " DISTOPT_RUNTIME_FUZZ_REGRESSIONS;
  std::sort(files.begin(), files.end());
  for (const std::string &name : files) {
    SCOPED_TRACE(name);
    std::ifstream in(std::string(DISTOPT_RUNTIME_FUZZ_REGRESSIONS) + "/" + name,
                     std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::string data = bytes.str();
    distopt::fuzz::readRuntimeInput(
        reinterpret_cast<const uint8_t *>(data.data()), data.size());
  }
}

/// A checkpoint part placed outside its block is refused, naming it.
TEST(Robustness, CheckpointPartOutsideItsBlock) {
  using namespace distopt::runtime::train;
  const std::string root = distopt::fuzz::scratchDir(); // with w.npy [2, 3]
  for (const char *offset : {"-1", "7", "9223372036854775805"}) {
    SCOPED_TRACE(offset);
    distopt::fuzz::writeFile(
        root + "/checkpoint/meta.json",
        std::string(R"({"step": 1, "weights": {"w": {"shape": [2, 3], "blocks": [)"
                    R"({"file": "w.npy", "offset": )") +
            offset + "}]}}, \"state\": {}}");
    Tensor wt;
    std::string error;
    ASSERT_TRUE(Tensor::create(DType::Float32, {2, 3}, wt, error));
    Named wn{"w", &wt};
    int64_t step = 0;
    EXPECT_FALSE(readCheckpoint(root, step, {wn}, {}, error));
    EXPECT_EQ(error, std::string("checkpoint 'w': a part at offset ") + offset +
                         ", outside its block of 6 elements");
  }
}
