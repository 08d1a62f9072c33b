//===- Launch.cpp - the command that runs a bundle on its ranks -----------===//
//
// A single-rank bundle runs directly; a multi-rank bundle under
// `mpirun -np N` (with --oversubscribe when N exceeds this machine's
// hardware threads, and --allow-run-as-root for root).
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

#include <thread>
#include <unistd.h>

using namespace llvm;

FailureOr<distopt::driver::LaunchCommand>
distopt::driver::launchCommand(StringRef bundle, std::optional<int64_t> ranks,
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
  int64_t bundleRanks = 1;
  if (auto *obj = manifest->getAsObject())
    if (auto r = obj->getInteger("ranks"))
      bundleRanks = *r;
  if (ranks && *ranks != bundleRanks)
    return fail("the bundle was compiled for " + Twine(bundleRanks) +
                (bundleRanks == 1 ? " rank" : " ranks") + "; -n " +
                Twine(*ranks) +
                " does not match (compile again with --cluster for another "
                "count)");
  // The executable: named after the bundle directory, as distopt compile
  // writes it.
  SmallString<256> exe(bundle);
  while (exe.size() > 1 && exe.back() == '/')
    exe.pop_back();
  sys::path::append(exe, sys::path::stem(exe));
  if (!sys::fs::can_execute(exe))
    return fail("no executable '" + exe + "' in the bundle");

  LaunchCommand cmd;
  if (bundleRanks == 1) {
    cmd.program = std::string(exe);
    cmd.args = {cmd.program};
  } else {
    ErrorOr<std::string> mpirun = sys::findProgramByName("mpirun");
    if (!mpirun)
      return fail("mpirun not found on PATH (install openmpi-bin); this "
                  "bundle needs " +
                  Twine(bundleRanks) + " ranks");
    cmd.program = *mpirun;
    cmd.args = {cmd.program, "-np", std::to_string(bundleRanks)};
    if (static_cast<unsigned>(bundleRanks) >
        std::thread::hardware_concurrency())
      cmd.args.push_back("--oversubscribe");
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

bool distopt::driver::takeRankFlag(std::vector<std::string> &modelArgs,
                                   std::optional<int64_t> &ranks,
                                   std::string &error) {
  if (modelArgs.empty() || !StringRef(modelArgs[0]).starts_with("-n"))
    return true;
  StringRef value = StringRef(modelArgs[0]).drop_front(2);
  size_t used = 1;
  if (value.empty() && modelArgs.size() > 1) {
    value = modelArgs[1];
    used = 2;
  } else {
    value.consume_front("=");
  }
  int64_t n = 0;
  if (value.getAsInteger(10, n) || n < 1) {
    error = "-n after the bundle takes a rank count, got '" +
            modelArgs[used - 1] + "'";
    return false;
  }
  if (ranks && n != *ranks) {
    error = ("-n " + Twine(*ranks) + " and -n " + Twine(n) + " disagree").str();
    return false;
  }
  ranks = n;
  modelArgs.erase(modelArgs.begin(), modelArgs.begin() + used);
  return true;
}
