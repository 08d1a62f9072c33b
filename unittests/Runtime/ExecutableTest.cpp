//===- ExecutableTest.cpp - a linked model executable, end to end ---------===//
//
// Runs dort-test-model (TestModelEntry.c + distopt_runtime_main +
// distopt_runtime) as a real process: once linked by CMake, once with the
// documented raw link line. The executable is copied into a bundle
// directory so the default bundle (the directory of /proc/self/exe) is used.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Tensor.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fcntl.h>
#include <sys/wait.h>

using namespace distopt::runtime;
using namespace distopt::runtime::test;

namespace {

struct Process {
  int code = -1;
  std::string out, err;
};

/// Runs `argv` with extra environment `env` ("NAME=VALUE"), in `cwd`.
Process runProcess(const std::vector<std::string> &argv,
                   const std::vector<std::string> &env, const std::string &cwd,
                   const TempDir &scratch) {
  std::string outPath = scratch / "stdout.txt",
              errPath = scratch / "stderr.txt";
  // Everything the child needs is built before fork (no malloc after it).
  std::vector<char *> args, envp;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  for (char **e = environ; *e; ++e)
    envp.push_back(*e);
  for (const std::string &e : env)
    envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 ||
        ::chdir(cwd.c_str()) != 0)
      ::_exit(120);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(121);
  }
  Process p;
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
    ADD_FAILURE() << "fork/waitpid failed";
    return p;
  }
  p.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  p.out = readFile(outPath);
  p.err = readFile(errPath);
  return p;
}

class ModelExecutable : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    bundle = dir / "model.dx";
    ASSERT_EQ(::mkdir(bundle.c_str(), 0777), 0);
    exe = bundle + "/model";
    std::string image = readFile(GetParam());
    ASSERT_FALSE(image.empty()) << GetParam();
    writeFile(exe, image);
    ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
    writeFile(bundle + "/manifest.json",
              std::string(R"({"format": 1, "model": "tiny",
      "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 3]}],
      "weights": [{"name": "w", "dtype": "float32", "shape": [2, 3],
                   "file": "weights.bin", "offset": 0, "length": 24}],
      "outputs": [{"name": "sum:0", "dtype": "float32", "shape": [2, 3]},
                  {"name": "gram", "dtype": "float32", "shape": [2, 2]}]})"));
    float w[6] = {1, 0, -1, 2, 0.5f, 3};
    writeFile(bundle + "/weights.bin", w, sizeof(w));
    float x[6] = {1, 2, 3, 4, 5, 6};
    std::string error;
    ASSERT_TRUE(writeNpy(dir / "x.npy", DType::Float32, {2, 3}, x, error));
    ASSERT_EQ(::mkdir((dir / "work").c_str(), 0777), 0);
  }

  TempDir dir, scratch;
  std::string bundle, exe;
};

} // namespace

TEST_P(ModelExecutable, RunsFromItsBundle) {
  // Default bundle (exe dir) and default output dir (cwd).
  Process p = runProcess({exe, "--input", "x=" + dir / "x.npy"}, {},
                         dir / "work", scratch);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(TempDir::list(dir / "work"),
            (std::vector<std::string>{"gram.npy", "sum_0.npy"}));
  Tensor sum, gram;
  std::string error;
  ASSERT_TRUE(readNpy(dir / "work/sum_0.npy", sum, error)) << error;
  const float *s = sum.dataAs<float>();
  EXPECT_EQ(std::vector<float>(s, s + 6),
            (std::vector<float>{2, 2, 2, 6, 5.5f, 9}));
  ASSERT_TRUE(readNpy(dir / "work/gram.npy", gram, error)) << error;
  EXPECT_EQ(gram.shape(), (std::vector<int64_t>{2, 2}));
  // gram = x * w^T: rows of x against rows of w.
  const float *g = gram.dataAs<float>();
  EXPECT_EQ(std::vector<float>(g, g + 4),
            (std::vector<float>{1 - 3, 2 + 1 + 9, 4 - 6, 8 + 2.5f + 18}));

  // --repeat with an explicit --output-dir and DISTOPT_NUM_THREADS.
  p = runProcess({exe, "--input", "x=" + dir / "x.npy", "--repeat", "3",
                  "--output-dir", dir / "out"},
                 {"DISTOPT_NUM_THREADS=1"}, dir / "work", scratch);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.err.find("model: model 'tiny': 3 runs: median "),
            std::string::npos)
      << p.err;
  EXPECT_TRUE(exists(dir / "out/gram.npy"));

  // --help lists the manifest of the default bundle.
  p = runProcess({exe, "--help"}, {}, dir / "work", scratch);
  EXPECT_EQ(p.code, 0);
  EXPECT_NE(p.out.find("  sum:0: float32 [2, 3] -> sum_0.npy"),
            std::string::npos)
      << p.out;
}

TEST_P(ModelExecutable, Failures) {
  Process p = runProcess(
      {exe, "--input", "x=" + dir / "x.npy", "--output-dir", dir / "out"},
      {"DORT_TEST_FAIL=boom"}, dir / "work", scratch);
  EXPECT_EQ(p.code, 1);
  EXPECT_EQ(p.err, "model: error: model 'tiny' failed: dopt_entry returned 5: "
                   "injected failure (boom); no outputs written\n");
  EXPECT_TRUE(TempDir::list(dir / "out").empty());

  p = runProcess({exe, "--input", "y=" + dir / "x.npy"}, {}, dir / "work",
                 scratch);
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("unknown input 'y'"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("missing input 'x'"), std::string::npos) << p.err;

  p = runProcess({exe, "--frobnicate"}, {}, dir / "work", scratch);
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("unknown option '--frobnicate'"), std::string::npos);

  ::unlink((bundle + "/manifest.json").c_str());
  p = runProcess({exe, "--input", "x=" + dir / "x.npy"}, {}, dir / "work",
                 scratch);
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find(bundle + "/manifest.json: cannot open"),
            std::string::npos)
      << p.err;
  EXPECT_TRUE(TempDir::list(dir / "work").empty());
}

INSTANTIATE_TEST_SUITE_P(Linked, ModelExecutable,
                         ::testing::Values(DORT_TEST_MODEL,
                                           DORT_TEST_MODEL_LINKLINE),
                         [](const testing::TestParamInfo<const char *> &info) {
                           return std::string(info.index == 0 ? "CMake"
                                                              : "LinkLine");
                         });
