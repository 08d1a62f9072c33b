//===- ManifestTest.cpp - manifest.json parsing and validation ------------===//

#include "distopt/Runtime/Manifest.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {
const char *kExample = R"({"format": 1, "model": "gpt", "ranks": 1,
 "inputs":  [{"name": "input_ids", "dtype": "int64", "shape": [2, 16]}],
 "outputs": [{"name": "logits", "dtype": "float32", "shape": [2, 16, 100]}],
 "weights": [{"name": "wte", "dtype": "float32", "shape": [100, 32], "file": "weights.bin", "offset": 0, "length": 12800}]}
)";

std::string manifestError(const std::string &text) {
  Manifest m;
  std::string error;
  EXPECT_FALSE(parseManifest(text, m, error)) << text;
  return error;
}

/// The example with `from` replaced by `to` (first occurrence).
std::string edit(const std::string &from, const std::string &to) {
  std::string s = kExample;
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    s.replace(at, from.size(), to);
  return s;
}

/// An edit of the example and the error it must give.
struct EditCase {
  const char *from, *to, *error;
};

void expectEditErrors(std::initializer_list<EditCase> cases) {
  for (const EditCase &c : cases)
    EXPECT_EQ(manifestError(edit(c.from, c.to)), c.error)
        << "editing " << c.from << " to " << c.to;
}
} // namespace

TEST(Manifest, ParsesTheExample) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(kExample, m, error)) << error;
  EXPECT_EQ(m.format, 1);
  EXPECT_EQ(m.model, "gpt");
  EXPECT_EQ(m.ranks, 1);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].name, "input_ids");
  EXPECT_EQ(m.inputs[0].dtype, DType::Int64);
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(m.inputs[0].byteSize(), 256u);
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].shape, (std::vector<int64_t>{2, 16, 100}));
  ASSERT_EQ(m.weights.size(), 1u);
  EXPECT_EQ(m.weights[0].file, "weights.bin");
  EXPECT_EQ(m.weights[0].offset, 0u);
  EXPECT_EQ(m.weights[0].length, 12800u);
  EXPECT_EQ(m.numBuffers(), 3u);
}

TEST(Manifest, DefaultsUnknownKeysAndScalars) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(
      R"({"format": 1, "inputs": [], "outputs": [{"name": "y", "dtype": "bool", "shape": [], "extra": [1, {"x": null}]}],
          "plan": {"dp": 2}, "comment": "ignored"})",
      m, error))
      << error;
  EXPECT_EQ(m.model, "");
  EXPECT_EQ(m.ranks, 1);
  EXPECT_TRUE(m.weights.empty());
  EXPECT_TRUE(m.outputs[0].shape.empty());
  EXPECT_EQ(m.outputs[0].numElements(), 1);
}

TEST(Manifest, ToJsonRoundTrips) {
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(kExample, m, error));
  m.weights.push_back(m.weights[0]);
  m.weights[1].name = "w\"2";
  m.weights[1].file = "/abs/other.bin";
  m.weights[1].offset = 64;
  Manifest back;
  ASSERT_TRUE(parseManifest(m.toJson(), back, error)) << error << m.toJson();
  EXPECT_EQ(back.toJson(), m.toJson());
  EXPECT_EQ(back.weights[1].name, "w\"2");
  EXPECT_EQ(back.weights[1].offset, 64u);
}

/// A manifest parsed, written and parsed again writes the same text.
void expectRoundTrip(const char *text) {
  Manifest m, back;
  std::string error;
  ASSERT_TRUE(parseManifest(text, m, error)) << error;
  ASSERT_TRUE(parseManifest(m.toJson(), back, error)) << error << m.toJson();
  EXPECT_EQ(back.toJson(), m.toJson());
}

TEST(Manifest, ToJsonWritesTheWholeFormat) {
  // A pipelined training step with its evaluation program.
  const char *pipelined =
      R"({"format": 1, "model": "gpt", "ranks": 2, "rank": 1,
   "codegen": "cuda-emu", "precision": "bf16", "accumulate": 2, "step_flops": 1.5e9, "grid": [2, 1, 1],
   "inputs":  [{"name": "ids", "dtype": "int64", "shape": [4, 16], "batch_dim": 0,
                "indices": {"low": -100, "high": 99, "use": "ONNX node 'wte' (Gather): the indices"}}],
   "outputs": [{"name": "loss", "dtype": "float32", "shape": []}],
   "weights": [{"name": "w0", "dtype": "float32", "shape": [8], "file": "weights.bin", "offset": 0, "length": 32},
               {"name": "w1", "dtype": "float32", "shape": [8], "file": "weights.bin", "offset": 64, "length": 32}],
   "pipeline": {"microbatches": 4, "stages": [
     {"inputs": [{"input": 0}], "weights": [0], "outputs": [{"dtype": "float32", "shape": [1, 16, 8], "activation": 0}]},
     {"inputs": [{"dtype": "float32", "shape": [1, 16, 8], "activation": 0}], "weights": [1], "outputs": [{"output": 0}]}]},
   "eval": {"inputs": [{"name": "ids", "dtype": "int64", "shape": [4, 16]}], "weights": [0, 1],
            "outputs": [{"name": "loss", "dtype": "float32", "shape": []}]}})";
  expectRoundTrip(pipelined);
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(pipelined, m, error)) << error;
  std::string json = m.toJson();
  for (const char *key :
       {"\"accumulate\": 2", "\"batch_dim\": 0", "\"pipeline\"",
        "\"codegen\": \"cuda-emu\"", "\"precision\": \"bf16\"",
        "\"activation\": 0", "\"eval\"", "\"microbatches\": 4", "\"low\": -100",
        "\"high\": 99", "\"rank\": 1"})
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  // Compiled for rank 1 (stage 1 of 2): rank 0 runs the other stage.
  EXPECT_TRUE(holdsProgramOf(m, 1, error));
  EXPECT_FALSE(holdsProgramOf(m, 0, error));
  EXPECT_NE(error.find("this bundle holds the program of pipeline stage 1 "
                       "(compiled with --rank 1), but rank 0 runs stage 0"),
            std::string::npos)
      << error;
  EXPECT_NE(manifestError(std::string(pipelined).replace(
                std::string(pipelined).find("\"rank\": 1"), 9, "\"rank\": 2")),
            "");
  // Parameter servers: one server rank before two workers.
  expectRoundTrip(R"({"format": 1, "model": "mlp", "ranks": 3, "grid": [1, 2, 1],
   "inputs":  [{"name": "x", "dtype": "float32", "shape": [4, 8]}],
   "outputs": [{"name": "loss", "dtype": "float32", "shape": []}],
   "weights": [{"name": "w", "dtype": "float32", "shape": [8], "file": "weights.bin", "offset": 0, "length": 32}],
   "parameter_servers": {"sync": "async", "servers": 1, "workers": 2, "backup_workers": 0,
     "shard_length": 8, "pieces": [{"weight": 0, "offset": 0, "length": 8, "server": 0, "shard_offset": 0}],
     "update": {"inputs": [{"name": "g", "dtype": "float32", "shape": [8]}],
                "outputs": [{"name": "w", "dtype": "float32", "shape": [8]}]}}})");
}

TEST(Manifest, RecordsTheCompilerThatWroteIt) {
  std::string text = edit("\"format\": 1,",
                          "\"format\": 1, \"compiler\": \"distopt 0.1.0 (LLVM/MLIR "
                          "22.1.8, git 0123456789ab)\",");
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(text, m, error)) << error;
  EXPECT_EQ(m.compiler, "distopt 0.1.0 (LLVM/MLIR 22.1.8, git 0123456789ab)");
  expectRoundTrip(text.c_str());
  expectEditErrors({{"\"format\": 1,", "\"format\": 1, \"compiler\": 1,",
                     "compiler: expected a string, found number"}});
}

TEST(Manifest, PrecisionIsOneOfTheDtypes) {
  expectEditErrors(
      {{"\"format\": 1,", "\"format\": 1, \"precision\": \"fp8\",",
        "precision: unknown precision \"fp8\" (fp32, tf32, bf16 or fp16)"},
       {"\"format\": 1,", "\"format\": 1, \"precision\": 16,",
        "precision: expected a string, found number"}});
}

TEST(Manifest, MissingKeysAreNamed) {
  EXPECT_EQ(manifestError(R"({"format": 1, "outputs": []})"),
            "missing required key \"inputs\"");
  EXPECT_EQ(manifestError(R"({"format": 1, "inputs": []})"),
            "missing required key \"outputs\"");
  expectEditErrors(
      {{"\"format\": 1,", "", "missing required key \"format\""},
       {"\"name\": \"input_ids\", ", "",
        "inputs[0]: missing required key \"name\""},
       {"\"dtype\": \"float32\", \"shape\": [2, 16, 100]",
        "\"shape\": [2, 16, 100]",
        "outputs[0]: missing required key \"dtype\""},
       {", \"shape\": [2, 16]", "",
        "inputs[0]: missing required key \"shape\""},
       {"\"file\": \"weights.bin\", ", "",
        "weights[0]: missing required key \"file\""},
       {"\"offset\": 0, ", "", "weights[0]: missing required key \"offset\""},
       {", \"length\": 12800", "",
        "weights[0]: missing required key \"length\""}});
}

TEST(Manifest, BadValues) {
  EXPECT_EQ(manifestError("[]"),
            "expected a JSON object at the top level, found array");
  EXPECT_EQ(manifestError(R"({"format": 1, "inputs": {}, "outputs": []})"),
            "inputs: expected an array, found object");
  expectEditErrors({
      {"\"format\": 1", "\"format\": 2",
       "format: unsupported manifest format 2 (this runtime reads format 1)"},
      {"\"format\": 1", "\"format\": \"1\"",
       "format: expected an integer, found string"},
      {"\"format\": 1", "\"format\": 1.5", "format: expected an integer"},
      {"\"model\": \"gpt\"", "\"model\": 3",
       "model: expected a string, found number"},
      {"\"ranks\": 1", "\"ranks\": 0",
       "ranks: expected an integer >= 1, found 0"},
      {"[{\"name\": \"input_ids\"", "[3, {\"name\": \"input_ids\"",
       "inputs[0]: expected an object, found number"},
      {"\"name\": \"input_ids\"", "\"name\": \"\"",
       "inputs[0].name: empty name"},
      {"\"name\": \"input_ids\"", "\"name\": [1]",
       "inputs[0].name: expected a string, found array"},
      {"\"int64\"", "\"int128\"",
       "inputs[0].dtype: unknown dtype \"int128\" (expected one of float32, "
       "float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool, "
       "uint16, uint32, uint64)"},
      {"[2, 16]", "[2, -16]",
       "inputs[0].shape[1]: expected an integer >= 0, found -16"},
      {"[2, 16]", "[2, 1.5]", "inputs[0].shape[1]: expected an integer"},
      {"[2, 16]", "\"2x16\"",
       "inputs[0].shape: expected an array of dimensions, found string"},
      {"[2, 16]", "[4611686018427387904, 4]",
       "inputs[0].shape: shape [4611686018427387904, 4] is too large"},
      {"\"length\": 12800", "\"length\": 12801",
       "weights[0].length: 12801 bytes, but shape [100, 32] of float32 "
       "needs 12800"},
      {"\"offset\": 0", "\"offset\": -8",
       "weights[0].offset: expected an integer >= 0, found -8"},
      {"\"file\": \"weights.bin\"", "\"file\": \"\"",
       "weights[0].file: empty file name"},
      {"\"weights\": [", "\"weights\": 5, \"w\": [",
       "weights: expected an array, found number"},
      {"[{\"name\": \"logits\", \"dtype\": \"float32\", \"shape\": [2, 16, "
       "100]}]",
       "[{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": []}, "
       "{\"name\": \"y\", \"dtype\": \"int8\", \"shape\": [1]}]",
       "outputs[1].name: duplicate name \"y\" in outputs"},
      {"\"shape\": [2, 16]", "\"shape\": [2, 16], \"indices\": 3",
       "inputs[0].indices: expected an object, found number"},
      {"\"shape\": [2, 16]",
       "\"shape\": [2, 16], \"indices\": {\"low\": 0, \"high\": 9}",
       "inputs[0].indices: missing required key \"use\""},
      {"\"shape\": [2, 16]",
       "\"shape\": [2, 16], \"indices\": "
       "{\"low\": 0, \"high\": -1, \"use\": \"x\"}",
       "inputs[0].indices: high -1 is below low 0"},
  });
}

TEST(Manifest, InPlaceOutputsHaveNoBuffer) {
  // A training step's update written into the weight's buffer, and one
  // into an input's (optimizer state): the entry has no buffer for them.
  const char *step =
      R"({"format": 1, "model": "mlp", "ranks": 1,
   "inputs":  [{"name": "x", "dtype": "float32", "shape": [4, 8]},
               {"name": "opt.m:w", "dtype": "float32", "shape": [8]}],
   "outputs": [{"name": "loss", "dtype": "float32", "shape": []},
               {"name": "opt.m:w", "dtype": "float32", "shape": [8], "in_place": "opt.m:w"},
               {"name": "update:w", "dtype": "float32", "shape": [8], "in_place": "w"}],
   "weights": [{"name": "w", "dtype": "float32", "shape": [8], "file": "weights.bin", "offset": 0, "length": 32}]})";
  expectRoundTrip(step);
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(step, m, error)) << error;
  EXPECT_EQ(m.outputs[2].inPlace, "w");
  EXPECT_EQ(m.numBuffers(), 4u); // 2 inputs, 1 weight, the loss
  EXPECT_EQ(m.bufferOf("opt.m:w"), 1);
  EXPECT_EQ(m.bufferOf("w"), 2);
  EXPECT_EQ(m.bufferOf("loss"), -1);
  // The weight's update written in place of `target`.
  auto inPlaceOf = [&](const std::string &target) {
    std::string text = step;
    std::string key = R"("in_place": "w")";
    return text.replace(text.find(key), key.size(), R"("in_place": )" + target);
  };
  EXPECT_EQ(manifestError(inPlaceOf(R"("v")")),
            "outputs[2].in_place: no weight or input 'v' of dtype float32 and "
            "the output's shape");
  EXPECT_EQ(manifestError(inPlaceOf(R"("x")")),
            "outputs[2].in_place: no weight or input 'x' of dtype float32 and "
            "the output's shape");
  EXPECT_EQ(manifestError(inPlaceOf("2")),
            "outputs[2].in_place: expected a string, found number");
}

TEST(Manifest, SyntaxErrorsHaveLineAndColumn) {
  expectEditErrors(
      {{"\"ranks\": 1,", "\"ranks\": 1",
        "line 2, column 2: expected ',' or '}' in object, found '\"'"},
       {"[2, 16]", "[2, 16,]",
        "line 2, column 70: trailing comma before ']'"}});
}

TEST(Manifest, LoadFromFile) {
  TempDir dir;
  writeFile(dir / "manifest.json", std::string(kExample));
  Manifest m;
  std::string error;
  ASSERT_TRUE(loadManifest(dir / "manifest.json", m, error)) << error;
  EXPECT_EQ(m.model, "gpt");
  writeFile(dir / "bad.json", std::string("{\"format\": 1,\n\"inputs\": [}"));
  EXPECT_FALSE(loadManifest(dir / "bad.json", m, error));
  EXPECT_EQ(error, dir / "bad.json" +
                       ": line 2, column 12: expected a value, found '}'");
  EXPECT_FALSE(loadManifest(dir / "none.json", m, error));
  EXPECT_EQ(error,
            dir / "none.json" + ": cannot open: No such file or directory");
}
