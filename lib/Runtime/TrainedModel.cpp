//===- TrainedModel.cpp - the trained model's files -----------------------===//
//
// --save-onnx (the model with its initializers replaced, inline or as
// external data) and --save-weights.
//
//===----------------------------------------------------------------------===//

#include "TrainInternal.h"

#include "Protobuf.h"

namespace distopt::runtime::train {

namespace {

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

} // namespace

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

} // namespace distopt::runtime::train
