//===- Main.cpp - main() of a compiled model executable -------------------===//
//
// Library `distopt_runtime_main`. The compiled model's object files define
// dopt_entry, or for a pipelined bundle dopt_entry_<k> per stage plus the
// table dopt_stage_entries / dopt_num_stages, and a training step also
// dopt_eval_entry (its evaluation program), a parameter-server step also
// dopt_ps_entry (the servers' update); everything else is dort_main in
// `distopt_runtime`. All are weak here: whichever the model defines.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Runtime.h"

extern "C" {
__attribute__((weak)) int32_t dopt_entry(void **buffers);
__attribute__((weak)) int32_t dopt_eval_entry(void **buffers);
__attribute__((weak)) int32_t dopt_ps_entry(void **buffers);
__attribute__((weak)) extern int32_t (*const dopt_stage_entries[])(void **);
__attribute__((weak)) extern const int32_t dopt_num_stages;
}

int main(int argc, char **argv) {
  if (dopt_eval_entry)
    dort_set_eval_entry(dopt_eval_entry);
  if (&dopt_num_stages != nullptr && dopt_num_stages > 0)
    return dort_main_pipeline(argc, argv, dopt_stage_entries, dopt_num_stages);
  if (dopt_ps_entry)
    dort_set_ps_entry(dopt_ps_entry);
  return dort_main(argc, argv, dopt_entry);
}
