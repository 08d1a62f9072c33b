//===- Manifest.cpp - bundle manifest.json --------------------------------===//

#include "distopt/Runtime/Manifest.h"

#include "distopt/Runtime/Json.h"

#include "FileUtil.h"

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
    for (size_t i = 0; i < shape->elements().size(); ++i) {
      int64_t d;
      if (!getInteger(shape->elements()[i],
                      shapePath + "[" + std::to_string(i) + "]", 0, d))
        return false;
      spec.shape.push_back(d);
    }
    int64_t n;
    if (!checkedNumElements(spec.shape, dtypeSize(spec.dtype), n))
      return fail(shapePath,
                  "shape " + shapeToString(spec.shape) + " is too large");
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
    if (spec.length != spec.byteSize())
      return fail(child(path, "length"),
                  std::to_string(length) + " bytes, but shape " +
                      shapeToString(spec.shape) + " of " +
                      dtypeName(spec.dtype) + " needs " +
                      std::to_string(spec.byteSize()));
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
  if (const JsonValue *ranks = root.get("ranks"))
    if (!check.getInteger(*ranks, "ranks", 1, m.ranks))
      return false;
  if (!check.list(root, "inputs", true, m.inputs, &Validator::tensor) ||
      !check.list(root, "weights", false, m.weights, &Validator::weight) ||
      !check.list(root, "outputs", true, m.outputs, &Validator::tensor))
    return false;
  out = std::move(m);
  return true;
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
  return {{"name", JsonValue::makeString(spec.name)},
          {"dtype", JsonValue::makeString(dtypeName(spec.dtype))},
          {"shape", shapeJson(spec.shape)}};
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
  JsonValue root =
      JsonValue::makeObject({{"format", JsonValue::makeInteger(format)},
                             {"model", JsonValue::makeString(model)},
                             {"ranks", JsonValue::makeInteger(ranks)},
                             {"inputs", tensors(inputs)},
                             {"outputs", tensors(outputs)},
                             {"weights", JsonValue::makeArray(std::move(ws))}});
  return root.serialize() + "\n";
}

} // namespace distopt::runtime
