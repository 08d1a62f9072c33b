//===- Hosts.cpp - hosts and their slots; clusters made of them -----------===//
//
// `--hosts a:8,b:8` and Open MPI hostfiles, read for `distopt run` (where
// ranks go) and for `--cluster hosts:...|hostfile:FILE` (what the planner
// assumes about them).
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Cluster.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace llvm;
using distopt::planner::HostSlots;

namespace {
/// A positive slot count; false where `text` is not one.
bool parseSlots(StringRef text, int64_t &slots) {
  return !text.getAsInteger(10, slots) && slots >= 1;
}

/// `HOST` or `HOST:SLOTS` into `h`.
bool parseHostEntry(StringRef entry, HostSlots &h) {
  auto [host, slots] = entry.split(':');
  h = {host.str(), 1};
  return !host.empty() && (!entry.contains(':') || parseSlots(slots, h.slots));
}
} // namespace

bool distopt::planner::parseHosts(StringRef spec, std::vector<HostSlots> &hosts,
                                  std::string &error) {
  SmallVector<StringRef> entries;
  spec.split(entries, ',');
  for (StringRef entry : entries) {
    HostSlots h;
    if (!parseHostEntry(entry.trim(), h)) {
      error = ("'" + entry + "' is not HOST or HOST:SLOTS").str();
      return false;
    }
    hosts.push_back(std::move(h));
  }
  return true;
}

bool distopt::planner::readHostfile(StringRef path,
                                    std::vector<HostSlots> &hosts,
                                    std::string &error) {
  auto buf = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf) {
    error = ("cannot read hostfile '" + path + "': " + buf.getError().message())
                .str();
    return false;
  }
  SmallVector<StringRef> lines;
  (*buf)->getBuffer().split(lines, '\n');
  size_t before = hosts.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    StringRef line = lines[i].split('#').first.trim();
    if (line.empty())
      continue;
    auto fail = [&](const Twine &what) {
      error = (path + ":" + Twine(i + 1) + ": " + what).str();
      return false;
    };
    SmallVector<StringRef> words;
    line.split(words, ' ', -1, false);
    HostSlots h;
    if (!parseHostEntry(words[0], h))
      return fail("'" + words[0] + "' is not HOST or HOST:SLOTS");
    for (StringRef word : ArrayRef(words).drop_front()) {
      auto [key, value] = word.split('=');
      int64_t maxSlots; // Open MPI's limit on oversubscription: not ours
      if ((key == "slots" && parseSlots(value, h.slots)) ||
          (key == "max_slots" && parseSlots(value, maxSlots)))
        continue;
      return fail("'" + word +
                  "' is not slots=N or max_slots=N (a line is HOST "
                  "[slots=N])");
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.size() == before) {
    error = ("hostfile '" + path + "' names no host").str();
    return false;
  }
  return true;
}

Expected<distopt::planner::Cluster>
distopt::planner::makeHostsCluster(ArrayRef<HostSlots> hosts, StringRef name,
                                   unsigned hardwareThreads,
                                   uint64_t physicalMemory) {
  if (hosts.empty())
    return createStringError(inconvertibleErrorCode(),
                             "cluster '%s' names no host", name.str().c_str());
  for (const HostSlots &h : hosts)
    if (h.slots != hosts.front().slots)
      return createStringError(
          inconvertibleErrorCode(),
          "cluster '%s': host %s has %lld slots and %s %lld; the planner's "
          "nodes are alike (give every host the same slots, or write a YAML "
          "spec)",
          name.str().c_str(), hosts.front().host.c_str(),
          static_cast<long long>(hosts.front().slots), h.host.c_str(),
          static_cast<long long>(h.slots));
  Expected<Cluster> node =
      makeLocalCluster(hosts.front().slots, hardwareThreads, physicalMemory);
  if (!node)
    return node.takeError();
  Cluster c = std::move(*node);
  c.name = name.str();
  c.nodes = static_cast<int64_t>(hosts.size());
  InterNodeLinkSpec ethernet;
  ethernet.bandwidth = 1.25e9; // 10 Gbit/s
  ethernet.latency = 50e-6;
  ethernet.nics = 1;
  c.interNode = ethernet;
  return c;
}
