//===- PlannerInputs.h - one input to the readers of cluster specs ---*- C++ -*-===//
//
// What the planner-inputs fuzzer (PlannerFuzzer.cpp) feeds, shared with the
// unit test that replays the inputs that once broke it
// (unittests/Planner/ClusterTest.cpp): the first byte of an input picks the
// reader, the rest is the YAML. A parse must succeed or return an error; a
// crash, an ASan report or a hang is a bug. Readers:
//   0  a cluster spec (`--cluster FILE`, parseCluster); what it accepts must
//      print (printCluster) and read back the same
//   1  an efficiency profile (`--profile FILE`, parseEfficiencyProfile)
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_FUZZ_PLANNERINPUTS_H
#define DISTOPT_FUZZ_PLANNERINPUTS_H

#include "distopt/Planner/Cluster.h"
#include "distopt/Planner/CostModel.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace distopt::fuzz {

inline void readPlannerInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return;
  llvm::StringRef yaml(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    llvm::Expected<planner::Cluster> c = planner::parseCluster(yaml, "fuzz.yaml");
    if (!c) {
      llvm::consumeError(c.takeError());
      return;
    }
    std::string printed = planner::printCluster(*c);
    llvm::Expected<planner::Cluster> again =
        planner::parseCluster(printed, "printed.yaml");
    if (!again || planner::printCluster(*again) != printed)
      std::abort(); // what is read must print and read back the same
    return;
  }
  llvm::Expected<planner::EfficiencyProfile> p =
      planner::parseEfficiencyProfile(yaml, "fuzz.yaml");
  if (!p)
    llvm::consumeError(p.takeError());
}

} // namespace distopt::fuzz

#endif // DISTOPT_FUZZ_PLANNERINPUTS_H
