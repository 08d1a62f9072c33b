//===- DriverTest.cpp - dort_main in process ------------------------------===//
//
// A tiny hand-written model: inputs x: float32 [2, 3] and ids: int64 [2];
// weight w: float32 [2, 3]; outputs "out/y:0" = x + w and "ids" = ids * 2.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Bundle.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Runtime.h"
#include "distopt/Runtime/Tensor.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {

int gCalls = 0;
enum class Mode { Add, Fail, Pending } gMode = Mode::Add;
bool gAligned = true;

int32_t testEntry(void **buffers) {
  ++gCalls;
  for (int i : {0, 1, 3, 4})
    if (reinterpret_cast<uintptr_t>(buffers[i]) % 64 != 0)
      gAligned = false;
  if (gMode == Mode::Fail)
    return dort_set_error(7, "injected failure in %s", "layer0");
  if (gMode == Mode::Pending) {
    dort_set_pending_error(1, "dort_matmul_f32: shape mismatch (test)");
    return 0;
  }
  const float *x = static_cast<const float *>(buffers[0]);
  const int64_t *ids = static_cast<const int64_t *>(buffers[1]);
  const float *w = static_cast<const float *>(buffers[2]);
  float *y = static_cast<float *>(buffers[3]);
  int64_t *idsOut = static_cast<int64_t *>(buffers[4]);
  for (int i = 0; i < 6; ++i)
    y[i] = x[i] + w[i];
  for (int i = 0; i < 2; ++i)
    idsOut[i] = ids[i] * 2;
  return 0;
}

const char *kManifest = R"({"format": 1, "model": "adder", "ranks": 1,
  "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 3]},
             {"name": "ids", "dtype": "int64", "shape": [2]}],
  "weights": [{"name": "w", "dtype": "float32", "shape": [2, 3],
               "file": "weights.bin", "offset": 64, "length": 24}],
  "outputs": [{"name": "out/y:0", "dtype": "float32", "shape": [2, 3]},
              {"name": "ids", "dtype": "int64", "shape": [2]}]}
)";

struct Result {
  int code;
  std::string err, out;
};

class DortMain : public ::testing::Test {
protected:
  void SetUp() override {
    gCalls = 0;
    gMode = Mode::Add;
    gAligned = true;
    bundle = dir / "model.dx";
    ::mkdir(bundle.c_str(), 0777);
    writeFile(bundle + "/manifest.json", std::string(kManifest));
    std::string blob(64, '\0');
    float w[6] = {10, 20, 30, 40, 50, 60};
    blob.append(reinterpret_cast<const char *>(w), sizeof(w));
    writeFile(bundle + "/weights.bin", blob);
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t ids[2] = {5, -7};
    std::string error;
    ASSERT_TRUE(writeNpy(dir / "x.npy", DType::Float32, {2, 3}, x, error));
    ASSERT_TRUE(writeNpy(dir / "ids.npy", DType::Int64, {2}, ids, error));
    Tensor xt = Tensor::fromBytes(DType::Float32, {2, 3}, x, sizeof(x));
    ASSERT_TRUE(writeTensorProto(dir / "x.pb", xt, error, "x"));
    writeFile(dir / "x.raw", encodeTensorProto(DType::Float32, {2, 3}, x));
  }

  Result run(std::vector<std::string> args, bool withBundle = true) {
    std::vector<std::string> all = {"/some/where/adder"};
    if (withBundle) {
      all.push_back("--bundle");
      all.push_back(bundle);
    }
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (std::string &a : all)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    testing::internal::CaptureStderr();
    testing::internal::CaptureStdout();
    int code = dort_main(static_cast<int>(all.size()), argv.data(), testEntry);
    Result r;
    r.code = code;
    r.out = testing::internal::GetCapturedStdout();
    r.err = testing::internal::GetCapturedStderr();
    return r;
  }

  std::vector<std::string> goodInputs() {
    return {"--input", "x=" + dir / "x.npy", "--input",
            "ids=" + dir / "ids.npy"};
  }

  static bool contains(const std::string &s, const std::string &part) {
    return s.find(part) != std::string::npos;
  }

  void expectOutputs(const std::string &outDir) {
    EXPECT_EQ(TempDir::list(outDir),
              (std::vector<std::string>{"ids.npy", "out_y_0.npy"}));
    Tensor y, ids;
    std::string error;
    ASSERT_TRUE(readNpy(outDir + "/out_y_0.npy", y, error)) << error;
    EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
    const float *p = y.dataAs<float>();
    EXPECT_EQ(std::vector<float>(p, p + 6),
              (std::vector<float>{11, 22, 33, 44, 55, 66}));
    ASSERT_TRUE(readNpy(outDir + "/ids.npy", ids, error)) << error;
    EXPECT_EQ(ids.dataAs<int64_t>()[0], 10);
    EXPECT_EQ(ids.dataAs<int64_t>()[1], -14);
  }

  TempDir dir;
  std::string bundle;
};

} // namespace

TEST_F(DortMain, RunsAndWritesOutputs) {
  std::vector<std::string> args = goodInputs();
  args.insert(args.end(), {"--output-dir", dir / "o"});
  Result r = run(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(gCalls, 1);
  EXPECT_TRUE(gAligned);
  expectOutputs(dir / "o");
}

TEST_F(DortMain, OutputDirIsCreatedAndWritesAreAtomic) {
  std::string out = dir / "a/b/out";
  std::vector<std::string> args = goodInputs();
  args.push_back("--output-dir=" + out);
  Result r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  expectOutputs(out);
  // Existing outputs are replaced; no temporaries are left.
  writeFile(out + "/ids.npy", std::string("stale"));
  r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  expectOutputs(out);
}

TEST_F(DortMain, DefaultOutputDirIsTheCurrentDirectory) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::mkdir((dir / "cwd").c_str(), 0777), 0);
  ASSERT_EQ(::chdir((dir / "cwd").c_str()), 0);
  Result r = run(goodInputs());
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_EQ(r.code, 0) << r.err;
  expectOutputs(dir / "cwd");
}

TEST_F(DortMain, TensorProtoInputsByExtensionOrContent) {
  for (const char *file : {"x.pb", "x.raw"}) {
    std::string out = dir / (std::string("out-") + file);
    Result r = run({"--input", std::string("x=") + (dir / file), "--input",
                    "ids=" + dir / "ids.npy", "--output-dir", out});
    ASSERT_EQ(r.code, 0) << r.err;
    expectOutputs(out);
  }
}

TEST_F(DortMain, RepeatRunsAndReportsTiming) {
  std::vector<std::string> args = goodInputs();
  args.insert(args.end(), {"--repeat", "5", "--output-dir", dir / "o"});
  Result r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(gCalls, 5);
  EXPECT_TRUE(contains(r.err, "adder: model 'adder': 5 runs: median "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "s, min ")) << r.err;
  EXPECT_TRUE(contains(r.err, "s per run (")) << r.err;
  // The thread count and OpenBLAS's kernels, which the timing depends on.
  EXPECT_TRUE(contains(r.err, " thread")) << r.err;
  EXPECT_TRUE(contains(r.err, std::string(", OpenBLAS kernels ") +
                                  dort_blas_kernels() + ")\n"))
      << r.err;
  EXPECT_STRNE(dort_blas_kernels(), "unknown");
  expectOutputs(dir / "o");
  gCalls = 0;
  args = goodInputs();
  args.insert(args.end(), {"--repeat=1", "--output-dir", dir / "o"});
  r = run(args);
  EXPECT_EQ(gCalls, 1);
  EXPECT_EQ(r.err, "");
}

TEST_F(DortMain, UsageErrorsExit2) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--bogus"}, "unknown option '--bogus'"},
      {{"-x"}, "unexpected argument '-x'"},
      {{"x.npy"},
       "unexpected argument 'x.npy' (inputs are given as --input NAME=FILE)"},
      {{"--input"}, "option '--input' needs a value"},
      {{"--input", "x"}, "--input expects NAME=FILE, got 'x'"},
      {{"--input", "=x.npy"}, "--input expects NAME=FILE, got '=x.npy'"},
      {{"--input", "x="}, "--input expects NAME=FILE, got 'x='"},
      {{"--repeat", "0"}, "--repeat expects a positive integer, got '0'"},
      {{"--repeat", "-3"}, "--repeat expects a positive integer, got '-3'"},
      {{"--repeat", "2x"}, "--repeat expects a positive integer, got '2x'"},
      {{"--repeat=99999999999"}, "--repeat expects a positive integer"},
      {{"--repeat", "2", "--repeat", "3"}, "--repeat given more than once"},
      {{"--output-dir"}, "option '--output-dir' needs a value"},
      {{"--output-dir="}, "--output-dir needs a non-empty directory"},
      {{"--output-dir", "a", "--output-dir", "b"},
       "--output-dir given more than once"},
      {{"--bundle", "a"}, "--bundle given more than once"},
  };
  for (const Case &c : cases) {
    Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.message;
    EXPECT_TRUE(contains(r.err, "adder: error: " + c.message)) << r.err;
    EXPECT_TRUE(contains(r.err, "run 'adder --help' for usage")) << r.err;
    EXPECT_EQ(gCalls, 0);
  }
}

TEST_F(DortMain, Help) {
  Result r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(contains(r.out, "usage: adder --input NAME=FILE")) << r.out;
  EXPECT_TRUE(contains(r.out, "--output-dir DIR")) << r.out;
  EXPECT_TRUE(contains(r.out, "--repeat N")) << r.out;
  EXPECT_TRUE(contains(r.out, "--bundle DIR")) << r.out;
  EXPECT_TRUE(contains(r.out, "such as '/' and ':'")) << r.out;
  EXPECT_TRUE(contains(r.out, "are replaced by '_'")) << r.out;
  EXPECT_TRUE(contains(r.out, "model adder")) << r.out;
  EXPECT_TRUE(contains(r.out, "  x: float32 [2, 3]\n  ids: int64 [2]\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "  out/y:0: float32 [2, 3] -> out_y_0.npy\n"))
      << r.out;
  // Help works without a readable bundle, too.
  r = run({"-h", "--bundle", dir / "nowhere"}, false);
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(
      contains(r.out, "(no manifest.json readable in " + dir / "nowhere" + ")"))
      << r.out;
  EXPECT_EQ(gCalls, 0);
}

TEST_F(DortMain, InputNameErrorsAreAllReported) {
  Result r =
      run({"--input", "y=" + dir / "x.npy", "--input", "x=" + dir / "x.npy",
           "--input", "x=" + dir / "x.pb", "--output-dir", dir / "o"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(
      r.err, "adder: error: unknown input 'y' (--input y=" + dir / "x.npy" +
                 "); the model's inputs are 'x', 'ids'\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "adder: error: input 'x' given more than once (" +
                                  dir / "x.npy" + " and " + dir / "x.pb" +
                                  ")\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "adder: error: missing input 'ids' (int64 [2]); "
                              "pass --input ids=FILE\n"))
      << r.err;
  EXPECT_EQ(gCalls, 0);
  EXPECT_FALSE(exists(dir / "o"));
  r = run({});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "missing input 'x' (float32 [2, 3])")) << r.err;
  EXPECT_TRUE(contains(r.err, "missing input 'ids' (int64 [2])")) << r.err;
}

TEST_F(DortMain, InputFileErrors) {
  std::string full = readFile(dir / "x.npy");
  writeFile(dir / "trunc.npy", full.substr(0, full.size() - 4));
  double d[6] = {};
  std::string error;
  ASSERT_TRUE(writeNpy(dir / "f64.npy", DType::Float64, {2, 3}, d, error));
  ASSERT_TRUE(writeNpy(dir / "shape.npy", DType::Float32, {3, 2}, d, error));
  std::string pb = readFile(dir / "x.pb");
  writeFile(dir / "trunc.pb", pb.substr(0, pb.size() - 5));
  ::mkdir((dir / "adir.npy").c_str(), 0777);
  struct Case {
    std::string file, message;
  } cases[] = {
      {dir / "nope.npy", "cannot open: No such file or directory"},
      {dir / "adir.npy", "cannot read: is a directory"},
      {dir / "trunc.npy",
       "truncated .npy file: shape [2, 3] of float32 needs 24 "
       "data bytes, file has 20"},
      {dir / "trunc.pb", "invalid TensorProto: truncated: length-delimited "
                         "field at byte 9 needs 24 bytes, 19 left"},
      {dir / "f64.npy", "wrong dtype: expected float32, got float64"},
      {dir / "shape.npy", "wrong shape: expected [2, 3], got [3, 2]"},
      {dir / "ids.npy", "wrong dtype: expected float32, got int64"},
  };
  std::vector<Case> all(std::begin(cases), std::end(cases));
  if (::geteuid() != 0) { // root reads anything
    writeFile(dir / "locked.npy", full);
    ::chmod((dir / "locked.npy").c_str(), 0);
    all.push_back({dir / "locked.npy", "cannot open: Permission denied"});
  }
  for (const Case &c : all) {
    Result r = run({"--input", "x=" + c.file, "--input",
                    "ids=" + dir / "ids.npy", "--output-dir", dir / "o"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "adder: error: input 'x': file '" + c.file +
                         "': " + c.message + "\n");
  }
  // Both inputs bad: both reported.
  Result r = run(
      {"--input", "x=" + dir / "f64.npy", "--input", "ids=" + dir / "x.npy"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "input 'x': file '" + dir / "f64.npy" +
                                  "': wrong dtype"));
  EXPECT_TRUE(
      contains(r.err, "input 'ids': file '" + dir / "x.npy" +
                          "': wrong dtype: expected int64, got float32"));
  EXPECT_EQ(gCalls, 0);
  EXPECT_FALSE(exists(dir / "o"));
}

TEST_F(DortMain, EntryFailureWritesNothing) {
  gMode = Mode::Fail;
  std::vector<std::string> args = goodInputs();
  args.insert(args.end(), {"--output-dir", dir / "o", "--repeat", "3"});
  Result r = run(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "adder: error: model 'adder' failed (run 1 of 3): dopt_entry "
            "returned 7: injected failure in layer0; no outputs written\n");
  EXPECT_EQ(gCalls, 1);
  EXPECT_TRUE(TempDir::list(dir / "o").empty());

  gMode = Mode::Pending;
  args = goodInputs();
  args.insert(args.end(), {"--output-dir", dir / "o"});
  r = run(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "adder: error: model 'adder' failed: a runtime call failed: "
            "dort_matmul_f32: shape mismatch (test); no outputs written\n");
  EXPECT_TRUE(TempDir::list(dir / "o").empty());
  EXPECT_EQ(dort_pending_error(), nullptr);
}

TEST_F(DortMain, BundleErrors) {
  // Weight file missing.
  ::unlink((bundle + "/weights.bin").c_str());
  Result r = run(goodInputs());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "adder: error: weight 'w': file '" + bundle +
                "/weights.bin': cannot open: No such file or directory\n");
  // Weight range past the end.
  writeFile(bundle + "/weights.bin", std::string(70, '\0'));
  r = run(goodInputs());
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(
      contains(r.err, "bytes [64, 88) run past the end of the file (70 bytes)"))
      << r.err;
  // Manifest syntax error, bad manifest, missing manifest.
  writeFile(bundle + "/manifest.json",
            std::string("{\"format\": 1,\n  \"inputs\": [}\n"));
  r = run(goodInputs());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(
      r.err,
      "adder: error: " + bundle +
          "/manifest.json: line 2, column 14: expected a value, found '}'\n");
  writeFile(bundle + "/manifest.json",
            std::string("{\"format\": 1, \"inputs\": []}"));
  r = run(goodInputs());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "adder: error: " + bundle +
                       "/manifest.json: missing required key \"outputs\"\n");
  // A 4-rank manifest run as one process: refused, saying `why`.
  auto expectRefused = [&](const std::string &manifest, const char *why) {
    writeFile(bundle + "/manifest.json", manifest);
    Result refused = run({});
    EXPECT_EQ(refused.code, 1);
    EXPECT_TRUE(contains(refused.err, why)) << refused.err;
  };
  expectRefused(
      "{\"format\": 1, \"ranks\": 4, \"inputs\": [], \"outputs\": []}",
      "a multi-rank manifest needs a \"grid\"");
  // A 4-rank bundle started without mpirun: a clear error before any work.
  expectRefused("{\"format\": 1, \"ranks\": 4, \"grid\": [1, 4, 1], "
                "\"inputs\": [], \"outputs\": []}",
                "compiled for 4 ranks, but it was launched on 1");
  expectRefused("{\"format\": 1, \"ranks\": 4, \"grid\": [1, 2, 1], "
                "\"inputs\": [], \"outputs\": []}",
                "the grid holds 2 ranks, but \"ranks\" is 4");
  ::unlink((bundle + "/manifest.json").c_str());
  r = run(goodInputs());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "adder: error: " + bundle +
                "/manifest.json: cannot open: No such file or directory\n");
  EXPECT_EQ(gCalls, 0);
}

TEST_F(DortMain, OutputWriteErrors) {
  // The output directory is a file.
  writeFile(dir / "file", std::string("x"));
  std::vector<std::string> args = goodInputs();
  args.insert(args.end(), {"--output-dir", dir / "file"});
  Result r = run(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "adder: error: output directory: '" + dir / "file" +
                       "' exists and is not a directory\n");
  EXPECT_EQ(gCalls, 0);
  // An output's file name is taken by a directory: the rename fails and the
  // temporary is removed.
  ::mkdir((dir / "o").c_str(), 0777);
  ::mkdir((dir / "o/ids.npy").c_str(), 0777);
  args = goodInputs();
  args.insert(args.end(), {"--output-dir", dir / "o"});
  r = run(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "adder: error: output 'ids': cannot rename"))
      << r.err;
  EXPECT_EQ(TempDir::list(dir / "o"),
            (std::vector<std::string>{"ids.npy", "out_y_0.npy"}));
}

TEST_F(DortMain, NoEntry) {
  std::vector<std::string> all = {"m", "--bundle", bundle};
  std::vector<char *> argv;
  for (std::string &a : all)
    argv.push_back(a.data());
  testing::internal::CaptureStderr();
  int code = dort_main(3, argv.data(), nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(contains(err, "no entry point")) << err;
}
