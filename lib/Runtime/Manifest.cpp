//===- Manifest.cpp - bundle manifest.json --------------------------------===//

#include "distopt/Runtime/Manifest.h"

#include "distopt/Runtime/Json.h"

#include "FileUtil.h"

#include <cstdlib>
#include <limits>
#include <set>

namespace distopt::runtime {

int64_t TensorSpec::numElements() const {
  int64_t n = 0;
  checkedNumElements(shape, dtypeSize(dtype), n);
  return n;
}

size_t TensorSpec::byteSize() const {
  return static_cast<size_t>(numElements()) * dtypeSize(dtype);
}

size_t TensorSpec::fileByteSize() const {
  size_t n = dtypeSize(dtype);
  for (int64_t d : fileShape())
    n *= static_cast<size_t>(d);
  return n;
}

namespace {

class Validator {
public:
  explicit Validator(std::string &error) : error(error) {}

  bool fail(const std::string &path, const std::string &what) {
    error = path.empty() ? what : path + ": " + what;
    return false;
  }

  const JsonValue *require(const JsonValue &object, const std::string &path,
                           const char *key) {
    const JsonValue *v = object.get(key);
    if (!v)
      fail(path, std::string("missing required key \"") + key + "\"");
    return v;
  }

  static std::string child(const std::string &path, const char *key) {
    return path.empty() ? key : path + "." + key;
  }

  bool wrongType(const std::string &path, const char *expected,
                 const JsonValue &v) {
    return fail(path, std::string("expected ") + expected + ", found " +
                          JsonValue::kindName(v.kind()));
  }

  bool getString(const JsonValue &object, const std::string &path,
                 const char *key, std::string &out) {
    const JsonValue *v = require(object, path, key);
    if (!v)
      return false;
    if (!v->isString())
      return wrongType(child(path, key), "a string", *v);
    out = v->asString();
    return true;
  }

  bool getInteger(const JsonValue &v, const std::string &path, int64_t min,
                  int64_t &out) {
    if (!v.isInteger())
      return v.isNumber() ? fail(path, "expected an integer")
                          : wrongType(path, "an integer", v);
    if (v.asInteger() < min)
      return fail(path, "expected an integer >= " + std::to_string(min) +
                            ", found " + std::to_string(v.asInteger()));
    out = v.asInteger();
    return true;
  }

  bool getInteger(const JsonValue &object, const std::string &path,
                  const char *key, int64_t min, int64_t &out) {
    const JsonValue *v = require(object, path, key);
    return v && getInteger(*v, child(path, key), min, out);
  }

  /// The elements of the array `list`, integers >= `min`, appended to
  /// `out`.
  bool appendIntegers(const JsonValue &list, const std::string &path,
                      int64_t min, std::vector<int64_t> &out) {
    for (size_t i = 0; i < list.elements().size(); ++i) {
      int64_t x;
      if (!getInteger(list.elements()[i], path + "[" + std::to_string(i) + "]",
                      min, x))
        return false;
      out.push_back(x);
    }
    return true;
  }

  /// A required array of integers >= `min`, appended to `out`.
  bool getIntegers(const JsonValue &object, const std::string &path,
                   const char *key, int64_t min, std::vector<int64_t> &out) {
    const JsonValue *list = require(object, path, key);
    if (!list)
      return false;
    if (!list->isArray())
      return wrongType(child(path, key), "an array", *list);
    return appendIntegers(*list, child(path, key), min, out);
  }

  bool tensor(const JsonValue &v, const std::string &path, TensorSpec &spec) {
    if (!v.isObject())
      return wrongType(path, "an object", v);
    if (!getString(v, path, "name", spec.name))
      return false;
    if (spec.name.empty())
      return fail(child(path, "name"), "empty name");
    std::string dtype;
    if (!getString(v, path, "dtype", dtype))
      return false;
    if (!parseDType(dtype, spec.dtype)) {
      std::string known;
      for (DType d : allDTypes())
        known += std::string(known.empty() ? "" : ", ") + dtypeName(d);
      return fail(child(path, "dtype"), "unknown dtype \"" + dtype +
                                            "\" (expected one of " + known +
                                            ")");
    }
    const JsonValue *shape = require(v, path, "shape");
    if (!shape)
      return false;
    std::string shapePath = child(path, "shape");
    if (!shape->isArray())
      return wrongType(shapePath, "an array of dimensions", *shape);
    spec.shape.clear();
    if (!appendIntegers(*shape, shapePath, 0, spec.shape))
      return false;
    int64_t n;
    if (!checkedNumElements(spec.shape, dtypeSize(spec.dtype), n))
      return fail(shapePath,
                  "shape " + shapeToString(spec.shape) + " is too large");
    if (const JsonValue *g = v.get("global_shape")) {
      std::string gpath = child(path, "global_shape");
      if (!g->isArray() || g->elements().size() != spec.shape.size())
        return fail(gpath, "expected an array of " +
                               std::to_string(spec.shape.size()) +
                               " dimensions");
      if (!appendIntegers(*g, gpath, 0, spec.globalShape))
        return false;
      if (!checkedNumElements(spec.globalShape, dtypeSize(spec.dtype), n))
        return fail(gpath, "shape is too large");
    }
    if (const JsonValue *s = v.get("split_axes")) {
      std::string spath = child(path, "split_axes");
      if (!s->isArray() || s->elements().size() != spec.shape.size())
        return fail(spath, "expected one array of grid axes per dimension");
      for (size_t i = 0; i < s->elements().size(); ++i) {
        const JsonValue &axes = s->elements()[i];
        std::string apath = spath + "[" + std::to_string(i) + "]";
        if (!axes.isArray())
          return wrongType(apath, "an array of grid axes", axes);
        std::vector<int64_t> list;
        if (!appendIntegers(axes, apath, 0, list))
          return false;
        spec.splitAxes.push_back(std::move(list));
      }
    }
    if (const JsonValue *b = v.get("block_parts"))
      if (!getInteger(*b, child(path, "block_parts"), 1, spec.blockParts))
        return false;
    if (const JsonValue *c = v.get("classes"))
      if (!getInteger(*c, child(path, "classes"), 1, spec.classes))
        return false;
    if (const JsonValue *ix = v.get("indices")) {
      std::string ipath = child(path, "indices");
      if (!ix->isObject())
        return wrongType(ipath, "an object", *ix);
      int64_t lowest = std::numeric_limits<int64_t>::min();
      if (!getInteger(*ix, ipath, "low", lowest, spec.indexLow) ||
          !getInteger(*ix, ipath, "high", lowest, spec.indexHigh) ||
          !getString(*ix, ipath, "use", spec.indexUse))
        return false;
      if (spec.indexHigh < spec.indexLow)
        return fail(ipath, "high " + std::to_string(spec.indexHigh) +
                               " is below low " +
                               std::to_string(spec.indexLow));
    }
    if (v.get("in_place") && !getString(v, path, "in_place", spec.inPlace))
      return false;
    if (const JsonValue *b = v.get("batch_dim")) {
      if (!getInteger(*b, child(path, "batch_dim"), 0, spec.batchDim))
        return false;
      if (spec.batchDim >= static_cast<int64_t>(spec.shape.size()))
        return fail(child(path, "batch_dim"), "beyond the tensor's rank");
    }
    return true;
  }

  bool stageBuffer(const JsonValue &v, const std::string &path,
                   StageBuffer &b) {
    if (!v.isObject())
      return wrongType(path, "an object", v);
    if (const JsonValue *i = v.get("input")) {
      b.kind = StageBuffer::Kind::ModelInput;
      return getInteger(*i, child(path, "input"), 0, b.index);
    }
    if (const JsonValue *o = v.get("output")) {
      b.kind = StageBuffer::Kind::ModelOutput;
      return getInteger(*o, child(path, "output"), 0, b.index);
    }
    b.kind = StageBuffer::Kind::Activation;
    if (!getInteger(v, path, "activation", 0, b.index))
      return false;
    JsonValue named = v;
    // Activations carry dtype and shape like tensors (their name is made up).
    std::string dtype;
    if (!getString(v, path, "dtype", dtype))
      return false;
    if (!parseDType(dtype, b.spec.dtype))
      return fail(child(path, "dtype"), "unknown dtype \"" + dtype + "\"");
    if (!getIntegers(v, path, "shape", 0, b.spec.shape))
      return false;
    b.spec.name = "activation " + std::to_string(b.index);
    return true;
  }

  bool pipeline(const JsonValue &v, Manifest &m) {
    if (!v.isObject())
      return wrongType("pipeline", "an object", v);
    if (!getInteger(v, "pipeline", "microbatches", 1, m.microbatches))
      return false;
    const JsonValue *stages = require(v, "pipeline", "stages");
    if (!stages)
      return false;
    if (!stages->isArray() || stages->elements().empty())
      return fail("pipeline.stages", "expected a non-empty array");
    for (size_t s = 0; s < stages->elements().size(); ++s) {
      const JsonValue &st = stages->elements()[s];
      std::string path = "pipeline.stages[" + std::to_string(s) + "]";
      if (!st.isObject())
        return wrongType(path, "an object", st);
      PipelineStage stage;
      for (const char *key : {"inputs", "outputs"}) {
        const JsonValue *list = require(st, path, key);
        if (!list)
          return false;
        if (!list->isArray())
          return wrongType(child(path, key), "an array", *list);
        for (size_t i = 0; i < list->elements().size(); ++i) {
          StageBuffer b;
          if (!stageBuffer(list->elements()[i],
                           child(path, key) + "[" + std::to_string(i) + "]", b))
            return false;
          (std::string(key) == "inputs" ? stage.inputs : stage.outputs)
              .push_back(std::move(b));
        }
      }
      if (!getIntegers(st, path, "weights", 0, stage.weights))
        return false;
      m.stages.push_back(std::move(stage));
    }
    return true;
  }

  /// A split tensor's local and global shapes must agree with the grid.
  bool distribution(const TensorSpec &spec, const std::string &path,
                    const std::vector<int64_t> &grid) {
    if (spec.splitAxes.empty())
      return spec.globalShape.empty() || spec.globalShape == spec.shape ||
             fail(path, "global_shape differs from shape but no split_axes");
    const std::vector<int64_t> &global = spec.fileShape();
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      int64_t parts = 1;
      for (int64_t a : spec.splitAxes[d]) {
        if (a >= static_cast<int64_t>(grid.size()))
          return fail(path + ".split_axes",
                      "grid axis " + std::to_string(a) + " of a " +
                          std::to_string(grid.size()) + "-axis grid");
        parts *= grid[a];
      }
      // Even splits, or an uneven one of ceil(global / parts) per rank.
      if (spec.shape[d] != (global[d] + parts - 1) / parts)
        return fail(path, "dimension " + std::to_string(d) + ": " +
                              std::to_string(spec.shape[d]) + " per rank " +
                              "over " + std::to_string(parts) + " parts " +
                              "does not make the global " +
                              std::to_string(global[d]));
    }
    return true;
  }

  bool weight(const JsonValue &v, const std::string &path, WeightSpec &spec) {
    if (!tensor(v, path, spec))
      return false;
    if (!getString(v, path, "file", spec.file))
      return false;
    if (spec.file.empty())
      return fail(child(path, "file"), "empty file name");
    int64_t offset, length;
    if (!getInteger(v, path, "offset", 0, offset) ||
        !getInteger(v, path, "length", 0, length))
      return false;
    spec.offset = static_cast<uint64_t>(offset);
    spec.length = static_cast<uint64_t>(length);
    if (spec.length != spec.fileByteSize())
      return fail(child(path, "length"),
                  std::to_string(length) + " bytes, but shape " +
                      shapeToString(spec.fileShape()) + " of " +
                      dtypeName(spec.dtype) + " needs " +
                      std::to_string(spec.fileByteSize()));
    return true;
  }

  template <typename Spec, typename Fn>
  bool list(const JsonValue &root, const char *key, bool required,
            std::vector<Spec> &out, Fn parseOne) {
    const JsonValue *v = root.get(key);
    out.clear();
    if (!v) {
      if (required)
        return fail("", std::string("missing required key \"") + key + "\"");
      return true;
    }
    if (!v->isArray())
      return wrongType(key, "an array", *v);
    std::set<std::string> names;
    for (size_t i = 0; i < v->elements().size(); ++i) {
      std::string path = std::string(key) + "[" + std::to_string(i) + "]";
      Spec spec;
      if (!(this->*parseOne)(v->elements()[i], path, spec))
        return false;
      if (!names.insert(spec.name).second)
        return fail(path + ".name",
                    "duplicate name \"" + spec.name + "\" in " + key);
      out.push_back(std::move(spec));
    }
    return true;
  }

private:
  std::string &error;
};

} // namespace

bool parseManifest(std::string_view text, Manifest &out, std::string &error) {
  JsonValue root;
  if (!parseJson(text, root, error))
    return false;
  Validator check(error);
  if (!root.isObject())
    return check.wrongType("", "a JSON object at the top level", root);
  Manifest m;
  if (!check.getInteger(root, "", "format", 0, m.format))
    return false;
  if (m.format != Manifest::kFormat)
    return check.fail("format", "unsupported manifest format " +
                                    std::to_string(m.format) +
                                    " (this runtime reads format " +
                                    std::to_string(Manifest::kFormat) + ")");
  if (const JsonValue *model = root.get("model")) {
    if (!model->isString())
      return check.wrongType("model", "a string", *model);
    m.model = model->asString();
  }
  if (const JsonValue *source = root.get("source")) {
    if (!source->isString())
      return check.wrongType("source", "a string", *source);
    m.source = source->asString();
  }
  using StringField = std::pair<const char *, std::string *>;
  for (auto [key, field] :
       {StringField{"compiler", &m.compiler}, StringField{"target", &m.target},
        StringField{"codegen", &m.codegen},
        StringField{"precision", &m.precision}})
    if (const JsonValue *v = root.get(key)) {
      if (!v->isString())
        return check.wrongType(key, "a string", *v);
      *field = v->asString();
    }
  if (!m.precision.empty() && m.precision != "fp32" && m.precision != "tf32" &&
      m.precision != "bf16" && m.precision != "fp16")
    return check.fail("precision", "unknown precision \"" + m.precision +
                                       "\" (fp32, tf32, bf16 or fp16)");
  if (const JsonValue *flops = root.get("step_flops")) {
    if (!flops->isNumber() || !(flops->asDouble() >= 0))
      return check.wrongType("step_flops", "a number >= 0", *flops);
    m.stepFlops = flops->asDouble();
  }
  if (const JsonValue *acc = root.get("accumulate")) {
    int64_t k;
    if (!check.getInteger(*acc, "accumulate", 1, k))
      return false;
    m.accumulate = k;
  }
  if (const JsonValue *ranks = root.get("ranks"))
    if (!check.getInteger(*ranks, "ranks", 1, m.ranks))
      return false;
  if (const JsonValue *rank = root.get("rank")) {
    int64_t r;
    if (!check.getInteger(*rank, "rank", 0, r))
      return false;
    if (r >= m.ranks)
      return check.fail("rank", "rank " + std::to_string(r) +
                                    " of a bundle of " +
                                    std::to_string(m.ranks) + " ranks");
    m.rank = r;
  }
  // Parameter servers take ranks of their own, before the workers' grid.
  int64_t serverRanks = 0;
  if (const JsonValue *ps = root.get("parameter_servers")) {
    if (!ps->isObject())
      return check.wrongType("parameter_servers", "an object", *ps);
    ParameterServers p;
    const std::string path = "parameter_servers";
    if (!check.getString(*ps, path, "sync", p.sync))
      return false;
    if (p.sync != "ps" && p.sync != "async")
      return check.fail(path + ".sync", "expected \"ps\" or \"async\", found \"" +
                                            p.sync + "\"");
    if (!check.getInteger(*ps, path, "servers", 1, p.servers) ||
        !check.getInteger(*ps, path, "workers", 1, p.workers) ||
        !check.getInteger(*ps, path, "backup_workers", 0, p.backupWorkers) ||
        !check.getInteger(*ps, path, "shard_length", 1, p.shardLength))
      return false;
    if (p.backupWorkers >= p.workers)
      return check.fail(path + ".backup_workers",
                        "must be fewer than the workers");
    const JsonValue *pieces = ps->get("pieces");
    if (!pieces || !pieces->isArray())
      return check.fail(path, "expected an array \"pieces\"");
    for (size_t i = 0; i < pieces->elements().size(); ++i) {
      const JsonValue &e = pieces->elements()[i];
      std::string ep = path + ".pieces[" + std::to_string(i) + "]";
      if (!e.isObject())
        return check.wrongType(ep, "an object", e);
      ServerPiece piece;
      if (!check.getInteger(e, ep, "weight", 0, piece.weight) ||
          !check.getInteger(e, ep, "offset", 0, piece.offset) ||
          !check.getInteger(e, ep, "length", 1, piece.length) ||
          !check.getInteger(e, ep, "server", 0, piece.server) ||
          !check.getInteger(e, ep, "shard_offset", 0, piece.shardOffset))
        return false;
      if (piece.server >= p.servers ||
          piece.shardOffset + piece.length > p.shardLength)
        return check.fail(ep, "outside the servers' shards");
      p.pieces.push_back(piece);
    }
    const JsonValue *update = ps->get("update");
    if (!update || !update->isObject())
      return check.fail(path, "expected an object \"update\"");
    if (!check.list(*update, "inputs", true, p.updateInputs, &Validator::tensor) ||
        !check.list(*update, "outputs", true, p.updateOutputs,
                    &Validator::tensor))
      return false;
    serverRanks = p.servers;
    m.parameterServers = std::move(p);
  }
  if (const JsonValue *grid = root.get("grid")) {
    if (!grid->isArray() || grid->elements().empty())
      return check.fail("grid", "expected a non-empty array of axis sizes");
    if (!check.appendIntegers(*grid, "grid", 1, m.grid))
      return false;
    int64_t product = 1;
    for (int64_t n : m.grid)
      product *= n;
    if (product + serverRanks != m.ranks)
      return check.fail("grid", "the grid holds " + std::to_string(product) +
                                    " ranks" +
                                    (serverRanks ? " (and " +
                                                       std::to_string(serverRanks) +
                                                       " parameter servers)"
                                                 : std::string()) +
                                    ", but \"ranks\" is " +
                                    std::to_string(m.ranks));
  } else if (m.ranks != 1) {
    return check.fail("", "a multi-rank manifest needs a \"grid\"");
  }
  if (!check.list(root, "inputs", true, m.inputs, &Validator::tensor) ||
      !check.list(root, "weights", false, m.weights, &Validator::weight) ||
      !check.list(root, "outputs", true, m.outputs, &Validator::tensor))
    return false;
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (!check.distribution(m.inputs[i], "inputs[" + std::to_string(i) + "]",
                            m.grid))
      return false;
  if (m.parameterServers)
    for (const ServerPiece &piece : m.parameterServers->pieces)
      if (piece.weight >= static_cast<int64_t>(m.weights.size()) ||
          piece.offset + piece.length > m.weights[piece.weight].numElements())
        return check.fail("parameter_servers.pieces",
                          "a piece outside weight " +
                              std::to_string(piece.weight));
  if (const JsonValue *e = root.get("eval")) {
    if (!e->isObject())
      return check.wrongType("eval", "an object", *e);
    EvalProgram ev;
    if (!check.list(*e, "inputs", true, ev.inputs, &Validator::tensor) ||
        !check.list(*e, "outputs", true, ev.outputs, &Validator::tensor))
      return false;
    const JsonValue *ws = e->get("weights");
    if (!ws || !ws->isArray())
      return check.fail("eval", "expected an array \"weights\"");
    for (size_t i = 0; i < ws->elements().size(); ++i) {
      int64_t w;
      if (!check.getInteger(ws->elements()[i],
                            "eval.weights[" + std::to_string(i) + "]", 0, w))
        return false;
      if (w >= static_cast<int64_t>(m.weights.size()))
        return check.fail("eval.weights", "weight index " + std::to_string(w) +
                                              " out of range");
      ev.weights.push_back(w);
    }
    m.eval = std::move(ev);
  }
  if (const JsonValue *p = root.get("pipeline")) {
    if (!check.pipeline(*p, m))
      return false;
    if (m.grid.empty() ||
        m.grid[0] != static_cast<int64_t>(m.stages.size()))
      return check.fail("pipeline.stages",
                        std::to_string(m.stages.size()) +
                            " stages, but grid axis 0 has " +
                            (m.grid.empty() ? std::string("none")
                                            : std::to_string(m.grid[0])));
    // A stage's reference to thing `index` of the `count` it names.
    auto inRange = [&](int64_t index, size_t count, const char *what) {
      return index < static_cast<int64_t>(count) ||
             check.fail("pipeline", std::string("a stage ") + what + " " +
                                        std::to_string(index) + " of " +
                                        std::to_string(count));
    };
    for (const PipelineStage &s : m.stages) {
      for (const StageBuffer &b : s.inputs)
        if (b.kind == StageBuffer::Kind::ModelInput &&
            !inRange(b.index, m.inputs.size(), "reads model input"))
          return false;
      for (const StageBuffer &b : s.outputs)
        if (b.kind == StageBuffer::Kind::ModelOutput &&
            !inRange(b.index, m.outputs.size(), "writes model output"))
          return false;
      for (int64_t w : s.weights)
        if (!inRange(w, m.weights.size(), "uses weight"))
          return false;
    }
  }
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    const TensorSpec &o = m.outputs[i];
    std::string path = "outputs[" + std::to_string(i) + "]";
    if (!check.distribution(o, path, m.grid))
      return false;
    if (o.inPlace.empty())
      continue;
    // Written into the buffer of a weight or an input of its type (the
    // buffer the runtime gives it: bufferOf).
    int64_t at = m.bufferOf(o.inPlace);
    int64_t inputs = static_cast<int64_t>(m.inputs.size());
    const TensorSpec *target = at < 0        ? nullptr
                               : at < inputs ? &m.inputs[at]
                                             : &m.weights[at - inputs];
    if (!target || target->dtype != o.dtype || target->shape != o.shape)
      return check.fail(path + ".in_place",
                        "no weight or input '" + o.inPlace + "' of dtype " +
                            dtypeName(o.dtype) + " and the output's shape");
  }
  for (size_t i = 0; i < m.weights.size(); ++i)
    if (!check.distribution(m.weights[i],
                            "weights[" + std::to_string(i) + "]", m.grid))
      return false;
  out = std::move(m);
  return true;
}

int64_t Manifest::bufferOf(const std::string &name) const {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == name)
      return static_cast<int64_t>(i);
  for (size_t w = 0; w < weights.size(); ++w)
    if (weights[w].name == name)
      return static_cast<int64_t>(inputs.size() + w);
  return -1;
}

bool loadManifest(const std::string &path, Manifest &out, std::string &error) {
  std::string text;
  if (!detail::readWholeFile(path, text, error)) {
    error = path + ": " + error;
    return false;
  }
  if (!parseManifest(text, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

namespace {
JsonValue shapeJson(const std::vector<int64_t> &shape) {
  std::vector<JsonValue> dims;
  for (int64_t d : shape)
    dims.push_back(JsonValue::makeInteger(d));
  return JsonValue::makeArray(std::move(dims));
}

std::vector<std::pair<std::string, JsonValue>>
tensorJson(const TensorSpec &spec) {
  std::vector<std::pair<std::string, JsonValue>> members = {
      {"name", JsonValue::makeString(spec.name)},
      {"dtype", JsonValue::makeString(dtypeName(spec.dtype))},
      {"shape", shapeJson(spec.shape)}};
  if (!spec.globalShape.empty())
    members.emplace_back("global_shape", shapeJson(spec.globalShape));
  if (!spec.splitAxes.empty()) {
    std::vector<JsonValue> dims;
    for (const auto &axes : spec.splitAxes)
      dims.push_back(shapeJson(axes));
    members.emplace_back("split_axes", JsonValue::makeArray(std::move(dims)));
  }
  if (spec.blockParts != 1)
    members.emplace_back("block_parts", JsonValue::makeInteger(spec.blockParts));
  if (spec.classes > 0)
    members.emplace_back("classes", JsonValue::makeInteger(spec.classes));
  if (spec.hasIndexRange())
    members.emplace_back(
        "indices",
        JsonValue::makeObject({{"low", JsonValue::makeInteger(spec.indexLow)},
                               {"high", JsonValue::makeInteger(spec.indexHigh)},
                               {"use", JsonValue::makeString(spec.indexUse)}}));
  if (spec.batchDim >= 0)
    members.emplace_back("batch_dim", JsonValue::makeInteger(spec.batchDim));
  if (!spec.inPlace.empty())
    members.emplace_back("in_place", JsonValue::makeString(spec.inPlace));
  return members;
}

JsonValue stageBufferJson(const StageBuffer &b) {
  switch (b.kind) {
  case StageBuffer::Kind::ModelInput:
    return JsonValue::makeObject({{"input", JsonValue::makeInteger(b.index)}});
  case StageBuffer::Kind::ModelOutput:
    return JsonValue::makeObject({{"output", JsonValue::makeInteger(b.index)}});
  case StageBuffer::Kind::Activation:
    break;
  }
  return JsonValue::makeObject(
      {{"dtype", JsonValue::makeString(dtypeName(b.spec.dtype))},
       {"shape", shapeJson(b.spec.shape)},
       {"activation", JsonValue::makeInteger(b.index)}});
}
} // namespace

std::string Manifest::toJson() const {
  auto tensors = [](const std::vector<TensorSpec> &specs) {
    std::vector<JsonValue> out;
    for (const TensorSpec &s : specs)
      out.push_back(JsonValue::makeObject(tensorJson(s)));
    return JsonValue::makeArray(std::move(out));
  };
  std::vector<JsonValue> ws;
  for (const WeightSpec &w : weights) {
    auto members = tensorJson(w);
    members.emplace_back("file", JsonValue::makeString(w.file));
    members.emplace_back(
        "offset", JsonValue::makeInteger(static_cast<int64_t>(w.offset)));
    members.emplace_back(
        "length", JsonValue::makeInteger(static_cast<int64_t>(w.length)));
    ws.push_back(JsonValue::makeObject(std::move(members)));
  }
  std::vector<std::pair<std::string, JsonValue>> members = {
      {"format", JsonValue::makeInteger(format)},
      {"model", JsonValue::makeString(model)},
      {"ranks", JsonValue::makeInteger(ranks)}};
  if (rank)
    members.emplace_back("rank", JsonValue::makeInteger(*rank));
  if (!source.empty())
    members.emplace_back("source", JsonValue::makeString(source));
  if (!compiler.empty())
    members.emplace_back("compiler", JsonValue::makeString(compiler));
  if (stepFlops > 0)
    members.emplace_back("step_flops", JsonValue::makeDouble(stepFlops));
  if (!target.empty())
    members.emplace_back("target", JsonValue::makeString(target));
  if (!codegen.empty())
    members.emplace_back("codegen", JsonValue::makeString(codegen));
  if (!precision.empty())
    members.emplace_back("precision", JsonValue::makeString(precision));
  if (accumulate)
    members.emplace_back("accumulate", JsonValue::makeInteger(*accumulate));
  if (!grid.empty())
    members.emplace_back("grid", shapeJson(grid));
  members.emplace_back("inputs", tensors(inputs));
  members.emplace_back("outputs", tensors(outputs));
  members.emplace_back("weights", JsonValue::makeArray(std::move(ws)));
  if (!stages.empty()) {
    std::vector<JsonValue> list;
    for (const PipelineStage &st : stages) {
      std::vector<JsonValue> ins, outs;
      for (const StageBuffer &b : st.inputs)
        ins.push_back(stageBufferJson(b));
      for (const StageBuffer &b : st.outputs)
        outs.push_back(stageBufferJson(b));
      list.push_back(JsonValue::makeObject(
          {{"inputs", JsonValue::makeArray(std::move(ins))},
           {"weights", shapeJson(st.weights)},
           {"outputs", JsonValue::makeArray(std::move(outs))}}));
    }
    members.emplace_back(
        "pipeline",
        JsonValue::makeObject(
            {{"microbatches", JsonValue::makeInteger(microbatches)},
             {"stages", JsonValue::makeArray(std::move(list))}}));
  }
  if (parameterServers) {
    const ParameterServers &p = *parameterServers;
    std::vector<JsonValue> pieces;
    for (const ServerPiece &piece : p.pieces)
      pieces.push_back(JsonValue::makeObject(
          {{"weight", JsonValue::makeInteger(piece.weight)},
           {"offset", JsonValue::makeInteger(piece.offset)},
           {"length", JsonValue::makeInteger(piece.length)},
           {"server", JsonValue::makeInteger(piece.server)},
           {"shard_offset", JsonValue::makeInteger(piece.shardOffset)}}));
    members.emplace_back(
        "parameter_servers",
        JsonValue::makeObject(
            {{"sync", JsonValue::makeString(p.sync)},
             {"servers", JsonValue::makeInteger(p.servers)},
             {"workers", JsonValue::makeInteger(p.workers)},
             {"backup_workers", JsonValue::makeInteger(p.backupWorkers)},
             {"shard_length", JsonValue::makeInteger(p.shardLength)},
             {"pieces", JsonValue::makeArray(std::move(pieces))},
             {"update", JsonValue::makeObject(
                            {{"inputs", tensors(p.updateInputs)},
                             {"outputs", tensors(p.updateOutputs)}})}}));
  }
  if (eval)
    members.emplace_back(
        "eval", JsonValue::makeObject({{"inputs", tensors(eval->inputs)},
                                       {"weights", shapeJson(eval->weights)},
                                       {"outputs", tensors(eval->outputs)}}));
  JsonValue root = JsonValue::makeObject(std::move(members));
  return root.serialize() + "\n";
}

bool holdsProgramOf(const Manifest &m, int64_t rank, std::string &error) {
  if (!m.rank || m.stages.empty())
    return true; // every rank runs the same program
  int64_t perStage = m.ranks / static_cast<int64_t>(m.stages.size());
  int64_t mine = *m.rank / perStage, theirs = rank / perStage;
  if (mine == theirs)
    return true;
  error = "this bundle holds the program of pipeline stage " +
          std::to_string(mine) + " (compiled with --rank " +
          std::to_string(*m.rank) + "), but rank " + std::to_string(rank) +
          " runs stage " + std::to_string(theirs) +
          ": compile a bundle for it (distopt compile --rank " +
          std::to_string(rank) +
          ") and start each rank from its stage's "
          "bundle (mpirun -np N a.dx/a ... : -np N b.dx/b ...)";
  return false;
}

void applyPrecision(const Manifest &m) {
  if (m.precision == "tf32")
    ::setenv("DISTOPT_CUDA_TF32", "1", /*overwrite=*/0);
}

} // namespace distopt::runtime
