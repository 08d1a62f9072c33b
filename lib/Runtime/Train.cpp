//===- Train.cpp - the `train` mode of a training-step bundle -------------===//
//
//   model train --data NAME=FILE.npy ... --steps N | --epochs E
//               [--lr F] [--momentum F] [--betas A,B] [--eps F]
//               [--weight-decay F] [--clip-grad-norm F]
//               [--lr-schedule constant|cosine|linear] [--warmup-steps K]
//               [--shuffle SEED | --no-shuffle] [--log FILE.jsonl]
//               [--trace FILE.json]
//               [--save-weights DIR] [--save-onnx OUT.onnx] [--bundle DIR]
//
// A data-parallel bundle (compiled with --cluster/--dp) runs under mpirun
// on its ranks: every rank takes the same batches (the order depends on the
// seed alone) and keeps its share of each; rank 0 logs and writes. The log
// has per step the loss, the learning rate, the gradients' global norm,
// samples/s, the achieved FLOP/s of the whole job (the compiler's count of
// a step's FLOPs) and the time and share of the step the main thread spent
// waiting for communication. --trace writes a Chrome-trace timeline of
// every rank (steps, collectives with their bytes, waits).
//
// Failures end the job naming the rank and the step: a collective that
// times out says which step it was in; a rank the launcher terminates
// because another died says which step it was in. For tests and
// experiments, DISTOPT_FAULT=die:RANK:STEP or hang:RANK:STEP makes rank
// RANK kill itself (SIGKILL) or stop responding at the start of step STEP.
//
// A bundle compiled with `distopt compile --loss ... --optimizer ...` runs
// one training step per call of its entry (lib/Training/Optimizer.cpp).
// Its manifest names the roles by convention: inputs `opt.<hyper>` are the
// hyperparameters, `opt.<state>:<weight>` the optimizer state (zeros at the
// start; the output of the same name replaces it after each step), the
// other inputs are data (one `--data` file each, samples along axis 0);
// outputs `loss`, `grad_norm`, and `update:<weight>`, which replaces the
// weight. Weights start from the bundle's and are kept in memory.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Bundle.h"
#include "distopt/Runtime/Comm.h"
#include "distopt/Runtime/Distributed.h"
#include "distopt/Runtime/Json.h"
#include "distopt/Runtime/Kernels.h"
#include "distopt/Runtime/Manifest.h"
#include "distopt/Runtime/ParamServer.h"
#include "distopt/Runtime/Runtime.h"
#include "distopt/Runtime/Tensor.h"
#include "distopt/Runtime/Trace.h"

#include "FileUtil.h"
#include "Protobuf.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <deque>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace distopt::runtime {

namespace {

struct TrainArgs {
  std::string program;
  std::string bundleDir;
  std::vector<std::pair<std::string, std::string>> data;
  int64_t steps = -1, epochs = -1;
  std::map<std::string, double> hyper = {
      {"lr", 1e-3},       {"momentum", 0.0},  {"beta1", 0.9},
      {"beta2", 0.999},   {"eps", 1e-8},      {"weight_decay", 0.0},
      {"clip_norm", 0.0}};
  bool shuffle = true;
  uint64_t seed = 0;
  std::string schedule = "constant";
  int64_t warmup = 0;
  std::string log, trace, saveWeights, saveOnnx;
  bool saveOnnxExternal = false;
  /// --accumulate K: must be what the step was compiled for.
  int64_t accumulate = 0;
  /// --eval-data NAME=FILE: evaluated every --eval-every steps and at the
  /// end (`eval` mode: --data).
  std::vector<std::pair<std::string, std::string>> evalData;
  int64_t evalEvery = 0;
  /// `eval` mode: weights from this checkpoint directory.
  std::string checkpoint;
  std::string checkpointDir, resume;
  int64_t checkpointEvery = 0;
  /// Asynchronous parameter servers' cures (--max-staleness, --drop-stale,
  /// --stale-lr, --sync-warmup, --delay-compensation).
  ps::AsyncOptions async;
  bool asyncGiven = false;
};

bool parseDouble(const std::string &s, double &out) {
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0' && std::isfinite(out);
}

/// An integer of at least `minimum` (1: counts; 0: seeds, warm-up steps).
bool parseInt(const std::string &s, int64_t &out, int64_t minimum = 1) {
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  out = v;
  return !s.empty() && end && *end == '\0' && v >= minimum;
}

/// NAME=FILE of --data and --eval-data.
bool parseNamedFile(const std::string &opt, const std::string &value,
                    std::vector<std::pair<std::string, std::string>> &out,
                    std::string &error) {
  auto e = value.find('=');
  if (e == std::string::npos || e == 0 || e + 1 == value.size()) {
    error = opt + " expects NAME=FILE, got '" + value + "'";
    return false;
  }
  out.emplace_back(value.substr(0, e), value.substr(e + 1));
  return true;
}

bool parseTrainArgs(int argc, char **argv, TrainArgs &a, std::string &error,
                    bool evalMode = false) {
  for (int i = 2; i < argc; ++i) {
    std::string opt = argv[i], value;
    if (evalMode && opt.rfind("--data", 0) != 0 &&
        opt.rfind("--checkpoint", 0) != 0 && opt.rfind("--bundle", 0) != 0) {
      error = "unknown option '" + opt + "' for eval (it takes --data "
              "NAME=FILE ..., --checkpoint DIR, --bundle DIR)";
      return false;
    }
    auto eq = opt.find('=');
    if (opt.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = opt.substr(eq + 1);
      opt = opt.substr(0, eq);
    } else if (opt != "--no-shuffle" && opt != "--save-onnx-external-data" &&
               opt != "--stale-lr") {
      if (i + 1 >= argc) {
        error = opt + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    double d;
    if (opt == "--data" || opt == "--eval-data") {
      if (!parseNamedFile(opt, value, opt == "--data" ? a.data : a.evalData,
                          error))
        return false;
    } else if (opt == "--steps") {
      if (!parseInt(value, a.steps)) {
        error = "--steps expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--epochs") {
      if (!parseInt(value, a.epochs)) {
        error = "--epochs expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--betas") {
      auto c = value.find(',');
      double b1, b2;
      if (c == std::string::npos || !parseDouble(value.substr(0, c), b1) ||
          !parseDouble(value.substr(c + 1), b2)) {
        error = "--betas expects A,B, got '" + value + "'";
        return false;
      }
      a.hyper["beta1"] = b1;
      a.hyper["beta2"] = b2;
    } else if (opt == "--lr" || opt == "--momentum" || opt == "--eps" ||
               opt == "--weight-decay" || opt == "--clip-grad-norm") {
      if (!parseDouble(value, d)) {
        error = opt + " expects a number, got '" + value + "'";
        return false;
      }
      std::string key = opt == "--weight-decay"     ? "weight_decay"
                        : opt == "--clip-grad-norm" ? "clip_norm"
                                                    : opt.substr(2);
      a.hyper[key] = d;
    } else if (opt == "--shuffle") {
      int64_t s;
      if (!parseInt(value, s, 0)) {
        error = "--shuffle expects a seed (a non-negative integer), got '" +
                value + "'";
        return false;
      }
      a.shuffle = true;
      a.seed = static_cast<uint64_t>(s);
    } else if (opt == "--lr-schedule") {
      if (value != "constant" && value != "cosine" && value != "linear") {
        error = "--lr-schedule expects constant, cosine or linear, got '" +
                value + "'";
        return false;
      }
      a.schedule = value;
    } else if (opt == "--warmup-steps") {
      if (!parseInt(value, a.warmup, 0)) {
        error = "--warmup-steps expects a non-negative integer, got '" +
                value + "'";
        return false;
      }
    } else if (opt == "--no-shuffle") {
      a.shuffle = false;
    } else if (opt == "--eval-every") {
      if (!parseInt(value, a.evalEvery)) {
        error = "--eval-every expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--accumulate") {
      if (!parseInt(value, a.accumulate)) {
        error = "--accumulate expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--log") {
      a.log = value;
    } else if (opt == "--trace") {
      a.trace = value;
    } else if (opt == "--save-weights") {
      a.saveWeights = value;
    } else if (opt == "--save-onnx") {
      a.saveOnnx = value;
    } else if (opt == "--save-onnx-external-data") {
      a.saveOnnxExternal = true;
    } else if (opt == "--checkpoint-dir") {
      a.checkpointDir = value;
    } else if (opt == "--checkpoint-every") {
      if (!parseInt(value, a.checkpointEvery)) {
        error = "--checkpoint-every expects a positive integer, got '" + value + "'";
        return false;
      }
    } else if (opt == "--resume") {
      a.resume = value;
    } else if (opt == "--max-staleness" || opt == "--drop-stale" ||
               opt == "--sync-warmup") {
      int64_t n;
      if (!parseInt(value, n, 0)) {
        error = opt + " expects a non-negative integer, got '" + value + "'";
        return false;
      }
      (opt == "--max-staleness" ? a.async.maxStaleness
       : opt == "--drop-stale"  ? a.async.dropStale
                                : a.async.syncWarmup) = n;
      a.asyncGiven = true;
    } else if (opt == "--stale-lr") {
      a.async.staleLr = true;
      a.asyncGiven = true;
    } else if (opt == "--delay-compensation") {
      if (!parseDouble(value, d) || d < 0) {
        error = "--delay-compensation expects a number >= 0 (DC-ASGD's "
                "lambda), got '" + value + "'";
        return false;
      }
      a.async.delayCompensation = d;
      a.asyncGiven = true;
    } else if (opt == "--checkpoint" && evalMode) {
      a.checkpoint = value;
    } else if (opt == "--bundle") {
      a.bundleDir = value;
    } else {
      error = "unknown option '" + opt + "' for train";
      return false;
    }
  }
  if (evalMode) {
    if (a.data.empty()) {
      error = "eval needs --data NAME=FILE for its inputs";
      return false;
    }
    return true;
  }
  if (a.checkpointEvery > 0 && a.checkpointDir.empty()) {
    error = "--checkpoint-every needs --checkpoint-dir";
    return false;
  }
  if (a.saveOnnxExternal && a.saveOnnx.empty()) {
    error = "--save-onnx-external-data needs --save-onnx";
    return false;
  }
  if (a.evalEvery > 0 && a.evalData.empty()) {
    error = "--eval-every needs --eval-data";
    return false;
  }
  if ((a.steps > 0) == (a.epochs > 0)) {
    error = "train needs exactly one of --steps N and --epochs E";
    return false;
  }
  return true;
}

std::string baseNameOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// One --data file: a .npy mapped and used in place (a data set need not
/// fit in memory; the pages a step touches are read then), or, for what
/// cannot be mapped (TensorProto files, big-endian or Fortran-order .npy),
/// read whole.
struct DataFile {
  MappedNpy mapped;
  Tensor loaded;
  bool isMapped = false;

  bool open(const std::string &path, std::string &error) {
    bool mappable = false;
    std::string why;
    if (mapped.open(path, why, mappable)) {
      isMapped = true;
      return true;
    }
    if (mappable) // a well-formed .npy that cannot be used in place
      return readNpy(path, loaded, error);
    return readTensorFile(path, loaded, error);
  }
  DType dtype() const { return isMapped ? mapped.dtype() : loaded.dtype(); }
  const std::vector<int64_t> &shape() const {
    return isMapped ? mapped.shape() : loaded.shape();
  }
  const void *data() const { return isMapped ? mapped.data() : loaded.data(); }
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape())
      n *= d;
    return n;
  }
};

/// The --data files of a program's data inputs: opened, checked against
/// the inputs (dtype, the shape of a sample, one sample count, class
/// labels in range).
struct DataSet {
  std::vector<std::unique_ptr<DataFile>> files; ///< by input index
  int64_t samples = -1, batch = -1;

  bool open(const std::vector<TensorSpec> &inputs,
            const std::vector<size_t> &dataInputs,
            const std::vector<std::pair<std::string, std::string>> &given,
            const std::string &what, std::string &error) {
    std::map<std::string, std::string> byName;
    for (auto &[name, file] : given) {
      bool known = std::any_of(dataInputs.begin(), dataInputs.end(),
                               [&](size_t i) { return inputs[i].name == name; });
      if (!known) {
        std::string expected;
        for (size_t i : dataInputs)
          expected += (expected.empty() ? "'" : ", '") + inputs[i].name + "'";
        error = "unknown data '" + name + "' (" + what + " data inputs are " +
                expected + ")";
        return false;
      }
      if (!byName.emplace(name, file).second) {
        error = "--data " + name + " given more than once";
        return false;
      }
    }
    files.resize(inputs.size());
    std::string samplesFrom;
    for (size_t i : dataInputs) {
      const TensorSpec &spec = inputs[i];
      // The file holds whole batches (a rank's share is cut from each).
      const std::vector<int64_t> &wholeShape = spec.fileShape();
      auto f = byName.find(spec.name);
      if (f == byName.end()) {
        error = "missing data for input '" + spec.name + "' (" +
                dtypeName(spec.dtype) + " " + shapeToString(spec.shape) +
                " per step; pass --data " + spec.name + "=FILE.npy)";
        return false;
      }
      files[i] = std::make_unique<DataFile>();
      if (!files[i]->open(f->second, error)) {
        error = "data '" + spec.name + "': file '" + f->second + "': " + error;
        return false;
      }
      const DataFile &t = *files[i];
      // A file holds one sample after another (axis 0); the model may take
      // them along another dimension (a sequence-first model: batch_dim 1).
      int64_t bd = sampleDim(spec);
      std::vector<int64_t> rowShape(wholeShape);
      if (!rowShape.empty())
        rowShape.erase(rowShape.begin() + bd);
      if (wholeShape.empty() || t.dtype() != spec.dtype || t.shape().empty() ||
          std::vector<int64_t>(t.shape().begin() + 1, t.shape().end()) !=
              rowShape) {
        error = "data '" + spec.name + "': file '" + f->second + "' holds " +
                dtypeName(t.dtype()) + " " + shapeToString(t.shape()) +
                "; expected " + dtypeName(spec.dtype) + " [N" +
                (rowShape.empty() ? "" : ", ") +
                shapeToString(rowShape).substr(1) + " (samples along axis 0" +
                (bd > 0 ? "; the model takes them along its dimension " +
                              std::to_string(bd) + ", " +
                              shapeToString(wholeShape) + " a step"
                        : "") +
                ")";
        return false;
      }
      if (batch >= 0 && wholeShape[bd] != batch) {
        error = "data '" + spec.name + "' takes " +
                std::to_string(wholeShape[bd]) + " samples a step, but '" +
                samplesFrom + "' takes " + std::to_string(batch) +
                " (every data input holds the batch)";
        return false;
      }
      if (samples >= 0 && t.shape()[0] != samples) {
        error = "data '" + spec.name + "' has " + std::to_string(t.shape()[0]) +
                " samples, but '" + samplesFrom + "' has " +
                std::to_string(samples);
        return false;
      }
      if (spec.classes > 0) {
        // Class indices: in range or the ignore index, checked once here
        // (out of range they would silently count as no class).
        int64_t n = t.numElements();
        for (int64_t e = 0; e < n; ++e) {
          int64_t label = t.dtype() == DType::Int64
                              ? static_cast<const int64_t *>(t.data())[e]
                              : static_cast<const int32_t *>(t.data())[e];
          if (label != -100 && (label < 0 || label >= spec.classes)) {
            int64_t row = e / std::max<int64_t>(1, n / t.shape()[0]);
            error = "data '" + spec.name + "': sample " + std::to_string(row) +
                    " has label " + std::to_string(label) + ", outside [0, " +
                    std::to_string(spec.classes) +
                    ") (the model's classes) and not the ignore index -100";
            return false;
          }
        }
      }
      samples = t.shape()[0];
      samplesFrom = spec.name;
      batch = wholeShape[bd];
    }
    return true;
  }

  /// The dimension of an input's whole batch that holds its samples.
  static int64_t sampleDim(const TensorSpec &spec) {
    return spec.batchDim > 0 ? spec.batchDim : 0;
  }

  /// Copies samples `rows` (indices; -1: padding) of input `i` into
  /// `whole` (the whole batch), then this rank's block into `local`.
  /// Padding rows are zeros, or the ignore index for class labels.
  void fill(size_t i, const TensorSpec &spec, const std::vector<int64_t> &rows,
            Tensor &whole, Tensor &local, const std::vector<int64_t> &grid,
            const std::vector<int64_t> &coords) const {
    bool split = !spec.splitAxes.empty();
    Tensor &dstT = split ? whole : local;
    size_t row = dstT.byteSize() / rows.size();
    auto *dst = static_cast<char *>(dstT.data());
    const auto *src = static_cast<const char *>(files[i]->data());
    // A sample is `outer` chunks of `chunk` bytes: one for each index of
    // the dimensions before the batch's (one chunk when it is dimension 0).
    const std::vector<int64_t> &shape = spec.fileShape();
    int64_t bd = sampleDim(spec), outer = 1;
    for (int64_t d = 0; d < bd; ++d)
      outer *= shape[d];
    size_t chunk = row / static_cast<size_t>(outer);
    size_t stride = chunk * rows.size(); // between a sample's chunks
    for (size_t b = 0; b < rows.size(); ++b) {
      for (int64_t o = 0; o < outer; ++o) {
        char *to = dst + o * stride + b * chunk;
        if (rows[b] >= 0) {
          std::memcpy(to, src + rows[b] * row + o * chunk, chunk);
        } else if (spec.classes > 0 && spec.dtype == DType::Int64) {
          std::fill_n(reinterpret_cast<int64_t *>(to), chunk / 8,
                      int64_t(-100));
        } else if (spec.classes > 0) {
          std::fill_n(reinterpret_cast<int32_t *>(to), chunk / 4,
                      int32_t(-100));
        } else {
          std::memset(to, 0, chunk);
        }
      }
    }
    // The rows past the batch on the last replicas of an uneven split are
    // padding too: ignored labels, not class 0.
    int64_t ignore64 = -100;
    int32_t ignore32 = -100;
    const void *pad = spec.classes <= 0              ? nullptr
                      : spec.dtype == DType::Int64 ? static_cast<const void *>(&ignore64)
                                                   : &ignore32;
    if (split)
      extractBlock(whole.data(), local.data(), spec, grid, coords, pad);
  }
};

/// The evaluation program over a data set: every sample once, in file
/// order. With class labels (the program returns `correct` and `counted`)
/// the last, incomplete batch is padded with ignored labels, and the loss
/// is the mean over all counted labels; otherwise (mse) an incomplete last
/// batch is dropped and the loss is the mean of the batches'.
struct Evaluator {
  const Manifest &m;
  const EvalProgram &ev;
  DataSet data;
  std::vector<size_t> dataInputs;
  std::vector<Tensor> inputs, whole, outputs;
  int lossOut = -1, correctOut = -1, countedOut = -1;

  Evaluator(const Manifest &m, const EvalProgram &ev) : m(m), ev(ev) {}

  bool open(const std::vector<std::pair<std::string, std::string>> &files,
            std::string &error) {
    for (size_t i = 0; i < ev.inputs.size(); ++i)
      dataInputs.push_back(i);
    if (!data.open(ev.inputs, dataInputs, files, "the evaluation's", error))
      return false;
    inputs.resize(ev.inputs.size());
    whole.resize(ev.inputs.size());
    for (size_t i = 0; i < ev.inputs.size(); ++i) {
      const TensorSpec &spec = ev.inputs[i];
      if (!Tensor::create(spec.dtype, spec.shape, inputs[i], error) ||
          (!spec.splitAxes.empty() &&
           !Tensor::create(spec.dtype, spec.fileShape(), whole[i], error)))
        return false;
    }
    outputs.resize(ev.outputs.size());
    for (size_t i = 0; i < ev.outputs.size(); ++i) {
      const std::string &n = ev.outputs[i].name;
      if (n == "loss")
        lossOut = int(i);
      else if (n == "correct")
        correctOut = int(i);
      else if (n == "counted")
        countedOut = int(i);
      if (!Tensor::create(ev.outputs[i].dtype, ev.outputs[i].shape, outputs[i],
                          error))
        return false;
    }
    if (lossOut < 0) {
      error = "the evaluation program has no 'loss' output";
      return false;
    }
    if (data.samples < 1 || (countedOut < 0 && data.samples < data.batch)) {
      error = "the evaluation data hold " + std::to_string(data.samples) +
              " samples, fewer than one batch of " + std::to_string(data.batch);
      return false;
    }
    return true;
  }

  /// Evaluates with `weights` (by the manifest's weight index).
  bool run(EntryFn entry, std::vector<Tensor> &weights,
           const std::vector<int64_t> &coords, double &loss, double &accuracy,
           std::string &error) {
    double sums[3] = {0, 0, 0};
    if (!runBatches(entry, weights, coords, 0, 1, sums, error))
      return false;
    finish(sums, loss, accuracy);
    return true;
  }

  /// The mean loss and the accuracy (-1: no class labels) of the sums
  /// runBatches added up.
  void finish(const double sums[3], double &loss, double &accuracy) const {
    loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    accuracy = correctOut >= 0 && sums[2] > 0 ? sums[1] / sums[2] : -1.0;
  }

  /// Runs batches k = part, part + parts, ... of the data, adding to `sums`
  /// (loss weighted by counted labels, correct, counted; without counts the
  /// batch's loss and 1).
  bool runBatches(EntryFn entry, std::vector<Tensor> &weights,
                  const std::vector<int64_t> &coords, int64_t part,
                  int64_t parts, double sums[3], std::string &error) {
    std::vector<void *> buffers;
    for (Tensor &t : inputs)
      buffers.push_back(t.data());
    for (int64_t w : ev.weights)
      buffers.push_back(weights[w].data());
    for (Tensor &t : outputs)
      buffers.push_back(t.data());
    int64_t batch = data.batch;
    int64_t batches = countedOut >= 0 ? (data.samples + batch - 1) / batch
                                      : data.samples / batch;
    double &lossSum = sums[0], &correct = sums[1], &counted = sums[2];
    std::vector<int64_t> rows(batch);
    for (int64_t k = part; k < batches; k += parts) {
      for (int64_t b = 0; b < batch; ++b)
        rows[b] = k * batch + b < data.samples ? k * batch + b : -1;
      for (size_t i : dataInputs)
        data.fill(i, ev.inputs[i], rows, whole[i], inputs[i], m.grid, coords);
      dort_clear_error();
      dort_clear_pending_error();
      std::string failure = entryFailure(entry(buffers.data()));
      if (!failure.empty()) {
        error = "evaluation batch " + std::to_string(k + 1) + " failed: " + failure;
        return false;
      }
      auto scalar = [&](int out) {
        return double(*static_cast<const float *>(outputs[out].data()));
      };
      if (countedOut >= 0) {
        double n = scalar(countedOut);
        if (n > 0)
          lossSum += scalar(lossOut) * n;
        counted += n;
        if (correctOut >= 0)
          correct += scalar(correctOut);
      } else {
        lossSum += scalar(lossOut);
        counted += 1;
      }
    }
    return true;
  }

  /// A pipelined step's evaluation (the whole model's program): every rank
  /// runs a share of the batches with the whole weights, `whole` (on every
  /// rank), and the sums are all-reduced. No rank waits on another's share
  /// longer than a batch, so the communication timeout keeps its meaning.
  bool runShared(EntryFn entry, std::vector<Tensor> &whole, double &loss,
                 double &accuracy, std::string &error) {
    dort_comm *world = dort_comm_world();
    double sums[3] = {0, 0, 0}, total[3];
    if (!runBatches(entry, whole, {}, dort_comm_rank(world),
                    dort_comm_size(world), sums, error))
      return false;
    if (dort_all_reduce(sums, total, 3, DORT_F64, DORT_SUM, world, nullptr) !=
        0) {
      error = dort_last_error_message();
      return false;
    }
    finish(total, loss, accuracy);
    return true;
  }
};



/// SplitMix64's output function (Steele, Lea, Flood 2014).
uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The random key of step `step` (1, 2, ...) of a run with `seed`: the
/// input `rng.key` that dopt.dropout draws its masks from. The same on
/// every rank, and on resume.
uint64_t stepKey(uint64_t seed, int64_t step) {
  return splitmix64(splitmix64(seed + 0x9E3779B97F4A7C15ull) +
                    static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull);
}

/// The evaluation program's entry (dort_set_eval_entry; null without one).
EntryFn gEvalEntry = nullptr;
/// The parameter servers' update program (dort_set_ps_entry).
EntryFn gServerEntry = nullptr;
EntryFn ps_entry() { return gServerEntry; }

/// The job a data-parallel training run belongs to (one process: rank 0
/// of 1, not distributed).
struct Job {
  bool distributed = false;
  int rank = 0;
  /// The bundle's grid (stages x data x tensor) and this rank's place on it
  /// (zeros for one process).
  std::vector<int64_t> grid, coords;
};
Job gJob;

/// The message a rank prints when the launcher terminates it (another rank
/// failed): prepared before each step, written by the signal handler with
/// write(2) alone.
char gTerminatedMessage[256];
size_t gTerminatedLength = 0;

extern "C" void onTerminate(int) {
  if (gTerminatedLength)
    (void)!write(2, gTerminatedMessage, gTerminatedLength);
  _exit(143);
}

/// Injected faults (tests and experiments): DISTOPT_FAULT=die:RANK:STEP|
/// hang:RANK:STEP, and the slow ranks of DISTOPT_STRAGGLER.
struct Fault {
  std::string kind;
  int64_t rank = -1, step = -1;
  std::vector<ps::Straggler> stragglers;
};

bool parseFault(Fault &f, std::string &error) {
  if (const char *env = std::getenv("DISTOPT_STRAGGLER"))
    if (*env && !ps::parseStragglers(env, f.stragglers, error))
      return false;
  const char *env = std::getenv("DISTOPT_FAULT");
  if (!env || !*env)
    return true;
  std::string v = env;
  size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  f.kind = v.substr(0, a);
  if ((f.kind != "die" && f.kind != "hang") || b == std::string::npos ||
      !parseInt(v.substr(a + 1, b - a - 1), f.rank, 0) ||
      !parseInt(v.substr(b + 1), f.step, 1)) {
    error = "DISTOPT_FAULT must be die:RANK:STEP or hang:RANK:STEP, got '" + v +
            "'";
    return false;
  }
  return true;
}

/// DISTOPT_FAULT: at the start of step `step`, the faulty rank dies
/// (SIGKILL) or stops responding.
void injectFault(const Fault &f, int64_t rank, int64_t step,
                 const std::string &program) {
  if (f.rank != rank || f.step != step)
    return;
  std::fprintf(stderr, "%s: DISTOPT_FAULT: %s at step %lld\n", program.c_str(),
               f.kind == "die" ? "dying" : "hanging",
               static_cast<long long>(step));
  std::fflush(stderr);
  if (f.kind == "die")
    raise(SIGKILL);
  for (;;)
    pause();
}

/// The message onTerminate prints if the launcher ends this rank during
/// step `step`.
void prepareTerminatedMessage(const std::string &program, int64_t step) {
  int n = std::snprintf(gTerminatedMessage, sizeof gTerminatedMessage,
                        "%s: terminated during step %lld (another rank "
                        "failed)\n",
                        program.c_str(), static_cast<long long>(step));
  gTerminatedLength =
      n > 0 ? std::min<size_t>(size_t(n), sizeof gTerminatedMessage - 1) : 0;
}

/// Joins the bundle's job: checks the launch has the bundle's rank count
/// and, for several ranks, initialises communication and the grid (this
/// rank's `coords` on it; zeros for one process).
bool joinJob(const Manifest &m, TrainArgs &a, std::vector<int64_t> &coords,
             std::string &error) {
  coords.assign(m.grid.size(), 0);
  gJob.grid = m.grid;
  gJob.coords = coords;
  int64_t launched = launchedRanks();
  if (launched != m.ranks) {
    error = "this bundle was compiled for " + std::to_string(m.ranks) +
            " rank" + (m.ranks == 1 ? "" : "s") + ", but it was launched on " +
            std::to_string(launched) +
            (m.ranks == 1 ? " (compile it with --cluster, or run it without "
                            "mpirun)"
                          : "; run it with `mpirun -np " +
                                std::to_string(m.ranks) + "`");
    return false;
  }
  if (m.ranks == 1)
    return true;
  if (dort_comm_init(nullptr, nullptr) != 0) {
    error = dort_last_error_message();
    return false;
  }
  gJob.distributed = true;
  gJob.rank = dort_comm_rank(dort_comm_world());
  a.program += ": rank " + std::to_string(gJob.rank);
  if (dort_grid_init(static_cast<int>(m.grid.size()), m.grid.data()) != 0) {
    error = dort_last_error_message();
    return false;
  }
  coords = gridCoords(m.grid, gJob.rank);
  gJob.coords = coords;
  return true;
}

/// Reports an error. In a distributed run every rank reads the same files
/// and runs the same steps, so an error on one rank is an error of the job:
/// it is ended at once (peers may be waiting in a collective).
int fail(const TrainArgs &a, const std::string &msg) {
  if (gJob.distributed)
    dort_comm_abort(1, (a.program + ": error: " + msg).c_str());
  std::fprintf(stderr, "%s: error: %s\n", a.program.c_str(), msg.c_str());
  return 1;
}

// --- The initializers of an ONNX model replaced (Protobuf.h) ------------

/// Writes a tensor's bytes to the external-data file, returning where
/// (location relative to the model, offset); false on error.
using ExternalWriter = std::function<bool(const Tensor &, int64_t &offset)>;

/// The ONNX model `model` with each `trained` initializer replaced by its
/// value: inline (raw_data, so external-data references of those go), or
/// with `external` in the external-data file at `location`.
/// ModelProto.graph is field 7, GraphProto.initializer field 5,
/// TensorProto.name field 8.
bool replaceInitializers(const std::string &model,
                         const std::map<std::string, const Tensor *> &trained,
                         std::string &out, std::string &error,
                         const ExternalWriter *external = nullptr,
                         const std::string &location = "") {
  std::map<std::string, bool> done;
  auto rewriteGraph = [&](const uint8_t *p, const uint8_t *end,
                          std::string &graph) {
    pb::Field f;
    while (p < end) {
      if (!pb::nextField(p, end, f))
        return false;
      std::string name;
      if (f.number == 5 && f.wire == 2) {
        const uint8_t *q = f.payload, *qe = f.payload + f.payloadSize;
        pb::Field g;
        while (q < qe && pb::nextField(q, qe, g))
          if (g.number == 8 && g.wire == 2)
            name.assign(reinterpret_cast<const char *>(g.payload), g.payloadSize);
      }
      auto t = name.empty() ? trained.end() : trained.find(name);
      if (t == trained.end()) {
        graph.append(reinterpret_cast<const char *>(f.begin), f.end - f.begin);
        continue;
      }
      if (external) {
        int64_t offset;
        if (!(*external)(*t->second, offset)) {
          error = "writing the external data of '" + name + "' failed";
          return false;
        }
        const Tensor &v = *t->second;
        pb::putBytesField(graph, 5,
                          encodeExternalTensorProto(v.dtype(), v.shape(), name,
                                                    location, offset,
                                                    v.byteSize()));
      } else {
        const Tensor &v = *t->second;
        pb::putBytesField(
            graph, 5, encodeTensorProto(v.dtype(), v.shape(), v.data(), name));
      }
      done[name] = true;
    }
    return true;
  };
  const auto *p = reinterpret_cast<const uint8_t *>(model.data());
  const uint8_t *end = p + model.size();
  pb::Field f;
  bool sawGraph = false;
  while (p < end) {
    if (!pb::nextField(p, end, f)) {
      error = "the model file is not a valid ONNX protobuf";
      return false;
    }
    if (f.number == 7 && f.wire == 2) {
      std::string graph;
      if (!rewriteGraph(f.payload, f.payload + f.payloadSize, graph)) {
        error = "the model's graph is not valid protobuf";
        return false;
      }
      pb::putBytesField(out, 7, graph);
      sawGraph = true;
    } else {
      out.append(reinterpret_cast<const char *>(f.begin), f.end - f.begin);
    }
  }
  if (!sawGraph) {
    error = "the model file has no graph";
    return false;
  }
  for (auto &[name, t] : trained)
    if (!done.count(name)) {
      error = "the model has no initializer '" + name + "'";
      return false;
    }
  return true;
}

/// The learning rate of step `step` (0-based) of `total`: linear warm-up
/// over the first `warmup` steps, then constant, or cosine or linear decay
/// to 0 at the end (the schedules of HuggingFace's
/// get_{cosine,linear}_schedule_with_warmup, applied through LambdaLR).
double scheduledLr(const TrainArgs &a, int64_t step, int64_t total) {
  double base = a.hyper.at("lr");
  if (step < a.warmup)
    return base * double(step) / double(std::max<int64_t>(1, a.warmup));
  if (a.schedule == "constant")
    return base;
  double progress = double(step - a.warmup) /
                    double(std::max<int64_t>(1, total - a.warmup));
  if (a.schedule == "linear")
    return base * std::max(0.0, 1.0 - progress);
  return base * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

bool pathExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// Removes a directory of plain files (a checkpoint's), if it exists.
void removeFlatDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink(detail::joinPath(dir, name).c_str());
    }
    ::closedir(d);
    ::rmdir(dir.c_str());
  }
}

/// A checkpoint: DIR/checkpoint/{meta.json, w.<i>.npy, s.<i>.npy}, tensors
/// keyed by name in meta.json (not by position, so a recompiled bundle of
/// the same model reads it). Written into DIR/checkpoint.tmp, then swapped
/// in by renames: a crash leaves the last good checkpoint (or the new one).
struct Named {
  std::string name;
  Tensor *tensor;
  /// ZeRO-1 optimizer state: this rank holds elements [offset, offset +
  /// tensor's size) of the flattened state of a weight of `wholeShape`
  /// (ZeroSharding.h: the chunk of data-parallel replica r starts at r * c;
  /// the last chunk runs past the end, zero-padded). Empty: whole.
  std::vector<int64_t> wholeShape;
  int64_t offset = 0;
  /// Tensor parallelism: the tensor (or what a chunk is cut from) is this
  /// rank's block of a weight split as `split` says (split->fileShape() is
  /// the whole weight). Null: the whole.
  const TensorSpec *split = nullptr;
  bool chunk() const { return !wholeShape.empty(); }
  /// The shape of the whole tensor, as checkpoints hold it.
  std::vector<int64_t> fileShape() const {
    return split ? split->fileShape() : chunk() ? wholeShape : tensor->shape();
  }
  int64_t wholeElements() const {
    int64_t n = 1;
    for (int64_t d : wholeShape)
      n *= d;
    return n;
  }
  /// Elements of the chunk inside the weight (the rest is padding).
  int64_t valid() const {
    return std::max<int64_t>(
        0, std::min(tensor->numElements(), wholeElements() - offset));
  }
};

/// Every rank agrees that every rank succeeded (one process: `ok`).
bool allAgree(bool ok) {
  if (!gJob.distributed)
    return ok;
  int32_t bad = ok ? 0 : 1, anyBad = 0;
  if (dort_all_reduce(&bad, &anyBad, 1, DORT_I32, DORT_MAX, dort_comm_world(),
                      nullptr) != 0)
    return false;
  return anyBad == 0;
}

/// Every rank's `mine` on rank 0, in rank order (others get nothing).
bool gatherStrings(const std::string &mine, std::vector<std::string> &all,
                   std::string &error) {
  dort_comm *world = dort_comm_world();
  int64_t n = dort_comm_size(world);
  int64_t length = static_cast<int64_t>(mine.size()), longest = 0;
  if (dort_all_reduce(&length, &longest, 1, DORT_I64, DORT_MAX, world,
                      nullptr) != 0) {
    error = dort_last_error_message();
    return false;
  }
  std::string padded = mine;
  padded.resize(static_cast<size_t>(longest), ' ');
  std::vector<char> buffer(gJob.rank == 0 ? longest * n : 0);
  if (longest > 0 && dort_gather(padded.data(), buffer.data(), longest,
                                 DORT_U8, 0, world) != 0) {
    error = dort_last_error_message();
    return false;
  }
  all.clear();
  if (gJob.rank != 0)
    return true;
  for (int64_t r = 0; r < n; ++r) {
    std::string p(buffer.data() + r * longest, static_cast<size_t>(longest));
    p.erase(p.find_last_not_of(' ') + 1);
    all.push_back(std::move(p));
  }
  return true;
}

/// Which rank of the pipeline stage holding `t` writes the part of it that
/// `coords` names: of a whole tensor, the stage's first rank; of a
/// tensor-parallel block, the first data-parallel replica; of a ZeRO-1
/// chunk, the first rank of the tensor axis; of a chunk of a block, each
/// rank.
bool writesPart(const Named &t, const std::vector<int64_t> &coords) {
  auto at = [&](int16_t axis) {
    return size_t(axis) < coords.size() ? coords[axis] : 0;
  };
  bool data = at(1) == 0, tensor = at(2) == 0;
  if (t.split && t.chunk())
    return true;
  if (t.split)
    return data;
  if (t.chunk())
    return tensor;
  return data && tensor;
}

/// A part's place as meta.json says it: the elements [offset, offset + n)
/// of the flattened block that the rank at `coords` holds of a tensor split
/// as `split` (no split: the whole tensor).
std::string partJson(const std::string &file, int64_t offset,
                     const TensorSpec *split,
                     const std::vector<int64_t> &coords) {
  std::string out = "{\"file\": " + jsonQuote(file) +
                    ", \"offset\": " + std::to_string(offset);
  if (split) {
    out += ", \"split_axes\": [";
    for (size_t d = 0; d < split->splitAxes.size(); ++d)
      out += (d ? ", " : "") + shapeToString(split->splitAxes[d]);
    out += "], \"grid\": " + shapeToString(gJob.grid) +
           ", \"coords\": " + shapeToString(coords) +
           ", \"block_parts\": " + std::to_string(split->blockParts);
  }
  return out + "}";
}

/// Writes a checkpoint: DIR/checkpoint/{meta.json, tensors}, through
/// DIR/checkpoint.tmp and renames (the last good one survives a crash).
/// Collective in a distributed run: each rank passes the tensors of its
/// pipeline stage; a whole tensor is written by the stage's first rank,
/// each tensor-parallel block and ZeRO-1 chunk by one rank holding it
/// (writesPart), so no rank ever holds a whole split tensor or another
/// stage's. The stages' first ranks describe their tensors and rank 0
/// gathers the descriptions into meta.json, which names, per tensor, its
/// file, or its whole shape and its parts (each a run of the flattened
/// elements of a block, and where the block lies in the whole) --
/// independent of the plan that wrote it.
bool writeCheckpoint(const std::string &dir, int64_t step, const TrainArgs &a,
                     const std::vector<Named> &weights,
                     const std::vector<Named> &state, std::string &error) {
  std::string tmp = detail::joinPath(dir, "checkpoint.tmp");
  std::string final_ = detail::joinPath(dir, "checkpoint");
  std::string old = detail::joinPath(dir, "checkpoint.old");
  bool leader = gJob.rank == 0;
  bool ok = true;
  if (leader) {
    removeFlatDirectory(tmp);
    ok = detail::makeDirectories(tmp, error);
  }
  if (!allAgree(ok)) {
    if (ok)
      error = "rank 0 could not make '" + tmp + "'";
    return false;
  }
  int64_t ranks = gJob.distributed ? dort_comm_size(dort_comm_world()) : 1;
  struct Group {
    const char *key, *prefix;
    const std::vector<Named> &tensors;
  };
  const Group groups[] = {{"weights", "w.", weights}, {"state", "s.", state}};
  // File names carry the writing rank: the stages' lists differ.
  auto partFile = [](const char *prefix, size_t i, int64_t r) {
    return prefix + std::to_string(i) + ".r" + std::to_string(r) + ".npy";
  };
  auto parted = [](const Named &t) { return t.split || t.chunk(); };
  std::vector<int64_t> me = gJob.coords.empty() ? std::vector<int64_t>{0, 0, 0}
                                                : gJob.coords;
  // This rank's parts and whole tensors.
  for (const Group &g : groups)
    for (size_t i = 0; ok && i < g.tensors.size(); ++i) {
      const Named &t = g.tensors[i];
      if (!writesPart(t, me))
        continue;
      if (!parted(t)) {
        ok = writeNpy(detail::joinPath(tmp, partFile(g.prefix, i, gJob.rank)),
                      *t.tensor, error);
        continue;
      }
      Tensor part;
      int64_t n = t.chunk() ? t.valid() : t.tensor->numElements();
      ok = Tensor::create(t.tensor->dtype(), {n}, part, error);
      if (ok) {
        std::memcpy(part.data(), t.tensor->data(), part.byteSize());
        ok = writeNpy(detail::joinPath(tmp, partFile(g.prefix, i, gJob.rank)),
                      part, error);
      }
    }
  if (!allAgree(ok)) {
    if (ok)
      error = "another rank could not write its part of the checkpoint";
    return false;
  }
  // The description of this stage's tensors (its first rank's).
  std::string described[2];
  bool lister = me.size() < 3 || (me[1] == 0 && me[2] == 0);
  for (size_t k = 0; lister && k < 2; ++k) {
    const Group &g = groups[k];
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      const Named &t = g.tensors[i];
      std::string entry = jsonQuote(t.name) + ": ";
      if (!parted(t)) {
        entry += jsonQuote(partFile(g.prefix, i, gJob.rank));
      } else {
        // Every part the stage's ranks wrote (the same chunk size
        // everywhere).
        entry += "{\"shape\": " + shapeToString(t.fileShape()) + ", \"blocks\": [";
        bool first = true;
        for (int64_t r = 0; r < ranks; ++r) {
          std::vector<int64_t> c =
              gJob.grid.empty() ? std::vector<int64_t>{0, 0, 0}
                                : gridCoords(gJob.grid, r);
          if (c[0] != me[0] || !writesPart(t, c))
            continue;
          int64_t offset = 0;
          if (t.chunk()) {
            offset = c[1] * t.tensor->numElements();
            if (offset >= t.wholeElements())
              continue;
          }
          entry += std::string(first ? "" : ", ") +
                   partJson(partFile(g.prefix, i, r), offset, t.split, c);
          first = false;
        }
        entry += "]}";
      }
      described[k] += (described[k].empty() ? "" : ",\n    ") + entry;
    }
  }
  // Rank 0 gathers the stages' descriptions.
  for (size_t k = 0; k < 2 && gJob.distributed; ++k) {
    std::vector<std::string> all;
    if (!gatherStrings(described[k], all, error))
      return false;
    described[k].clear();
    for (const std::string &d : all)
      if (!d.empty())
        described[k] += (described[k].empty() ? "" : ",\n    ") + d;
  }
  if (!leader)
    return true;
  std::string meta = "{\n  \"step\": " + std::to_string(step) +
                     ",\n  \"seed\": " + std::to_string(a.seed) +
                     ",\n  \"shuffle\": " + (a.shuffle ? "true" : "false");
  for (size_t k = 0; k < 2; ++k)
    meta += ",\n  \"" + std::string(groups[k].key) + "\": {" + described[k] + "}";
  meta += "\n}\n";
  std::string_view parts[] = {meta};
  if (!detail::writeFileAtomically(detail::joinPath(tmp, "meta.json"), parts, 1,
                                   error))
    return false;
  removeFlatDirectory(old);
  if (pathExists(final_) && std::rename(final_.c_str(), old.c_str()) != 0) {
    error = "cannot move the previous checkpoint aside";
    return false;
  }
  if (std::rename(tmp.c_str(), final_.c_str()) != 0) {
    error = "cannot move the checkpoint into place";
    return false;
  }
  removeFlatDirectory(old);
  return true;
}

/// Reads an integer array of meta.json (an empty vector if it is none).
std::vector<int64_t> jsonInts(const JsonValue *v) {
  std::vector<int64_t> out;
  if (v && v->isArray())
    for (const JsonValue &e : v->elements())
      out.push_back(e.isInteger() ? e.asInteger() : -1);
  return out;
}

/// The whole tensor `t` stands for, put together from a checkpoint entry
/// `f` (a file, or parts: runs of the flattened elements of blocks of the
/// whole, each block as a split of it places it). One whole tensor is in
/// memory at a time.
bool readWhole(const std::string &root, const Named &t, const JsonValue &f,
               Tensor &whole, std::string &error) {
  std::vector<int64_t> shape = t.fileShape();
  DType dtype = t.tensor->dtype();
  size_t elem = static_cast<size_t>(dtypeSize(dtype));
  auto readFile = [&](const std::string &file, Tensor &read) {
    std::string path = detail::joinPath(root, file);
    if (!readNpy(path, read, error)) {
      error = "checkpoint '" + path + "': " + error;
      return false;
    }
    if (read.dtype() != dtype) {
      error = "checkpoint '" + t.name + "' is " + dtypeName(read.dtype()) +
              ", the bundle's " + dtypeName(dtype);
      return false;
    }
    return true;
  };
  if (f.isString()) {
    if (!readFile(f.asString(), whole))
      return false;
    if (whole.shape() != shape) {
      error = "checkpoint '" + t.name + "' is " + shapeToString(whole.shape()) +
              ", the bundle's " + shapeToString(shape);
      return false;
    }
    return true;
  }
  std::vector<int64_t> saved = jsonInts(f.get("shape"));
  const JsonValue *blocks = f.get("blocks");
  if (saved != shape || !blocks || !blocks->isArray()) {
    error = "checkpoint '" + t.name + "' has shape " + shapeToString(saved) +
            ", the bundle's " + shapeToString(shape);
    return false;
  }
  if (!Tensor::create(dtype, shape, whole, error))
    return false;
  std::memset(whole.data(), 0, whole.byteSize());
  // The blocks, each put together from its parts first.
  struct Block {
    TensorSpec spec;
    std::vector<int64_t> grid, coords;
    Tensor data;
  };
  std::map<std::string, Block> byPlace;
  for (const JsonValue &part : blocks->elements()) {
    const JsonValue *file = part.get("file"), *at = part.get("offset");
    if (!file || !file->isString() || !at || !at->isInteger()) {
      error = "checkpoint '" + t.name + "': a part without file and offset";
      return false;
    }
    Block b;
    b.spec.dtype = dtype;
    b.spec.shape = shape;
    std::string place;
    if (const JsonValue *axes = part.get("split_axes")) {
      b.grid = jsonInts(part.get("grid"));
      b.coords = jsonInts(part.get("coords"));
      b.spec.globalShape = shape;
      if (axes->isArray())
        for (const JsonValue &d : axes->elements())
          b.spec.splitAxes.push_back(jsonInts(&d));
      const JsonValue *k = part.get("block_parts");
      b.spec.blockParts = k && k->isInteger() ? k->asInteger() : 1;
      bool valid = b.coords.size() == b.grid.size() &&
                   b.spec.splitAxes.size() <= shape.size() &&
                   b.spec.blockParts >= 1;
      for (size_t d = 0; valid && d < b.spec.splitAxes.size(); ++d) {
        int64_t n = 1;
        for (int64_t axis : b.spec.splitAxes[d]) {
          valid &= axis >= 0 && size_t(axis) < b.grid.size() && b.grid[axis] > 0;
          n *= valid ? b.grid[axis] : 1;
        }
        valid &= valid && shape[d] % n == 0;
        if (valid)
          b.spec.shape[d] = shape[d] / n;
      }
      if (!valid) {
        error = "checkpoint '" + t.name + "': a part's split does not fit " +
                shapeToString(shape);
        return false;
      }
      // The block is named by the coordinates on the axes that split it
      // (the ZeRO-1 chunks of one block come from several data replicas).
      std::vector<int64_t> key(b.grid.size(), 0);
      for (const std::vector<int64_t> &axes : b.spec.splitAxes)
        for (int64_t axis : axes)
          key[axis] = b.coords[axis];
      place = shapeToString(key);
    }
    auto [it, fresh] = byPlace.try_emplace(place, std::move(b));
    Block &block = it->second;
    if (fresh) {
      if (!Tensor::create(dtype, block.spec.shape, block.data, error))
        return false;
      std::memset(block.data.data(), 0, block.data.byteSize());
    }
    Tensor read;
    if (!readFile(file->asString(), read))
      return false;
    int64_t from = std::max<int64_t>(0, at->asInteger());
    int64_t to = std::min(block.data.numElements(),
                          at->asInteger() + read.numElements());
    if (from < to)
      std::memcpy(static_cast<char *>(block.data.data()) + from * elem,
                  static_cast<const char *>(read.data()) +
                      (from - at->asInteger()) * elem,
                  static_cast<size_t>(to - from) * elem);
  }
  for (auto &[place, b] : byPlace) {
    if (place.empty())
      std::memcpy(whole.data(), b.data.data(), whole.byteSize());
    else
      insertBlock(b.data.data(), whole.data(), b.spec, b.grid, b.coords);
  }
  return true;
}

bool readCheckpoint(const std::string &dir, int64_t &step,
                    const std::vector<Named> &weights,
                    const std::vector<Named> &state, std::string &error) {
  std::string root = detail::joinPath(dir, "checkpoint");
  std::string text;
  if (!detail::readWholeFile(detail::joinPath(root, "meta.json"), text, error)) {
    error = "no checkpoint in '" + dir + "' (" + error + ")";
    return false;
  }
  JsonValue meta;
  if (!parseJson(text, meta, error) || !meta.isObject()) {
    error = "checkpoint '" + root + "/meta.json' is not valid JSON: " + error;
    return false;
  }
  const JsonValue *s = meta.get("step");
  if (!s || !s->isInteger() || s->asInteger() < 0) {
    error = "checkpoint '" + root + "/meta.json' has no step";
    return false;
  }
  step = s->asInteger();
  auto load = [&](const char *key, const std::vector<Named> &tensors) {
    const JsonValue *table = meta.get(key);
    if (!table || !table->isObject()) {
      error = std::string("checkpoint meta.json has no '") + key + "'";
      return false;
    }
    for (const Named &t : tensors) {
      const JsonValue *f = table->get(t.name);
      if (!f || !(f->isString() || f->isObject())) {
        error = "the checkpoint has no '" + t.name +
                "' (it belongs to another model or optimizer)";
        return false;
      }
      Tensor whole, block;
      if (!readWhole(root, t, *f, whole, error))
        return false;
      // This rank's block of the whole, then its chunk of the block.
      const Tensor *mine = &whole;
      if (t.split) {
        if (!Tensor::create(t.tensor->dtype(), t.split->shape, block, error))
          return false;
        extractBlock(whole.data(), block.data(), *t.split, gJob.grid,
                     gJob.coords);
        mine = &block;
      }
      size_t elem = static_cast<size_t>(dtypeSize(t.tensor->dtype()));
      int64_t lo = t.chunk() ? t.offset : 0, count = t.tensor->numElements();
      auto *dst = static_cast<char *>(t.tensor->data());
      std::memset(dst, 0, t.tensor->byteSize());
      int64_t to = std::min(lo + count, mine->numElements());
      if (lo < to)
        std::memcpy(dst, static_cast<const char *>(mine->data()) + lo * elem,
                    static_cast<size_t>(to - lo) * elem);
    }
    return true;
  };
  return load("weights", weights) && load("state", state);
}

/// A number in a message (9 significant digits; "nan", "inf").
std::string numberText(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

} // namespace

namespace {

/// This rank's copy of every weight (its block of a tensor-parallel one),
/// which the training updates overwrite.
bool loadWeightBlocks(const Manifest &m, const WeightStore &store,
                      std::vector<Tensor> &weights, std::string &error,
                      const std::vector<bool> *used = nullptr) {
  weights.resize(m.weights.size());
  for (size_t w = 0; w < m.weights.size(); ++w) {
    const WeightSpec &spec = m.weights[w];
    if (used && !(*used)[w])
      continue; // another pipeline stage's
    if (!Tensor::create(spec.dtype, spec.shape, weights[w], error)) {
      error = "weight '" + spec.name + "': " + error;
      return false;
    }
    if (spec.splitAxes.empty())
      std::memcpy(weights[w].data(), store.data(w), weights[w].byteSize());
    else
      extractBlock(store.data(w), weights[w].data(), spec, gJob.grid,
                   gJob.coords);
  }
  return true;
}

Named namedWeight(const Manifest &m, size_t w, Tensor &tensor) {
  Named n{m.weights[w].name, &tensor, {}, 0};
  if (!m.weights[w].splitAxes.empty())
    n.split = &m.weights[w];
  return n;
}

/// The whole of a weight on rank 0, put together from the blocks the ranks
/// of its pipeline stage hold (a tensor-parallel block each, or the whole;
/// collective: the other stages' ranks send zeros). One weight at a time,
/// so rank 0 holds one whole weight beyond its own. Other ranks get an
/// empty tensor.
bool gatherWeight(const WeightSpec &spec, int64_t stage, const Tensor &block,
                  Tensor &whole, std::string &error) {
  dort_comm *world = dort_comm_world();
  int64_t ranks = dort_comm_size(world);
  int64_t bytes = static_cast<int64_t>(spec.byteSize());
  bool holds = gJob.coords.empty() || gJob.coords[0] == stage;
  std::vector<char> zeros(holds ? 0 : bytes);
  std::vector<char> all(gJob.rank == 0 ? bytes * ranks : 0);
  if (dort_gather(holds ? block.data() : zeros.data(), all.data(), bytes,
                  DORT_U8, 0, world) != 0) {
    error = dort_last_error_message();
    return false;
  }
  if (gJob.rank != 0)
    return true;
  if (!Tensor::create(spec.dtype, spec.fileShape(), whole, error))
    return false;
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> c = gridCoords(gJob.grid, r);
    if (c[0] == stage)
      insertBlock(all.data() + r * bytes, whole.data(), spec, gJob.grid, c);
  }
  return true;
}

/// The pipeline stage that takes each weight (0 for none, and without a
/// pipeline); `unstaged[w]`: no stage takes it.
std::vector<int64_t> weightStages(const Manifest &m,
                                  std::vector<bool> *unstaged = nullptr) {
  std::vector<int64_t> stageOf(m.weights.size(), 0);
  if (unstaged)
    unstaged->assign(m.weights.size(), !m.stages.empty());
  for (size_t s = 0; s < m.stages.size(); ++s)
    for (int64_t w : m.stages[s].weights) {
      stageOf[w] = static_cast<int64_t>(s);
      if (unstaged)
        (*unstaged)[w] = false;
    }
  return stageOf;
}

/// Every rank's copy of every weight, whole, for a pipelined step's
/// evaluation: the ones `gathered(w)` says a rank may hold only in part (a
/// tensor-parallel block, or another stage's) gathered on rank 0 from
/// stage `stageOf[w]`, the others as rank 0 holds them; then each broadcast
/// from rank 0. Collective: every rank calls it with the same manifest.
bool wholeWeightsEverywhere(const Manifest &m, const std::vector<Tensor> &weights,
                            const std::vector<int64_t> &stageOf,
                            const std::function<bool(size_t)> &gathered,
                            std::vector<Tensor> &whole, std::string &error) {
  whole.clear();
  whole.resize(m.weights.size());
  for (size_t w = 0; w < m.weights.size(); ++w) {
    const WeightSpec &spec = m.weights[w];
    if (gathered(w)) {
      if (!gatherWeight(spec, stageOf[w], weights[w], whole[w], error))
        return false;
    } else if (gJob.rank == 0) {
      whole[w] = weights[w].clone();
    }
    if (gJob.rank != 0 &&
        !Tensor::create(spec.dtype, spec.fileShape(), whole[w], error))
      return false;
    // In pieces of at most 1 GiB (a message counts its bytes in an int).
    auto *bytes = static_cast<char *>(whole[w].data());
    const int64_t size = static_cast<int64_t>(whole[w].byteSize());
    for (int64_t at = 0; at < size; at += int64_t(1) << 30) {
      int64_t n = std::min<int64_t>(int64_t(1) << 30, size - at);
      if (dort_broadcast(bytes + at, bytes + at, n, DORT_U8, 0,
                         dort_comm_world(), nullptr) != 0) {
        error = dort_last_error_message();
        return false;
      }
    }
  }
  return true;
}

} // namespace

/// Writes the timeline of every rank to a.trace (Chrome's trace event
/// format, one process per rank): rank 0 gathers the others' events.
bool writeTrace(const TrainArgs &a, std::string &error) {
  std::string mine = trace::takeChromeEvents(gJob.rank);
  std::vector<std::string> parts{mine};
  if (gJob.distributed) {
    if (!gatherStrings(mine, parts, error))
      return false;
    if (gJob.rank != 0)
      return true;
  }
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (size_t r = 0; r < parts.size(); ++r) {
    // Name each process after its rank.
    text += std::string(first ? "" : ",\n") +
            "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " +
            std::to_string(r) + ", \"args\": {\"name\": \"rank " +
            std::to_string(r) + "\"}}";
    first = false;
    if (!parts[r].empty())
      text += ",\n" + parts[r];
  }
  text += "\n]}\n";
  std::string_view view[] = {text};
  return detail::writeFileAtomically(a.trace, view, 1, error);
}

namespace {

/// --save-onnx and --save-weights: the whole weights, `wholeOf(w)` for
/// weight w (the caller gathers split ones). Returns 0, or fail()'s status.
int saveTrainedWeights(const TrainArgs &a, const Manifest &m,
                       const std::function<const Tensor &(size_t)> &wholeOf) {
  std::string error;
  if (!a.saveOnnx.empty()) {
    if (m.source.empty())
      return fail(a, "--save-onnx: the bundle does not name the ONNX model it "
                     "was compiled from (recompile it)");
    std::string model;
    if (!detail::readWholeFile(m.source, model, error))
      return fail(a, "--save-onnx: reading the original model '" + m.source +
                         "': " + error);
    // Every weight is written with its value, trained or frozen: the new
    // file stands alone (no external data relative to the old one).
    std::map<std::string, const Tensor *> trained;
    for (size_t w = 0; w < m.weights.size(); ++w)
      trained[m.weights[w].name] = &wholeOf(w);
    // One protobuf holds under 2 GB: past that (or with
    // --save-onnx-external-data) the weights go to OUT.data beside it, as
    // ONNX's external data, 64-byte aligned.
    size_t weightBytes = 0;
    for (size_t w = 0; w < m.weights.size(); ++w)
      weightBytes += wholeOf(w).byteSize();
    bool external = a.saveOnnxExternal ||
                    model.size() + weightBytes > (size_t(2) << 30) - (1 << 20);
    std::string rewritten;
    if (!external) {
      if (!replaceInitializers(model, trained, rewritten, error))
        return fail(a, "--save-onnx: " + m.source + ": " + error);
    } else {
      std::string dataPath = a.saveOnnx + ".data";
      std::string location = baseNameOf(dataPath);
      std::string tmpData = dataPath + ".tmp";
      std::ofstream data(tmpData, std::ios::binary | std::ios::trunc);
      if (!data)
        return fail(a, "--save-onnx: cannot write '" + tmpData + "'");
      int64_t written = 0;
      ExternalWriter writer = [&](const Tensor &t, int64_t &offset) {
        int64_t pad = (64 - written % 64) % 64;
        static const char zeros[64] = {};
        data.write(zeros, pad);
        offset = written + pad;
        data.write(static_cast<const char *>(t.data()),
                   static_cast<std::streamsize>(t.byteSize()));
        written = offset + static_cast<int64_t>(t.byteSize());
        return static_cast<bool>(data);
      };
      if (!replaceInitializers(model, trained, rewritten, error, &writer,
                               location))
        return fail(a, "--save-onnx: " + m.source + ": " + error);
      data.close();
      if (!data || std::rename(tmpData.c_str(), dataPath.c_str()) != 0)
        return fail(a, "--save-onnx: writing '" + dataPath + "' failed");
    }
    std::string_view parts[] = {rewritten};
    if (!detail::writeFileAtomically(a.saveOnnx, parts, 1, error))
      return fail(a, "--save-onnx: " + error);
  }
  if (!a.saveWeights.empty()) {
    if (!detail::makeDirectories(a.saveWeights, error))
      return fail(a, "--save-weights: " + error);
    std::vector<TensorSpec> specs(m.weights.begin(), m.weights.end());
    std::vector<std::string> names = outputFileNames(specs);
    for (size_t w = 0; w < m.weights.size(); ++w)
      if (!writeNpy(detail::joinPath(a.saveWeights, names[w]), wholeOf(w), error))
        return fail(a, "--save-weights: weight '" + m.weights[w].name + "': " + error);
  }
  return 0;
}

} // namespace

namespace {

// --- Parameter servers (--sync ps|async) ---------------------------------
//
// Ranks [0, K) are servers, the rest workers (manifest
// "parameter_servers"). Every message between a worker and a server is one
// buffer of floats: a header of 8 doubles, then the server's shard
// (shard_length floats; a worker's gradient pieces or a server's weights).
// Each push gets exactly one reply; a worker that is told to stop sends
// every server a last message ("bye"), so no message is left unreceived.

constexpr int64_t kHeaderFloats = 16; // 8 doubles
enum : int { kPushGradient = 0, kPushBye = 1 };
enum : int { kReplyWeights = 0, kReplyStop = 1 };

struct PsMessage {
  std::vector<float> buf;
  explicit PsMessage(int64_t shard) : buf(kHeaderFloats + shard, 0.0f) {}
  double get(int i) const {
    double v;
    std::memcpy(&v, buf.data() + 2 * i, sizeof v);
    return v;
  }
  void set(int i, double v) { std::memcpy(buf.data() + 2 * i, &v, sizeof v); }
  float *payload() { return buf.data() + kHeaderFloats; }
  const float *payload() const { return buf.data() + kHeaderFloats; }
  int64_t count() const { return static_cast<int64_t>(buf.size()); }
};
// Push header: kind, worker, pulled version, loss, counted, wait_s,
// compute_s, local step. Reply header: kind, version.

/// Sends that must outlive the call (MPI_Isend on a copy), completed in
/// order as they finish and all at the end.
struct Outbox {
  std::deque<std::pair<std::vector<float>, dort_request *>> sends;
  bool send(const PsMessage &msg, int peer, dort_comm *c, std::string &error) {
    reap();
    sends.emplace_back(msg.buf, nullptr);
    if (dort_isend(sends.back().first.data(), msg.count(), DORT_F32, peer, c,
                   &sends.back().second) != 0) {
      error = dort_last_error_message();
      return false;
    }
    return true;
  }
  void reap() {
    while (!sends.empty()) {
      int done = 0;
      if (dort_test(sends.front().second, &done) != 0 || !done)
        return;
      sends.pop_front();
    }
  }
  bool flush(std::string &error) {
    for (auto &s : sends)
      if (dort_wait(s.second) != 0) {
        error = dort_last_error_message();
        return false;
      }
    sends.clear();
    return true;
  }
};

void sleepSeconds(double s) {
  if (s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

/// The delay DISTOPT_STRAGGLER gives `rank` before it sends step `step`'s
/// gradient (0: none).
double stragglerDelay(const std::vector<ps::Straggler> &stragglers,
                      int64_t rank, int64_t step) {
  for (const ps::Straggler &s : stragglers)
    if (s.rank == rank) {
      if (!s.random)
        return s.seconds;
      uint64_t u = splitmix64(static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull +
                              static_cast<uint64_t>(step));
      return 2.0 * s.seconds * double(u >> 11) / double(uint64_t(1) << 53);
    }
  return 0;
}

int runParameterServers(TrainArgs &a, const Manifest &m,
                        const std::string &bundleDir, EntryFn workerEntry) {
  const ParameterServers &p = *m.parameterServers;
  std::string error;
  bool async = p.sync == "async";
  if (a.asyncGiven && !async)
    return fail(a, "--max-staleness, --drop-stale, --stale-lr, --sync-warmup "
                   "and --delay-compensation are cures for asynchronous "
                   "servers: compile with --sync async");
  if (!a.checkpointDir.empty() || !a.resume.empty())
    return fail(a, "--checkpoint-dir and --resume are not built for "
                   "parameter-server runs yet (save the result with "
                   "--save-weights or --save-onnx)");
  if (!a.trace.empty())
    return fail(a, "--trace is not built for parameter-server runs yet (the "
                   "log has each worker's wait and the staleness)");
  if (a.accumulate > 0 && a.accumulate != 1)
    return fail(a, "--accumulate: parameter servers apply each batch's "
                   "gradient");
  if (async && p.servers > 1 && a.hyper["clip_norm"] > 0)
    return fail(a, "--clip-grad-norm needs the norm of the whole gradient; "
                   "asynchronous servers apply their shards independently "
                   "(use one server, or --sync ps)");
  if (!ps_entry())
    return fail(a, "this executable has no parameter-server update program "
                   "(recompile the bundle)");
  int64_t launched = launchedRanks();
  if (launched != m.ranks)
    return fail(a, "this bundle was compiled for " + std::to_string(m.ranks) +
                       " ranks (" + std::to_string(p.servers) +
                       " parameter server(s) and " + std::to_string(p.workers) +
                       " workers), but it was launched on " +
                       std::to_string(launched) + "; run it with `mpirun -np " +
                       std::to_string(m.ranks) + "`");
  if (dort_comm_init(nullptr, nullptr) != 0)
    return fail(a, dort_last_error_message());
  gJob.distributed = true;
  dort_comm *world = dort_comm_world();
  gJob.rank = dort_comm_rank(world);
  int64_t rank = gJob.rank, K = p.servers, W = p.workers;
  bool server = rank < K;
  int64_t me = server ? rank : rank - K;
  a.program += ": rank " + std::to_string(rank) +
               (server ? " (server " + std::to_string(me) + ")"
                       : " (worker " + std::to_string(me) + ")");
  signal(SIGTERM, onTerminate);
  dort_comm *group = nullptr;
  if (dort_comm_split(world, server ? 0 : 1, static_cast<int>(rank), &group) != 0)
    return fail(a, dort_last_error_message());
  std::vector<int64_t> serverGrid{1, 1, K};
  const std::vector<int64_t> &grid = server ? serverGrid : m.grid;
  if (dort_grid_init_on(group, 3, grid.data()) != 0)
    return fail(a, dort_last_error_message());
  gJob.grid = grid;
  gJob.coords = gridCoords(grid, me);
  Fault fault;
  if (!parseFault(fault, error))
    return fail(a, error);

  // Roles of the step's inputs and outputs.
  std::vector<size_t> dataInputs, keyInputs;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    if (m.inputs[i].name == "rng.key")
      keyInputs.push_back(i);
    else
      dataInputs.push_back(i);
  }
  DataSet dataSet;
  if (!dataSet.open(m.inputs, dataInputs, a.data, "the step's", error))
    return fail(a, error);
  int64_t samples = dataSet.samples, batch = dataSet.batch;
  int64_t perEpoch = samples / batch;
  if (perEpoch < 1)
    return fail(a, "the data hold " + std::to_string(samples) +
                       " samples, fewer than one batch of " +
                       std::to_string(batch));
  int64_t steps = a.steps > 0 ? a.steps : a.epochs * perEpoch;
  int64_t L = p.shardLength;
  WeightStore store;
  if (!store.load(m, bundleDir, error))
    return fail(a, error);
  std::vector<Tensor> weights;
  if (!loadWeightBlocks(m, store, weights, error))
    return fail(a, error);
  dort_set_num_threads(0);
  auto elapsedSince = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  };
  auto start = std::chrono::steady_clock::now();
  bool ok = true;

  if (!server) {
    // --- A worker: pull, compute the gradient of its batch, push. -------
    std::map<std::string, size_t> outputIndex;
    for (size_t i = 0; i < m.outputs.size(); ++i)
      outputIndex[m.outputs[i].name] = i;
    if (!outputIndex.count("loss") || !outputIndex.count("counted"))
      return fail(a, "the worker program returns no loss and count");
    std::vector<int64_t> gradOut(m.weights.size(), -1);
    for (size_t w = 0; w < m.weights.size(); ++w) {
      auto o = outputIndex.find("grad:" + m.weights[w].name);
      if (o != outputIndex.end())
        gradOut[w] = static_cast<int64_t>(o->second);
    }
    std::vector<Tensor> inputs(m.inputs.size()), wholeBatch(m.inputs.size()),
        outputs(m.outputs.size());
    for (size_t i = 0; i < m.inputs.size(); ++i)
      if (!Tensor::create(m.inputs[i].dtype, m.inputs[i].shape, inputs[i], error) ||
          (!m.inputs[i].splitAxes.empty() &&
           !Tensor::create(m.inputs[i].dtype, m.inputs[i].fileShape(),
                           wholeBatch[i], error)))
        return fail(a, "input '" + m.inputs[i].name + "': " + error);
    for (size_t o = 0; o < m.outputs.size(); ++o)
      if (!Tensor::create(m.outputs[o].dtype, m.outputs[o].shape, outputs[o], error))
        return fail(a, "output '" + m.outputs[o].name + "': " + error);
    std::vector<void *> buffers;
    for (Tensor &t : inputs)
      buffers.push_back(t.data());
    for (Tensor &t : weights)
      buffers.push_back(t.data());
    for (Tensor &t : outputs)
      buffers.push_back(t.data());
    const float *loss = static_cast<const float *>(outputs[outputIndex["loss"]].data());
    const float *counted =
        static_cast<const float *>(outputs[outputIndex["counted"]].data());
    std::vector<PsMessage> replies(K, PsMessage(L));
    std::vector<int64_t> pulled(K, 0);
    Outbox outbox;
    std::vector<int64_t> order(samples);
    std::iota(order.begin(), order.end(), 0);
    int64_t shuffledEpoch = -1;
    double waitSeconds = 0, computeSeconds = 0;
    // Pull: one reply from each server, its pieces into the weights.
    auto pull = [&](bool &stop) {
      double t0 = trace::now();
      stop = false;
      for (int64_t s = 0; s < K; ++s) {
        if (dort_recv(replies[s].buf.data(), replies[s].count(), DORT_F32,
                      static_cast<int>(s), world, nullptr) != 0) {
          error = dort_last_error_message();
          return false;
        }
        stop = stop || int(replies[s].get(0)) == kReplyStop;
        pulled[s] = static_cast<int64_t>(replies[s].get(1));
      }
      for (const ServerPiece &piece : p.pieces)
        std::memcpy(static_cast<float *>(weights[piece.weight].data()) + piece.offset,
                    replies[piece.server].payload() + piece.shardOffset,
                    piece.length * sizeof(float));
      // The weights changed under the program (a GPU had them cached).
      dort_device_host_changed();
      waitSeconds = trace::now() - t0;
      return true;
    };
    bool stop = false;
    if (!pull(stop))
      return fail(a, error);
    for (int64_t local = 0; !stop; ++local) {
      // Synchronous: the step is the version pulled (every worker takes its
      // block of that step's batch); asynchronous: the worker's own count.
      int64_t step = async ? local : pulled[0];
      injectFault(fault, rank, local + 1, a.program);
      int64_t epoch = step / perEpoch, within = step % perEpoch;
      if (a.shuffle && epoch != shuffledEpoch) {
        std::iota(order.begin(), order.end(), 0);
        std::mt19937_64 rng(a.seed * 1000003u + static_cast<uint64_t>(epoch));
        std::shuffle(order.begin(), order.end(), rng);
        shuffledEpoch = epoch;
      }
      std::vector<int64_t> rows(order.begin() + within * batch,
                                order.begin() + (within + 1) * batch);
      for (size_t i : dataInputs)
        dataSet.fill(i, m.inputs[i], rows, wholeBatch[i], inputs[i], m.grid,
                     gJob.coords);
      for (size_t i : keyInputs)
        *static_cast<int64_t *>(inputs[i].data()) =
            static_cast<int64_t>(stepKey(a.seed, step + 1));
      std::string context = "worker step " + std::to_string(local + 1);
      dort_set_context(context.c_str());
      prepareTerminatedMessage(a.program, local + 1);
      dort_clear_error();
      dort_clear_pending_error();
      double t0 = trace::now();
      std::string failure = entryFailure(workerEntry(buffers.data()));
      if (!failure.empty())
        return fail(a, "step " + std::to_string(local + 1) + " failed: " + failure);
      computeSeconds = trace::now() - t0;
      sleepSeconds(stragglerDelay(fault.stragglers, rank, local + 1));
      for (int64_t s = 0; s < K; ++s) {
        PsMessage msg(L);
        msg.set(0, kPushGradient);
        msg.set(1, double(me));
        msg.set(2, double(pulled[s]));
        msg.set(3, *loss);
        msg.set(4, *counted);
        msg.set(5, waitSeconds);
        msg.set(6, computeSeconds);
        msg.set(7, double(local));
        for (const ServerPiece &piece : p.pieces)
          if (piece.server == s)
            std::memcpy(msg.payload() + piece.shardOffset,
                        static_cast<const float *>(outputs[gradOut[piece.weight]].data()) +
                            piece.offset,
                        piece.length * sizeof(float));
        if (!outbox.send(msg, static_cast<int>(s), world, error))
          return fail(a, error);
      }
      if (!pull(stop))
        return fail(a, error);
    }
    for (int64_t s = 0; s < K; ++s) {
      PsMessage bye(L);
      bye.set(0, kPushBye);
      bye.set(1, double(me));
      if (!outbox.send(bye, static_cast<int>(s), world, error))
        return fail(a, error);
    }
    ok = outbox.flush(error);
  } else {
    // --- A server: its shard, the update program, the workers' pushes. ---
    const std::vector<TensorSpec> &ins = p.updateInputs, &outs = p.updateOutputs;
    std::map<std::string, size_t> inIndex, outIndex;
    for (size_t i = 0; i < ins.size(); ++i)
      inIndex[ins[i].name] = i;
    for (size_t o = 0; o < outs.size(); ++o)
      outIndex[outs[o].name] = o;
    std::string shardName = "ps.shard";
    for (const char *need : {"ps.grad", "ps.pulled", "ps.dc_lambda"})
      if (!inIndex.count(need))
        return fail(a, std::string("the update program has no input '") + need + "'");
    if (!outIndex.count("update:" + shardName) || !outIndex.count("grad_norm"))
      return fail(a, "the update program returns no updated shard");
    std::vector<Tensor> uIn(ins.size()), uOut(outs.size());
    Tensor shard;
    for (size_t i = 0; i < ins.size(); ++i)
      if (!Tensor::create(ins[i].dtype, ins[i].shape, uIn[i], error))
        return fail(a, error);
    for (size_t o = 0; o < outs.size(); ++o)
      if (!Tensor::create(outs[o].dtype, outs[o].shape, uOut[o], error))
        return fail(a, error);
    if (!Tensor::create(DType::Float32, {L}, shard, error))
      return fail(a, error);
    std::vector<std::pair<size_t, size_t>> stateIO;
    std::vector<std::pair<size_t, std::string>> hyper;
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string &n = ins[i].name;
      if (n.rfind("opt.", 0) != 0)
        continue;
      if (n.find(':') != std::string::npos) {
        auto o = outIndex.find(n);
        if (o == outIndex.end())
          return fail(a, "optimizer state '" + n + "' has no update output");
        stateIO.emplace_back(i, o->second);
      } else {
        hyper.emplace_back(i, n.substr(4));
      }
    }
    float *shardData = static_cast<float *>(shard.data());
    for (const ServerPiece &piece : p.pieces)
      if (piece.server == me)
        std::memcpy(shardData + piece.shardOffset,
                    static_cast<const float *>(weights[piece.weight].data()) +
                        piece.offset,
                    piece.length * sizeof(float));
    std::vector<void *> buffers;
    auto rebind = [&] {
      buffers.clear();
      for (Tensor &t : uIn)
        buffers.push_back(t.data());
      buffers.push_back(shard.data());
      for (Tensor &t : uOut)
        buffers.push_back(t.data());
    };
    rebind();
    float *const grad = static_cast<float *>(uIn[inIndex["ps.grad"]].data());
    float *const pulledIn = static_cast<float *>(uIn[inIndex["ps.pulled"]].data());
    float *const lambda = static_cast<float *>(uIn[inIndex["ps.dc_lambda"]].data());
    const float *const normOut = static_cast<const float *>(uOut[outIndex["grad_norm"]].data());
    size_t updateOut = outIndex["update:" + shardName];
    int64_t version = 0, applied = 0;
    // Applies `g` (with the weights it was computed on, for DC-ASGD) at
    // learning-rate scale `lrScale`; the update becomes the shard.
    auto apply = [&](const float *g, const float *pulledW, double dc,
                     double lrScale, int64_t step) {
      std::memcpy(grad, g, L * sizeof(float));
      std::memcpy(pulledIn, pulledW ? pulledW : shardData, L * sizeof(float));
      *lambda = static_cast<float>(dc);
      double lr = scheduledLr(a, step, steps) * lrScale;
      for (auto &[i, name] : hyper) {
        double v = name == "step" ? double(applied + 1) : name == "lr" ? lr : 0.0;
        if (name != "step" && name != "lr") {
          auto h = a.hyper.find(name);
          if (h == a.hyper.end()) {
            error = "the update takes a hyperparameter '" + name +
                    "' this runtime does not know";
            return false;
          }
          v = h->second;
        }
        *static_cast<float *>(uIn[i].data()) = static_cast<float>(v);
      }
      dort_clear_error();
      dort_clear_pending_error();
      std::string failure = entryFailure(ps_entry()(buffers.data()));
      if (!failure.empty()) {
        error = "the update failed: " + failure;
        return false;
      }
      std::swap(shard, uOut[updateOut]);
      shardData = static_cast<float *>(shard.data());
      // Only the shard and the optimizer state change buffers; the
      // gradient, pulled weights, λ and the norm keep theirs.
      for (auto &[i, o] : stateIO)
        std::swap(uIn[i], uOut[o]);
      rebind();
      ++applied;
      return true;
    };
    Outbox outbox;
    // This server's traffic: messages received and sent (the log's
    // per-server bytes).
    int64_t messagesIn = 0, messagesOut = 0;
    auto reply = [&](int64_t worker, int kind) {
      ++messagesOut;
      PsMessage msg(L);
      msg.set(0, kind);
      msg.set(1, double(version));
      std::memcpy(msg.payload(), shardData, L * sizeof(float));
      return outbox.send(msg, static_cast<int>(K + worker), world, error);
    };
    // The whole weights on server 0 (evaluation, saving): every server's
    // shard gathered, its pieces put back.
    auto gatherWeights = [&]() {
      std::vector<float> all(me == 0 ? K * L : 0);
      if (dort_gather(shardData, all.data(), L, DORT_F32, 0, group) != 0) {
        error = dort_last_error_message();
        return false;
      }
      if (me == 0)
        for (const ServerPiece &piece : p.pieces)
          std::memcpy(static_cast<float *>(weights[piece.weight].data()) + piece.offset,
                      all.data() + piece.server * L + piece.shardOffset,
                      piece.length * sizeof(float));
      return true;
    };
    std::unique_ptr<Evaluator> evaluator;
    if (!a.evalData.empty()) {
      if (!m.eval || !gEvalEntry)
        return fail(a, "--eval-data: this bundle has no evaluation program");
      evaluator = std::make_unique<Evaluator>(m, *m.eval);
      if (!evaluator->open(a.evalData, error))
        return fail(a, "--eval-data: " + error);
    }
    std::ofstream log;
    if (!a.log.empty() && me == 0) {
      log.open(a.log, std::ios::trunc);
      if (!log)
        return fail(a, "cannot write the log '" + a.log + "'");
    }
    ps::StalenessHistogram histogram;
    std::vector<double> waits(W, 0.0);
    std::string serverBytes = "[]"; // [[in, out], ...] per server
    // Dropped by a rule (backups, --drop-stale); pushed after the last step.
    int64_t dropped = 0, droppedTotal = 0, unapplied = 0, byes = 0;
    std::vector<bool> finished(W, false);
    // One log line (server 0) per synchronous step, or per W gradients
    // received asynchronously.
    double lineLoss = 0, lineCounted = 0, lineStaleSum = 0, lastLine = 0;
    int64_t lineApplied = 0, lineGradients = 0, lineStaleMax = 0;
    double norm = 0;
    auto logLine = [&](int64_t step) {
      double now = elapsedSince(start);
      std::string evalFields;
      if (evaluator && ((a.evalEvery > 0 && step % a.evalEvery == 0) ||
                        step == steps)) {
        if (!gatherWeights())
          return false;
        if (me == 0) {
          double evalLoss, accuracy;
          std::vector<int64_t> none;
          dort_device_host_changed(); // the gathered weights are new
          if (!evaluator->run(gEvalEntry, weights, none, evalLoss, accuracy, error))
            return false;
          evalFields = ", \"eval_loss\": " + jsonNumber(evalLoss);
          if (accuracy >= 0)
            evalFields += ", \"eval_accuracy\": " + jsonNumber(accuracy);
          std::fprintf(stderr, "%s: step %lld: eval loss %.6g%s\n",
                       a.program.c_str(), static_cast<long long>(step), evalLoss,
                       accuracy >= 0
                           ? (", accuracy " + std::to_string(accuracy)).c_str()
                           : "");
        }
      }
      double lossValue = lineCounted > 0 ? lineLoss / lineCounted : 0.0;
      if (log) {
        log << "{\"step\": " << step << ", \"loss\": " << jsonNumber(lossValue)
            << ", \"lr\": " << jsonNumber(scheduledLr(a, step - 1, steps))
            << ", \"grad_norm\": " << jsonNumber(norm)
            << ", \"samples_per_s\": "
            << jsonNumber(now > 0 ? double(step * batch) / now : 0.0)
            << ", \"step_s\": " << jsonNumber(now - lastLine)
            << ", \"applied\": " << lineApplied << ", \"dropped\": " << dropped
            << ", \"staleness_mean\": "
            << jsonNumber(lineGradients ? lineStaleSum / double(lineGradients) : 0.0)
            << ", \"staleness_max\": " << lineStaleMax << ", \"wait_s\": [";
        for (int64_t w = 0; w < W; ++w)
          log << (w ? ", " : "") << jsonNumber(waits[w]);
        log << "], \"elapsed_s\": " << jsonNumber(now) << evalFields << "}\n";
      }
      if (me == 0 && (step == steps || step % std::max<int64_t>(1, steps / 10) == 0))
        std::fprintf(stderr, "%s: step %lld/%lld loss %.6g (%.0f samples/s)\n",
                     a.program.c_str(), static_cast<long long>(step),
                     static_cast<long long>(steps), lossValue,
                     now > 0 ? double(step * batch) / now : 0.0);
      if (!std::isfinite(lossValue))
        return error = "the loss is " + numberText(lossValue) + " at step " +
                       std::to_string(step) + "; stopped",
               false;
      lastLine = now;
      lineLoss = lineCounted = lineStaleSum = 0;
      lineApplied = lineGradients = lineStaleMax = dropped = 0;
      return true;
    };
    auto checkFault = [&](int64_t step) {
      injectFault(fault, rank, step, a.program);
      std::string context = "server step " + std::to_string(step);
      dort_set_context(context.c_str());
      prepareTerminatedMessage(a.program, step);
    };
    PsMessage in(L);
    int source = -1;
    auto receive = [&]() {
      if (dort_recv_any(in.buf.data(), in.count(), DORT_F32, world, &source) != 0) {
        error = dort_last_error_message();
        return false;
      }
      ++messagesIn;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (source != K + w) {
        error = "a message from rank " + std::to_string(source) +
                " claims to be worker " + std::to_string(w);
        return false;
      }
      if (int(in.get(0)) == kPushBye) {
        finished[w] = true;
        ++byes;
      } else {
        waits[w] = in.get(5);
      }
      return true;
    };
    for (int64_t w = 0; w < W && ok; ++w)
      ok = reply(w, kReplyWeights);
    if (!ok)
      return fail(a, error);
    int64_t N = W - p.backupWorkers;
    std::vector<std::vector<float>> grads(W);
    std::vector<double> losses(W), counts(W);
    // A synchronous step: N gradients of this version (the first to arrive
    // when there are backups; server 0 chooses, the others follow), their
    // average by counted labels, one update; every push gets its reply.
    auto syncStep = [&](int64_t step) {
      std::vector<int64_t> arrivals, waiting;
      std::vector<bool> have(W, false);
      std::vector<int64_t> chosen;
      bool decided = p.backupWorkers == 0;
      if (decided)
        for (int64_t w = 0; w < W; ++w)
          chosen.push_back(w);
      auto complete = [&] {
        return decided && std::all_of(chosen.begin(), chosen.end(),
                                      [&](int64_t w) { return have[w]; });
      };
      // Followers learn server 0's choice first.
      if (!decided && me != 0) {
        std::vector<uint8_t> mask(W, 0);
        if (dort_broadcast(mask.data(), mask.data(), W, DORT_U8, 0, group,
                           nullptr) != 0) {
          error = dort_last_error_message();
          return false;
        }
        for (int64_t w = 0; w < W; ++w)
          if (mask[w])
            chosen.push_back(w);
        decided = true;
      }
      while (!complete()) {
        if (!receive())
          return false;
        int64_t w = static_cast<int64_t>(in.get(1));
        if (finished[w])
          continue;
        if (static_cast<int64_t>(in.get(2)) != version) {
          // A late gradient of an earlier step: dropped, and its worker
          // goes on from the newest weights.
          ++dropped;
          ++droppedTotal;
          if (!reply(w, kReplyWeights))
            return false;
          continue;
        }
        have[w] = true;
        grads[w].assign(in.payload(), in.payload() + L);
        losses[w] = in.get(3);
        counts[w] = in.get(4);
        waiting.push_back(w);
        arrivals.push_back(w);
        if (!decided && static_cast<int64_t>(arrivals.size()) >= N) {
          chosen = ps::firstToArrive(arrivals, N);
          std::vector<uint8_t> mask(W, 0);
          for (int64_t c : chosen)
            mask[c] = 1;
          if (K > 1 && dort_broadcast(mask.data(), mask.data(), W, DORT_U8, 0,
                                      group, nullptr) != 0) {
            error = dort_last_error_message();
            return false;
          }
          decided = true;
        }
      }
      double total = 0;
      for (int64_t w : chosen)
        total += counts[w];
      std::vector<float> sum(L, 0.0f);
      for (int64_t w : chosen) {
        // Each gradient is its batch's mean: weighted by its share of the
        // counted labels, the sum is the mean over the step's batch.
        float weight = static_cast<float>(total > 0 ? counts[w] / total
                                                    : 1.0 / double(chosen.size()));
        const float *g = grads[w].data();
        for (int64_t i = 0; i < L; ++i)
          sum[i] += weight * g[i];
        lineLoss += losses[w] * (total > 0 ? counts[w] : 1.0);
        lineCounted += total > 0 ? counts[w] : 1.0;
        histogram.add(0);
        ++lineGradients;
      }
      int64_t late = static_cast<int64_t>(waiting.size() - chosen.size());
      dropped += late;
      droppedTotal += late;
      if (!apply(sum.data(), nullptr, 0.0, 1.0, step))
        return false;
      norm = *normOut;
      lineApplied += static_cast<int64_t>(chosen.size());
      ++version;
      bool last = step + 1 == steps;
      for (int64_t w : waiting)
        if (!reply(w, last ? kReplyStop : kReplyWeights))
          return false;
      return true;
    };

    int64_t received = 0; // asynchronous: gradients taken
    std::vector<int64_t> clocks(W, 0);
    std::vector<std::vector<float>> pulledCopy(
        a.async.delayCompensation > 0 ? W : 0, std::vector<float>(shardData, shardData + L));
    std::vector<int64_t> deferred;
    auto asyncReply = [&](int64_t w, bool stop) {
      if (!reply(w, stop ? kReplyStop : kReplyWeights))
        return false;
      if (!pulledCopy.empty())
        pulledCopy[w].assign(shardData, shardData + L);
      return true;
    };
    auto activeClocks = [&] {
      std::vector<int64_t> c;
      for (int64_t w = 0; w < W; ++w)
        if (!finished[w])
          c.push_back(clocks[w]);
      return c;
    };
    int64_t step = 0;
    while (ok && step < steps && byes < W) {
      checkFault(step + 1);
      if (!async || ps::inWarmup(a.async, step)) {
        ok = syncStep(step);
        if (ok) {
          received += W;
          ++step;
          ok = logLine(step);
        }
        if (async && ok && !ps::inWarmup(a.async, step) && step < steps)
          for (int64_t w = 0; w < W; ++w)
            clocks[w] = step;
        continue;
      }
      // Asynchronous: each gradient when it arrives.
      if (!(ok = receive()))
        break;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (finished[w])
        continue;
      ++received;
      ++clocks[w];
      ps::Decision d = ps::decide(a.async, version, static_cast<int64_t>(in.get(2)));
      histogram.add(d.staleness);
      ++lineGradients;
      lineStaleSum += double(d.staleness);
      lineStaleMax = std::max(lineStaleMax, d.staleness);
      double c = in.get(4);
      lineLoss += in.get(3) * c;
      lineCounted += c;
      if (d.apply) {
        if (!(ok = apply(in.payload(),
                         pulledCopy.empty() ? nullptr : pulledCopy[w].data(),
                         a.async.delayCompensation, d.lrScale, step)))
          break;
        norm = *normOut;
        ++version;
        ++lineApplied;
      } else {
        ++dropped;
        ++droppedTotal;
      }
      bool stepDone = received % W == 0;
      if (stepDone)
        ++step;
      bool stop = step >= steps;
      // Bounded staleness: a worker too far ahead of the slowest waits for
      // its reply.
      deferred.push_back(w);
      std::vector<int64_t> still;
      for (int64_t v : deferred) {
        if (!stop && !ps::mayProceed(a.async, clocks[v], activeClocks()))
          still.push_back(v);
        else if (!(ok = asyncReply(v, stop)))
          break;
      }
      deferred = std::move(still);
      if (ok && stepDone)
        ok = logLine(step);
    }
    // Whoever is still deferred (bounded staleness) is told to stop.
    for (int64_t v : deferred)
      if (ok)
        ok = asyncReply(v, true);
    // Until every worker has said goodbye: late pushes are answered with
    // stop.
    while (ok && byes < W) {
      if (!(ok = receive()))
        break;
      int64_t w = static_cast<int64_t>(in.get(1));
      if (int(in.get(0)) == kPushGradient && !finished[w]) {
        ++unapplied;
        ok = reply(w, kReplyStop);
      }
    }
    ok = ok && outbox.flush(error);
    // Every server's bytes in and out per step, to server 0's summary.
    double bytesPerMessage = double(kHeaderFloats + L) * sizeof(float);
    std::vector<double> traffic{double(messagesIn) * bytesPerMessage / double(steps),
                                double(messagesOut) * bytesPerMessage / double(steps)},
        allTraffic(me == 0 ? 2 * K : 0);
    if (ok && dort_gather(traffic.data(), allTraffic.data(), 2, DORT_F64, 0, group) != 0) {
      error = dort_last_error_message();
      ok = false;
    }
    if (ok && me == 0) {
      std::string bytes = "[";
      for (int64_t k = 0; k < K; ++k) {
        bytes += (k ? ", [" : "[") + jsonNumber(allTraffic[2 * k]) + ", " +
                 jsonNumber(allTraffic[2 * k + 1]) + "]";
        std::fprintf(stderr,
                     "%s: server %lld received %.0f and sent %.0f bytes per step\n",
                     a.program.c_str(), static_cast<long long>(k), allTraffic[2 * k],
                     allTraffic[2 * k + 1]);
      }
      serverBytes = bytes + "]";
    }
    if (ok && me == 0) {
      std::fprintf(stderr,
                   "%s: %lld updates, %lld gradients dropped, %lld pushed "
                   "after the last step; staleness mean %.2f, max %lld, "
                   "histogram %s\n",
                   a.program.c_str(), static_cast<long long>(applied),
                   static_cast<long long>(droppedTotal),
                   static_cast<long long>(unapplied), histogram.mean(),
                   static_cast<long long>(histogram.max), histogram.json().c_str());
      if (log)
        log << "{\"summary\": true, \"updates\": " << applied
            << ", \"dropped\": " << droppedTotal
            << ", \"after_last_step\": " << unapplied
            << ", \"server_bytes_per_step\": " << serverBytes
            << ", \"staleness_mean\": " << jsonNumber(histogram.mean())
            << ", \"staleness_max\": " << histogram.max
            << ", \"staleness_histogram\": " << histogram.json()
            << ", \"elapsed_s\": " << jsonNumber(elapsedSince(start)) << "}\n";
    }
    if (ok && (!a.saveOnnx.empty() || !a.saveWeights.empty()))
      ok = gatherWeights();
    if (ok && me == 0 && (!a.saveOnnx.empty() || !a.saveWeights.empty()))
      if (int rc = saveTrainedWeights(a, m, [&](size_t w) -> const Tensor & {
            return weights[w];
          }))
        return rc;
    if (log) {
      log.close();
      if (!log)
        return fail(a, "writing the log '" + a.log + "' failed");
    }
  }
  if (!ok)
    return fail(a, error);
  dort_grid_finalize();
  dort_comm_free(group);
  dort_comm_finalize();
  return 0;
}

} // namespace

int runTraining(int argc, char **argv, const std::vector<EntryFn> &entries,
                const std::string &defaultBundle) {
  TrainArgs a;
  a.program = baseNameOf(argv[0]);
  std::string error;
  if (!parseTrainArgs(argc, argv, a, error)) {
    std::fprintf(stderr, "%s: error: %s\n", a.program.c_str(), error.c_str());
    return 2;
  }
  std::string bundleDir = a.bundleDir.empty() ? defaultBundle : a.bundleDir;
  Manifest m;
  if (!loadManifest(detail::joinPath(bundleDir, "manifest.json"), m, error))
    return fail(a, error);
  if (m.parameterServers)
    return runParameterServers(a, m, bundleDir, entries[0]);
  if (a.asyncGiven)
    return fail(a, "--max-staleness, --drop-stale, --stale-lr, --sync-warmup "
                   "and --delay-compensation are cures for asynchronous "
                   "parameter servers: compile with --sync async");
  // A pipelined step: one program per stage, each with its own inputs,
  // weights and outputs (the manifest's lists are their union); its
  // activations travel inside the programs.
  bool pipelined = !m.stages.empty();
  for (const PipelineStage &st : m.stages)
    for (const auto *list : {&st.inputs, &st.outputs})
      for (const StageBuffer &b : *list)
        if (b.kind == StageBuffer::Kind::Activation)
          return fail(a, "this is a pipelined inference bundle: compile the "
                         "model with --loss and --optimizer to train it");
  if (entries.size() != std::max<size_t>(1, m.stages.size()))
    return fail(a, "the manifest has " + std::to_string(m.stages.size()) +
                       " pipeline stages, but the executable has " +
                       std::to_string(entries.size()) + " programs");
  // Accumulation is compiled into the step (its micro-batches run inside
  // one call): --accumulate may only restate it.
  if (a.accumulate > 0 && a.accumulate != m.accumulate)
    return fail(a, "--accumulate " + std::to_string(a.accumulate) +
                       ": this step was compiled for " +
                       std::to_string(m.accumulate) +
                       " micro-batch(es) per update; accumulation is compiled "
                       "in (distopt compile ... --accumulate " +
                       std::to_string(a.accumulate) + ")");
  // Ranks: a data-parallel step runs under mpirun with exactly its rank
  // count; each rank trains on its share of every batch.
  std::vector<int64_t> coords;
  if (!joinJob(m, a, coords, error))
    return fail(a, error);
  if (gJob.distributed) {
    // The ranks' clocks start together (one node: one monotonic clock).
    if (dort_barrier(dort_comm_world()) != 0)
      return fail(a, dort_last_error_message());
  }
  trace::resetOrigin();
  trace::setEnabled(!a.trace.empty());
  Fault fault;
  if (!parseFault(fault, error))
    return fail(a, error);
  if (gJob.distributed)
    signal(SIGTERM, onTerminate);
  bool leader = gJob.rank == 0;
  // Roles of the inputs and outputs.
  std::map<std::string, size_t> inputIndex, outputIndex;
  for (size_t i = 0; i < m.inputs.size(); ++i)
    inputIndex[m.inputs[i].name] = i;
  for (size_t i = 0; i < m.outputs.size(); ++i)
    outputIndex[m.outputs[i].name] = i;
  if (!outputIndex.count("loss") || !outputIndex.count("grad_norm"))
    return fail(a, "this bundle is not a training step (compile it with "
                   "--loss KIND:OUTPUT --optimizer sgd|adam|adamw)");
  // What this rank's program takes and returns: every input, weight and
  // output, or its pipeline stage's (in the order of its buffers).
  EntryFn entry = entries[pipelined ? coords[0] : 0];
  std::vector<int64_t> inputSlot(m.inputs.size(), -1),
      weightSlot(m.weights.size(), -1), outputSlot(m.outputs.size(), -1);
  // Weights no stage takes (only the evaluation program's, if any): every
  // rank loads them; they do not train.
  std::vector<bool> unstaged;
  std::vector<int64_t> weightStage = weightStages(m, &unstaged);
  if (pipelined) {
    const PipelineStage &st = m.stages[coords[0]];
    int64_t slot = 0;
    for (const StageBuffer &b : st.inputs)
      inputSlot[b.index] = slot++;
    for (int64_t w : st.weights)
      weightSlot[w] = slot++;
    for (const StageBuffer &b : st.outputs)
      outputSlot[b.index] = slot++;
  } else {
    int64_t slot = 0;
    for (auto *slots : {&inputSlot, &weightSlot, &outputSlot})
      for (int64_t &x : *slots)
        x = slot++;
  }
  auto mineIn = [&](size_t i) { return inputSlot[i] >= 0; };
  auto mineOut = [&](size_t o) { return outputSlot[o] >= 0; };
  auto mineW = [&](size_t w) { return weightSlot[w] >= 0; };
  // Rank 0 has the whole of weight w only by gathering it (a collective):
  // a tensor-parallel block, or another pipeline stage's.
  auto wholeElsewhere = [&](size_t w) {
    return !m.weights[w].splitAxes.empty() || (pipelined && weightStage[w] != 0);
  };
  std::vector<size_t> dataInputs, keyInputs;
  std::vector<std::pair<size_t, size_t>> stateIO; // input, output
  std::vector<std::pair<size_t, std::string>> hyperInputs;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const std::string &n = m.inputs[i].name;
    if (n == "rng.key") {
      keyInputs.push_back(i);
    } else if (n.rfind("opt.", 0) != 0) {
      dataInputs.push_back(i);
    } else if (n.find(':') != std::string::npos) {
      auto o = outputIndex.find(n);
      if (o == outputIndex.end())
        return fail(a, "optimizer state '" + n + "' has no update output");
      stateIO.emplace_back(i, o->second);
    } else {
      hyperInputs.emplace_back(i, n.substr(4));
    }
  }
  std::vector<std::pair<size_t, size_t>> weightUpdates; // output, weight
  for (size_t w = 0; w < m.weights.size(); ++w) {
    auto o = outputIndex.find("update:" + m.weights[w].name);
    if (o != outputIndex.end() && mineOut(o->second))
      weightUpdates.emplace_back(o->second, w);
  }
  // Only this rank's inputs are filled.
  auto keepMine = [&](std::vector<size_t> &list) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](size_t i) { return !mineIn(i); }),
               list.end());
  };
  keepMine(keyInputs);
  stateIO.erase(std::remove_if(stateIO.begin(), stateIO.end(),
                               [&](const auto &io) { return !mineIn(io.first); }),
                stateIO.end());
  hyperInputs.erase(std::remove_if(hyperInputs.begin(), hyperInputs.end(),
                                   [&](const auto &h) { return !mineIn(h.first); }),
                    hyperInputs.end());

  // Data: one file per data input, the same number of samples each.
  DataSet dataSet;
  if (!dataSet.open(m.inputs, dataInputs, a.data, "the step's", error))
    return fail(a, error);
  int64_t samples = dataSet.samples, batch = dataSet.batch;
  if (dataInputs.empty())
    return fail(a, "the step has no data inputs");
  std::unique_ptr<Evaluator> evaluator;
  if (!a.evalData.empty()) {
    if (!m.eval || !gEvalEntry)
      return fail(a, "--eval-data: this bundle has no evaluation program "
                     "(recompile it with --loss and --optimizer)");
    evaluator = std::make_unique<Evaluator>(m, *m.eval);
    if (!evaluator->open(a.evalData, error))
      return fail(a, "--eval-data: " + error);
  }
  int64_t perEpoch = samples / batch;
  if (perEpoch < 1)
    return fail(a, "the data hold " + std::to_string(samples) +
                       " samples, fewer than one batch of " +
                       std::to_string(batch));
  int64_t steps = a.steps > 0 ? a.steps : a.epochs * perEpoch;

  // Buffers: step inputs, weights (copies that the updates overwrite),
  // outputs.
  keepMine(dataInputs);
  std::vector<Tensor> inputs(m.inputs.size()), wholeBatch(m.inputs.size());
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (mineIn(i) &&
        !Tensor::create(m.inputs[i].dtype, m.inputs[i].shape, inputs[i], error))
      return fail(a, "input '" + m.inputs[i].name + "': " + error);
  for (size_t i : dataInputs)
    if (!m.inputs[i].splitAxes.empty() &&
        !Tensor::create(m.inputs[i].dtype, m.inputs[i].fileShape(),
                        wholeBatch[i], error))
      return fail(a, "input '" + m.inputs[i].name + "': " + error);
  WeightStore store;
  if (!store.load(m, bundleDir, error))
    return fail(a, error);
  std::vector<Tensor> weights;
  std::vector<bool> usedWeights(m.weights.size());
  for (size_t w = 0; w < m.weights.size(); ++w)
    usedWeights[w] = mineW(w) || unstaged[w];
  if (!loadWeightBlocks(m, store, weights, error, &usedWeights))
    return fail(a, error);
  std::vector<Tensor> outputs(m.outputs.size());
  for (size_t i = 0; i < m.outputs.size(); ++i)
    if (mineOut(i) &&
        !Tensor::create(m.outputs[i].dtype, m.outputs[i].shape, outputs[i], error))
      return fail(a, "output '" + m.outputs[i].name + "': " + error);
  int64_t slots = 0;
  for (auto *list : {&inputSlot, &weightSlot, &outputSlot})
    for (int64_t x : *list)
      slots += x >= 0;
  std::vector<void *> buffers(slots);
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (mineIn(i))
      buffers[inputSlot[i]] = inputs[i].data();
  for (size_t w = 0; w < m.weights.size(); ++w)
    if (mineW(w))
      buffers[weightSlot[w]] = weights[w].data();
  for (size_t o = 0; o < m.outputs.size(); ++o)
    if (mineOut(o))
      buffers[outputSlot[o]] = outputs[o].data();

  std::ofstream log;
  if (!a.log.empty() && leader) {
    log.open(a.log, std::ios::trunc);
    if (!log)
      return fail(a, "cannot write the log '" + a.log + "'");
  }
  dort_set_num_threads(0);
  std::vector<Named> namedWeights, namedState;
  for (auto &[o, w] : weightUpdates)
    namedWeights.push_back(namedWeight(m, w, weights[w]));
  for (auto &[i, o] : stateIO) {
    // The state of weight <w> ("opt.<kind>:<w>") is cut as the weight is
    // (a tensor-parallel block), and a ZeRO-1 chunk of that: this rank's
    // replica index on the data axis says which.
    Named state{m.inputs[i].name, &inputs[i], {}, 0};
    std::string weight = state.name.substr(state.name.find(':') + 1);
    auto w = std::find_if(m.weights.begin(), m.weights.end(),
                          [&](const WeightSpec &s) { return s.name == weight; });
    if (w != m.weights.end() && !w->splitAxes.empty())
      state.split = &*w;
    if (!m.inputs[i].splitAxes.empty()) {
      if (w == m.weights.end() || m.grid.size() < 2)
        return fail(a, "optimizer state '" + state.name +
                           "' is split, but not as a chunk of a weight");
      state.wholeShape = w->shape;
      state.offset = coords[1] * inputs[i].numElements();
    }
    namedState.push_back(state);
  }
  int64_t first = 0;
  if (!a.resume.empty()) {
    if (!readCheckpoint(a.resume, first, namedWeights, namedState, error))
      return fail(a, "--resume: " + error);
    if (first >= steps)
      return fail(a, "--resume: the checkpoint is at step " +
                         std::to_string(first) + ", the run has " +
                         std::to_string(steps) + " steps");
  }
  // On a GPU the updated weights and optimizer state stay on the device
  // from step to step (dort_device_carry; nothing in a CPU bundle): the
  // host buffers are brought up to date (deviceSync) before anything here
  // reads them.
  {
    std::vector<int64_t> carriedIn, carriedOut;
    for (auto &[o, w] : weightUpdates) {
      carriedIn.push_back(weightSlot[w]);
      carriedOut.push_back(outputSlot[o]);
    }
    for (auto &[i, o] : stateIO) {
      carriedIn.push_back(inputSlot[i]);
      carriedOut.push_back(outputSlot[o]);
    }
    dort_device_carry(buffers.data(), static_cast<int32_t>(carriedIn.size()),
                      carriedIn.data(), carriedOut.data());
  }
  auto deviceSync = [&](const char *what) {
    if (dort_device_sync(buffers.data()) == 0)
      return true;
    error = std::string(what) + ": " + dort_last_error_message();
    return false;
  };
  std::vector<int64_t> order(samples);
  std::iota(order.begin(), order.end(), 0);
  auto start = std::chrono::steady_clock::now();
  const Tensor &lossT = outputs[outputIndex["loss"]];
  const Tensor &normT = outputs[outputIndex["grad_norm"]];
  double lastLoss = 0;
  int64_t lastCheckpoint = 0; // written by this run
  for (int64_t step = first; step < steps; ++step) {
    int64_t epoch = step / perEpoch, within = step % perEpoch;
    if ((within == 0 || step == first) && a.shuffle) {
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 rng(a.seed * 1000003u + static_cast<uint64_t>(epoch));
      std::shuffle(order.begin(), order.end(), rng);
    }
    // The step's batch (the same samples on every rank: the order depends
    // on the seed alone), then this rank's share of it.
    std::vector<int64_t> rows(order.begin() + within * batch,
                              order.begin() + (within + 1) * batch);
    for (size_t i : dataInputs)
      dataSet.fill(i, m.inputs[i], rows, wholeBatch[i], inputs[i], m.grid,
                   coords);
    // The step's random key (training-mode dropout masks).
    for (size_t i : keyInputs)
      *static_cast<int64_t *>(inputs[i].data()) =
          static_cast<int64_t>(stepKey(a.seed, step + 1));
    double lr = scheduledLr(a, step, steps);
    for (auto &[i, name] : hyperInputs) {
      double v = name == "step" ? double(step + 1) : name == "lr" ? lr : 0.0;
      if (name != "step" && name != "lr") {
        auto h = a.hyper.find(name);
        if (h == a.hyper.end())
          return fail(a, "the step takes a hyperparameter '" + name +
                             "' this runtime does not know");
        v = h->second;
      }
      *static_cast<float *>(inputs[i].data()) = static_cast<float>(v);
    }
    std::string context = "step " + std::to_string(step + 1);
    dort_set_context(context.c_str());
    if (gJob.distributed)
      prepareTerminatedMessage(a.program, step + 1);
    injectFault(fault, gJob.rank, step + 1, a.program);
    // A straggler (DISTOPT_STRAGGLER) is late for the step's collectives.
    sleepSeconds(stragglerDelay(fault.stragglers, gJob.rank, step + 1));
    dort_clear_error();
    dort_clear_pending_error();
    double stepStart = trace::now(), waitBefore = trace::commWaitSeconds();
    int32_t rc = entry(buffers.data());
    // A pipeline's sends still in flight complete before the next step.
    if (pipelined && rc == 0)
      dort_p2p_flush();
    double stepEnd = trace::now();
    double stepSeconds = stepEnd - stepStart;
    double commWait = trace::commWaitSeconds() - waitBefore;
    trace::record({"step " + std::to_string(step + 1), "step", stepStart,
                   stepEnd, 0, ""});
    std::string failure = entryFailure(rc);
    if (!failure.empty())
      return fail(a, "step " + std::to_string(step + 1) + " failed: " + failure);
    double loss = *static_cast<const float *>(lossT.data());
    double norm = *static_cast<const float *>(normT.data());
    if (!std::isfinite(loss))
      return fail(a, "the loss is " + numberText(loss) + " at step " +
                         std::to_string(step + 1) + " (last finite loss " +
                         numberText(lastLoss) + "); stopped" +
                         (lastCheckpoint > 0
                              ? "; the last good checkpoint is step " +
                                    std::to_string(lastCheckpoint) + " in '" +
                                    a.checkpointDir + "' (--resume it)"
                              : std::string()));
    lastLoss = loss;
    // The updates become the next step's weights and state by swapping
    // buffers (the entry overwrites its outputs whole on every step).
    for (auto &[o, w] : weightUpdates) {
      std::swap(weights[w], outputs[o]);
      buffers[weightSlot[w]] = weights[w].data();
      buffers[outputSlot[o]] = outputs[o].data();
    }
    for (auto &[i, o] : stateIO) {
      std::swap(inputs[i], outputs[o]);
      buffers[inputSlot[i]] = inputs[i].data();
      buffers[outputSlot[o]] = outputs[o].data();
    }
    double elapsed = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    double rate =
        elapsed > 0 ? double((step + 1 - first) * batch) / elapsed : 0.0;
    // Evaluation with the updated weights, every --eval-every steps and
    // after the last.
    std::string evalFields;
    if (evaluator && ((a.evalEvery > 0 && (step + 1) % a.evalEvery == 0) ||
                      step + 1 == steps)) {
      double evalLoss = 0, accuracy = -1;
      if (!deviceSync("evaluation"))
        return fail(a, error);
      if (pipelined) {
        // The whole model's program: every rank evaluates a share of the
        // batches with every weight, whole.
        std::vector<Tensor> whole;
        if (!wholeWeightsEverywhere(m, weights, weightStage, wholeElsewhere,
                                    whole, error))
          return fail(a, "evaluation: " + error);
        dort_device_host_changed(); // the evaluation's weights are new
        bool ok = evaluator->runShared(gEvalEntry, whole, evalLoss, accuracy,
                                       error);
        whole.clear();
        dort_device_host_changed();
        if (!ok)
          return fail(a, error);
      } else if (!evaluator->run(gEvalEntry, weights, coords, evalLoss,
                                 accuracy, error)) {
        return fail(a, error);
      }
      evalFields = ", \"eval_loss\": " + jsonNumber(evalLoss);
      if (accuracy >= 0)
        evalFields += ", \"eval_accuracy\": " + jsonNumber(accuracy);
      if (leader)
        std::fprintf(stderr, "%s: step %lld: eval loss %.6g%s\n",
                     a.program.c_str(), static_cast<long long>(step + 1),
                     evalLoss,
                     accuracy >= 0
                         ? (", accuracy " + std::to_string(accuracy)).c_str()
                         : "");
    }
    if (log)
      log << "{\"step\": " << step + 1 << ", \"loss\": " << jsonNumber(loss)
          << ", \"lr\": " << jsonNumber(lr)
          << ", \"grad_norm\": " << jsonNumber(norm)
          << ", \"samples_per_s\": " << jsonNumber(rate)
          << ", \"step_s\": " << jsonNumber(stepSeconds)
          << ", \"flops_per_s\": "
          << jsonNumber(stepSeconds > 0 ? m.stepFlops * double(m.ranks) /
                                              stepSeconds
                                        : 0.0)
          << ", \"comm_wait_s\": " << jsonNumber(commWait)
          << ", \"comm_share\": "
          << jsonNumber(stepSeconds > 0 ? commWait / stepSeconds : 0.0)
          << ", \"elapsed_s\": " << jsonNumber(elapsed) << evalFields
          << "}\n";
    if (!a.checkpointDir.empty() &&
        ((a.checkpointEvery > 0 && (step + 1) % a.checkpointEvery == 0) ||
         step + 1 == steps)) {
      if (!deviceSync("the weights on the GPU") ||
          (leader && !detail::makeDirectories(a.checkpointDir, error)) ||
          !writeCheckpoint(a.checkpointDir, step + 1, a, namedWeights,
                           namedState, error))
        return fail(a, "checkpoint at step " + std::to_string(step + 1) + ": " +
                           error);
      lastCheckpoint = step + 1;
    }
    if (leader && (step + 1 == steps ||
                   (step + 1) % std::max<int64_t>(1, steps / 10) == 0)) {
      // Time left at this run's average step so far.
      double eta = elapsed / double(step + 1 - first) * double(steps - step - 1);
      std::fprintf(stderr,
                   "%s: step %lld/%lld loss %.6g (%.0f samples/s, ETA %.0f s)\n",
                   a.program.c_str(), static_cast<long long>(step + 1),
                   static_cast<long long>(steps), loss, rate, eta);
    }
  }
  if (log) {
    log.close();
    if (!log)
      return fail(a, "writing the log '" + a.log + "' failed");
  }
  // Rank 0 writes the weights: the replicated ones as they are, the
  // tensor-parallel ones gathered from their blocks.
  std::vector<Tensor> gathered(m.weights.size());
  if (!deviceSync("the weights on the GPU"))
    return fail(a, error);
  if (!a.saveOnnx.empty() || !a.saveWeights.empty())
    for (size_t w = 0; w < m.weights.size(); ++w)
      if (wholeElsewhere(w) && !gatherWeight(m.weights[w], weightStage[w], weights[w],
                                      gathered[w], error))
        return fail(a, "gathering weight '" + m.weights[w].name + "': " + error);
  auto wholeOf = [&](size_t w) -> const Tensor & {
    return wholeElsewhere(w) ? gathered[w] : weights[w];
  };
  if (leader)
    if (int rc = saveTrainedWeights(a, m, wholeOf))
      return rc;
  if (!a.trace.empty() && !writeTrace(a, error))
    return fail(a, "--trace: " + error);
  if (gJob.distributed) {
    dort_grid_finalize();
    dort_comm_finalize();
  }
  return 0;
}

int runEvaluation(int argc, char **argv, const std::string &defaultBundle) {
  TrainArgs a;
  a.program = baseNameOf(argv[0]);
  std::string error;
  if (!parseTrainArgs(argc, argv, a, error, /*evalMode=*/true)) {
    std::fprintf(stderr, "%s: error: %s\n", a.program.c_str(), error.c_str());
    return 2;
  }
  std::string bundleDir = a.bundleDir.empty() ? defaultBundle : a.bundleDir;
  Manifest m;
  if (!loadManifest(detail::joinPath(bundleDir, "manifest.json"), m, error))
    return fail(a, error);
  if (!m.eval || !gEvalEntry)
    return fail(a, "this bundle has no evaluation program (compile the model "
                   "with --loss and --optimizer)");
  std::vector<int64_t> coords;
  if (!joinJob(m, a, coords, error))
    return fail(a, error);
  // The bundle's weights, or a checkpoint's.
  WeightStore store;
  if (!store.load(m, bundleDir, error))
    return fail(a, error);
  std::vector<Tensor> weights;
  if (!loadWeightBlocks(m, store, weights, error))
    return fail(a, error);
  std::vector<Named> named;
  for (size_t w = 0; w < m.weights.size(); ++w)
    named.push_back(namedWeight(m, w, weights[w]));
  if (!a.checkpoint.empty()) {
    int64_t step;
    if (!readCheckpoint(a.checkpoint, step, named, {}, error))
      return fail(a, "--checkpoint: " + error);
  }
  Evaluator evaluator(m, *m.eval);
  if (!evaluator.open(a.data, error))
    return fail(a, error);
  dort_set_num_threads(0);
  double loss = 0, accuracy = -1;
  if (!m.stages.empty()) {
    // A pipelined step's evaluation program is the whole model: every rank
    // runs a share of the batches with the weights put together from the
    // stages' blocks (each rank loaded every weight's block).
    std::vector<Tensor> whole;
    if (!wholeWeightsEverywhere(
            m, weights, weightStages(m),
            [&](size_t w) { return !m.weights[w].splitAxes.empty(); }, whole,
            error) ||
        !evaluator.runShared(gEvalEntry, whole, loss, accuracy, error))
      return fail(a, error);
  } else if (!evaluator.run(gEvalEntry, weights, coords, loss, accuracy,
                            error)) {
    return fail(a, error);
  }
  if (gJob.rank == 0) {
    std::printf("{\"loss\": %s, %s\"samples\": %lld}\n", jsonNumber(loss).c_str(),
                accuracy >= 0
                    ? ("\"accuracy\": " + jsonNumber(accuracy) + ", ").c_str()
                    : "",
                static_cast<long long>(evaluator.data.samples));
    std::fflush(stdout);
  }
  if (gJob.distributed) {
    dort_grid_finalize();
    dort_comm_finalize();
  }
  return 0;
}

} // namespace distopt::runtime

extern "C" void dort_set_eval_entry(dort_entry_fn entry) {
  distopt::runtime::gEvalEntry = entry;
}

extern "C" void dort_set_ps_entry(dort_entry_fn entry) {
  distopt::runtime::gServerEntry = entry;
}
