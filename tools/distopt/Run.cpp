//===- Run.cpp - `distopt run`: launch a bundle on its ranks --------------===//
//
//   distopt run [-n N] model.dx [-n N] [--input NAME=FILE ...] [--output-dir DIR]
//
// The flags of the launcher; the command is driver::launchCommand (the
// executable alone, or under `mpirun -np N`). N defaults to the bundle's rank
// count; another N is an error before anything starts. Everything after the
// bundle goes to the model executable, but for a `-n N` right after it
// (where users also put it), which is the launcher's.
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace distopt;

cl::SubCommand &distopt::tool::runCommand() {
  static cl::SubCommand cmd(
      "run", "Run a compiled bundle on its ranks (mpirun for multi-rank "
             "bundles)");
  return cmd;
}

namespace {
cl::opt<std::string> bundle(cl::Positional, cl::Required,
                            cl::desc("<bundle.dx>"),
                            cl::sub(distopt::tool::runCommand()));
cl::list<std::string> modelArgs(cl::ConsumeAfter,
                                cl::desc("<model arguments>..."),
                                cl::sub(distopt::tool::runCommand()));
cl::opt<int64_t> ranksOpt("n", cl::desc("Number of ranks (default: the "
                                        "bundle's)"),
                          cl::init(0), cl::value_desc("N"),
                          cl::sub(distopt::tool::runCommand()));

} // namespace

int distopt::tool::runBundle() {
  // `-n N` (or `-nN`, `-n=N`) right after the bundle: the launcher's too.
  std::vector<std::string> passed(modelArgs.begin(), modelArgs.end());
  std::optional<int64_t> ranks;
  if (ranksOpt.getNumOccurrences())
    ranks = ranksOpt;
  std::string message;
  if (!driver::takeRankFlag(passed, ranks, message))
    return fail("run", message);
  FailureOr<driver::LaunchCommand> command =
      driver::launchCommand(bundle, ranks, passed, message);
  if (failed(command))
    return fail("run", message);
  int rc = driver::runLaunchCommand(*command, message);
  if (rc < 0)
    return fail("run", message);
  return rc;
}
