//===- Runtime.cpp - runtime version and error reporting ------------------===//

#include "distopt/Runtime/Runtime.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace {
struct ErrorState {
  int code = 0;
  std::string message;
};
thread_local ErrorState lastError;

struct PendingError {
  std::mutex mutex;
  bool set = false;
  std::string message;
};
PendingError &pending() {
  static PendingError *p = new PendingError(); // Never destroyed.
  return *p;
}
} // namespace

extern "C" const char *dort_version(void) { return DISTOPT_RUNTIME_VERSION; }

extern "C" int dort_last_error_code(void) { return lastError.code; }

extern "C" const char *dort_last_error_message(void) {
  return lastError.message.c_str();
}

/// Formats the message and records it as this thread's last error.
static void recordError(int code, const char *format, va_list args) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  lastError.code = code;
  lastError.message = buffer;
}

extern "C" int dort_set_error(int code, const char *format, ...) {
  va_list args;
  va_start(args, format);
  recordError(code, format, args);
  va_end(args);
  return code;
}

extern "C" void dort_clear_error(void) {
  lastError.code = 0;
  lastError.message.clear();
}

extern "C" int dort_set_pending_error(int code, const char *format, ...) {
  va_list args;
  va_start(args, format);
  recordError(code, format, args);
  va_end(args);
  PendingError &p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.set) {
    p.set = true;
    p.message = lastError.message;
  }
  return code;
}

extern "C" const char *dort_pending_error(void) {
  PendingError &p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.set ? p.message.c_str() : nullptr;
}

extern "C" void dort_clear_pending_error(void) {
  PendingError &p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.set = false;
  p.message.clear();
}

namespace {
const dort_device_hooks *gDeviceHooks = nullptr;
} // namespace

extern "C" void dort_register_device_hooks(const dort_device_hooks *hooks) {
  gDeviceHooks = hooks;
}

extern "C" void dort_device_carry(void **host, int32_t n,
                                  const int64_t *in_slots,
                                  const int64_t *out_slots) {
  if (gDeviceHooks)
    gDeviceHooks->carry(host, n, in_slots, out_slots);
}

extern "C" int dort_device_sync(void **host) {
  return gDeviceHooks ? gDeviceHooks->sync(host) : 0;
}

extern "C" void dort_device_host_changed(void) {
  if (gDeviceHooks)
    gDeviceHooks->host_changed();
}
