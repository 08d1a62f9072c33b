//===- Tool.h - pieces of the distopt command line --------------*- C++ -*-===//
//
// The subcommands' flags, parsed into the driver library's options
// (distopt/Driver/Options.h). The pipeline itself is lib/Driver.
//
//===----------------------------------------------------------------------===//
#ifndef DISTOPT_TOOLS_DISTOPT_TOOL_H
#define DISTOPT_TOOLS_DISTOPT_TOOL_H

#include "distopt/Driver/Options.h"
#include "distopt/Import/ONNX/Importer.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/WithColor.h"

#include <string>

namespace distopt::tool {

/// Fills import options from --shape/--dim/--freeze/--inline-weights/--text;
/// prints a usage error and returns false when a flag is malformed.
bool importOptionsFromFlags(ONNXImportOptions &options);

/// The subcommands (function-local statics, so options in other files can
/// name them safely during static initialisation).
llvm::cl::SubCommand &importCommand();
llvm::cl::SubCommand &planCommand();
llvm::cl::SubCommand &compileCommand();
llvm::cl::SubCommand &runCommand();

/// cl::opt modifiers: a flag of `plan` and `compile`, and one of those and
/// `import`.
struct PlanAndCompile {
  template <class Opt> void apply(Opt &o) const {
    o.addSubCommand(planCommand());
    o.addSubCommand(compileCommand());
  }
};
struct ImportPlanAndCompile {
  template <class Opt> void apply(Opt &o) const {
    o.addSubCommand(importCommand());
    PlanAndCompile().apply(o);
  }
};

/// Prints "distopt SUB: error: MSG" and returns the exit status 1.
inline int fail(llvm::StringRef subcommand, const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), ("distopt " + subcommand).str())
      << msg << "\n";
  return 1;
}

/// Sets `field` to the flag's value where the flag was given.
template <class Opt, class Field>
void setIfGiven(const Opt &flag, Field &field) {
  if (flag.getNumOccurrences())
    field = flag.getValue();
}

/// The flags `plan` and `compile` share (Flags.cpp) (--cluster, the degrees, gradient
/// synchronisation, pipelines, parameter servers, --profile); false with
/// `error` where a value is not one of the allowed ones.
bool distributionFromFlags(driver::DistributionOptions &out,
                           std::string &error);

/// --precision (plan and compile): unset when not given; false with `error`
/// where the value is not a dtype.
bool precisionFromFlags(std::optional<planner::DType> &out,
                        std::string &error);

/// `distopt plan` (Plan.cpp).
int runPlan(mlir::MLIRContext &context, llvm::StringRef input);
/// `distopt compile` (Compile.cpp): its flags into driver::CompileOptions.
int runCompile(mlir::MLIRContext &context, llvm::StringRef input,
               llvm::StringRef output, llvm::StringRef emit,
               llvm::StringRef cpu, bool printGeneric);
/// `distopt run [-n N] BUNDLE ARGS...` (Run.cpp).
int runBundle();

} // namespace distopt::tool

#endif // DISTOPT_TOOLS_DISTOPT_TOOL_H
