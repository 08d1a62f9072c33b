//===- TrainInternal.h - the parts of `train` mode, shared -----*- C++ -*-===//
//
// Internal to lib/Runtime: the arguments of `model train`, the data set,
// the job a rank belongs to, checkpoints' tensors, and the functions the
// training loop (Train.cpp), checkpoints (Checkpoint.cpp), the trained
// model's files (TrainedModel.cpp) and the parameter servers' loop
// (ParamServerLoop.cpp) share.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_RUNTIME_TRAININTERNAL_H
#define DISTOPT_LIB_RUNTIME_TRAININTERNAL_H

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
#include <optional>
#include <string>
#include <vector>

namespace distopt::runtime::train {

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
  /// Dynamic loss scaling of an fp16 step (PyTorch's GradScaler):
  /// --init-scale, --growth-interval; growth x2, back-off x0.5.
  double initScale = 65536.0;
  int64_t growthInterval = 2000;
  bool initScaleGiven = false, growthIntervalGiven = false;
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

/// The job a data-parallel training run belongs to (one process: rank 0
/// of 1, not distributed).
struct Job {
  bool distributed = false;
  int rank = 0;
  /// The bundle's grid (stages x data x tensor) and this rank's place on it
  /// (zeros for one process).
  std::vector<int64_t> grid, coords;
};

/// Injected faults (tests and experiments): DISTOPT_FAULT=die:RANK:STEP|
/// hang:RANK:STEP, and the slow ranks of DISTOPT_STRAGGLER.
struct Fault {
  std::string kind;
  int64_t rank = -1, step = -1;
  std::vector<ps::Straggler> stragglers;
};

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

/// An integer of at least `minimum` (1: counts; 0: seeds, warm-up steps).
bool parseInt(const std::string &s, int64_t &out, int64_t minimum = 1);

/// The usage of `PROGRAM train` (or, with `evalMode`, `PROGRAM eval`).
void printTrainUsage(std::FILE *out, const std::string &program,
                     bool evalMode);
bool parseTrainArgs(int argc, char **argv, TrainArgs &a, std::string &error,
                    bool evalMode = false);

std::string baseNameOf(const std::string &path);

/// SplitMix64's output function (Steele, Lea, Flood 2014).
uint64_t splitmix64(uint64_t z);

/// The random key of step `step` (1, 2, ...) of a run with `seed`: the
/// input `rng.key` that dopt.dropout draws its masks from. The same on
/// every rank, and on resume.
uint64_t stepKey(uint64_t seed, int64_t step);

extern EntryFn gEvalEntry;

EntryFn ps_entry();

extern Job gJob;

extern "C" void onTerminate(int);

bool parseFault(Fault &f, std::string &error);

/// DISTOPT_FAULT: at the start of step `step`, the faulty rank dies
/// (SIGKILL) or stops responding.
void injectFault(const Fault &f, int64_t rank, int64_t step,
                 const std::string &program);

/// The message onTerminate prints if the launcher ends this rank during
/// step `step`.
void prepareTerminatedMessage(const std::string &program, int64_t step);

/// Reports an error. In a distributed run every rank reads the same files
/// and runs the same steps, so an error on one rank is an error of the job:
/// it is ended at once (peers may be waiting in a collective).
int fail(const TrainArgs &a, const std::string &msg);

/// Files input `i` of a step program, an optimizer input named `name`
/// ("opt.<...>"): a state (a name with ':'), with the output of the same
/// name that updates it, in `stateIO`; a hyper-parameter, with its name
/// after "opt.", in `hyper`. False with `error` set when a state has no
/// update output.
bool addOptimizerInput(size_t i, const std::string &name,
                       const std::map<std::string, size_t> &outputIndex,
                       std::vector<std::pair<size_t, size_t>> &stateIO,
                       std::vector<std::pair<size_t, std::string>> &hyper,
                       std::string &error);

/// The learning rate of step `step` (0-based) of `total`: linear warm-up
/// over the first `warmup` steps, then constant, or cosine or linear decay
/// to 0 at the end (the schedules of HuggingFace's
/// get_{cosine,linear}_schedule_with_warmup, applied through LambdaLR).
double scheduledLr(const TrainArgs &a, int64_t step, int64_t total);

/// The steps a run takes: --steps, else --epochs passes over `samples` in
/// batches of `batch`; false with `error` when the data hold less than one
/// batch.
bool stepsToRun(const TrainArgs &a, int64_t samples, int64_t batch,
                int64_t &steps, std::string &error);

bool pathExists(const std::string &path);

/// Removes a directory of plain files (a checkpoint's), if it exists.
void removeFlatDirectory(const std::string &dir);

/// Every rank's `mine` on rank 0, in rank order (others get nothing).
bool gatherStrings(const std::string &mine, std::vector<std::string> &all,
                   std::string &error);

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
                     const std::vector<Named> &state, std::string &error);

bool readCheckpoint(const std::string &dir, int64_t &step,
                    const std::vector<Named> &weights,
                    const std::vector<Named> &state, std::string &error);

/// A number in a message (9 significant digits; "nan", "inf").
std::string numberText(double v);

/// Reads `train`'s (`eval`'s with evalMode) arguments into `a` and the
/// manifest of the bundle they name (else `defaultBundle`) into `m`, the
/// bundle's directory into `bundleDir`; on failure, reported, the exit
/// status (2 for usage errors).
std::optional<int> openBundle(int argc, char **argv, bool evalMode,
                              const std::string &defaultBundle, TrainArgs &a,
                              std::string &bundleDir, Manifest &m);

/// The bundle's weights opened (`store`) and this rank's copy of each read
/// into `weights` (loadWeightBlocks).
bool loadWeights(const Manifest &m, const std::string &bundleDir,
                 WeightStore &store, std::vector<Tensor> &weights,
                 std::string &error);

/// This rank's copy of every weight (its block of a tensor-parallel one),
/// which the training updates overwrite.
bool loadWeightBlocks(const Manifest &m, const WeightStore &store,
                      std::vector<Tensor> &weights, std::string &error,
                      const std::vector<bool> *used = nullptr);

Named namedWeight(const Manifest &m, size_t w, Tensor &tensor);

/// The whole of a weight on rank 0, put together from the blocks the ranks
/// of its pipeline stage hold (a tensor-parallel block each, or the whole;
/// collective: the other stages' ranks send zeros). One weight at a time,
/// so rank 0 holds one whole weight beyond its own. Other ranks get an
/// empty tensor.
bool gatherWeight(const WeightSpec &spec, int64_t stage, const Tensor &block,
                  Tensor &whole, std::string &error);

/// The pipeline stage that takes each weight (0 for none, and without a
/// pipeline); `unstaged[w]`: no stage takes it.
std::vector<int64_t> weightStages(const Manifest &m,
                                  std::vector<bool> *unstaged = nullptr);

/// Every rank's copy of every weight, whole, for a pipelined step's
/// evaluation: the ones `gathered(w)` says a rank may hold only in part (a
/// tensor-parallel block, or another stage's) gathered on rank 0 from
/// stage `stageOf[w]`, the others as rank 0 holds them; then each broadcast
/// from rank 0. Collective: every rank calls it with the same manifest.
bool wholeWeightsEverywhere(const Manifest &m, const std::vector<Tensor> &weights,
                            const std::vector<int64_t> &stageOf,
                            const std::function<bool(size_t)> &gathered,
                            std::vector<Tensor> &whole, std::string &error);

/// --save-onnx and --save-weights: the whole weights, `wholeOf(w)` for
/// weight w (the caller gathers split ones). Returns 0, or fail()'s status.
int saveTrainedWeights(const TrainArgs &a, const Manifest &m,
                       const std::function<const Tensor &(size_t)> &wholeOf);

void sleepSeconds(double s);

/// The delay DISTOPT_STRAGGLER gives `rank` before it sends step `step`'s
/// gradient (0: none).
double stragglerDelay(const std::vector<ps::Straggler> &stragglers,
                      int64_t rank, int64_t step);

int runParameterServers(TrainArgs &a, const Manifest &m,
                        const std::string &bundleDir, EntryFn workerEntry);

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
    for (const auto &entry : given) {
      const std::string &name = entry.first, &file = entry.second;
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
          int64_t label = intAt(t, e);
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
      if (spec.hasIndexRange() && (t.dtype() == DType::Int64 ||
                                   t.dtype() == DType::Int32)) {
        // Indices (token ids, say): checked once here, naming the sample;
        // the program checks them again and would name only the step.
        int64_t n = t.numElements();
        int64_t per = std::max<int64_t>(1, n / std::max<int64_t>(1, t.shape()[0]));
        for (int64_t e = 0; e < n; ++e) {
          int64_t v = intAt(t, e);
          if (v < spec.indexLow || v > spec.indexHigh) {
            // Its position in the sample.
            std::vector<int64_t> at;
            for (int64_t rest = e % per, d = (int64_t)t.shape().size() - 1;
                 d >= 1; --d) {
              at.insert(at.begin(), rest % t.shape()[d]);
              rest /= t.shape()[d];
            }
            error = "data '" + spec.name + "': file '" + f->second +
                    "': sample " + std::to_string(e / per) + " holds " +
                    std::to_string(v) + " at " + shapeToString(at) +
                    ", outside [" + std::to_string(spec.indexLow) + ", " +
                    std::to_string(spec.indexHigh) + "] (" + spec.indexUse +
                    ")";
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

  /// Element `e` of an int64 or int32 data file (labels, indices).
  static int64_t intAt(const DataFile &t, int64_t e) {
    return t.dtype() == DType::Int64
               ? static_cast<const int64_t *>(t.data())[e]
               : static_cast<const int32_t *>(t.data())[e];
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

} // namespace distopt::runtime::train

#endif // DISTOPT_LIB_RUNTIME_TRAININTERNAL_H
