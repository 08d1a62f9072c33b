/*===- BundleAPI.h - running a bundle's program in a host process -*- C -*-===*
 *
 * A single-rank CPU bundle holds its program twice: the executable, and
 * `<model>.so`, the same code as a shared library that leaves the runtime
 * to libdistopt_runtime_shared.so. A host process (the Python package
 * `distopt`, or any C program) loads `<model>.so` and drives it through
 * these functions, which the shared runtime exports:
 *
 *   dort_bundle *b = dort_bundle_open("m.dx", dopt_entry);
 *   const void *in[] = {x};          // manifest order, row-major, its dtype
 *   const int64_t *shapes[] = {xs};  int32_t ranks[] = {2};
 *   if (dort_bundle_run(b, 1, in, shapes, ranks) != 0)
 *     puts(dort_bundle_last_error());
 *   const void *y = dort_bundle_output(b, 0);   // valid until the next run
 *   dort_bundle_close(b);
 *
 * Errors (a wrong input, an index out of range, a failing kernel) make a
 * call return non-zero (or NULL) with the message in
 * dort_bundle_last_error(); nothing exits the process.
 *
 *===----------------------------------------------------------------------===*/
#ifndef DISTOPT_RUNTIME_BUNDLEAPI_H
#define DISTOPT_RUNTIME_BUNDLEAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dort_bundle dort_bundle;
/** The generated entry point (`dopt_entry` in `<model>.so`). */
typedef int32_t (*dort_bundle_entry)(void **buffers);

/** Opens the bundle directory `dir` (its manifest and weights) with its
 * program's entry point; NULL with the error on failure (a bundle for
 * several ranks or another target is refused). */
dort_bundle *dort_bundle_open(const char *dir, dort_bundle_entry entry);
/** Runs the program once on `num_inputs` inputs (manifest order): data,
 * shapes and ranks; each input's bytes are its dtype's, row-major. 0 on
 * success. */
int32_t dort_bundle_run(dort_bundle *bundle, int32_t num_inputs,
                        const void *const *inputs, const int64_t *const *shapes,
                        const int32_t *ranks);
/** Output `index` (manifest order) of the last successful run; NULL before
 * one. Valid until the next run or close. */
const void *dort_bundle_output(const dort_bundle *bundle, int32_t index);
void dort_bundle_close(dort_bundle *bundle);
/** This thread's last error message ("" when none). */
const char *dort_bundle_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RUNTIME_BUNDLEAPI_H */
