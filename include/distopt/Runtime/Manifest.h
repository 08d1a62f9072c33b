//===- Manifest.h - bundle manifest.json -------------------------*- C++
//-*-===//
//
// manifest.json describes the buffers `dopt_entry(void **buffers)` takes, in
// order: all inputs, then all weights, then all outputs.
//
//   {"format": 1, "model": "gpt", "ranks": 1,
//    "inputs":  [{"name": "input_ids", "dtype": "int64", "shape": [2, 16]}],
//    "outputs": [{"name": "logits", "dtype": "float32", "shape": [2, 16,
//    100]}], "weights": [{"name": "wte", "dtype": "float32", "shape": [100,
//    32],
//                 "file": "weights.bin", "offset": 0, "length": 12800}]}
//
// Required: format (must be 1), inputs, outputs, and per tensor name, dtype,
// shape; per weight also file, offset, length (== numel * element size).
// Optional: model (default ""), ranks (default 1), weights (default []).
// Unknown keys are ignored. Names are unique within inputs, within weights
// and within outputs.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_MANIFEST_H
#define DISTOPT_RUNTIME_MANIFEST_H

#include "distopt/Runtime/Tensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distopt::runtime {

struct TensorSpec {
  std::string name;
  DType dtype = DType::Float32;
  /// The shape one rank's program sees.
  std::vector<int64_t> shape;
  /// Multi-rank bundles: the whole tensor's shape (what input, output and
  /// weight files hold) when it differs from `shape`, and per dimension the
  /// grid axes that split it (row-major order of the grid; empty: no split).
  std::vector<int64_t> globalShape;
  std::vector<std::vector<int64_t>> splitAxes;
  /// Weights only: the split dimension holds this many equal parts, each
  /// split separately (a fused QKV projection's columns).
  int64_t blockParts = 1;
  /// The dimension holding the samples (-1: not said): a pipelined bundle's
  /// micro-batches slice it, a training step's loader places the samples of
  /// its data files along it (0 where not said).
  int64_t batchDim = -1;
  /// A loss's class-index labels: the class count (0: not labels). Labels
  /// are in [0, classes) or the ignore index -100.
  int64_t classes = 0;
  /// An integer input the program reads as indices (a Gather's, say): its
  /// values must lie in [indexLow, indexHigh] (indexHigh < indexLow: not
  /// said), the range of `indexUse` (what they index, with its ONNX node).
  /// A training step's loader checks its data against it.
  int64_t indexLow = 0, indexHigh = -1;
  std::string indexUse;
  bool hasIndexRange() const { return indexHigh >= indexLow; }
  /// Outputs of a training step only: the weight or input (by name) whose
  /// buffer the program writes this updated value into; the entry point
  /// has no buffer of its own for it (empty: an ordinary output).
  std::string inPlace;

  int64_t numElements() const;
  size_t byteSize() const;
  /// The shape in files: globalShape, or shape when not split.
  const std::vector<int64_t> &fileShape() const {
    return globalShape.empty() ? shape : globalShape;
  }
  size_t fileByteSize() const;
};

struct WeightSpec : TensorSpec {
  /// Relative to the bundle directory unless absolute.
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// One buffer of a pipeline stage's entry point.
struct StageBuffer {
  enum class Kind { ModelInput, ModelOutput, Activation };
  Kind kind = Kind::Activation;
  int64_t index = 0; ///< model input/output index, or the activation id
  TensorSpec spec;   ///< activations: dtype and (micro-batch) shape
};

struct PipelineStage {
  std::vector<StageBuffer> inputs;
  std::vector<int64_t> weights; ///< indices into Manifest::weights
  std::vector<StageBuffer> outputs;
};

/// A training step's evaluation program (`eval`, `train --eval-data`): its
/// own inputs and outputs, the step's weights by index.
struct EvalProgram {
  std::vector<TensorSpec> inputs;
  std::vector<int64_t> weights; ///< indices into Manifest::weights
  std::vector<TensorSpec> outputs;
};

/// Parameter-server training (`--sync ps|async`): ranks [0, servers) are
/// servers, the rest run the step program (its loss and gradients) as
/// workers on `grid`.
struct ServerPiece {
  int64_t weight = 0;      ///< index into Manifest::weights
  int64_t offset = 0;      ///< first element of the flattened weight
  int64_t length = 0;
  int64_t server = 0;
  int64_t shardOffset = 0; ///< where it sits in the server's shard
};

struct ParameterServers {
  std::string sync; ///< "ps" (synchronous) or "async"
  int64_t servers = 1, workers = 1, backupWorkers = 0;
  /// Elements of every server's update program (shards padded to it).
  int64_t shardLength = 1;
  std::vector<ServerPiece> pieces;
  /// The update program (dopt_ps_entry): inputs, the shard, outputs.
  std::vector<TensorSpec> updateInputs, updateOutputs;
};

struct Manifest {
  static constexpr int64_t kFormat = 1;

  int64_t format = kFormat;
  std::string model;
  /// The ONNX model the bundle was compiled from (absolute path; empty for
  /// bundles written before it was recorded). `train --save-onnx` rewrites
  /// its initializers.
  std::string source;
  /// The distopt that wrote the bundle: version, git commit and LLVM
  /// (`distopt --version`; empty for bundles written before it was
  /// recorded).
  std::string compiler;
  /// "cuda" for a bundle of CUDA programs (empty: the CPU's).
  std::string target;
  /// "cuda-emu" for a CPU bundle running the CUDA target's kernels thread
  /// by thread (empty otherwise).
  std::string codegen;
  /// The precision the programs compute in (`distopt compile
  /// --precision`): "tf32", "bf16" or "fp16" (empty: fp32).
  std::string precision;
  /// Training steps: the FLOPs one rank's step performs (the compiler's
  /// count; 0 when not recorded).
  double stepFlops = 0;
  /// Training steps: the micro-batches one step accumulates (--accumulate;
  /// unset in inference bundles).
  std::optional<int64_t> accumulate;
  int64_t ranks = 1;
  /// `distopt compile --rank R`: the executable holds only the programs
  /// rank R runs (its pipeline stage's, so every rank of that stage; the
  /// evaluation program where that stage holds rank 0). Unset: every
  /// rank's.
  std::optional<int64_t> rank;
  /// Training steps compiled with a loss: the evaluation program.
  std::optional<EvalProgram> eval;
  /// Multi-rank bundles: the device grid (stages x data x tensor), whose
  /// product is `ranks`; ranks are numbered row-major over it.
  std::vector<int64_t> grid;
  std::vector<TensorSpec> inputs;
  std::vector<WeightSpec> weights;
  std::vector<TensorSpec> outputs;
  /// Pipelined bundles: one entry point per stage (grid axis 0), run on
  /// `microbatches` slices of each replica's batch.
  int64_t microbatches = 1;
  std::vector<PipelineStage> stages;
  std::optional<ParameterServers> parameterServers;

  /// Number of entries in the `buffers` array of dopt_entry (outputs
  /// written in place have none).
  size_t numBuffers() const {
    size_t n = inputs.size() + weights.size();
    for (const TensorSpec &o : outputs)
      n += o.inPlace.empty();
    return n;
  }
  /// The position in the `buffers` array of the input, or else the
  /// weight, named `name` (an in-place output's target); -1 when none.
  int64_t bufferOf(const std::string &name) const;
  /// Serializes to manifest.json text: every field parseManifest reads
  /// (parseManifest(toJson()) gives this manifest back).
  std::string toJson() const;
};

/// Whether the bundle's executable holds the program `rank` runs (see
/// Manifest::rank); if not, `error` says which bundle does.
bool holdsProgramOf(const Manifest &m, int64_t rank, std::string &error);

/// What a manifest's precision asks of the process: "tf32" lets the CUDA
/// libraries use TF32 tensor-core math (DISTOPT_CUDA_TF32=1, unless the
/// environment already sets it).
void applyPrecision(const Manifest &m);

/// Parses and validates manifest text. Errors read like
/// "line 3, column 7: expected ',' or '}' in object, found ']'" (syntax) or
/// "inputs[0]: missing required key \"dtype\"" (structure).
bool parseManifest(std::string_view text, Manifest &out, std::string &error);
/// Reads and parses `path`; errors are prefixed with the path.
bool loadManifest(const std::string &path, Manifest &out, std::string &error);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_MANIFEST_H
