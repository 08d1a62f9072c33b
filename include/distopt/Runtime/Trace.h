//===- Trace.h - timeline events and communication time ----------*- C++ -*-===//
//
// What a rank spends its time on, for the training log (the share of a step
// spent waiting for communication) and for `train --trace FILE.json`, a
// Chrome-trace timeline (chrome://tracing, Perfetto) of every rank: steps,
// each collective with its bytes, the waits for asynchronous ones.
// Thread-safe: the communication thread records its collectives too.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RUNTIME_TRACE_H
#define DISTOPT_RUNTIME_TRACE_H

#include <cstdint>
#include <string>
#include <vector>

namespace distopt::runtime::trace {

/// Seconds on the monotonic clock since the trace's origin (resetOrigin).
double now();
/// Makes now() count from this moment (ranks call it right after a barrier,
/// so their timelines line up).
void resetOrigin();

/// Whether events are kept (communication time is always counted).
void setEnabled(bool enabled);
bool enabled();

struct Event {
  std::string name, category;
  double start = 0, end = 0;
  /// 0: the main thread; 1: the communication thread.
  int thread = 0;
  /// Extra fields as a JSON object's members ("\"bytes\": 64"), or empty.
  std::string args;
  /// A moment (start only), not a span.
  bool instant = false;
};
/// Keeps an event (when enabled).
void record(Event e);
/// The events kept so far, as Chrome-trace JSON objects of process `pid`
/// joined by commas, and forgets them.
std::string takeChromeEvents(int pid);

/// Time the main thread spent blocked in collectives: synchronous ones, and
/// waits for asynchronous ones. Monotonic; callers take differences.
double commWaitSeconds();
void addCommWait(double seconds);

/// Records a collective's duration (and adds it to the communication
/// wait when `blocking`): RAII around the call. `bytes` < 0: none to
/// report (a wait); `tag` >= 0: the gradient bucket.
class Collective {
public:
  Collective(const char *name, int64_t bytes, int64_t tag = -1,
             bool blocking = true, int thread = 0);
  ~Collective();

private:
  const char *name_;
  int64_t bytes_, tag_;
  bool blocking_;
  int thread_;
  double start_;
};

} // namespace distopt::runtime::trace

#endif // DISTOPT_RUNTIME_TRACE_H
