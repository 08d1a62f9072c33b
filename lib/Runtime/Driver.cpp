//===- Driver.cpp - dort_main, the model executable's command line --------===//

#include "distopt/Runtime/Bundle.h"
#include "distopt/Runtime/Distributed.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Manifest.h"
#include "distopt/Runtime/Runtime.h"
#include "distopt/Runtime/Tensor.h"

#include "FileUtil.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <malloc.h>
#include <map>
#include <unistd.h>

namespace distopt::runtime {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

struct InputArg {
  std::string name;
  std::string file;
};

struct CommandLine {
  std::string program = "model";
  std::vector<InputArg> inputs;
  std::string outputDir = ".";
  int64_t repeat = 1;
  std::string bundleDir;
  bool help = false;
};

std::string baseName(const char *path) {
  if (!path || !*path)
    return "model";
  const char *slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/// Parses argv; false with `error` on a usage error.
bool parseCommandLine(int argc, char **argv, CommandLine &cl,
                      std::string &error) {
  if (argc > 0)
    cl.program = baseName(argv[0]);
  bool sawOutputDir = false, sawRepeat = false, sawBundle = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      cl.help = true;
      continue;
    }
    std::string option = arg, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        option = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        hasValue = true;
      }
    } else {
      error = "unexpected argument '" + arg + "' (inputs are given as " +
              "--input NAME=FILE)";
      return false;
    }
    bool known = option == "--input" || option == "--output-dir" ||
                 option == "--repeat" || option == "--bundle";
    if (!known) {
      error = "unknown option '" + option + "'";
      return false;
    }
    if (!hasValue) {
      if (i + 1 >= argc) {
        error = "option '" + option + "' needs a value";
        return false;
      }
      value = argv[++i];
    }
    // Options given at most once: `saw` says whether it was.
    auto once = [&](bool &saw) {
      if (saw) {
        error = option + " given more than once";
        return false;
      }
      saw = true;
      return true;
    };
    auto directory = [&](bool &saw, std::string &dir) {
      if (!once(saw))
        return false;
      if (value.empty()) {
        error = option + " needs a non-empty directory";
        return false;
      }
      dir = value;
      return true;
    };
    if (option == "--input") {
      size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
        error = "--input expects NAME=FILE, got '" + value + "'";
        return false;
      }
      cl.inputs.push_back({value.substr(0, eq), value.substr(eq + 1)});
    } else if (option == "--output-dir") {
      if (!directory(sawOutputDir, cl.outputDir))
        return false;
    } else if (option == "--repeat") {
      if (!once(sawRepeat))
        return false;
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || n < 1 ||
          n > INT32_MAX) {
        error = "--repeat expects a positive integer, got '" + value + "'";
        return false;
      }
      cl.repeat = n;
    } else if (!directory(sawBundle, cl.bundleDir)) { // --bundle
      return false;
    }
  }
  return true;
}

std::string defaultBundleDir() {
  std::string buffer(4096, '\0');
  ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n <= 0)
    return ".";
  buffer.resize(static_cast<size_t>(n));
  return detail::dirName(buffer);
}

/// "12.345 ms", or "4.56 us" below a millisecond.
std::string formatMillis(double ms) {
  char buf[64];
  if (ms < 1.0)
    std::snprintf(buf, sizeof(buf), "%.2f us", ms * 1000.0);
  else
    std::snprintf(buf, sizeof(buf), "%.3f ms", ms);
  return buf;
}

std::string specLine(const TensorSpec &s) {
  return std::string(dtypeName(s.dtype)) + " " + shapeToString(s.shape);
}

void printUsage(std::FILE *out, const CommandLine &cl, const Manifest *manifest,
                const std::string &bundleDir) {
  const std::string &p = cl.program;
  std::fprintf(
      out,
      "usage: %s --input NAME=FILE [--input NAME=FILE ...] [--output-dir DIR]\n"
      "       %*s [--repeat N] [--bundle DIR] [--help]\n"
      "\n"
      "Runs a model compiled by distopt on the given inputs and writes its\n"
      "outputs as .npy files.\n"
      "\n"
      "options:\n"
      "  --input NAME=FILE  bind model input NAME to FILE, a NumPy .npy file\n"
      "                     or an ONNX TensorProto .pb file (chosen by the\n"
      "                     extension, else by content); dtype and shape must\n"
      "                     match the model's\n"
      "  --output-dir DIR   write outputs to DIR (default: the current\n"
      "                     directory; created if missing)\n"
      "  --repeat N         run the model N times (default 1); with N > 1,\n"
      "                     print the median and minimum time per run to\n"
      "                     stderr\n"
      "  --bundle DIR       the bundle directory holding manifest.json and "
      "the\n"
      "                     weights (default: the directory of this\n"
      "                     executable)\n"
      "  --help             print this help\n"
      "\n"
      "Each output NAME is written to DIR/NAME.npy, atomically (to a\n"
      "temporary file, then renamed). Characters of NAME other than ASCII\n"
      "letters, digits, '.', '_' and '-' (such as '/' and ':' in names from\n"
      "PyTorch exports) are replaced by '_' in the file name, a leading '.'\n"
      "becomes '_', and when two outputs end up with the same file name the\n"
      "later one gets _2, _3, ... appended.\n"
      "\n"
      "environment: DISTOPT_NUM_THREADS (else OMP_NUM_THREADS) sets the\n"
      "number of threads, shared by the loops and the matrix products\n"
      "(default: the usable CPUs, divided among the processes of an MPI job\n"
      "on this node unless they are bound to cores). A --target cuda-emu\n"
      "bundle runs its emulated kernels' threads in the order\n"
      "DISTOPT_EMULATE_THREADS names (forward or reverse; default: the\n"
      "compile's --emulate-threads); any other value is an error in every\n"
      "bundle.\n"
      "exit status: 0 success, 1 error, 2 usage error.\n",
      p.c_str(), static_cast<int>(p.size()), "");
  if (!manifest) {
    std::fprintf(out, "\n(no manifest.json readable in %s)\n",
                 bundleDir.c_str());
    return;
  }
  std::fprintf(out, "\nmodel%s%s (bundle %s)\n",
               manifest->model.empty() ? "" : " ", manifest->model.c_str(),
               bundleDir.c_str());
  std::fprintf(out, "inputs:\n");
  if (manifest->inputs.empty())
    std::fprintf(out, "  (none)\n");
  for (const TensorSpec &s : manifest->inputs)
    std::fprintf(out, "  %s: %s\n", s.name.c_str(), specLine(s).c_str());
  std::fprintf(out, "outputs:\n");
  std::vector<std::string> files = outputFileNames(manifest->outputs);
  for (size_t i = 0; i < manifest->outputs.size(); ++i)
    std::fprintf(out, "  %s: %s -> %s\n", manifest->outputs[i].name.c_str(),
                 specLine(manifest->outputs[i]).c_str(), files[i].c_str());
}

class Driver {
public:
  Driver(int argc, char **argv, dort_entry_fn entry)
      : argc(argc), argv(argv), entry(entry) {}
  Driver(int argc, char **argv, const dort_entry_fn *stages, int count)
      : argc(argc), argv(argv), entry(count > 0 ? stages[0] : nullptr),
        stageEntries(stages, stages + count) {}

  int run() {
    std::string error;
    if (dort_emulate_threads_check() != 0) {
      std::fprintf(stderr, "%s: error: %s\n", argc > 0 ? argv[0] : "model",
                   dort_last_error_message());
      return kExitError;
    }
    if (argc > 1 && std::string(argv[1]) == "train")
      return runTraining(argc, argv,
                         stageEntries.empty() ? std::vector<EntryFn>{entry}
                                              : std::vector<EntryFn>(
                                                    stageEntries.begin(),
                                                    stageEntries.end()),
                         defaultBundleDir());
    if (argc > 1 && std::string(argv[1]) == "eval")
      return runEvaluation(argc, argv, defaultBundleDir());
    if (!parseCommandLine(argc, argv, cl, error)) {
      std::fprintf(stderr, "%s: error: %s\n", cl.program.c_str(),
                   error.c_str());
      std::fprintf(stderr, "run '%s --help' for usage\n", cl.program.c_str());
      return kExitUsage;
    }
    std::string bundleDir =
        cl.bundleDir.empty() ? defaultBundleDir() : cl.bundleDir;
    std::string manifestPath = detail::joinPath(bundleDir, "manifest.json");
    Manifest manifest;
    bool haveManifest = loadManifest(manifestPath, manifest, error);
    if (cl.help) {
      printUsage(stdout, cl, haveManifest ? &manifest : nullptr, bundleDir);
      return kExitOk;
    }
    if (!haveManifest)
      return fail(error);
    applyPrecision(manifest);
    if (!entry)
      return fail("no entry point (dopt_entry) given to dort_main");
    bool pipelined = !manifest.stages.empty();
    if (pipelined != !stageEntries.empty() ||
        (pipelined && manifest.stages.size() != stageEntries.size()))
      return fail("the manifest describes " +
                  std::to_string(manifest.stages.size()) +
                  " pipeline stages, but the executable has " +
                  std::to_string(stageEntries.size()) +
                  " (the bundle's files do not belong together)");
    // Ranks: a multi-rank bundle runs under mpirun with exactly its rank
    // count; a single-rank bundle must not be started on several.
    int64_t launched = launchedRanks();
    if (manifest.ranks == 1 && launched > 1)
      return fail("this bundle was compiled for 1 rank, but it was launched "
                  "on " + std::to_string(launched) +
                  " (compile it with --cluster, or run it without mpirun)");
    if (manifest.ranks > 1) {
      if (launched != manifest.ranks)
        return fail("this bundle was compiled for " +
                    std::to_string(manifest.ranks) + " ranks, but it was "
                    "launched on " + std::to_string(launched) +
                    "; run it with `distopt run BUNDLE -n " +
                    std::to_string(manifest.ranks) + "` or `mpirun -np " +
                    std::to_string(manifest.ranks) + "`");
      if (dort_comm_init(&argc, &argv) != 0)
        return fail(dort_last_error_message());
      distributed = true;
      rank = dort_comm_rank(dort_comm_world());
      if (dort_grid_init(static_cast<int>(manifest.grid.size()),
                         manifest.grid.data()) != 0)
        return fail(dort_last_error_message());
      coords = gridCoords(manifest.grid, rank);
      if (!holdsProgramOf(manifest, rank, error))
        return fail(error);
    }

    // Inputs: names first, then files; report every problem found.
    std::vector<std::string> problems;
    std::map<std::string, size_t> given; // name -> index in cl.inputs
    for (size_t i = 0; i < cl.inputs.size(); ++i) {
      const InputArg &in = cl.inputs[i];
      bool known =
          std::any_of(manifest.inputs.begin(), manifest.inputs.end(),
                      [&](const TensorSpec &s) { return s.name == in.name; });
      if (!known) {
        std::string expected;
        for (const TensorSpec &s : manifest.inputs)
          expected += (expected.empty() ? "'" : ", '") + s.name + "'";
        problems.push_back(
            "unknown input '" + in.name + "' (--input " + in.name + "=" +
            in.file + "); the model's inputs " +
            (expected.empty() ? std::string("are none") : "are " + expected));
        continue;
      }
      auto [it, inserted] = given.emplace(in.name, i);
      if (!inserted)
        problems.push_back("input '" + in.name + "' given more than once (" +
                           cl.inputs[it->second].file + " and " + in.file +
                           ")");
    }
    for (const TensorSpec &s : manifest.inputs)
      if (!given.count(s.name))
        problems.push_back("missing input '" + s.name + "' (" + specLine(s) +
                           "); pass --input " + s.name + "=FILE");
    if (!problems.empty())
      return failAll(problems);

    std::vector<Tensor> inputs(manifest.inputs.size());
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      const TensorSpec &spec = manifest.inputs[i];
      const std::string &file = cl.inputs[given[spec.name]].file;
      std::string why;
      // Files hold whole tensors; each rank keeps its block.
      TensorSpec whole = spec;
      whole.shape = spec.fileShape();
      Tensor read;
      if (!readTensorFile(file, read, why) ||
          !checkTensorMatches(whole, read, why)) {
        problems.push_back("input '" + spec.name + "': file '" + file +
                           "': " + why);
        continue;
      }
      if (spec.splitAxes.empty()) {
        inputs[i] = std::move(read);
      } else if (!Tensor::create(spec.dtype, spec.shape, inputs[i], why)) {
        problems.push_back("input '" + spec.name + "': " + why);
      } else {
        extractBlock(read.data(), inputs[i].data(), spec, manifest.grid,
                     coords);
      }
    }
    if (!agree(problems.empty()))
      return failAll(problems);

    WeightStore weights;
    bool weightsOk = weights.load(manifest, bundleDir, error);
    if (!agree(weightsOk))
      return fail(weightsOk ? "another rank failed to load the weights"
                            : error);
    // Sharded weights: this rank's block, copied out of the mapped file.
    std::vector<Tensor> weightBlocks(manifest.weights.size());
    std::vector<bool> usedHere(manifest.weights.size(), !pipelined);
    if (pipelined)
      for (int64_t w : manifest.stages[coords[0]].weights)
        usedHere[w] = true;
    for (size_t i = 0; i < manifest.weights.size(); ++i) {
      const WeightSpec &spec = manifest.weights[i];
      if (spec.splitAxes.empty() || !usedHere[i])
        continue;
      if (!Tensor::create(spec.dtype, spec.shape, weightBlocks[i], error))
        return fail("weight '" + spec.name + "': " + error);
      extractBlock(weights.data(i), weightBlocks[i].data(), spec,
                   manifest.grid, coords);
    }

    std::vector<Tensor> outputs(manifest.outputs.size());
    for (size_t i = 0; i < manifest.outputs.size(); ++i) {
      const TensorSpec &spec = manifest.outputs[i];
      if (!Tensor::create(spec.dtype, spec.shape, outputs[i], error))
        return fail("output '" + spec.name + "': " + error);
    }
    std::vector<std::string> files = outputFileNames(manifest.outputs);
    if (!detail::makeDirectories(cl.outputDir, error))
      return fail("output directory: " + error);

    std::vector<void *> buffers;
    buffers.reserve(manifest.numBuffers());
    for (Tensor &t : inputs)
      buffers.push_back(t.data());
    for (size_t i = 0; i < weights.size(); ++i)
      buffers.push_back(manifest.weights[i].splitAxes.empty()
                            ? weights.data(i)
                            : weightBlocks[i].data());
    // A training step's updates written in place (one step run as a
    // function): each output starts as a copy of what it updates and takes
    // its place, so the inputs and the mapped weights stay as they are.
    std::vector<std::pair<size_t, size_t>> inPlaceOutputs; // output, slot
    for (size_t o = 0; o < outputs.size(); ++o) {
      const std::string &target = manifest.outputs[o].inPlace;
      if (target.empty()) {
        buffers.push_back(outputs[o].data());
        continue;
      }
      if (pipelined)
        return fail("'" + manifest.outputs[o].name +
                    "' is a pipelined training step's update: run the step "
                    "with 'train'");
      int64_t slot = manifest.bufferOf(target);
      inPlaceOutputs.emplace_back(o, slot);
    }
    std::vector<void *> original = buffers;
    for (auto [o, slot] : inPlaceOutputs)
      buffers[slot] = outputs[o].data();

    int threads = dort_set_num_threads(0);
    std::vector<double> millis;
    for (int64_t r = 0; r < cl.repeat; ++r) {
      dort_clear_error();
      dort_clear_pending_error();
      for (auto [o, slot] : inPlaceOutputs)
        std::memcpy(outputs[o].data(), original[slot], outputs[o].byteSize());
      auto start = std::chrono::steady_clock::now();
      int32_t rc = pipelined
                       ? runStage(manifest, inputs, weights, weightBlocks,
                                  outputs)
                       : entry(buffers.data());
      auto stop = std::chrono::steady_clock::now();
      std::string failure = entryFailure(rc);
      if (!failure.empty()) {
        std::string run = cl.repeat > 1
                              ? " (run " + std::to_string(r + 1) + " of " +
                                    std::to_string(cl.repeat) + ")"
                              : "";
        std::string msg = modelLabel(manifest) + " failed" + run + ": " +
                          failure + "; no outputs written";
        // Peers may be waiting in a collective for this rank: end the job.
        if (distributed)
          dort_comm_abort(1, (cl.program + ": error: " + msg).c_str());
        return fail(msg);
      }
      millis.push_back(
          std::chrono::duration<double, std::milli>(stop - start).count());
    }
    if (cl.repeat > 1 && rank == 0) {
      std::vector<double> sorted = millis;
      std::sort(sorted.begin(), sorted.end());
      size_t n = sorted.size();
      double median =
          n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
      std::fprintf(stderr,
                   "%s: %s: %lld runs: median %s, min %s per run (%d "
                   "thread%s, OpenBLAS kernels %s)\n",
                   cl.program.c_str(), modelLabel(manifest).c_str(),
                   static_cast<long long>(n), formatMillis(median).c_str(),
                   formatMillis(sorted[0]).c_str(), threads,
                   threads == 1 ? "" : "s", dort_blas_kernels());
    }

    // Multi-rank: rank 0 collects every rank's output block and puts the
    // whole tensors together.
    if (distributed) {
      int64_t n = manifest.ranks;
      for (size_t i = 0; i < outputs.size(); ++i) {
        const TensorSpec &spec = manifest.outputs[i];
        size_t bytes = outputs[i].byteSize();
        std::vector<char> all(rank == 0 ? bytes * n : 0);
        if (dort_gather(outputs[i].data(), all.data(),
                        static_cast<int64_t>(bytes), DORT_U8, 0,
                        dort_comm_world()) != 0)
          return fail(std::string("collecting the outputs: ") +
                      dort_last_error_message());
        if (rank != 0)
          continue;
        Tensor whole;
        if (!Tensor::create(spec.dtype, spec.fileShape(), whole, error))
          return fail("output '" + spec.name + "': " + error);
        for (int64_t r = 0; r < n; ++r) {
          std::vector<int64_t> at = gridCoords(manifest.grid, r);
          // A pipeline's outputs come from its last stage.
          if (pipelined && at[0] != manifest.grid[0] - 1)
            continue;
          insertBlock(all.data() + r * bytes, whole.data(), spec,
                      manifest.grid, at);
        }
        outputs[i] = std::move(whole);
      }
    }
    if (rank == 0)
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string path = detail::joinPath(cl.outputDir, files[i]);
        if (!writeNpy(path, outputs[i], error))
          return fail("output '" + manifest.outputs[i].name + "': " + error);
      }
    return kExitOk;
  }

  ~Driver() {
    if (distributed) {
      dort_grid_finalize();
      dort_comm_finalize();
    }
  }

private:
  int argc;
  char **argv;
  dort_entry_fn entry;
  CommandLine cl;
  bool distributed = false;
  int rank = 0;
  std::vector<int64_t> coords;

  std::vector<dort_entry_fn> stageEntries;

  /// Micro-batch `mb` of `m` along dimension `dim`: copies between the
  /// replica's tensor and a micro-batch tensor (toSlice: replica -> slice).
  static void microbatchCopy(const Tensor &whole, Tensor &slice, int64_t dim,
                             int64_t mb, int64_t m, bool toSlice) {
    const std::vector<int64_t> &shape = whole.shape();
    size_t elem = dtypeSize(whole.dtype());
    int64_t outer = 1, inner = static_cast<int64_t>(elem);
    for (int64_t d = 0; d < dim; ++d)
      outer *= shape[d];
    for (size_t d = dim + 1; d < shape.size(); ++d)
      inner *= shape[d];
    int64_t rows = shape[dim], per = rows / m;
    char *w = static_cast<char *>(const_cast<void *>(whole.data()));
    char *s = static_cast<char *>(slice.data());
    for (int64_t o = 0; o < outer; ++o) {
      char *wp = w + (o * rows + mb * per) * inner;
      char *sp = s + o * per * inner;
      if (toSlice)
        std::memcpy(sp, wp, per * inner);
      else
        std::memcpy(wp, sp, per * inner);
    }
  }

  static std::vector<int64_t> microShape(const TensorSpec &spec, int64_t m) {
    std::vector<int64_t> shape = spec.shape;
    if (spec.batchDim >= 0)
      shape[spec.batchDim] /= m;
    return shape;
  }

  /// One step of a pipelined bundle on this rank: for every micro-batch,
  /// receive the stage's activations from the previous stage (or slice the
  /// model inputs), run the stage, send its activations on (or keep the
  /// model outputs). Neighbouring stages work on consecutive micro-batches
  /// at the same time (GPipe's forward schedule).
  int32_t runStage(const Manifest &m, std::vector<Tensor> &inputs,
                   const WeightStore &weights,
                   std::vector<Tensor> &weightBlocks,
                   std::vector<Tensor> &outputs) {
    int64_t s = coords[0];
    const PipelineStage &stage = m.stages[s];
    dort_comm *pp = dort_grid_axis_comm(0);
    std::string error;
    // The stage's buffers are the same for every micro-batch: set them up
    // once. Whole model inputs/outputs (nothing to slice) are used in place.
    auto sliced = [&](const TensorSpec &spec) {
      return spec.batchDim >= 0 && m.microbatches > 1;
    };
    std::vector<Tensor> ins(stage.inputs.size()), outs(stage.outputs.size());
    std::vector<void *> bufs;
    // Buffers for the stage's inputs (outputs): a whole model input
    // (output) in place, else a tensor of `own` made here.
    auto addBuffers = [&](const std::vector<StageBuffer> &buffers,
                          StageBuffer::Kind modelKind,
                          const std::vector<TensorSpec> &modelSpecs,
                          std::vector<Tensor> &modelTensors,
                          std::vector<Tensor> &own) {
      for (size_t i = 0; i < buffers.size(); ++i) {
        const StageBuffer &b = buffers[i];
        bool model = b.kind == modelKind;
        const TensorSpec &spec = model ? modelSpecs[b.index] : b.spec;
        if (model && !sliced(spec)) {
          bufs.push_back(modelTensors[b.index].data());
          continue;
        }
        std::vector<int64_t> shape =
            model ? microShape(spec, m.microbatches) : spec.shape;
        if (!Tensor::create(spec.dtype, shape, own[i], error))
          return false;
        bufs.push_back(own[i].data());
      }
      return true;
    };
    if (!addBuffers(stage.inputs, StageBuffer::Kind::ModelInput, m.inputs,
                    inputs, ins))
      return dort_set_error(1, "%s", error.c_str());
    for (int64_t w : stage.weights)
      bufs.push_back(m.weights[w].splitAxes.empty() ? weights.data(w)
                                                    : weightBlocks[w].data());
    if (!addBuffers(stage.outputs, StageBuffer::Kind::ModelOutput, m.outputs,
                    outputs, outs))
      return dort_set_error(1, "%s", error.c_str());
    for (int64_t mb = 0; mb < m.microbatches; ++mb) {
      for (size_t i = 0; i < stage.inputs.size(); ++i) {
        const StageBuffer &b = stage.inputs[i];
        if (b.kind == StageBuffer::Kind::ModelInput) {
          const TensorSpec &spec = m.inputs[b.index];
          if (sliced(spec))
            microbatchCopy(inputs[b.index], ins[i], spec.batchDim, mb,
                           m.microbatches, true);
        } else if (dort_recv(ins[i].data(),
                             static_cast<int64_t>(ins[i].byteSize()), DORT_U8,
                             static_cast<int>(s - 1), pp, nullptr) != 0) {
          return 1;
        }
      }
      if (int32_t rc = stageEntries[s](bufs.data()))
        return rc;
      if (dort_pending_error())
        return 1;
      for (size_t i = 0; i < stage.outputs.size(); ++i) {
        const StageBuffer &b = stage.outputs[i];
        if (b.kind == StageBuffer::Kind::ModelOutput) {
          const TensorSpec &spec = m.outputs[b.index];
          if (sliced(spec))
            microbatchCopy(outputs[b.index], outs[i], spec.batchDim, mb,
                           m.microbatches, false);
        } else if (dort_send(outs[i].data(),
                             static_cast<int64_t>(outs[i].byteSize()), DORT_U8,
                             static_cast<int>(s + 1), pp, nullptr) != 0) {
          return 1;
        }
      }
    }
    return 0;
  }

  /// Whether every rank succeeded (single rank: `ok`).
  bool agree(bool ok) {
    if (!distributed)
      return ok;
    int32_t bad = ok ? 0 : 1, anyBad = 0;
    if (dort_all_reduce(&bad, &anyBad, 1, DORT_I32, DORT_MAX,
                        dort_comm_world(), nullptr) != 0)
      return false;
    if (anyBad && ok && rank == 0)
      std::fprintf(stderr, "%s: error: another rank failed (see its "
                           "message)\n", cl.program.c_str());
    return anyBad == 0;
  }

  static std::string modelLabel(const Manifest &m) {
    return m.model.empty() ? std::string("model") : "model '" + m.model + "'";
  }
  std::string prefix() const {
    return distributed ? cl.program + ": rank " + std::to_string(rank)
                       : cl.program;
  }
  int fail(const std::string &message) {
    std::fprintf(stderr, "%s: error: %s\n", prefix().c_str(),
                 message.c_str());
    return kExitError;
  }
  int failAll(const std::vector<std::string> &messages) {
    for (const std::string &m : messages)
      std::fprintf(stderr, "%s: error: %s\n", prefix().c_str(), m.c_str());
    return kExitError;
  }
};

} // namespace
} // namespace distopt::runtime

extern "C" int dort_main_pipeline(int argc, char **argv,
                                  const dort_entry_fn *stages, int count) {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  try {
    return distopt::runtime::Driver(argc, argv, stages, count).run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", argc > 0 ? argv[0] : "model",
                 e.what());
  }
  return 1;
}

extern "C" int dort_main(int argc, char **argv, dort_entry_fn entry) {
  // Generated code allocates its intermediate buffers on every run. glibc
  // would serve large ones with fresh mmaps and unmap them on free, so every
  // run page-faults its whole working set in again (3x the run time of a
  // small CNN). Keep freed memory in the heap for the next run instead.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  try {
    return distopt::runtime::Driver(argc, argv, entry).run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", argc > 0 ? argv[0] : "model",
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: unexpected exception\n",
                 argc > 0 ? argv[0] : "model");
  }
  return 1;
}
