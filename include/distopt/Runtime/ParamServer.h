//===- ParamServer.h - the rules of a parameter server ----------*- C++ -*-===//
//
// What a parameter server decides, apart from moving bytes (the train
// loop, lib/Runtime/ParamServerLoop.cpp, does that over MPI):
//
//   - staleness: a gradient computed on version v of the server's shard and
//     arriving at version V is V - v updates old;
//   - the cures for stale gradients (asynchronous mode): drop gradients
//     older than a bound (--drop-stale T), divide the learning rate by the
//     staleness (--stale-lr), a synchronous warm-up of S steps before going
//     asynchronous (--sync-warmup S), and bounded staleness (--max-staleness
//     s: stale synchronous parallel, Ho et al. 2013 -- a worker s steps ahead
//     of the slowest waits for its reply); delay compensation (DC-ASGD) is
//     part of the update program (lib/Training/ServerUpdate.cpp);
//   - backup workers (synchronous mode): a step applies the first N
//     gradients to arrive of its N + b workers; the late ones are dropped.
//
// Header-only, no MPI: unit-tested on its own (unittests/Runtime).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RUNTIME_PARAMSERVER_H
#define DISTOPT_RUNTIME_PARAMSERVER_H

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace distopt::runtime::ps {

/// The asynchronous server's cures (train flags).
struct AsyncOptions {
  int64_t maxStaleness = -1; ///< --max-staleness s (-1: unbounded)
  int64_t dropStale = -1;    ///< --drop-stale T (-1: keep every gradient)
  bool staleLr = false;      ///< --stale-lr
  int64_t syncWarmup = 0;    ///< --sync-warmup S (steps)
  double delayCompensation = 0; ///< --delay-compensation λ
};

/// What the server does with one gradient.
struct Decision {
  bool apply = true;
  int64_t staleness = 0;
  double lrScale = 1.0; ///< multiplies the learning rate
};

/// The asynchronous rule for a gradient computed on `pulledVersion`,
/// arriving when the server's shard is at `version`.
inline Decision decide(const AsyncOptions &o, int64_t version,
                       int64_t pulledVersion) {
  Decision d;
  d.staleness = std::max<int64_t>(0, version - pulledVersion);
  if (o.dropStale >= 0 && d.staleness > o.dropStale)
    d.apply = false;
  if (o.staleLr && d.staleness > 1)
    d.lrScale = 1.0 / static_cast<double>(d.staleness);
  return d;
}

/// Whether step `step` (0-based, counted in synchronous steps) still runs
/// synchronously under --sync-warmup.
inline bool inWarmup(const AsyncOptions &o, int64_t step) {
  return step < o.syncWarmup;
}

/// Stale synchronous parallel: whether a worker that has pushed `clock`
/// gradients may get its reply (go on), given every active worker's clock.
/// A worker may run at most s pushes ahead of the slowest.
inline bool mayProceed(const AsyncOptions &o, int64_t clock,
                       const std::vector<int64_t> &activeClocks) {
  if (o.maxStaleness < 0 || activeClocks.empty())
    return true;
  int64_t slowest =
      *std::min_element(activeClocks.begin(), activeClocks.end());
  return clock - slowest <= o.maxStaleness;
}

/// Backup workers: of gradients arriving in `arrivals` order (worker
/// indices), the first `needed` distinct workers' are applied. Returns the
/// applied workers, sorted (the server sums them in worker order, so a
/// step's result does not depend on arrival order beyond the choice).
inline std::vector<int64_t> firstToArrive(const std::vector<int64_t> &arrivals,
                                          int64_t needed) {
  std::vector<int64_t> chosen;
  for (int64_t w : arrivals) {
    if (static_cast<int64_t>(chosen.size()) >= needed)
      break;
    if (std::find(chosen.begin(), chosen.end(), w) == chosen.end())
      chosen.push_back(w);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

/// The staleness of every gradient a server received (applied or not).
struct StalenessHistogram {
  std::map<int64_t, int64_t> counts;
  int64_t total = 0, sum = 0, max = 0;

  void add(int64_t staleness) {
    ++counts[staleness];
    ++total;
    sum += staleness;
    max = std::max(max, staleness);
  }
  double mean() const {
    return total ? static_cast<double>(sum) / static_cast<double>(total) : 0.0;
  }
  /// {"0": n0, "1": n1, ...}
  std::string json() const {
    std::string s = "{";
    for (auto &[k, n] : counts)
      s += (s.size() > 1 ? ", \"" : "\"") + std::to_string(k) +
           "\": " + std::to_string(n);
    return s + "}";
  }
};

/// DISTOPT_STRAGGLER=RANK:SECONDS[:random][,RANK:SECONDS...]: the ranks
/// that sleep before sending each step's gradient (a fixed delay, or one
/// drawn uniformly from [0, 2·SECONDS) per step), to show what stragglers
/// do on one machine.
struct Straggler {
  int64_t rank = -1;
  double seconds = 0;
  bool random = false;
};

inline bool parseStragglers(const std::string &spec,
                            std::vector<Straggler> &out, std::string &error) {
  out.clear();
  size_t start = 0;
  while (start <= spec.size() && !spec.empty()) {
    size_t end = spec.find(',', start);
    std::string item = spec.substr(start, end == std::string::npos
                                              ? std::string::npos
                                              : end - start);
    Straggler s;
    size_t a = item.find(':');
    size_t b = a == std::string::npos ? a : item.find(':', a + 1);
    bool ok = a != std::string::npos;
    if (ok) {
      char *e = nullptr;
      std::string r = item.substr(0, a);
      s.rank = std::strtoll(r.c_str(), &e, 10);
      ok = !r.empty() && e && *e == 0 && s.rank >= 0;
      std::string t = item.substr(a + 1, b == std::string::npos
                                             ? std::string::npos
                                             : b - a - 1);
      s.seconds = std::strtod(t.c_str(), &e);
      ok = ok && !t.empty() && e && *e == 0 && s.seconds >= 0;
      if (b != std::string::npos) {
        s.random = item.substr(b + 1) == "random";
        ok = ok && s.random;
      }
    }
    if (!ok) {
      error = "DISTOPT_STRAGGLER must be RANK:SECONDS[:random][,...], got '" +
              spec + "'";
      return false;
    }
    out.push_back(s);
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return true;
}

} // namespace distopt::runtime::ps

#endif // DISTOPT_RUNTIME_PARAMSERVER_H
