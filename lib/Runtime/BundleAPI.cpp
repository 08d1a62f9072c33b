//===- BundleAPI.cpp - running a bundle's program in a host process -------===//
//
// The C functions of BundleAPI.h over runEntry (Bundle.h): the manifest and
// weights loaded once, inputs copied into tensors and checked against the
// manifest, outputs kept until the next run.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/BundleAPI.h"

#include "distopt/Runtime/Bundle.h"

#include <string>
#include <vector>

using namespace distopt::runtime;

struct dort_bundle {
  Manifest manifest;
  WeightStore weights;
  EntryFn entry = nullptr;
  std::vector<Tensor> outputs;
};

namespace {
thread_local std::string lastError;

template <typename T> T failWith(std::string message, T result) {
  lastError = std::move(message);
  return result;
}
} // namespace

extern "C" dort_bundle *dort_bundle_open(const char *dir,
                                         dort_bundle_entry entry) {
  lastError.clear();
  if (!dir || !entry)
    return failWith<dort_bundle *>("dort_bundle_open: no bundle directory or "
                                   "no entry point",
                                   nullptr);
  auto bundle = std::make_unique<dort_bundle>();
  std::string error;
  std::string base = dir;
  if (!loadManifest(base + "/manifest.json", bundle->manifest, error))
    return failWith<dort_bundle *>(error, nullptr);
  const Manifest &m = bundle->manifest;
  if (m.ranks != 1)
    return failWith<dort_bundle *>(
        "the bundle '" + base + "' runs on " + std::to_string(m.ranks) +
            " ranks; a program runs in this process for a single-rank bundle "
            "only (launch it with distopt run)",
        nullptr);
  if (!m.target.empty() || !m.stages.empty() || m.parameterServers)
    return failWith<dort_bundle *>(
        "the bundle '" + base + "' is not a single CPU program (" +
            (m.target.empty() ? std::string("a pipeline or parameter servers")
                              : "target " + m.target) +
            "); run it with distopt run",
        nullptr);
  if (!bundle->weights.load(m, base, error))
    return failWith<dort_bundle *>(error, nullptr);
  bundle->entry = entry;
  return bundle.release();
}

extern "C" int32_t dort_bundle_run(dort_bundle *bundle, int32_t numInputs,
                                   const void *const *inputs,
                                   const int64_t *const *shapes,
                                   const int32_t *ranks) {
  lastError.clear();
  if (!bundle)
    return failWith("dort_bundle_run: no bundle", 1);
  const Manifest &m = bundle->manifest;
  if (numInputs != static_cast<int32_t>(m.inputs.size()))
    return failWith("expected " + std::to_string(m.inputs.size()) +
                        " inputs, got " + std::to_string(numInputs),
                    1);
  std::vector<Tensor> tensors;
  for (int32_t i = 0; i < numInputs; ++i) {
    const TensorSpec &spec = m.inputs[i];
    if (ranks[i] < 0 || (ranks[i] > 0 && !shapes[i]))
      return failWith("input '" + spec.name + "': no shape", 1);
    std::vector<int64_t> shape(shapes[i], shapes[i] + ranks[i]);
    // The dtype is the manifest's (a host checks its own); the shape is
    // checked by runEntry against the manifest.
    for (int64_t d : shape)
      if (d < 0)
        return failWith("input '" + spec.name + "': negative dimension", 1);
    size_t bytes = dtypeSize(spec.dtype);
    for (int64_t d : shape)
      bytes *= static_cast<size_t>(d);
    if (bytes && !inputs[i])
      return failWith("input '" + spec.name + "': no data", 1);
    tensors.push_back(Tensor::fromBytes(spec.dtype, shape, inputs[i], bytes));
  }
  std::string error;
  if (!runEntry(bundle->entry, m, tensors, bundle->weights, bundle->outputs,
                error)) {
    bundle->outputs.clear();
    return failWith(error, 1);
  }
  return 0;
}

extern "C" const void *dort_bundle_output(const dort_bundle *bundle,
                                          int32_t index) {
  if (!bundle || index < 0 ||
      index >= static_cast<int32_t>(bundle->outputs.size()))
    return nullptr;
  return bundle->outputs[index].data();
}

extern "C" void dort_bundle_close(dort_bundle *bundle) { delete bundle; }

extern "C" const char *dort_bundle_last_error(void) {
  return lastError.c_str();
}
