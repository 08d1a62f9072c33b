//===- Launch.cpp - the command that runs a bundle on its ranks -----------===//
//
// A single-rank bundle runs directly; a multi-rank bundle under
// `mpirun -np N` (with --oversubscribe when N exceeds this machine's
// hardware threads, and --allow-run-as-root for root), on this machine or
// on the hosts of --hosts/--hostfile, or under srun in a Slurm allocation.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/WithColor.h"

#include <cstdlib>
#include <thread>
#include <unistd.h>

using namespace llvm;

namespace {

/// The variables every rank on another host needs from this environment.
bool exported(StringRef name) {
  return name.starts_with("DISTOPT_") || name.starts_with("OMP_") ||
         name.starts_with("OPENBLAS_") || name.starts_with("NCCL_") ||
         name == "LD_LIBRARY_PATH";
}

/// Warnings where filling `hosts` in order splits a tensor-parallel group
/// (`tensor` consecutive ranks) over two hosts.
std::vector<std::string>
placementWarnings(ArrayRef<distopt::driver::HostSlots> hosts, int64_t ranks,
                  int64_t tensor) {
  std::vector<std::string> warnings;
  if (tensor <= 1 || hosts.empty())
    return warnings;
  std::vector<size_t> hostOf;
  for (size_t h = 0; h < hosts.size() && (int64_t)hostOf.size() < ranks; ++h)
    for (int64_t i = 0; i < hosts[h].slots && (int64_t)hostOf.size() < ranks;
         ++i)
      hostOf.push_back(h);
  for (int64_t first = 0; first + tensor <= ranks; first += tensor) {
    size_t a = hostOf[first], b = hostOf[first + tensor - 1];
    if (a == b)
      continue;
    warnings.push_back(
        ("ranks " + Twine(first) + "-" + Twine(first + tensor - 1) +
         " (a tensor-parallel group) are placed on " + hosts[a].host + " and " +
         hosts[b].host +
         ": their collectives cross the network; give each host a multiple "
         "of " +
         Twine(tensor) + " slots")
            .str());
  }
  return warnings;
}

} // namespace

bool distopt::driver::parseHosts(StringRef spec, std::vector<HostSlots> &hosts,
                                 std::string &error) {
  if (planner::parseHosts(spec, hosts, error))
    return true;
  error = "--hosts: " + error;
  return false;
}

FailureOr<distopt::driver::LaunchCommand>
distopt::driver::launchCommand(StringRef bundle, const LaunchOptions &options,
                               ArrayRef<std::string> modelArgs,
                               std::string &error) {
  auto fail = [&](const Twine &msg) {
    error = msg.str();
    return failure();
  };
  SmallString<256> manifestPath(bundle);
  sys::path::append(manifestPath, "manifest.json");
  auto buf = MemoryBuffer::getFile(manifestPath);
  if (!buf)
    return fail("cannot read '" + manifestPath +
                "': " + buf.getError().message() + " (is '" + bundle +
                "' a bundle made by distopt compile?)");
  Expected<json::Value> manifest = json::parse((*buf)->getBuffer());
  if (!manifest)
    return fail(manifestPath + ": " + toString(manifest.takeError()));
  int64_t bundleRanks = 1, tensor = 1;
  if (auto *obj = manifest->getAsObject()) {
    if (auto r = obj->getInteger("ranks"))
      bundleRanks = *r;
    // A bundle of one rank's stage (compile --rank) cannot run the others.
    if (auto r = obj->getInteger("rank"); r && obj->get("pipeline"))
      return fail("'" + bundle + "' holds the program of one pipeline stage "
                  "(compiled with --rank " + Twine(*r) + "); start every "
                  "stage's bundle under one mpirun (mpirun -np N s0.dx/s0 "
                  "ARGS : -np N s1.dx/s1 ARGS ...), or compile without "
                  "--rank for `distopt run`");
    // The grid is stages x data x tensor: the last axis is the tensor's.
    if (auto *grid = obj->getArray("grid"); grid && !grid->empty())
      tensor = grid->back().getAsInteger().value_or(1);
  }
  const std::optional<int64_t> &ranks = options.ranks;
  if (ranks && *ranks != bundleRanks)
    return fail("the bundle was compiled for " + Twine(bundleRanks) +
                (bundleRanks == 1 ? " rank" : " ranks") + "; -n " +
                Twine(*ranks) +
                " does not match (compile again with --cluster for another "
                "count)");
  // The executable: named after the bundle directory, as distopt compile
  // writes it; absolute, as other hosts start it from their own directory.
  SmallString<256> exe(bundle);
  while (exe.size() > 1 && exe.back() == '/')
    exe.pop_back();
  sys::path::append(exe, sys::path::stem(exe));
  if (!sys::fs::can_execute(exe))
    return fail("no executable '" + exe + "' in the bundle");
  sys::fs::make_absolute(exe);

  Launcher launcher = options.launcher;
  bool inSlurm = std::getenv("SLURM_JOB_ID") != nullptr;
  if (launcher == Launcher::Auto && bundleRanks > 1)
    launcher =
        inSlurm && options.hosts.empty() ? Launcher::Srun : Launcher::MPIRun;
  if (launcher == Launcher::Srun && !options.hosts.empty())
    return fail("--hosts and --hostfile go with mpirun; under srun the "
                "Slurm allocation places the ranks");
  if (launcher == Launcher::Auto && !options.hosts.empty())
    launcher = Launcher::MPIRun;

  LaunchCommand cmd;
  if (launcher == Launcher::Auto) {
    cmd.program = std::string(exe);
    cmd.args = {cmd.program};
  } else if (launcher == Launcher::Srun) {
    ErrorOr<std::string> srun = sys::findProgramByName("srun");
    if (!srun)
      return fail("srun not found on PATH; this bundle needs " +
                  Twine(bundleRanks) + " ranks (or pass --launcher mpirun)");
    if (const char *tasks = std::getenv("SLURM_NTASKS")) {
      int64_t n = 0;
      if (!StringRef(tasks).getAsInteger(10, n) && n < bundleRanks)
        return fail("the Slurm allocation has " + Twine(n) +
                    " tasks (SLURM_NTASKS); this bundle needs " +
                    Twine(bundleRanks) + " (sbatch --ntasks " +
                    Twine(bundleRanks) + ")");
    }
    cmd.program = *srun;
    cmd.args = {cmd.program, "--ntasks", std::to_string(bundleRanks),
                "--kill-on-bad-exit=1", std::string(exe)};
  } else {
    ErrorOr<std::string> mpirun = sys::findProgramByName("mpirun");
    if (!mpirun)
      return fail("mpirun not found on PATH (install openmpi-bin); this "
                  "bundle needs " +
                  Twine(bundleRanks) + " ranks");
    cmd.program = *mpirun;
    cmd.args = {cmd.program, "-np", std::to_string(bundleRanks)};
    if (options.hosts.empty()) {
      if (static_cast<unsigned>(bundleRanks) >
          std::thread::hardware_concurrency())
        cmd.args.push_back("--oversubscribe");
    } else {
      int64_t slots = 0;
      std::string list;
      for (const HostSlots &h : options.hosts) {
        slots += h.slots;
        list +=
            (list.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
      }
      if (slots < bundleRanks)
        return fail("the hosts offer " + Twine(slots) +
                    " slots; this bundle needs " + Twine(bundleRanks) +
                    " ranks");
      cmd.args.insert(cmd.args.end(), {"--host", list, "--map-by", "slot"});
      for (char **env = environ; *env; ++env) {
        StringRef name = StringRef(*env).split('=').first;
        if (exported(name))
          cmd.args.insert(cmd.args.end(), {"-x", name.str()});
      }
      cmd.warnings = placementWarnings(options.hosts, bundleRanks, tensor);
    }
    if (::geteuid() == 0)
      cmd.args.push_back("--allow-run-as-root");
    cmd.args.push_back(std::string(exe));
  }
  cmd.args.insert(cmd.args.end(), modelArgs.begin(), modelArgs.end());
  return cmd;
}

int distopt::driver::runLaunchCommand(const LaunchCommand &cmd,
                                      std::string &error) {
  SmallVector<StringRef> refs(cmd.args.begin(), cmd.args.end());
  std::string message;
  int rc =
      sys::ExecuteAndWait(cmd.program, refs, std::nullopt, {}, 0, 0, &message);
  if (rc < 0)
    error = "cannot run " + cmd.program + ": " + message;
  return rc;
}

bool distopt::driver::takeLaunchFlags(std::vector<std::string> &modelArgs,
                                      LaunchOptions &options,
                                      std::string &error) {
  while (!modelArgs.empty()) {
    StringRef arg = modelArgs[0], flag, value;
    for (StringRef f : {"--hostfile", "--hosts", "--launcher", "-n"})
      if (arg.starts_with(f) &&
          (f == "-n" || arg.size() == f.size() || arg[f.size()] == '=')) {
        flag = f;
        break;
      }
    if (flag.empty())
      return true;
    value = arg.drop_front(flag.size());
    size_t used = 1;
    if (value.empty() && modelArgs.size() > 1) {
      value = modelArgs[1];
      used = 2;
    } else {
      value.consume_front("=");
    }
    if (flag == "-n") {
      int64_t n = 0;
      if (value.getAsInteger(10, n) || n < 1) {
        error = "-n after the bundle takes a rank count, got '" +
                modelArgs[used - 1] + "'";
        return false;
      }
      if (options.ranks && n != *options.ranks) {
        error = ("-n " + Twine(*options.ranks) + " and -n " + Twine(n) +
                 " disagree")
                    .str();
        return false;
      }
      options.ranks = n;
    } else if (flag == "--hosts") {
      if (!driver::parseHosts(value, options.hosts, error))
        return false;
    } else if (flag == "--hostfile") {
      if (!readHostfile(value, options.hosts, error))
        return false;
    } else if (!parseNamed("launcher", kLaunchers, value, options.launcher,
                           error)) {
      return false;
    }
    modelArgs.erase(modelArgs.begin(), modelArgs.begin() + used);
  }
  return true;
}

int distopt::driver::runBundle(StringRef bundle, LaunchOptions options,
                               std::vector<std::string> modelArgs, bool dryRun,
                               raw_ostream &out, raw_ostream &log,
                               std::string &error) {
  if (!takeLaunchFlags(modelArgs, options, error))
    return -1;
  FailureOr<LaunchCommand> command =
      launchCommand(bundle, options, modelArgs, error);
  if (failed(command))
    return -1;
  for (const std::string &warning : command->warnings)
    WithColor::warning(log, "distopt run") << warning << "\n";
  if (!dryRun)
    return runLaunchCommand(*command, error);
  for (const std::string &arg : command->args)
    out << arg << "\n";
  return 0;
}
