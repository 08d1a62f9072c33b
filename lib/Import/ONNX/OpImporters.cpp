//===- OpImporters.cpp - the table of ONNX op importers -------------------===//
//
// ONNX op type -> importer, gathered from the op families (Elementwise.cpp,
// Normalization.cpp, Linear.cpp, Pooling.cpp, Reduction.cpp, Spatial.cpp,
// DataMovement.cpp, Recurrent.cpp, Attention.cpp, Signal.cpp,
// Quantization.cpp; their shared helpers in OpHelpers.h).
//
// Each importer maps one ONNX node (default domain, opsets 13-21) to dopt ops,
// resolving what ONNX leaves to run time (negative axes, 0/-1 in shapes,
// auto_pad, optional inputs, inputs that became attributes across opsets)
// into canonical static attributes. Constant inputs fold as they are built,
// so exporters' shape subgraphs vanish during import.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

using namespace distopt;
using namespace distopt::onnximport;

const llvm::StringMap<OpImporterFn> &onnximport::opImporters() {
  static const llvm::StringMap<OpImporterFn> table = [] {
    llvm::StringMap<OpImporterFn> t;
    registerElementwiseImporters(t);
    registerNormalizationImporters(t);
    registerLinearImporters(t);
    registerPoolingImporters(t);
    registerReductionImporters(t);
    registerSpatialImporters(t);
    registerDataMovementImporters(t);
    registerRecurrentImporters(t);
    registerAttentionImporters(t);
    registerSignalImporters(t);
    registerQuantizationImporters(t);
    return t;
  }();
  return table;
}
