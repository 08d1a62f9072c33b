//===- Run.cpp - `distopt run`: launch a bundle on its ranks --------------===//
//
//   distopt run [-n N] [--hosts a:8,b:8 | --hostfile FILE]
//               [--launcher auto|mpirun|srun] model.dx [--input NAME=FILE ...]
//
// The flags of the launcher; the command is driver::launchCommand (the
// executable alone, or under mpirun or srun). N defaults to the bundle's
// rank count; another N is an error before anything starts. Everything
// after the bundle goes to the model executable, but for the launcher's
// flags right after it (where users also put them).
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Driver/Driver.h"

#include "llvm/Support/CommandLine.h"

using namespace llvm;
using namespace distopt;

cl::SubCommand &distopt::tool::runCommand() {
  static cl::SubCommand cmd(
      "run", "Run a compiled bundle on its ranks (mpirun, or srun in a Slurm "
             "allocation, for multi-rank bundles)");
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
cl::opt<std::string>
    hostsOpt("hosts",
             cl::desc("Run the ranks on these hosts, in order, each up to its "
                      "slots (mpirun --host)"),
             cl::value_desc("HOST:SLOTS,..."),
             cl::sub(distopt::tool::runCommand()));
cl::opt<std::string>
    hostfileOpt("hostfile",
                cl::desc("The hosts from an Open MPI hostfile (HOST "
                         "slots=N a line)"),
                cl::value_desc("FILE"), cl::sub(distopt::tool::runCommand()));
cl::opt<std::string> launcherOpt(
    "launcher",
    cl::desc("What starts the ranks: auto (default: srun in a Slurm "
             "allocation, else mpirun), mpirun or srun"),
    cl::value_desc("auto|mpirun|srun"), cl::init("auto"),
    cl::sub(distopt::tool::runCommand()));
cl::opt<bool> dryRun("dry-run",
                     cl::desc("Print the command that starts the ranks, "
                              "one argument a line, and exit"),
                     cl::sub(distopt::tool::runCommand()));
} // namespace

int distopt::tool::runBundle() {
  driver::LaunchOptions options;
  setIfGiven(ranksOpt, options.ranks);
  std::string error;
  if ((!hostsOpt.empty() &&
       !driver::parseHosts(hostsOpt, options.hosts, error)) ||
      (!hostfileOpt.empty() &&
       !driver::readHostfile(hostfileOpt, options.hosts, error)) ||
      !parseNamed("launcher", driver::kLaunchers, launcherOpt, options.launcher,
                  error))
    return fail("run", error);
  int rc = driver::runBundle(bundle, std::move(options),
                             {modelArgs.begin(), modelArgs.end()}, dryRun,
                             outs(), errs(), error);
  return rc < 0 ? fail("run", error) : rc;
}
