//===- Bundle.cpp - weights, output names, in-process runs ----------------===//

#include "distopt/Runtime/Bundle.h"

#include "distopt/Runtime/Runtime.h"

#include "FileUtil.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace distopt::runtime {

struct WeightStore::Mapping {
  std::string path;
  dev_t device = 0;
  ino_t inode = 0;
  void *base = nullptr; // Null for an empty file.
  size_t size = 0;

  ~Mapping() {
    if (base)
      ::munmap(base, size);
  }
};

WeightStore::WeightStore() = default;
WeightStore::~WeightStore() = default;

size_t WeightStore::numMappedFiles() const { return mappings_.size(); }

namespace {
/// A 64-byte-aligned, never-written stand-in for zero-length weights.
alignas(kBufferAlignment) unsigned char emptyWeight[kBufferAlignment];
} // namespace

bool WeightStore::load(const Manifest &manifest, const std::string &bundleDir,
                       std::string &error) {
  mappings_.clear();
  copies_.clear();
  pointers_.clear();
  for (const WeightSpec &w : manifest.weights) {
    std::string path = detail::joinPath(bundleDir, w.file);
    auto fail = [&](const std::string &what) {
      error = "weight '" + w.name + "': file '" + path + "': " + what;
      return false;
    };
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    int savedErrno = errno;
    if (fd < 0)
      return fail("cannot open: " + detail::errnoMessage(savedErrno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      return fail("cannot stat: " + detail::errnoMessage(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return fail("not a regular file");
    }
    Mapping *mapping = nullptr;
    for (auto &m : mappings_)
      if (m->device == st.st_dev && m->inode == st.st_ino)
        mapping = m.get();
    if (!mapping) {
      auto m = std::make_unique<Mapping>();
      m->path = path;
      m->device = st.st_dev;
      m->inode = st.st_ino;
      m->size = static_cast<size_t>(st.st_size);
      if (m->size) {
        void *p = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
          int e = errno;
          ::close(fd);
          return fail("cannot mmap: " + detail::errnoMessage(e));
        }
        m->base = p;
      }
      mapping = m.get();
      mappings_.push_back(std::move(m));
    }
    ::close(fd);
    if (w.offset > mapping->size || w.length > mapping->size - w.offset)
      return fail("bytes [" + std::to_string(w.offset) + ", " +
                  std::to_string(w.offset + w.length) +
                  ") run past the end of the file (" +
                  std::to_string(mapping->size) + " bytes)");
    if (w.length != w.fileByteSize())
      return fail("length " + std::to_string(w.length) + " does not match " +
                  shapeToString(w.shape) + " of " + dtypeName(w.dtype) + " (" +
                  std::to_string(w.fileByteSize()) + " bytes)");
    if (w.length == 0) {
      pointers_.push_back(emptyWeight);
      continue;
    }
    unsigned char *p = static_cast<unsigned char *>(mapping->base) + w.offset;
    if (reinterpret_cast<uintptr_t>(p) % dtypeSize(w.dtype) != 0) {
      void *copy = alignedAlloc(w.length, /*zero=*/false);
      if (!copy)
        return fail("cannot allocate " + std::to_string(w.length) +
                    " bytes for an aligned copy");
      std::memcpy(copy, p, w.length);
      copies_.emplace_back(copy);
      pointers_.push_back(copy);
      continue;
    }
    pointers_.push_back(p);
  }
  return true;
}

std::string sanitizeFileName(std::string_view name) {
  std::string out;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty())
    out = "output";
  if (out[0] == '.')
    out[0] = '_';
  if (out.size() > 200)
    out.resize(200);
  return out;
}

std::vector<std::string>
outputFileNames(const std::vector<TensorSpec> &outputs) {
  std::vector<std::string> names;
  std::set<std::string> taken;
  for (const TensorSpec &o : outputs) {
    std::string stem = sanitizeFileName(o.name);
    std::string candidate = stem;
    for (int i = 2; taken.count(candidate); ++i)
      candidate = stem + "_" + std::to_string(i);
    taken.insert(candidate);
    names.push_back(candidate + ".npy");
  }
  return names;
}

bool checkTensorMatches(const TensorSpec &spec, const Tensor &tensor,
                        std::string &error) {
  if (tensor.dtype() != spec.dtype) {
    error = std::string("wrong dtype: expected ") + dtypeName(spec.dtype) +
            ", got " + dtypeName(tensor.dtype());
    return false;
  }
  if (tensor.shape() != spec.shape) {
    error = "wrong shape: expected " + shapeToString(spec.shape) + ", got " +
            shapeToString(tensor.shape());
    return false;
  }
  return true;
}

std::string entryFailure(int32_t rc) {
  const char *pendingMessage = dort_pending_error();
  std::string message;
  if (rc != 0) {
    message = "dopt_entry returned " + std::to_string(rc);
    const char *last = dort_last_error_message();
    if (!*last && pendingMessage)
      last = pendingMessage;
    if (*last)
      message += std::string(": ") + last;
  } else if (pendingMessage) {
    message = std::string("a runtime call failed: ") + pendingMessage;
  }
  dort_clear_pending_error();
  return message;
}

bool runEntry(EntryFn entry, const Manifest &manifest,
              const std::vector<Tensor> &inputs, const WeightStore &weights,
              std::vector<Tensor> &outputs, std::string &error) {
  if (inputs.size() != manifest.inputs.size()) {
    error = "expected " + std::to_string(manifest.inputs.size()) +
            " inputs, got " + std::to_string(inputs.size());
    return false;
  }
  if (weights.size() != manifest.weights.size()) {
    error = "expected " + std::to_string(manifest.weights.size()) +
            " weights, got " + std::to_string(weights.size());
    return false;
  }
  std::vector<void *> buffers;
  buffers.reserve(manifest.numBuffers());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!checkTensorMatches(manifest.inputs[i], inputs[i], error)) {
      error = "input '" + manifest.inputs[i].name + "': " + error;
      return false;
    }
    buffers.push_back(const_cast<void *>(inputs[i].data()));
  }
  for (size_t i = 0; i < weights.size(); ++i)
    buffers.push_back(weights.data(i));
  outputs.clear();
  for (const TensorSpec &o : manifest.outputs) {
    Tensor t;
    if (!Tensor::create(o.dtype, o.shape, t, error)) {
      error = "output '" + o.name + "': " + error;
      return false;
    }
    if (o.inPlace.empty()) {
      buffers.push_back(t.data());
    } else {
      // A training step's update written in place: it starts as a copy of
      // what it updates and takes its place (the caller's tensors stay).
      int64_t slot = manifest.bufferOf(o.inPlace);
      std::memcpy(t.data(), buffers[slot], t.byteSize());
      buffers[slot] = t.data();
    }
    outputs.push_back(std::move(t));
  }
  dort_clear_error();
  dort_clear_pending_error();
  int32_t rc = entry(buffers.data());
  std::string failure = entryFailure(rc);
  if (!failure.empty()) {
    error = failure;
    return false;
  }
  return true;
}

} // namespace distopt::runtime
