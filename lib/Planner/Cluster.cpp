//===- Cluster.cpp - cluster specification for the planner ----------------===//
//
// YAML I/O for cluster specs, the compiled-in presets, `local:N` and
// `NxPRESET`. Values are read through small wrapper types whose ScalarTraits
// reject non-positive numbers, so each such error is reported by YAML I/O at
// the offending scalar with its line and column.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Cluster.h"

#include "YAMLDiagnostics.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLTraits.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

using namespace distopt::planner;
using distopt::planner::detail::badScalar;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// DType
//===----------------------------------------------------------------------===//

unsigned distopt::planner::dtypeBytes(DType dtype) {
  switch (dtype) {
  case DType::FP32:
  case DType::TF32:
    return 4;
  case DType::BF16:
  case DType::FP16:
    return 2;
  }
  return 4;
}

bool distopt::planner::isHalfPrecision(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::FP16;
}

//===----------------------------------------------------------------------===//
// YAML mapping
//===----------------------------------------------------------------------===//

namespace {

/// A number > 0 (bandwidths, latencies, FLOP/s).
struct PositiveNumber {
  double value = 0;
};
/// A whole number > 0 (node and device counts, NICs).
struct PositiveCount {
  int64_t value = 0;
  bool operator==(const PositiveCount &o) const { return value == o.value; }
};
/// A whole number of bytes > 0, written as an integer or in exponent form
/// (`85899345920` or `80e9`).
struct ByteCount {
  int64_t value = 0;
};
/// Shortest "%.*g" rendering that reads back to the same double.
std::string formatDouble(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

bool parseFiniteDouble(StringRef s, double &out) {
  s = s.trim();
  if (s.empty() || !llvm::to_float(s, out))
    return false;
  return std::isfinite(out);
}

struct PeakFlops {
  std::array<PositiveNumber, kNumDTypes> perDType;
};

struct RawDevice {
  std::string name;
  PeakFlops peakFlops;
  PositiveNumber memoryBandwidth;
  ByteCount memoryCapacity;
};

struct RawLink {
  PositiveNumber bandwidth;
  PositiveNumber latency;
};

struct RawInterLink {
  PositiveNumber bandwidth;
  PositiveNumber latency;
  PositiveCount nics{1};
};

struct RawLinks {
  RawLink intraNode;
  std::optional<RawInterLink> interNode;
};

struct RawCluster {
  std::optional<std::string> name;
  PositiveCount nodes{1};
  PositiveCount devicesPerNode;
  RawDevice device;
  RawLinks links;
  /// Set when the top-level mapping was read at all.
  bool seen = false;
};

/// True once an input has reported an error (mapping() then stops asking
/// for more keys, which would only add follow-on diagnostics).
bool inputFailed(llvm::yaml::IO &io) {
  return !io.outputting() &&
         static_cast<bool>(static_cast<llvm::yaml::Input &>(io).error());
}

} // namespace

namespace llvm::yaml {

template <> struct ScalarTraits<PositiveNumber> {
  static void output(const PositiveNumber &v, void *, raw_ostream &os) {
    os << formatDouble(v.value);
  }
  static StringRef input(StringRef s, void *, PositiveNumber &v) {
    double d;
    if (!parseFiniteDouble(s, d))
      return badScalar("a number", s);
    if (!(d > 0))
      return badScalar("a number greater than 0", s);
    v.value = d;
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct ScalarTraits<PositiveCount> {
  static void output(const PositiveCount &v, void *, raw_ostream &os) {
    os << v.value;
  }
  static StringRef input(StringRef s, void *, PositiveCount &v) {
    int64_t n;
    if (s.trim().getAsInteger(10, n))
      return badScalar("a whole number", s);
    if (n <= 0)
      return badScalar("a whole number greater than 0", s);
    v.value = n;
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct ScalarTraits<ByteCount> {
  static void output(const ByteCount &v, void *, raw_ostream &os) {
    os << v.value;
  }
  static StringRef input(StringRef s, void *, ByteCount &v) {
    int64_t n;
    if (!s.trim().getAsInteger(10, n)) {
      if (n <= 0)
        return badScalar("a byte count greater than 0", s);
      v.value = n;
      return {};
    }
    double d;
    if (!parseFiniteDouble(s, d))
      return badScalar("a byte count", s);
    if (!(d > 0))
      return badScalar("a byte count greater than 0", s);
    if (d != std::floor(d) || d >= 9.2e18)
      return badScalar("a whole number of bytes below 2^63", s);
    v.value = static_cast<int64_t>(d);
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct MappingTraits<PeakFlops> {
  static void mapping(IO &io, PeakFlops &p) {
    for (unsigned i = 0; i < kNumDTypes; ++i)
      io.mapRequired(dtypeName(static_cast<DType>(i)), p.perDType[i]);
  }
  static std::string validate(IO &, PeakFlops &) {
    distopt::planner::detail::setUnknownKeyHint(
        "peak_flops takes fp32, tf32, bf16 and fp16");
    return {};
  }
};

template <> struct MappingTraits<RawDevice> {
  static void mapping(IO &io, RawDevice &d) {
    io.mapRequired("name", d.name);
    io.mapRequired("peak_flops", d.peakFlops);
    io.mapRequired("memory_bandwidth", d.memoryBandwidth);
    io.mapRequired("memory_capacity", d.memoryCapacity);
  }
  static std::string validate(IO &io, RawDevice &d) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected name, peak_flops, memory_bandwidth and memory_capacity");
    if (inputFailed(io))
      return {};
    if (StringRef(d.name).trim().empty())
      return "device 'name' must not be empty";
    return {};
  }
};

template <> struct MappingTraits<RawLink> {
  static void mapping(IO &io, RawLink &l) {
    io.mapRequired("bandwidth", l.bandwidth);
    io.mapRequired("latency", l.latency);
  }
  static std::string validate(IO &, RawLink &) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected bandwidth and latency");
    return {};
  }
};

template <> struct MappingTraits<RawInterLink> {
  static void mapping(IO &io, RawInterLink &l) {
    io.mapRequired("bandwidth", l.bandwidth);
    io.mapRequired("latency", l.latency);
    io.mapOptional("nics", l.nics, PositiveCount{1});
  }
  static std::string validate(IO &, RawInterLink &) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected bandwidth, latency and nics");
    return {};
  }
};

/// The context is the cluster's node count: several nodes need a network.
template <> struct MappingContextTraits<RawLinks, int64_t> {
  static void mapping(IO &io, RawLinks &l, int64_t &) {
    io.mapRequired("intra_node", l.intraNode);
    io.mapOptional("inter_node", l.interNode);
  }
  static std::string validate(IO &io, RawLinks &l, int64_t &nodes) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected intra_node and inter_node");
    if (inputFailed(io))
      return {};
    if (nodes > 1 && !l.interNode)
      return "'links' needs an 'inter_node' entry when 'nodes' is greater "
             "than 1";
    return {};
  }
};

template <> struct MappingTraits<RawCluster> {
  static void mapping(IO &io, RawCluster &c) {
    c.seen = true;
    io.mapOptional("name", c.name);
    io.mapOptional("nodes", c.nodes, PositiveCount{1});
    io.mapRequired("devices_per_node", c.devicesPerNode);
    io.mapRequired("device", c.device);
    io.mapRequired("links", c.links, c.nodes.value);
  }
  static std::string validate(IO &io, RawCluster &c) {
    distopt::planner::detail::setUnknownKeyHint(
        "expected name, nodes, devices_per_node, device and links");
    if (inputFailed(io))
      return {};
    // Keep device counts far from int64 overflow in products of them.
    constexpr int64_t kMaxDevices = int64_t(1) << 32;
    if (c.nodes.value > kMaxDevices / c.devicesPerNode.value)
      return "the cluster has more than 2^32 devices (nodes × "
             "devices_per_node)";
    return {};
  }
};

} // namespace llvm::yaml

//===----------------------------------------------------------------------===//
// Parsing and printing
//===----------------------------------------------------------------------===//

namespace {
thread_local std::string unknownKeyHint;
/// Where YAML I/O last said "unexpected scalar": the ScalarTraits error that
/// follows it at the same place only repeats it.
thread_local const char *unexpectedScalarAt = nullptr;
} // namespace

void distopt::planner::detail::setUnknownKeyHint(StringRef hint) {
  unknownKeyHint = hint.str();
}

void distopt::planner::detail::resetYAMLDiagnostics() {
  unknownKeyHint.clear();
  unexpectedScalarAt = nullptr;
}

void distopt::planner::detail::collectYAMLDiagnostic(
    const llvm::SMDiagnostic &diag, void *context) {
  auto *out = static_cast<std::string *>(context);
  StringRef msg = diag.getMessage();
  const char *at = diag.getLoc().getPointer();
  if (at && at == unexpectedScalarAt)
    return;
  std::string replacement;
  if (msg == "unexpected scalar") {
    // YAML I/O's wording for "wanted a scalar, found a list, a mapping or
    // an empty value"; an empty value is located at the next token.
    unexpectedScalarAt = at;
    replacement = "expected a single value here, found a list, a mapping or "
                  "an empty value";
  } else if (msg.starts_with("unknown key '") && !unknownKeyHint.empty()) {
    replacement = (msg + " (" + unknownKeyHint + ")").str();
  }
  llvm::raw_string_ostream os(*out);
  if (replacement.empty() || !diag.getSourceMgr()) {
    diag.print(/*ProgName=*/nullptr, os, /*ShowColors=*/false);
    return;
  }
  llvm::SMDiagnostic rewritten(
      *diag.getSourceMgr(), diag.getLoc(), diag.getFilename(), diag.getLineNo(),
      diag.getColumnNo(), diag.getKind(), replacement, diag.getLineContents(),
      diag.getRanges(), diag.getFixIts());
  rewritten.print(/*ProgName=*/nullptr, os, /*ShowColors=*/false);
}

bool distopt::planner::detail::isBlankYAML(StringRef yaml) {
  llvm::SmallVector<StringRef> lines;
  yaml.split(lines, '\n');
  return llvm::all_of(lines, [](StringRef line) {
    line = line.trim();
    return line.empty() || line.starts_with("#") || line == "---" ||
           line == "...";
  });
}

llvm::Expected<Cluster> distopt::planner::parseCluster(StringRef yaml,
                                                       StringRef bufferName) {
  if (detail::isBlankYAML(yaml))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%s: error: empty cluster spec (expected a mapping with "
        "'devices_per_node', 'device' and 'links')",
        bufferName.str().c_str());
  RawCluster raw;
  if (llvm::Error e = detail::readYAML(yaml, bufferName, raw, "cluster spec"))
    return std::move(e);
  // Some of YAML I/O's failures come without a diagnostic.
  if (!raw.seen)
    return detail::invalidYAML(bufferName, "cluster spec");

  Cluster c;
  c.name = raw.name ? *raw.name : bufferName.str();
  c.nodes = raw.nodes.value;
  c.devicesPerNode = raw.devicesPerNode.value;
  c.device.name = raw.device.name;
  for (unsigned i = 0; i < kNumDTypes; ++i)
    c.device.peakFlops[i] = raw.device.peakFlops.perDType[i].value;
  c.device.memoryBandwidth = raw.device.memoryBandwidth.value;
  c.device.memoryCapacity = raw.device.memoryCapacity.value;
  c.intraNode.bandwidth = raw.links.intraNode.bandwidth.value;
  c.intraNode.latency = raw.links.intraNode.latency.value;
  if (raw.links.interNode) {
    InterNodeLinkSpec inter;
    inter.bandwidth = raw.links.interNode->bandwidth.value;
    inter.latency = raw.links.interNode->latency.value;
    inter.nics = raw.links.interNode->nics.value;
    c.interNode = inter;
  }
  return c;
}

std::string distopt::planner::printCluster(const Cluster &c) {
  RawCluster raw;
  raw.name = c.name;
  raw.nodes.value = c.nodes;
  raw.devicesPerNode.value = c.devicesPerNode;
  raw.device.name = c.device.name;
  for (unsigned i = 0; i < kNumDTypes; ++i)
    raw.device.peakFlops.perDType[i].value = c.device.peakFlops[i];
  raw.device.memoryBandwidth.value = c.device.memoryBandwidth;
  raw.device.memoryCapacity.value = c.device.memoryCapacity;
  raw.links.intraNode.bandwidth.value = c.intraNode.bandwidth;
  raw.links.intraNode.latency.value = c.intraNode.latency;
  if (c.interNode) {
    RawInterLink inter;
    inter.bandwidth.value = c.interNode->bandwidth;
    inter.latency.value = c.interNode->latency;
    inter.nics.value = c.interNode->nics;
    raw.links.interNode = inter;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::yaml::Output yout(os);
  yout << raw;
  return text;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {
struct PresetText {
  const char *name;
  const char *yaml;
};
/// Generated at configure time from clusters/*.yaml (lib/Planner/
/// CMakeLists.txt), so the binary needs no installed data files.
const PresetText kPresets[] = {
#include "ClusterPresets.inc"
};
/// The per-core template behind `local:N`; not usable by name.
constexpr StringRef kLocalTemplate = "local";
} // namespace

std::optional<StringRef> distopt::planner::clusterPresetYAML(StringRef name) {
  for (const PresetText &p : kPresets)
    if (name == p.name)
      return StringRef(p.yaml);
  return std::nullopt;
}

std::vector<std::string> distopt::planner::clusterPresetNames() {
  std::vector<std::string> names;
  for (const PresetText &p : kPresets)
    if (StringRef(p.name) != kLocalTemplate)
      names.push_back(p.name);
  std::sort(names.begin(), names.end());
  return names;
}

static llvm::Expected<Cluster> loadPreset(StringRef name) {
  std::optional<StringRef> text = clusterPresetYAML(name);
  if (!text)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no cluster preset named '%s'",
                                   name.str().c_str());
  return parseCluster(*text, ("clusters/" + name + ".yaml").str());
}

llvm::Expected<Cluster> distopt::planner::multiplyNodes(const Cluster &cluster,
                                                        int64_t factor) {
  if (factor <= 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "node count must be greater than 0, got %lld",
        static_cast<long long>(factor));
  if (!cluster.interNode)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cluster '%s' has no inter-node link, so it cannot span several "
        "nodes",
        cluster.name.c_str());
  constexpr int64_t kMaxDevices = int64_t(1) << 32;
  if (factor > kMaxDevices / cluster.numDevices())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "%lld nodes of '%s' would be more than 2^32 devices",
        static_cast<long long>(factor), cluster.name.c_str());
  Cluster result = cluster;
  result.nodes = cluster.nodes * factor;
  result.name = std::to_string(factor) + "x" + cluster.name;
  return result;
}

llvm::Expected<Cluster>
distopt::planner::makeLocalCluster(int64_t ranks, unsigned hardwareThreads,
                                   uint64_t physicalMemory) {
  if (ranks <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "local:N needs N greater than 0, got %lld",
                                   static_cast<long long>(ranks));
  constexpr int64_t kMaxLocalRanks = 1 << 16;
  if (ranks > kMaxLocalRanks)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "local:%lld: at most %lld local ranks",
        static_cast<long long>(ranks), static_cast<long long>(kMaxLocalRanks));
  llvm::Expected<Cluster> base = loadPreset(kLocalTemplate);
  if (!base)
    return base.takeError();
  Cluster c = std::move(*base);
  c.name = "local:" + std::to_string(ranks);
  c.nodes = 1;
  c.devicesPerNode = ranks;
  c.interNode.reset();
  // Cores per rank, as the runtime gives them (dort_set_num_threads): each
  // of N <= T ranks runs floor(T / N) threads; oversubscribed ranks share
  // the cores.
  unsigned threads = std::max(1u, hardwareThreads);
  double share =
      ranks <= static_cast<int64_t>(threads)
          ? static_cast<double>(threads / static_cast<unsigned>(ranks))
          : static_cast<double>(threads) / static_cast<double>(ranks);
  for (double &p : c.device.peakFlops)
    p *= share;
  c.device.memoryBandwidth *= share;
  if (physicalMemory > 0) {
    double perRank =
        0.9 * static_cast<double>(physicalMemory) / static_cast<double>(ranks);
    c.device.memoryCapacity =
        std::max<int64_t>(1, static_cast<int64_t>(perRank));
  }
  return c;
}

static uint64_t physicalMemoryBytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  long pages = sysconf(_SC_PHYS_PAGES);
  long pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0)
    return static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
#endif
  return 0;
}

static llvm::Expected<Cluster> loadClusterFile(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(
        buffer.getError(), "cannot read cluster spec '%s': %s",
        path.str().c_str(), buffer.getError().message().c_str());
  return parseCluster((*buffer)->getBuffer(), path);
}

static std::string knownSpecsHint() {
  std::string hint = "expected a YAML file, local:N, a preset (";
  std::vector<std::string> names = clusterPresetNames();
  for (size_t i = 0; i < names.size(); ++i)
    hint += (i ? ", " : "") + names[i];
  hint += "), NxPRESET (e.g. 128xdgx-a100x8), hosts:A:N,B:N or "
          "hostfile:FILE";
  return hint;
}

llvm::Expected<Cluster>
distopt::planner::resolveCluster(StringRef specOrPreset) {
  StringRef spec = specOrPreset.trim();
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid cluster '" + spec + "': " + why);
  };
  if (spec.empty())
    return fail("empty; " + knownSpecsHint());

  if (spec.consume_front("local:")) {
    int64_t ranks;
    if (spec.getAsInteger(10, ranks) || ranks <= 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "invalid cluster 'local:%s': N must be a whole number greater "
          "than 0",
          spec.str().c_str());
    unsigned threads = std::thread::hardware_concurrency();
    return makeLocalCluster(ranks, threads, physicalMemoryBytes());
  }

  if (spec.starts_with("hosts:") || spec.starts_with("hostfile:")) {
    std::vector<HostSlots> hosts;
    std::string error;
    StringRef rest = spec;
    bool ok = rest.consume_front("hosts:") ? parseHosts(rest, hosts, error)
                                           : (rest.consume_front("hostfile:"),
                                              readHostfile(rest, hosts, error));
    if (!ok)
      return fail(error);
    return makeHostsCluster(hosts, specOrPreset.trim(),
                            std::thread::hardware_concurrency(),
                            physicalMemoryBytes());
  }

  bool looksLikePath = spec.contains('/') || spec.contains('\\') ||
                       spec.ends_with(".yaml") || spec.ends_with(".yml");
  if (looksLikePath)
    return loadClusterFile(spec);

  if (spec == kLocalTemplate)
    return fail("'local' needs a rank count: local:N");
  if (clusterPresetYAML(spec))
    return loadPreset(spec);

  // NxPRESET
  size_t x = spec.find('x');
  if (x != StringRef::npos && x > 0) {
    StringRef count = spec.take_front(x), preset = spec.drop_front(x + 1);
    if (llvm::all_of(count, llvm::isDigit)) {
      int64_t factor;
      if (count.getAsInteger(10, factor) || factor <= 0)
        return fail("the node count must be a whole number greater than 0");
      if (preset.starts_with("local"))
        return fail("local:N describes this machine alone; it cannot be "
                    "repeated over nodes");
      if (!clusterPresetYAML(preset) || preset == kLocalTemplate)
        return fail("'" + preset + "' is not a preset; " + knownSpecsHint());
      llvm::Expected<Cluster> base = loadPreset(preset);
      if (!base)
        return base.takeError();
      return multiplyNodes(*base, factor);
    }
  }

  if (llvm::sys::fs::exists(spec))
    return loadClusterFile(spec);
  return fail(knownSpecsHint());
}
