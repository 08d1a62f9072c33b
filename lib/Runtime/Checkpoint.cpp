//===- Checkpoint.cpp - checkpoints and whole weights ---------------------===//
//
// Checkpoints written and read under any plan (each rank its blocks, rank 0
// the metadata), and the whole weights of a split model gathered.
//
//===----------------------------------------------------------------------===//

#include "TrainInternal.h"

namespace distopt::runtime::train {

namespace {

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
  // The saved tensor is not the bundle's: says what each is.
  auto mismatch = [&](const std::string &saved, const std::string &bundle) {
    error =
        "checkpoint '" + t.name + "' is " + saved + ", the bundle's " + bundle;
    return false;
  };
  auto readFile = [&](const std::string &file, Tensor &read) {
    std::string path = detail::joinPath(root, file);
    if (!readNpy(path, read, error)) {
      error = "checkpoint '" + path + "': " + error;
      return false;
    }
    if (read.dtype() != dtype)
      return mismatch(dtypeName(read.dtype()), dtypeName(dtype));
    return true;
  };
  if (f.isString()) {
    if (!readFile(f.asString(), whole))
      return false;
    if (whole.shape() != shape)
      return mismatch(shapeToString(whole.shape()), shapeToString(shape));
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
    if (at->asInteger() < 0 || at->asInteger() > block.data.numElements()) {
      error = "checkpoint '" + t.name + "': a part at offset " +
              std::to_string(at->asInteger()) + ", outside its block of " +
              std::to_string(block.data.numElements()) + " elements";
      return false;
    }
    Tensor read;
    if (!readFile(file->asString(), read))
      return false;
    int64_t from = at->asInteger();
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

} // namespace

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

bool loadWeightBlocks(const Manifest &m, const WeightStore &store,
                      std::vector<Tensor> &weights, std::string &error,
                      const std::vector<bool> *used) {
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

std::vector<int64_t> weightStages(const Manifest &m,
                                  std::vector<bool> *unstaged) {
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

} // namespace distopt::runtime::train
