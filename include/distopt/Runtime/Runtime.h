/*===- Runtime.h - distopt runtime C ABI ---------------------------*- C -*-===
 *
 * The small C ABI that generated code and launchers call (prefix dort_).
 * Never includes LLVM/MLIR headers; builds alone with
 * -DDISTOPT_BUILD_COMPILER=OFF.
 *
 *===----------------------------------------------------------------------===*/
#ifndef DISTOPT_RUNTIME_RUNTIME_H
#define DISTOPT_RUNTIME_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the runtime library, "MAJOR.MINOR.PATCH". */
const char *dort_version(void);

/* Status of the last failed runtime call on this thread: 0 when none. */
int dort_last_error_code(void);
/* Message of the last failed runtime call on this thread ("" when none). */
const char *dort_last_error_message(void);
/* Records an error (printf-style message) for this thread; returns `code`. */
int dort_set_error(int code, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Clears this thread's error. */
void dort_clear_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RUNTIME_RUNTIME_H */
