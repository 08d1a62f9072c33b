//===- Trace.cpp - timeline events and communication time -----------------===//

#include "distopt/Runtime/Trace.h"

#include "distopt/Runtime/Json.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace distopt::runtime::trace {
namespace {

std::chrono::steady_clock::time_point &origin() {
  static std::chrono::steady_clock::time_point t =
      std::chrono::steady_clock::now();
  return t;
}
std::mutex gMutex;
std::vector<Event> gEvents;
std::atomic<bool> gEnabled{false};
double gCommWait = 0; // main thread only

} // namespace

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       origin())
      .count();
}

void resetOrigin() { origin() = std::chrono::steady_clock::now(); }

void setEnabled(bool enabled) { gEnabled = enabled; }
bool enabled() { return gEnabled; }

void record(Event e) {
  if (!gEnabled)
    return;
  std::lock_guard<std::mutex> lock(gMutex);
  gEvents.push_back(std::move(e));
}

std::string takeChromeEvents(int pid) {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    events.swap(gEvents);
  }
  std::string out;
  char buf[160];
  for (const Event &e : events) {
    if (!out.empty())
      out += ",\n";
    // Complete events ("X") in microseconds.
    if (e.instant)
      std::snprintf(buf, sizeof buf,
                    "\"ph\": \"i\", \"s\": \"t\", \"pid\": %d, \"tid\": %d, "
                    "\"ts\": %.3f",
                    pid, e.thread, e.start * 1e6);
    else
      std::snprintf(buf, sizeof buf,
                    "\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                    "\"dur\": %.3f",
                    pid, e.thread, e.start * 1e6, (e.end - e.start) * 1e6);
    out += "{\"name\": " + jsonQuote(e.name) + ", \"cat\": " +
           jsonQuote(e.category) + ", " + buf;
    if (!e.args.empty())
      out += ", \"args\": {" + e.args + "}";
    out += "}";
  }
  return out;
}

double commWaitSeconds() { return gCommWait; }
void addCommWait(double seconds) { gCommWait += seconds; }

Collective::Collective(const char *name, int64_t bytes, int64_t tag,
                       bool blocking, int thread)
    : name_(name), bytes_(bytes), tag_(tag), blocking_(blocking),
      thread_(thread), start_(now()) {}

Collective::~Collective() {
  double end = now();
  if (blocking_)
    addCommWait(end - start_);
  if (!gEnabled)
    return;
  Event e;
  e.name = name_;
  if (tag_ >= 0)
    e.name += " (bucket " + std::to_string(tag_) + ")";
  e.category = "comm";
  e.start = start_;
  e.end = end;
  e.thread = thread_;
  if (bytes_ >= 0)
    e.args = "\"bytes\": " + std::to_string(bytes_);
  if (tag_ >= 0)
    e.args += std::string(e.args.empty() ? "" : ", ") +
              "\"bucket\": " + std::to_string(tag_);
  record(std::move(e));
}

} // namespace distopt::runtime::trace
