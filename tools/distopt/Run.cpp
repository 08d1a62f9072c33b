//===- Run.cpp - `distopt run`: launch a bundle on its ranks --------------===//
//
//   distopt run [-n N] model.dx [-n N] [--input NAME=FILE ...] [--output-dir DIR]
//
// A thin launcher: a single-rank bundle runs directly; a multi-rank bundle
// runs under `mpirun -np N` (with --oversubscribe when N exceeds this
// machine's hardware threads, and --allow-run-as-root for root). N defaults
// to the bundle's rank count; another N is an error before anything starts.
// Everything after the bundle goes to the model executable, but for a
// `-n N` right after it (where users also put it), which is the launcher's.
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/WithColor.h"

#include <thread>
#include <unistd.h>

using namespace llvm;

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

int error(const Twine &msg) {
  WithColor::error(errs(), "distopt run") << msg << "\n";
  return 1;
}
} // namespace

int distopt::tool::runBundle() {
  SmallString<256> manifestPath(bundle);
  sys::path::append(manifestPath, "manifest.json");
  auto buf = MemoryBuffer::getFile(manifestPath);
  if (!buf)
    return error("cannot read '" + manifestPath +
                 "': " + buf.getError().message() + " (is '" + bundle +
                 "' a bundle made by distopt compile?)");
  Expected<json::Value> manifest = json::parse((*buf)->getBuffer());
  if (!manifest)
    return error(manifestPath + ": " + toString(manifest.takeError()));
  int64_t ranks = 1;
  if (auto *obj = manifest->getAsObject())
    if (auto r = obj->getInteger("ranks"))
      ranks = *r;
  // `-n N` (or `-nN`, `-n=N`) right after the bundle: the launcher's too.
  std::vector<std::string> passed(modelArgs.begin(), modelArgs.end());
  bool ranksGiven = ranksOpt.getNumOccurrences() > 0;
  int64_t ranksWanted = ranksOpt;
  if (!passed.empty() && StringRef(passed[0]).starts_with("-n")) {
    StringRef value = StringRef(passed[0]).drop_front(2);
    size_t used = 1;
    if (value.empty() && passed.size() > 1) {
      value = passed[1];
      used = 2;
    } else {
      value.consume_front("=");
    }
    int64_t n = 0;
    if (value.getAsInteger(10, n) || n < 1)
      return error("-n after the bundle takes a rank count, got '" +
                   (used == 2 ? passed[1] : passed[0]) + "'");
    if (ranksGiven && n != ranksWanted)
      return error("-n " + Twine(ranksWanted) + " and -n " + Twine(n) +
                   " disagree");
    ranksGiven = true;
    ranksWanted = n;
    passed.erase(passed.begin(), passed.begin() + used);
  }
  if (ranksGiven && ranksWanted != ranks)
    return error("the bundle was compiled for " + Twine(ranks) +
                 (ranks == 1 ? " rank" : " ranks") + "; -n " +
                 Twine(ranksWanted) + " does not match (compile again with "
                 "--cluster for another count)");
  // The executable: named after the bundle directory, as distopt compile
  // writes it.
  SmallString<256> exe(bundle);
  while (exe.size() > 1 && exe.back() == '/')
    exe.pop_back();
  sys::path::append(exe, sys::path::stem(exe));
  if (!sys::fs::can_execute(exe))
    return error("no executable '" + exe + "' in the bundle");

  std::vector<std::string> args;
  std::string program;
  if (ranks == 1) {
    program = std::string(exe);
  } else {
    ErrorOr<std::string> mpirun = sys::findProgramByName("mpirun");
    if (!mpirun)
      return error("mpirun not found on PATH (install openmpi-bin); this "
                   "bundle needs " + Twine(ranks) + " ranks");
    program = *mpirun;
    args = {program, "-np", std::to_string(ranks)};
    if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency())
      args.push_back("--oversubscribe");
    if (::geteuid() == 0)
      args.push_back("--allow-run-as-root");
  }
  if (args.empty())
    args.push_back(program);
  if (ranks > 1)
    args.push_back(std::string(exe));
  for (const std::string &a : passed)
    args.push_back(a);
  SmallVector<StringRef> refs(args.begin(), args.end());
  std::string message;
  int rc = sys::ExecuteAndWait(program, refs, std::nullopt, {}, 0, 0,
                               &message);
  if (rc < 0)
    return error("cannot run " + program + ": " + message);
  return rc;
}
