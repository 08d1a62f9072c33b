//===- Bundle.h - weights, output names and the model driver -----*- C++
//-*-===//
//
// Pieces of dort_main (Runtime.h) that tools and tests can use on their own:
// mapping a bundle's weights, naming output files, and running an entry
// point over tensors in process.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_RUNTIME_BUNDLE_H
#define DISTOPT_RUNTIME_BUNDLE_H

#include "distopt/Runtime/Manifest.h"
#include "distopt/Runtime/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace distopt::runtime {

/// The weights of a bundle: each distinct weight file is mapped once
/// (read-only, MAP_PRIVATE); a weight's pointer is base + offset, or a
/// 64-byte-aligned copy when base + offset is misaligned for its dtype.
/// Pointers stay valid while the store lives. Weight memory is read-only:
/// writing through a mapped pointer faults.
class WeightStore {
public:
  WeightStore();
  ~WeightStore();
  WeightStore(const WeightStore &) = delete;
  WeightStore &operator=(const WeightStore &) = delete;

  /// Maps the weights of `manifest`; relative files are resolved against
  /// `bundleDir`. Errors name the weight and the file.
  bool load(const Manifest &manifest, const std::string &bundleDir,
            std::string &error);

  size_t size() const { return pointers_.size(); }
  /// Pointer for weight `i` (manifest order); never null.
  void *data(size_t i) const { return pointers_[i]; }
  /// How many distinct files were mapped.
  size_t numMappedFiles() const;
  /// How many weights were copied because they were misaligned.
  size_t numCopied() const { return copies_.size(); }

private:
  struct Mapping;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::vector<std::unique_ptr<void, AlignedFree>> copies_;
  std::vector<void *> pointers_;
};

/// Turns a tensor name into a file-name stem: characters other than ASCII
/// letters, digits, '.', '_' and '-' (e.g. '/' and ':' in torch names)
/// become '_'; a leading '.' becomes '_'; an empty name becomes "output";
/// names are cut to 200 bytes.
std::string sanitizeFileName(std::string_view name);
/// File names (with ".npy") for `outputs`, sanitized and made distinct: a
/// stem already taken by an earlier output gets "_2", "_3", ... appended.
std::vector<std::string>
outputFileNames(const std::vector<TensorSpec> &outputs);

/// Signature of the generated entry point.
using EntryFn = int32_t (*)(void **buffers);

/// Checks that `tensor` matches `spec` (dtype, then shape); error reads
/// "wrong dtype: expected float32, got float64" or
/// "wrong shape: expected [2, 3], got [3, 2]".
bool checkTensorMatches(const TensorSpec &spec, const Tensor &tensor,
                        std::string &error);

/// After calling an entry that returned `rc`: "" on success, else the
/// failure ("dopt_entry returned 7: <dort_last_error_message>", or the
/// pending error a kernel raised). Clears the pending error.
std::string entryFailure(int32_t rc);

/// Runs `entry` once in process: inputs (manifest order, checked against
/// the manifest), weights from `weights`, outputs allocated (zeroed) into
/// `outputs`. Returns false with dort_last_error_message (or the pending
/// error) in `error` when the entry fails.
bool runEntry(EntryFn entry, const Manifest &manifest,
              const std::vector<Tensor> &inputs, const WeightStore &weights,
              std::vector<Tensor> &outputs, std::string &error);

/// `model train ...` (lib/Runtime/Train.cpp): runs a training-step bundle
/// (compiled with --loss and --optimizer) over data files for a number of
/// steps or epochs, feeding the updated weights and optimizer state back.
/// Returns the exit status (0, 1 error, 2 usage error).
/// `model eval --data NAME=FILE ... [--checkpoint DIR]`: the training
/// bundle's evaluation program over a data set; prints {"loss", "accuracy",
/// "samples"} as JSON (Train.cpp).
int runEvaluation(int argc, char **argv, const std::string &defaultBundle);
/// `entries`: the step's program, or one per pipeline stage.
int runTraining(int argc, char **argv, const std::vector<EntryFn> &entries,
                const std::string &defaultBundleDir);

} // namespace distopt::runtime

#endif // DISTOPT_RUNTIME_BUNDLE_H
