//===- Runtime.cpp - runtime version and error reporting ------------------===//

#include "distopt/Runtime/Runtime.h"

#include <cstdarg>
#include <cstdio>
#include <string>

namespace {
struct ErrorState {
  int code = 0;
  std::string message;
};
thread_local ErrorState lastError;
} // namespace

extern "C" const char *dort_version(void) { return DISTOPT_RUNTIME_VERSION; }

extern "C" int dort_last_error_code(void) { return lastError.code; }

extern "C" const char *dort_last_error_message(void) {
  return lastError.message.c_str();
}

extern "C" int dort_set_error(int code, const char *format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  lastError.code = code;
  lastError.message = buffer;
  return code;
}

extern "C" void dort_clear_error(void) {
  lastError.code = 0;
  lastError.message.clear();
}
