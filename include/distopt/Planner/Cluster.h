//===- Cluster.h - cluster specification for the planner --------*- C++ -*-===//
//
// A cluster is `nodes` identical nodes of `devices_per_node` identical
// devices. The planner needs, per device, the peak dense FLOP/s for each
// compute dtype, the memory bandwidth and capacity; and per link class, the
// bandwidth and latency of the intra-node fabric (e.g. NVLink) and of the
// inter-node network (e.g. InfiniBand).
//
// Specs are YAML (LLVM's YAML I/O), for example:
//
//   name: dgx-a100x8
//   nodes: 1
//   devices_per_node: 8
//   device:
//     name: NVIDIA A100-SXM4-80GB
//     peak_flops: {fp32: 19.5e12, tf32: 156e12, bf16: 312e12, fp16: 312e12}
//     memory_bandwidth: 2.039e12      # bytes/s
//     memory_capacity: 85899345920    # bytes
//   links:
//     # per device, per direction:
//     intra_node: {bandwidth: 300e9, latency: 3.4e-6}
//     # per node (all NICs together), per direction:
//     inter_node: {bandwidth: 200e9, latency: 9.6e-6, nics: 8}
//
// Presets live in the repository's `clusters/` directory and are compiled
// into the library (see docs/cost-model.md for their figures and sources).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_CLUSTER_H
#define DISTOPT_PLANNER_CLUSTER_H

#include "distopt/Support/NamedValues.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace distopt::planner {

/// Compute dtypes a device spec gives peak throughput for. TF32 is a
/// compute mode (fp32 storage, reduced-precision tensor-core math).
enum class DType : unsigned { FP32 = 0, TF32 = 1, BF16 = 2, FP16 = 3 };
constexpr unsigned kNumDTypes = 4;

inline constexpr NamedValue<DType> kDTypes[] = {{"fp32", DType::FP32},
                                                {"tf32", DType::TF32},
                                                {"bf16", DType::BF16},
                                                {"fp16", DType::FP16}};
static_assert(std::size(kDTypes) == kNumDTypes);
inline llvm::StringRef dtypeName(DType dtype) { return nameOf(kDTypes, dtype); }
/// Inverse of dtypeName; std::nullopt for anything else.
inline std::optional<DType> parseDType(llvm::StringRef name) {
  return valueNamed(kDTypes, name);
}
/// Bytes one element occupies in memory (TF32 is stored as fp32: 4).
unsigned dtypeBytes(DType dtype);
/// True for the 16-bit types (bf16, fp16), which are trained in mixed
/// precision (fp32 master weights and optimizer state).
bool isHalfPrecision(DType dtype);

/// One device (GPU, or one CPU rank).
struct DeviceSpec {
  std::string name;
  /// Peak dense FLOP/s, indexed by DType.
  std::array<double, kNumDTypes> peakFlops{};
  /// Memory bandwidth in bytes/s.
  double memoryBandwidth = 0;
  /// Memory capacity in bytes.
  int64_t memoryCapacity = 0;

  double peak(DType dtype) const {
    return peakFlops[static_cast<unsigned>(dtype)];
  }
};

/// A link class: bandwidth in bytes/s per direction, latency in seconds
/// (the α of the α–β model: the fixed cost of one message / one step).
struct LinkSpec {
  double bandwidth = 0;
  double latency = 0;
};

/// The inter-node network of one node. `bandwidth` is the node's aggregate
/// over all its NICs, per direction. A device drives at most one NIC, so a
/// device's share of it is bandwidth / max(devices of the node taking part,
/// nics); see CostModel.h.
struct InterNodeLinkSpec : LinkSpec {
  int64_t nics = 1;
};

struct Cluster {
  std::string name;
  int64_t nodes = 1;
  int64_t devicesPerNode = 1;
  DeviceSpec device;
  /// Intra-node link, per device per direction (e.g. NVLink).
  LinkSpec intraNode;
  /// Inter-node link, per node (aggregate). Absent only for single-node
  /// clusters (local:N); required when nodes > 1.
  std::optional<InterNodeLinkSpec> interNode;

  int64_t numDevices() const { return nodes * devicesPerNode; }
  /// Node of a global device rank (ranks are numbered node-major).
  int64_t nodeOf(int64_t rank) const { return rank / devicesPerNode; }
};

/// Parses a cluster spec. Errors (malformed YAML, missing or unknown keys,
/// non-positive values, unknown dtypes) are returned as one message in
/// `bufferName:line:col: error: ...` form with the offending source line.
llvm::Expected<Cluster> parseCluster(llvm::StringRef yaml,
                                     llvm::StringRef bufferName);

/// Writes a cluster as YAML that parseCluster reads back.
std::string printCluster(const Cluster &cluster);

/// Resolves a `--cluster` argument:
///  * `local:N`    N CPU ranks on this machine (makeLocalCluster);
///  * `PRESET`     a preset compiled in from clusters/ (clusterPresetNames);
///  * `NxPRESET`   N nodes of a preset (e.g. `128xdgx-a100x8`): the preset's
///                 node count is multiplied by N;
///  * `hosts:a:8,b:8`, `hostfile:FILE`  CPU hosts like this machine, each
///                 running its slots as ranks (makeHostsCluster);
///  * a path       a YAML file (anything with '/', or ending .yaml/.yml, or an
///                 existing file).
llvm::Expected<Cluster> resolveCluster(llvm::StringRef specOrPreset);

/// A host and how many ranks it runs (Hosts.cpp).
struct HostSlots {
  std::string host;
  int64_t slots = 1;
};
/// `a:8,b:8` (a host without `:N` takes one rank) into `hosts`; false with
/// `error` = "'ENTRY' is not HOST or HOST:SLOTS".
bool parseHosts(llvm::StringRef spec, std::vector<HostSlots> &hosts,
                std::string &error);
/// An Open MPI hostfile (`host`, `host slots=N [max_slots=M]` or `host:N`
/// a line, `#` comments) into `hosts`; false with `error` naming the file
/// and line of a malformed entry.
bool readHostfile(llvm::StringRef path, std::vector<HostSlots> &hosts,
                  std::string &error);
/// The cluster of `hosts`, named `name`: as many nodes, each with its
/// slots as ranks that have what `local:SLOTS` gives a rank of this machine
/// (the hosts are taken to be machines like this one), joined by 10 Gigabit
/// Ethernet (1.25 GB/s, 50 us; a YAML spec describes another network).
/// Fails where the hosts' slot counts differ (the planner's nodes are
/// alike).
llvm::Expected<Cluster> makeHostsCluster(llvm::ArrayRef<HostSlots> hosts,
                                         llvm::StringRef name,
                                         unsigned hardwareThreads,
                                         uint64_t physicalMemory);

/// Names of the shipped presets usable by name (sorted).
std::vector<std::string> clusterPresetNames();
/// The YAML text of a compiled-in preset (including the internal `local`
/// per-core template), or std::nullopt.
std::optional<llvm::StringRef> clusterPresetYAML(llvm::StringRef name);

/// `local:N` for a machine with `hardwareThreads` hardware threads and
/// `physicalMemory` bytes of RAM. Per-rank figures come from the `local`
/// preset (one conservative AVX-512 core; see clusters/local.yaml), scaled
/// by the cores each rank gets: floor(hardwareThreads / N) when N does not
/// exceed the hardware threads (the runtime runs that many threads per
/// rank), else hardwareThreads / N (ranks share cores). Memory capacity per
/// rank is 90% of physical memory divided by N (the preset's figure is kept
/// when physicalMemory is 0, i.e. unknown).
llvm::Expected<Cluster> makeLocalCluster(int64_t ranks,
                                         unsigned hardwareThreads,
                                         uint64_t physicalMemory);

/// `factor` times as many nodes as `cluster`, named `<factor>x<name>`.
/// Fails when the cluster has no inter-node link.
llvm::Expected<Cluster> multiplyNodes(const Cluster &cluster, int64_t factor);

} // namespace distopt::planner

#endif // DISTOPT_PLANNER_CLUSTER_H
