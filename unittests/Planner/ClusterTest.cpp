//===- ClusterTest.cpp - cluster specs, presets, local:N, NxPRESET --------===//

#include "distopt/Planner/Cluster.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "PlannerInputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include <string>

using namespace distopt::planner;

namespace {

/// A valid two-node spec. Line numbers matter: the error tests below edit
/// one line and expect the diagnostic there.
constexpr const char *kSpec = R"(name: test
nodes: 2
devices_per_node: 4
device:
  name: GPU
  peak_flops:
    fp32: 1e12
    tf32: 2e12
    bf16: 4e12
    fp16: 4e12
  memory_bandwidth: 1e12
  memory_capacity: 16e9
links:
  intra_node:
    bandwidth: 100e9
    latency: 2e-6
  inter_node:
    bandwidth: 50e9
    latency: 5e-6
    nics: 2
)";

/// kSpec with the first occurrence of `from` replaced by `to`.
std::string edit(llvm::StringRef from, llvm::StringRef to) {
  std::string s = kSpec;
  size_t at = s.find(from.str());
  EXPECT_NE(at, std::string::npos) << from.str();
  if (at != std::string::npos)
    s.replace(at, from.size(), to.str());
  return s;
}

/// The error message of a failed parse ("" and a test failure if it
/// succeeded).
std::string errorOf(llvm::Expected<Cluster> c) {
  if (c) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return llvm::toString(c.takeError());
}

Cluster ok(llvm::Expected<Cluster> c) {
  if (!c) {
    ADD_FAILURE() << llvm::toString(c.takeError());
    return Cluster();
  }
  return std::move(*c);
}

} // namespace

TEST(DType, NamesBytesAndHalfPrecision) {
  EXPECT_EQ(dtypeName(DType::TF32), "tf32");
  EXPECT_EQ(parseDType("bf16"), DType::BF16);
  EXPECT_FALSE(parseDType("int8").has_value());
  EXPECT_EQ(dtypeBytes(DType::FP32), 4u);
  EXPECT_EQ(dtypeBytes(DType::TF32), 4u); // stored as fp32
  EXPECT_EQ(dtypeBytes(DType::BF16), 2u);
  EXPECT_EQ(dtypeBytes(DType::FP16), 2u);
  EXPECT_TRUE(isHalfPrecision(DType::FP16));
  EXPECT_FALSE(isHalfPrecision(DType::TF32));
}

TEST(ParseCluster, ReadsEveryField) {
  Cluster c = ok(parseCluster(kSpec, "spec.yaml"));
  EXPECT_EQ(c.name, "test");
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.devicesPerNode, 4);
  EXPECT_EQ(c.numDevices(), 8);
  EXPECT_EQ(c.nodeOf(5), 1); // ranks are node-major: 5 / 4 = 1
  EXPECT_EQ(c.device.name, "GPU");
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 1e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::TF32), 2e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::BF16), 4e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP16), 4e12);
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 1e12);
  EXPECT_EQ(c.device.memoryCapacity, 16000000000);
  EXPECT_DOUBLE_EQ(c.intraNode.bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(c.intraNode.latency, 2e-6);
  ASSERT_TRUE(c.interNode.has_value());
  EXPECT_DOUBLE_EQ(c.interNode->bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(c.interNode->latency, 5e-6);
  EXPECT_EQ(c.interNode->nics, 2);
}

TEST(ParseCluster, OptionalFieldsAndFlowStyle) {
  // No name (defaults to the buffer name), no nodes (1), no inter_node
  // (allowed on one node), integer byte count, flow mappings.
  const char *spec = R"(devices_per_node: 2
device:
  name: cpu
  peak_flops: {fp32: 1e11, tf32: 1e11, bf16: 1e11, fp16: 1e11}
  memory_bandwidth: 2e10
  memory_capacity: 1073741824
links: {intra_node: {bandwidth: 1e10, latency: 1e-6}}
)";
  Cluster c = ok(parseCluster(spec, "mine.yaml"));
  EXPECT_EQ(c.name, "mine.yaml");
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devicesPerNode, 2);
  EXPECT_EQ(c.device.memoryCapacity, 1073741824);
  EXPECT_FALSE(c.interNode.has_value());

  // nics defaults to 1.
  Cluster d = ok(parseCluster(edit("    nics: 2\n", ""), "spec.yaml"));
  ASSERT_TRUE(d.interNode.has_value());
  EXPECT_EQ(d.interNode->nics, 1);
}

TEST(ParseCluster, PrintRoundTrips) {
  Cluster c = ok(parseCluster(kSpec, "spec.yaml"));
  std::string text = printCluster(c);
  Cluster d = ok(parseCluster(text, "printed.yaml"));
  EXPECT_EQ(d.name, c.name);
  EXPECT_EQ(d.nodes, c.nodes);
  EXPECT_EQ(d.devicesPerNode, c.devicesPerNode);
  EXPECT_EQ(d.device.name, c.device.name);
  EXPECT_EQ(d.device.peakFlops, c.device.peakFlops);
  EXPECT_EQ(d.device.memoryBandwidth, c.device.memoryBandwidth);
  EXPECT_EQ(d.device.memoryCapacity, c.device.memoryCapacity);
  EXPECT_EQ(d.intraNode.bandwidth, c.intraNode.bandwidth);
  EXPECT_EQ(d.intraNode.latency, c.intraNode.latency);
  ASSERT_TRUE(d.interNode.has_value());
  EXPECT_EQ(d.interNode->bandwidth, c.interNode->bandwidth);
  EXPECT_EQ(d.interNode->nics, c.interNode->nics);
}

//===----------------------------------------------------------------------===//
// Errors: each names the buffer, the line and the column.
//===----------------------------------------------------------------------===//

TEST(ParseClusterErrors, MissingField) {
  // The mapping that lacks the key is reported (its first key's position).
  std::string e = errorOf(
      parseCluster(edit("  memory_bandwidth: 1e12\n", ""), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:5:3: error: missing required key "
                   "'memory_bandwidth'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("devices_per_node: 4\n", ""), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:1:1: error: missing required key "
                   "'devices_per_node'"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, MissingDType) {
  std::string e =
      errorOf(parseCluster(edit("    tf32: 2e12\n", ""), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:7:5: error: missing required key 'tf32'"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, UnknownDType) {
  std::string e = errorOf(
      parseCluster(edit("    fp16: 4e12\n", "    fp16: 4e12\n    int8: 8e12\n"),
                   "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:11:5: error: unknown key 'int8' (peak_flops "
                   "takes fp32, tf32, bf16 and fp16)"),
            std::string::npos)
      << e;
  // The offending line is shown.
  EXPECT_NE(e.find("    int8: 8e12"), std::string::npos) << e;
}

TEST(ParseClusterErrors, UnknownKey) {
  std::string e = errorOf(
      parseCluster(edit("nodes: 2\n", "nodes: 2\ngpus: 8\n"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:3:1: error: unknown key 'gpus' (expected name, "
                   "nodes, devices_per_node, device and links)"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, NegativeAndZeroValues) {
  std::string e = errorOf(parseCluster(
      edit("memory_bandwidth: 1e12", "memory_bandwidth: -1e12"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:11:21: error: expected a number greater than 0, "
                   "got '-1e12'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("latency: 2e-6", "latency: 0"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:16:14: error: expected a number greater than 0, "
                   "got '0'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("fp32: 1e12", "fp32: 0.0"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:7:11: error: expected a number greater than 0"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("nodes: 2", "nodes: 0"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:2:8: error: expected a whole number greater "
                   "than 0, got '0'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("nics: 2", "nics: -2"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:20:11: error: expected a whole number greater "
                   "than 0, got '-2'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("memory_capacity: 16e9", "memory_capacity: 0"),
                           "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:12:20: error: expected a byte count greater "
                   "than 0, got '0'"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, WrongKindsOfNumbers) {
  std::string e = errorOf(parseCluster(
      edit("devices_per_node: 4", "devices_per_node: 2.5"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:3:19: error: expected a whole number, got "
                   "'2.5'"),
            std::string::npos)
      << e;
  e = errorOf(
      parseCluster(edit("bandwidth: 100e9", "bandwidth: fast"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:15:16: error: expected a number, got 'fast'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(edit("fp32: 1e12", "fp32: inf"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:7:11: error: expected a number, got 'inf'"),
            std::string::npos)
      << e;
  e = errorOf(parseCluster(
      edit("memory_capacity: 16e9", "memory_capacity: 1.5"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:12:20: error: expected a whole number of bytes"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, MalformedYAML) {
  // An unclosed flow mapping.
  std::string e = errorOf(parseCluster(
      edit("  intra_node:\n    bandwidth: 100e9\n    latency: 2e-6\n",
           "  intra_node: {bandwidth: 100e9, latency: 2e-6\n"),
      "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("error:"), std::string::npos) << e;
  // A tab in indentation is a YAML syntax error, reported at its line.
  e = errorOf(parseCluster("devices_per_node: 1\n\tdevice: x\n", "tab.yaml"));
  EXPECT_NE(e.find("tab.yaml:2:"), std::string::npos) << e;
  // A sequence where a mapping belongs.
  e = errorOf(
      parseCluster(edit("  name: GPU\n", "  name: [GPU]\n"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:5:10: error: expected a single value here, "
                   "found a list, a mapping or an empty value"),
            std::string::npos)
      << e;
  // ... reported once: the number parser's "got ''" would only repeat it.
  EXPECT_EQ(e.find("error:", e.find("error:") + 1), std::string::npos) << e;
  // An empty value is located at the next token (YAML I/O's position).
  e = errorOf(parseCluster(edit("latency: 2e-6", "latency:"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:17:3: error: expected a single value here"),
            std::string::npos)
      << e;
  // Not a mapping at all.
  e = errorOf(parseCluster("just a string\n", "s.yaml"));
  EXPECT_NE(e.find("s.yaml:1:1: error: not a mapping"), std::string::npos) << e;
}

TEST(ParseClusterErrors, EmptySpec) {
  std::string e = errorOf(parseCluster("", "empty.yaml"));
  EXPECT_NE(e.find("empty.yaml: error: empty cluster spec"), std::string::npos)
      << e;
  e = errorOf(parseCluster("# only a comment\n", "c.yaml"));
  EXPECT_NE(e.find("c.yaml: error: empty cluster spec"), std::string::npos)
      << e;
}

TEST(ParseClusterErrors, SeveralNodesNeedANetwork) {
  std::string e = errorOf(parseCluster(
      edit("  inter_node:\n    bandwidth: 50e9\n    latency: 5e-6\n    nics: "
           "2\n",
           ""),
      "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:14:3: error: 'links' needs an 'inter_node' "
                   "entry when 'nodes' is greater than 1"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, EmptyDeviceName) {
  std::string e =
      errorOf(parseCluster(edit("  name: GPU", "  name: ''"), "spec.yaml"));
  EXPECT_NE(e.find("spec.yaml:5:3: error: device 'name' must not be empty"),
            std::string::npos)
      << e;
}

TEST(ParseClusterErrors, OddInputsGiveErrorsNotCrashes) {
  // Empty and null values, wrong node kinds, aliases, duplicate keys, tags,
  // several documents, binary junk: each must come back as an error.
  const std::pair<const char *, const char *> edits[] = {
      {"latency: 2e-6", "latency:"},
      {"latency: 2e-6", "latency: ~"},
      {"latency: 2e-6", "latency: [1, 2]"},
      {"latency: 2e-6", "latency: {a: 1}"},
      {"    fp16: 4e12\n", "    fp16:\n"},
      {"    fp16: 4e12\n", "    fp16: 4e12\n    int8:\n"},
      {"    fp16: 4e12\n", "    fp16: 4e12\n    int8: [1]\n"},
      {"    fp16: 4e12\n", "    fp16: 4e12\n    fp16: 5e12\n"},
      {"links:", "links: ~\nx:"},
      {"nodes: 2", "nodes: &n 2\nalias: *n"},
      {"nodes: 2", "nodes: !!str 2x"},
      {"name: test", "name: test\n---\nname: other"},
      {"name: test", "name: \"unterminated"},
      {"name: test", "\x01\xff\xfe"},
  };
  for (auto [from, to] : edits) {
    llvm::Expected<Cluster> c = parseCluster(edit(from, to), "odd.yaml");
    if (c) {
      // Only a second document may be ignored; everything else must fail.
      EXPECT_NE(std::string(to).find("---"), std::string::npos) << to;
      continue;
    }
    std::string e = llvm::toString(c.takeError());
    EXPECT_NE(e.find("odd.yaml"), std::string::npos) << to << "\n" << e;
  }
  for (const char *whole : {"[]", "- a\n- b\n", "~", "{", "}", ":", "\"\"",
                            "devices_per_node: 1\ndevice: ~\nlinks: ~\n"}) {
    llvm::Expected<Cluster> c = parseCluster(whole, "odd.yaml");
    ASSERT_FALSE(static_cast<bool>(c)) << whole;
    std::string e = llvm::toString(c.takeError());
    EXPECT_NE(e.find("odd.yaml"), std::string::npos) << whole << "\n" << e;
  }
}

TEST(ParseClusterErrors, TooManyDevices) {
  std::string e =
      errorOf(parseCluster(edit("nodes: 2", "nodes: 4294967296"), "spec.yaml"));
  EXPECT_NE(e.find("more than 2^32 devices"), std::string::npos) << e;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

TEST(Presets, NamesExcludeTheLocalTemplate) {
  std::vector<std::string> names = clusterPresetNames();
  EXPECT_EQ(names, (std::vector<std::string>{"dgx-a100x8", "dgx-h100x8"}));
  EXPECT_TRUE(clusterPresetYAML("local").has_value());
}

TEST(Presets, CompiledInCopiesMatchTheRepository) {
  for (const char *name : {"dgx-a100x8", "dgx-h100x8", "local"}) {
    std::string path = std::string(DISTOPT_CLUSTERS_DIR) + "/" + name + ".yaml";
    auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
    ASSERT_TRUE(static_cast<bool>(buffer)) << path;
    std::optional<llvm::StringRef> embedded = clusterPresetYAML(name);
    ASSERT_TRUE(embedded.has_value()) << name;
    EXPECT_EQ(embedded->str(), (*buffer)->getBuffer().str()) << name;
  }
}

TEST(Presets, DgxA100) {
  Cluster c = ok(resolveCluster("dgx-a100x8"));
  EXPECT_EQ(c.name, "dgx-a100x8");
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devicesPerNode, 8);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::TF32), 156e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::BF16), 312e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP16), 312e12);
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 2.039e12);
  EXPECT_EQ(c.device.memoryCapacity, int64_t(80) << 30);
  EXPECT_DOUBLE_EQ(c.intraNode.bandwidth, 300e9);
  ASSERT_TRUE(c.interNode.has_value());
  // 8 × 200 Gb/s = 1600 Gb/s = 200 GB/s per node.
  EXPECT_DOUBLE_EQ(c.interNode->bandwidth, 8 * 200e9 / 8);
  EXPECT_EQ(c.interNode->nics, 8);
}

TEST(Presets, DgxH100) {
  Cluster c = ok(resolveCluster("dgx-h100x8"));
  EXPECT_EQ(c.devicesPerNode, 8);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 67e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::TF32), 494.5e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::BF16), 989.5e12);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP16), 989.5e12);
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 3.35e12);
  EXPECT_EQ(c.device.memoryCapacity, int64_t(81559) << 20);
  EXPECT_DOUBLE_EQ(c.intraNode.bandwidth, 450e9);
  ASSERT_TRUE(c.interNode.has_value());
  // 8 × 400 Gb/s = 3200 Gb/s = 400 GB/s per node.
  EXPECT_DOUBLE_EQ(c.interNode->bandwidth, 8 * 400e9 / 8);
  EXPECT_EQ(c.interNode->nics, 8);
}

TEST(Presets, MultiNode) {
  Cluster c = ok(resolveCluster("128xdgx-a100x8"));
  EXPECT_EQ(c.name, "128xdgx-a100x8");
  EXPECT_EQ(c.nodes, 128);
  EXPECT_EQ(c.devicesPerNode, 8);
  EXPECT_EQ(c.numDevices(), 1024);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP16), 312e12);
  EXPECT_EQ(ok(resolveCluster("1xdgx-h100x8")).nodes, 1);
  // multiplyNodes multiplies: 3 × (2-node spec) = 6 nodes.
  Cluster two = ok(parseCluster(kSpec, "spec.yaml"));
  Cluster six = ok(multiplyNodes(two, 3));
  EXPECT_EQ(six.nodes, 6);
  EXPECT_EQ(six.name, "3xtest");
}

TEST(Presets, MultiNodeErrors) {
  std::string e = errorOf(resolveCluster("0xdgx-a100x8"));
  EXPECT_NE(e.find("node count must be a whole number greater than 0"),
            std::string::npos)
      << e;
  e = errorOf(resolveCluster("4xdgx-z100x8"));
  EXPECT_NE(e.find("'dgx-z100x8' is not a preset"), std::string::npos) << e;
  EXPECT_NE(e.find("dgx-a100x8, dgx-h100x8"), std::string::npos) << e;
  e = errorOf(resolveCluster("2xlocal:4"));
  EXPECT_NE(e.find("cannot be repeated over nodes"), std::string::npos) << e;
  e = errorOf(resolveCluster("99999999999999xdgx-a100x8"));
  EXPECT_NE(e.find("more than 2^32 devices"), std::string::npos) << e;
  Cluster local = ok(resolveCluster("local:2"));
  e = errorOf(multiplyNodes(local, 2));
  EXPECT_NE(e.find("has no inter-node link"), std::string::npos) << e;
}

TEST(Presets, UnknownName) {
  std::string e = errorOf(resolveCluster("dgx-b200x8"));
  EXPECT_NE(e.find("invalid cluster 'dgx-b200x8'"), std::string::npos) << e;
  EXPECT_NE(e.find("local:N"), std::string::npos) << e;
  e = errorOf(resolveCluster("  "));
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  e = errorOf(resolveCluster("local"));
  EXPECT_NE(e.find("local:N"), std::string::npos) << e;
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

TEST(ResolveCluster, ReadsAFile) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("cluster", "yaml", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << kSpec;
  }
  Cluster c = ok(resolveCluster(path));
  EXPECT_EQ(c.name, "test");
  EXPECT_EQ(c.numDevices(), 8);

  // Errors in a file name the file.
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << edit("latency: 5e-6", "latency: -5e-6");
  }
  std::string e = errorOf(resolveCluster(path));
  EXPECT_NE(
      e.find((path + ":19:14: error: expected a number greater than 0").str()),
      std::string::npos)
      << e;
  llvm::sys::fs::remove(path);

  e = errorOf(resolveCluster("/nonexistent/dir/cluster.yaml"));
  EXPECT_NE(e.find("cannot read cluster spec '/nonexistent/dir/cluster.yaml'"),
            std::string::npos)
      << e;
}

//===----------------------------------------------------------------------===//
// local:N
//===----------------------------------------------------------------------===//

TEST(LocalCluster, PerCoreFigures) {
  // 2 ranks on 2 hardware threads, 24 GiB: no oversubscription.
  const uint64_t mem = uint64_t(24) << 30;
  Cluster c = ok(makeLocalCluster(2, 2, mem));
  EXPECT_EQ(c.name, "local:2");
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devicesPerNode, 2);
  EXPECT_FALSE(c.interNode.has_value());
  // 2 FMA ports × 16 lanes × 2 FLOP × 2.0 GHz = 128 GFLOP/s.
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 2 * 16 * 2 * 2.0e9);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::BF16), 128e9);
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 10e9);
  // 0.9 × 24 GiB / 2 = 0.9 × 25769803776 / 2 = 11596411699.2 -> 11596411699.
  EXPECT_EQ(c.device.memoryCapacity, 11596411699);
  EXPECT_DOUBLE_EQ(c.intraNode.bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(c.intraNode.latency, 1e-6);
}

TEST(LocalCluster, OversubscribedRanksShareCores) {
  // 8 ranks on 2 threads: each gets 2/8 of a core.
  Cluster c = ok(makeLocalCluster(8, 2, uint64_t(8) << 30));
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 128e9 * 2 / 8); // 32 GFLOP/s
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 10e9 * 2 / 8);    // 2.5 GB/s
  // 0.9 × 8 GiB / 8 = 0.9 × 1073741824 = 966367641.6 -> 966367641.
  EXPECT_EQ(c.device.memoryCapacity, 966367641);
  // Unknown memory keeps the template's 8 GiB.
  EXPECT_EQ(ok(makeLocalCluster(1, 1, 0)).device.memoryCapacity, int64_t(8)
                                                                     << 30);
}

TEST(LocalCluster, FewerRanksThanCoresGetSeveralCoresEach) {
  // The runtime runs floor(8 / 3) = 2 threads in each of 3 ranks.
  Cluster c = ok(makeLocalCluster(3, 8, uint64_t(8) << 30));
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), 128e9 * 2);
  EXPECT_DOUBLE_EQ(c.device.memoryBandwidth, 10e9 * 2);
  EXPECT_DOUBLE_EQ(ok(makeLocalCluster(1, 8, 0)).device.peak(DType::FP32),
                   128e9 * 8);
}

TEST(LocalCluster, ResolvesOnThisMachine) {
  Cluster c = ok(resolveCluster("local:4"));
  EXPECT_EQ(c.name, "local:4");
  EXPECT_EQ(c.devicesPerNode, 4);
  EXPECT_GT(c.device.memoryCapacity, 0);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_LE(c.device.peak(DType::FP32), 128e9 * std::max(1u, cores / 4));
}

TEST(LocalCluster, Errors) {
  std::string e = errorOf(resolveCluster("local:0"));
  EXPECT_NE(e.find("invalid cluster 'local:0': N must be a whole number "
                   "greater than 0"),
            std::string::npos)
      << e;
  e = errorOf(resolveCluster("local:two"));
  EXPECT_NE(e.find("invalid cluster 'local:two'"), std::string::npos) << e;
  e = errorOf(makeLocalCluster(-1, 2, 0));
  EXPECT_NE(e.find("greater than 0"), std::string::npos) << e;
  e = errorOf(makeLocalCluster(100000, 2, 0));
  EXPECT_NE(e.find("at most 65536 local ranks"), std::string::npos) << e;
}

/// The inputs that once broke the planner-inputs fuzzer (scripts/fuzz-runtime),
/// kept in fuzz/planner-regressions/: each is read again without a crash.
TEST(ClusterFuzzRegressions, ReadAgain) {
  std::vector<std::string> files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(DISTOPT_PLANNER_FUZZ_REGRESSIONS, ec), end;
       !ec && it != end; it.increment(ec))
    files.push_back(it->path());
  ASSERT_FALSE(files.empty()) << "no inputs in " DISTOPT_PLANNER_FUZZ_REGRESSIONS;
  std::sort(files.begin(), files.end());
  for (const std::string &path : files) {
    SCOPED_TRACE(path);
    auto buf = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(bool(buf));
    distopt::fuzz::readPlannerInput(
        reinterpret_cast<const uint8_t *>((*buf)->getBufferStart()),
        (*buf)->getBufferSize());
  }
}

TEST(HostsCluster, NodesOfThisMachinesRanksOverEthernet) {
  std::vector<HostSlots> hosts = {{"a", 2}, {"b", 2}, {"c", 2}};
  Cluster c =
      ok(makeHostsCluster(hosts, "hosts:a:2,b:2,c:2", 2, uint64_t(24) << 30));
  Cluster local = ok(makeLocalCluster(2, 2, uint64_t(24) << 30));
  EXPECT_EQ(c.name, "hosts:a:2,b:2,c:2");
  EXPECT_EQ(c.nodes, 3);
  EXPECT_EQ(c.devicesPerNode, 2);
  EXPECT_DOUBLE_EQ(c.device.peak(DType::FP32), local.device.peak(DType::FP32));
  EXPECT_EQ(c.device.memoryCapacity, local.device.memoryCapacity);
  ASSERT_TRUE(c.interNode.has_value());
  EXPECT_DOUBLE_EQ(c.interNode->bandwidth, 1.25e9);
  EXPECT_DOUBLE_EQ(c.interNode->latency, 50e-6);
  std::string e = errorOf(makeHostsCluster({{"a", 2}, {"b", 4}}, "x", 2, 0));
  EXPECT_NE(e.find("host a has 2 slots and b 4; the planner's nodes are alike"),
            std::string::npos)
      << e;
}

TEST(HostsCluster, FromASpecOrAHostfile) {
  Cluster c = ok(resolveCluster("hosts:n1:4,n2:4"));
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.devicesPerNode, 4);
  llvm::SmallString<128> path;
  ASSERT_FALSE(
      llvm::sys::fs::createTemporaryFile("distopt-hosts", "txt", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << "# the nodes\nn1 slots=4 max_slots=8\nn2:4\n\nn3 slots=4\n";
  }
  Cluster f = ok(resolveCluster(("hostfile:" + path).str()));
  EXPECT_EQ(f.nodes, 3);
  EXPECT_EQ(f.devicesPerNode, 4);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << "n1 slots=4\nn2 cores=4\n";
  }
  std::string e = errorOf(resolveCluster(("hostfile:" + path).str()));
  EXPECT_NE(e.find(":2: 'cores=4' is not slots=N or max_slots=N"),
            std::string::npos)
      << e;
  llvm::sys::fs::remove(path);
  e = errorOf(resolveCluster("hosts:n1:x"));
  EXPECT_NE(e.find("invalid cluster 'hosts:n1:x': 'n1:x' is not HOST or "
                   "HOST:SLOTS"),
            std::string::npos)
      << e;
  e = errorOf(resolveCluster("hostfile:/nonexistent/hosts"));
  EXPECT_NE(e.find("cannot read hostfile '/nonexistent/hosts'"),
            std::string::npos)
      << e;
}
