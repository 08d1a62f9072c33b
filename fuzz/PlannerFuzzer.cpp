//===- PlannerFuzzer.cpp - libFuzzer target for cluster specs and profiles -===//
//
// The YAML files `distopt plan` and `compile` read (--cluster, --profile)
// from arbitrary bytes: PlannerInputs.h says which byte picks which reader.
//
//===----------------------------------------------------------------------===//

#include "PlannerInputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  distopt::fuzz::readPlannerInput(data, size);
  return 0;
}
