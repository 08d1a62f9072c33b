//===- YAMLDiagnostics.h - error reporting for YAML I/O readers -*- C++ -*-===//
//
// Private to lib/Planner. YAML I/O reports problems through a SourceMgr
// diagnostic handler; these helpers collect them as `file:line:col: error:`
// text. They append to YAML I/O's generic "unknown key 'x'" the keys the
// mapping accepts (each MappingTraits::validate sets that hint just before
// YAML I/O checks the mapping's keys), and reword its "unexpected scalar"
// (a list, mapping or nothing where a value belongs), dropping the
// ScalarTraits error that repeats it at the same place.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_PLANNER_YAMLDIAGNOSTICS_H
#define DISTOPT_LIB_PLANNER_YAMLDIAGNOSTICS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLTraits.h"

#include <string>

namespace distopt::planner::detail {

/// Sets the "(expected ...)" text for the next unknown-key diagnostic.
void setUnknownKeyHint(llvm::StringRef hint);

/// Clears the state below; call before each parse.
void resetYAMLDiagnostics();

/// A SourceMgr::DiagHandlerTy; `context` is a std::string * that receives
/// the printed diagnostics.
void collectYAMLDiagnostic(const llvm::SMDiagnostic &diag, void *context);

/// True if `yaml` holds nothing but blank lines, comments and document
/// markers (YAML I/O gives no diagnostic for such input).
bool isBlankYAML(llvm::StringRef yaml);

/// What a ScalarTraits::input returns for a bad scalar `s`: "expected
/// <what>, got '<s>'". YAML I/O reports it at once, so one buffer per thread
/// holds it.
inline llvm::StringRef badScalar(llvm::StringRef what, llvm::StringRef s) {
  thread_local std::string message;
  message = ("expected " + what + ", got '" + s + "'").str();
  return message;
}

/// "<bufferName>: error: invalid <what>": YAML I/O failed without saying
/// why.
inline llvm::Error invalidYAML(llvm::StringRef bufferName,
                               llvm::StringRef what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "%s: error: invalid %s",
                                 bufferName.str().c_str(), what.str().c_str());
}

/// Reads `yaml` (named `bufferName` in messages) into `raw` with YAML I/O;
/// the collected diagnostics as one error, or invalidYAML(what) where YAML
/// I/O failed without one.
template <typename Raw>
llvm::Error readYAML(llvm::StringRef yaml, llvm::StringRef bufferName,
                     Raw &raw, llvm::StringRef what) {
  std::string diagnostics;
  llvm::yaml::Input yin(llvm::MemoryBufferRef(yaml, bufferName),
                        /*Ctxt=*/nullptr, collectYAMLDiagnostic, &diagnostics);
  resetYAMLDiagnostics();
  yin >> raw;
  if (!diagnostics.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   llvm::StringRef(diagnostics).rtrim());
  if (yin.error())
    return invalidYAML(bufferName, what);
  return llvm::Error::success();
}

} // namespace distopt::planner::detail

#endif // DISTOPT_LIB_PLANNER_YAMLDIAGNOSTICS_H
