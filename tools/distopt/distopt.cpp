//===- distopt.cpp - the distopt command-line driver ----------------------===//
//
//   distopt import|plan|compile|run|ops ...   (`distopt SUB --help`)
//
// Each subcommand is a cl::SubCommand: import and ops here, plan in
// Plan.cpp, compile in Compile.cpp, run in Run.cpp; Flags.cpp holds the
// flags they share.
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"
#include "distopt/Import/ONNX/Importer.h"

#include "Tool.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace llvm;

static cl::SubCommand &importCmd = distopt::tool::importCommand();
static cl::SubCommand &compileCmd = distopt::tool::compileCommand();
static cl::SubCommand opsCmd("ops",
                             "List the ONNX op types distopt imports (default "
                             "domain), one per line");

static cl::opt<std::string> importInput(cl::Positional, cl::Required,
                                        cl::desc("<model.onnx|model.onnxtxt>"),
                                        cl::sub(importCmd), cl::sub(compileCmd),
                                        cl::sub(distopt::tool::planCommand()));
static cl::opt<std::string>
    importOutput("o",
                 cl::desc("Output: an MLIR file (import, compile --emit), or "
                          "the bundle directory (compile; default "
                          "<model>.dx)"),
                 cl::value_desc("path"), cl::sub(importCmd),
                 cl::sub(compileCmd));
static cl::opt<bool> importGeneric("mlir-print-generic",
                                   cl::desc("Print ops in generic form"),
                                   cl::sub(importCmd), cl::sub(compileCmd));
static cl::opt<std::string> compileEmit(
    "emit",
    cl::desc("Stop early and print IR: graph (dopt), linalg, llvm (LLVM IR); "
             "with --target cuda also gpu (kernels outlined, before NVVM) "
             "and ptx"),
    cl::value_desc("graph|linalg|llvm|gpu|ptx"), cl::sub(compileCmd));
static cl::opt<std::string>
    compileCPU("cpu", cl::desc("Target CPU (default: native, the host's)"),
               cl::init("native"), cl::sub(compileCmd));

static int runImport(MLIRContext &context) {
  distopt::ONNXImportOptions options;
  if (!distopt::tool::importOptionsFromFlags(options))
    return 1;
  std::string error;
  if (failed(distopt::driver::importToFile(
          context, importInput, options,
          importOutput.empty() ? StringRef("-") : StringRef(importOutput),
          importGeneric, error))) {
    if (!error.empty())
      WithColor::error() << error << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  InitLLVM y(argc, argv);
  cl::SetVersionPrinter(
      [](raw_ostream &os) { os << distopt::driver::version() << "\n"; });
  // `distopt --help` lists the subcommands. The LLVM and MLIR libraries
  // register their own options at the top level (hundreds of target
  // backends' flags): they still work, but only --help-hidden lists them.
  for (auto &entry : cl::getRegisteredOptions(cl::SubCommand::getTopLevel()))
    if (entry.first != "version" &&
        !entry.second->Subs.contains(&cl::SubCommand::getAll()))
      entry.second->setHiddenFlag(cl::Hidden);
  cl::ParseCommandLineOptions(
      argc, argv,
      "distopt: compile ONNX models for distributed training and inference\n");
  if (opsCmd) {
    for (const std::string &op : distopt::supportedONNXOps())
      outs() << op << "\n";
    return 0;
  }

  DialectRegistry registry;
  distopt::driver::registerDialects(registry);
  if (compileCmd)
    distopt::driver::registerCompileDialects(registry);
  MLIRContext context(registry);
  // Errors name the ONNX node and say what is wrong; a dump of the IR the
  // failing pass was looking at helps compiler developers (distopt-opt),
  // not users.
  distopt::driver::printDiagnosticsTo(context, errs());

  if (importCmd)
    return runImport(context);
  if (distopt::tool::planCommand())
    return distopt::tool::runPlan(context, importInput);
  if (distopt::tool::runCommand())
    return distopt::tool::runBundle();
  if (compileCmd)
    return distopt::tool::runCompile(context, importInput, importOutput,
                                     compileEmit, compileCPU, importGeneric);
  errs() << "distopt: no subcommand given. Try 'distopt --help'.\n";
  return 1;
}
