/*===- Runtime.h - distopt runtime C ABI ---------------------------*- C -*-===
 *
 * The small C ABI that generated code and launchers call (prefix dort_).
 * Never includes LLVM/MLIR headers; builds alone with
 * -DDISTOPT_BUILD_COMPILER=OFF.
 *
 *===----------------------------------------------------------------------===*/
#ifndef DISTOPT_RUNTIME_RUNTIME_H
#define DISTOPT_RUNTIME_RUNTIME_H

#include <stdint.h>

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

/* Records a failure in a runtime call that cannot return a status to
 * generated code (e.g. a kernel handed mismatched shapes): sets this thread's
 * error as dort_set_error does, and keeps the first such message
 * process-wide (any thread) until dort_clear_pending_error. dort_main fails
 * the run when one is pending after dopt_entry returns. Returns `code`. */
int dort_set_pending_error(int code, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The first pending error's message, or NULL when none is pending. */
const char *dort_pending_error(void);
void dort_clear_pending_error(void);

/* Buffers that stay on the device between runs (a CUDA bundle's runtime
 * implements these; in a CPU bundle they do nothing). A training loop passes
 * each step's updated weights and optimizer state back in as the next
 * step's inputs:
 *  - dort_device_carry(host, n, in, out): every run given the buffer array
 *    `host` (the loop's, which it hands its entry point), input slot in[k]
 *    takes output slot out[k]'s value after the run, on the device: those
 *    outputs are not downloaded nor those inputs uploaded between runs (the
 *    first run uploads them). Other runs (an evaluation program's) are not
 *    affected.
 *  - dort_device_sync(host): writes the carried values into the host
 *    buffers `host` (the slots of that entry, as the loop holds them now),
 *    before anything reads them there (a checkpoint, an evaluation, the
 *    saved weights); cached weights are dropped, as they may have changed.
 *    Returns 0, or non-zero after dort_set_error.
 *  - dort_device_host_changed(): the loop wrote the carried host buffers,
 *    or weights (a parameter-server worker's pulled weights): the next run
 *    uploads them again. */
void dort_device_carry(void **host, int32_t n, const int64_t *in_slots,
                       const int64_t *out_slots);
int dort_device_sync(void **host);
void dort_device_host_changed(void);
/* What a device runtime registers (once, at start-up) to implement them. */
typedef struct dort_device_hooks {
  void (*carry)(void **host, int32_t n, const int64_t *in_slots,
                const int64_t *out_slots);
  int (*sync)(void **host);
  void (*host_changed)(void);
} dort_device_hooks;
void dort_register_device_hooks(const dort_device_hooks *hooks);

/* The generated entry point: `buffers` holds one pointer per manifest buffer,
 * inputs, then weights, then outputs. Returns 0 on success, else non-zero
 * after dort_set_error. Defined by the compiled model, not the runtime. */
typedef int32_t (*dort_entry_fn)(void **buffers);

/* The model executable's main (the `distopt_runtime_main` library's main
 * calls it with dopt_entry):
 *   model --input NAME=FILE ... [--output-dir DIR] [--repeat N]
 *         [--bundle DIR] [--help]
 * Returns the process exit status: 0 success, 1 runtime error (bad manifest,
 * input, weight, failed run, unwritable output), 2 usage error. Never calls
 * exit(), so it can be called in-process by tests. */
int dort_main(int argc, char **argv, dort_entry_fn entry);
/* A training step's evaluation program (dopt_eval_entry), for the `eval`
 * and `train --eval-data` modes; call before dort_main. */
void dort_set_eval_entry(dort_entry_fn entry);
/* A parameter-server training step's update program (run by the server
 * ranks; lib/Runtime/ParamServer.cpp). */
void dort_set_ps_entry(dort_entry_fn entry);
/* dort_main for a pipelined bundle: one entry point per stage (grid axis 0);
 * each rank runs its stage's on every micro-batch. */
int dort_main_pipeline(int argc, char **argv, const dort_entry_fn *stages,
                       int count);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RUNTIME_RUNTIME_H */
