//===- Diagnostics.cpp - errors as users of an ONNX tool read them --------===//
//
// See Driver.h (printDiagnosticsTo).
//
//===----------------------------------------------------------------------===//

#include "distopt/Driver/Driver.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace distopt;
using llvm::raw_ostream;
using llvm::WithColor;

/// The place of a diagnostic as `file: node 'name': `, the form users
/// of an ONNX tool expect (protobuf models have no line numbers).
static void printLocation(raw_ostream &os, Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    printLocation(os, name.getChildLoc());
    os << "'" << name.getName().getValue() << "': ";
    return;
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    os << file.getFilename().getValue();
    if (file.getLine() > 0)
      os << ":" << file.getLine() << ":" << file.getColumn();
    os << ": ";
    return;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    if (!fused.getLocations().empty())
      printLocation(os, fused.getLocations().front());
    return;
  }
}

static void printDiagnostic(raw_ostream &os, Diagnostic &diag) {
  printLocation(os, diag.getLocation());
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error:
    WithColor(os, raw_ostream::RED, true) << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    WithColor(os, raw_ostream::MAGENTA, true) << "warning: ";
    break;
  case DiagnosticSeverity::Note:
    WithColor(os, raw_ostream::BLACK, true) << "note: ";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark: ";
    break;
  }
  os << diag << "\n";
  for (Diagnostic &note : diag.getNotes()) {
    printLocation(os, note.getLocation());
    os << "note: " << note << "\n";
  }
}

void driver::printDiagnosticsTo(MLIRContext &context, raw_ostream &os) {
  context.printOpOnDiagnostic(false);
  context.getDiagEngine().registerHandler([&os](Diagnostic &diag) {
    printDiagnostic(os, diag);
    return success();
  });
}
