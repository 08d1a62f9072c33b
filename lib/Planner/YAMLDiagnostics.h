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
#include "llvm/Support/SourceMgr.h"

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

} // namespace distopt::planner::detail

#endif // DISTOPT_LIB_PLANNER_YAMLDIAGNOSTICS_H
