//===- Compile.cpp - `distopt compile` ------------------------------------===//
//
// Imports the model, lowers it for the CPU, and writes the bundle:
//
//   model.dx/model          executable (generated object + runtime)
//   model.dx/manifest.json  inputs, outputs, weights (name, dtype, shape, file)
//   model.dx/weights.bin    weights embedded in the ONNX file, 64-byte aligned
//
// External-data weights are not copied: the manifest points at the model's
// external-data file (absolute path), which the runtime maps.
//
//===----------------------------------------------------------------------===//

#include "Tool.h"

#include "distopt/Dialect/Dopt/IR/DoptOps.h"
#include "distopt/Target/CPU/CPUTarget.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "distopt/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <fstream>

using namespace mlir;
using namespace distopt;
using llvm::WithColor;

namespace {

std::string dtypeName(Type t) {
  if (t.isF32())
    return "float32";
  if (t.isF64())
    return "float64";
  if (t.isF16())
    return "float16";
  if (t.isBF16())
    return "bfloat16";
  if (t.isInteger(1))
    return "bool";
  if (t.isUnsignedInteger(8))
    return "uint8";
  if (auto it = dyn_cast<IntegerType>(t))
    return "int" + std::to_string(it.getWidth());
  return "unknown";
}

int64_t elementBytes(Type t) {
  return t.isInteger(1) ? 1 : (t.getIntOrFloatBitWidth() + 7) / 8;
}

llvm::json::Array shapeJson(ArrayRef<int64_t> shape) {
  llvm::json::Array a;
  for (int64_t d : shape)
    a.push_back(d);
  return a;
}

llvm::json::Object tensorJson(StringRef name, RankedTensorType t) {
  return llvm::json::Object{{"name", name.str()},
                            {"dtype", dtypeName(t.getElementType())},
                            {"shape", shapeJson(t.getShape())}};
}

/// Where the runtime finds libdistopt_runtime*.a: $DISTOPT_RUNTIME_LIB_DIR,
/// else the build tree this driver was built in, else <bindir>/../lib.
std::string runtimeLibDir() {
  if (std::optional<std::string> env =
          llvm::sys::Process::GetEnv("DISTOPT_RUNTIME_LIB_DIR"))
    return *env;
#ifdef DISTOPT_RUNTIME_LIB_DIR
  if (llvm::sys::fs::exists(DISTOPT_RUNTIME_LIB_DIR))
    return DISTOPT_RUNTIME_LIB_DIR;
#endif
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  SmallString<256> dir(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(dir, "..", "lib");
  return std::string(dir);
}

template <typename Fn> LogicalResult printTo(StringRef output, Fn print) {
  std::string error;
  auto out = openOutputFile(output.empty() ? "-" : output, &error);
  if (!out) {
    WithColor::error() << error << "\n";
    return failure();
  }
  print(out->os());
  out->keep();
  return success();
}

} // namespace

int tool::runCompile(MLIRContext &context, StringRef input, StringRef output,
                     StringRef emit, StringRef cpuName, bool printGeneric) {
  if (!emit.empty() && emit != "graph" && emit != "linalg" && emit != "llvm") {
    WithColor::error() << "--emit must be graph, linalg or llvm, got '" << emit
                       << "'\n";
    return 1;
  }
  ONNXImportOptions options;
  if (!importOptionsFromFlags(options))
    return 1;
  OwningOpRef<ModuleOp> module = importONNXFile(context, input, options);
  if (!module)
    return 1;
  // --cluster: plan, then rewrite into the program of one rank.
  std::vector<int64_t> grid;
  if (!partitionForCluster(context, *module, grid))
    return 1;
  int64_t ranks = 1;
  for (int64_t g : grid)
    ranks *= g;
  OpPrintingFlags flags;
  if (printGeneric)
    flags.printGenericOpForm();
  if (emit == "graph")
    return failed(printTo(output, [&](llvm::raw_ostream &os) {
             module->print(os, flags);
             os << "\n";
           }));

  // Outline weights, then read the bundle's interface off @main.
  {
    PassManager pm(&context);
    pm.addPass(createOutlineWeightsPass());
    if (failed(pm.run(*module)))
      return 1;
  }
  auto main = module->lookupSymbol<func::FuncOp>("main");
  llvm::json::Array inputs, weights, outputs;
  struct WeightToCopy {
    std::string name;
    RankedTensorType type;
    int64_t offset;
  };
  std::vector<WeightToCopy> embedded;
  int64_t weightsBinSize = 0;
  SmallString<256> modelDir(input);
  llvm::sys::path::remove_filename(modelDir);
  if (modelDir.empty())
    modelDir = ".";
  llvm::sys::fs::make_absolute(modelDir);
  // A partitioned program's tensors are blocks of whole tensors: the
  // manifest says how to cut them (split axes over the grid, whole shape).
  auto distribute = [&](llvm::json::Object &t, Attribute splitAxes,
                        Attribute globalType, Attribute blockParts) {
    auto axes = dyn_cast_or_null<ArrayAttr>(splitAxes);
    auto global = dyn_cast_or_null<TypeAttr>(globalType);
    if (!axes || !global)
      return;
    llvm::json::Array dims;
    for (Attribute a : axes) {
      llvm::json::Array list;
      for (Attribute x : cast<ArrayAttr>(a))
        list.push_back(cast<IntegerAttr>(x).getInt());
      dims.push_back(std::move(list));
    }
    t["split_axes"] = std::move(dims);
    t["global_shape"] =
        shapeJson(cast<RankedTensorType>(global.getValue()).getShape());
    if (auto parts = dyn_cast_or_null<IntegerAttr>(blockParts))
      t["block_parts"] = parts.getInt();
  };
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(main.getArgument(i).getType());
    if (auto ref = main.getArgAttrOfType<DictionaryAttr>(i, "dopt.weight")) {
      StringRef name = cast<StringAttr>(ref.get("name")).getValue();
      llvm::json::Object w = tensorJson(name, type);
      distribute(w, ref.get("split_axes"), ref.get("global_type"),
                 ref.get("block_parts"));
      // Files hold the whole weight.
      if (auto global = ref.getAs<TypeAttr>("global_type"))
        type = cast<RankedTensorType>(global.getValue());
      int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
      if (auto loc = ref.getAs<StringAttr>("location")) {
        SmallString<256> path(modelDir);
        llvm::sys::path::append(path, loc.getValue());
        llvm::sys::path::remove_dots(path, /*remove_dot_dot=*/true);
        w["file"] = std::string(path);
        w["offset"] = ref.getAs<IntegerAttr>("offset").getInt();
        w["length"] = ref.getAs<IntegerAttr>("length").getInt();
      } else {
        weightsBinSize = llvm::alignTo(weightsBinSize, 64);
        embedded.push_back({name.str(), type, weightsBinSize});
        w["file"] = "weights.bin";
        w["offset"] = weightsBinSize;
        w["length"] = bytes;
        weightsBinSize += bytes;
      }
      weights.push_back(std::move(w));
      continue;
    }
    auto name = main.getArgAttrOfType<StringAttr>(i, "dopt.name");
    llvm::json::Object in = tensorJson(name ? name.getValue() : "", type);
    distribute(in, main.getArgAttr(i, "dopt.split_axes"),
               main.getArgAttr(i, "dopt.global_type"), nullptr);
    inputs.push_back(std::move(in));
  }
  llvm::StringSet<> outputNames;
  for (unsigned i = 0; i < main.getNumResults(); ++i) {
    auto attr = main.getResultAttrOfType<StringAttr>(i, "dopt.name");
    std::string name =
        attr ? attr.getValue().str() : "output" + std::to_string(i);
    // A graph may list one output twice; the bundle's outputs need distinct
    // names (and files).
    if (!outputNames.insert(name).second) {
      std::string unique = name + "_" + std::to_string(i);
      WithColor::warning() << "graph output '" << name
                           << "' is listed more than once; output " << i
                           << " is written as '" << unique << "'\n";
      name = unique;
      outputNames.insert(name);
    }
    llvm::json::Object out =
        tensorJson(name, cast<RankedTensorType>(main.getResultTypes()[i]));
    distribute(out, main.getResultAttr(i, "dopt.split_axes"),
               main.getResultAttr(i, "dopt.global_type"), nullptr);
    outputs.push_back(std::move(out));
  }

  if (failed(cpu::lowerToLinalg(*module)))
    return 1;
  if (emit == "linalg")
    return failed(printTo(output, [&](llvm::raw_ostream &os) {
             module->print(os, flags);
             os << "\n";
           }));
  if (failed(cpu::lowerToLLVMDialect(*module)))
    return 1;
  cpu::CPUOptions cpuOptions;
  cpuOptions.cpu = cpuName.str();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      cpu::translateToLLVMIR(*module, llvmContext, cpuOptions);
  if (!llvmModule)
    return 1;
  if (emit == "llvm")
    return failed(printTo(output, [&](llvm::raw_ostream &os) {
             llvmModule->print(os, nullptr);
           }));

  // Write the bundle into a temporary directory, then move it into place.
  SmallString<256> bundle(output);
  if (bundle.empty()) {
    bundle = llvm::sys::path::stem(input);
    bundle += ".dx";
  }
  std::string exeName = llvm::sys::path::stem(bundle).str();
  SmallString<256> tmp(bundle);
  tmp += ".tmp-" + std::to_string(llvm::sys::Process::getProcessId());
  llvm::sys::fs::remove_directories(tmp);
  if (std::error_code ec = llvm::sys::fs::create_directories(tmp)) {
    WithColor::error() << "cannot create '" << tmp << "': " << ec.message()
                       << "\n";
    return 1;
  }
  auto fail = [&](const Twine &msg) {
    WithColor::error() << msg << "\n";
    llvm::sys::fs::remove_directories(tmp);
    return 1;
  };
  auto pathIn = [&](StringRef file) {
    SmallString<256> p(tmp);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };

  if (!embedded.empty()) {
    std::string error;
    std::unique_ptr<ONNXWeightReader> reader =
        ONNXWeightReader::open(input, error);
    if (!reader)
      return fail(error);
    std::ofstream bin(pathIn("weights.bin"), std::ios::binary);
    int64_t written = 0;
    std::vector<char> bytes;
    for (const WeightToCopy &w : embedded) {
      if (!reader->readEmbedded(w.name, w.type.getNumElements(),
                                elementBytes(w.type.getElementType()), bytes,
                                error))
        return fail(input + ": " + error);
      std::vector<char> pad(w.offset - written, 0);
      bin.write(pad.data(), pad.size());
      bin.write(bytes.data(), bytes.size());
      written = w.offset + bytes.size();
    }
    if (!bin)
      return fail("cannot write " + pathIn("weights.bin"));
  }

  llvm::json::Object manifest{
      {"format", 1},
      {"model", llvm::sys::path::stem(input)},
      {"ranks", ranks},
      {"inputs", std::move(inputs)},
      {"outputs", std::move(outputs)},
      {"weights", std::move(weights)}};
  if (!grid.empty()) {
    llvm::json::Array g;
    for (int64_t n : grid)
      g.push_back(n);
    manifest["grid"] = std::move(g);
  }
  if (failed(printTo(pathIn("manifest.json"), [&](llvm::raw_ostream &os) {
        os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest)))
           << "\n";
      })))
    return fail("cannot write the manifest");

  std::string object = pathIn(exeName + ".o");
  if (failed(cpu::emitObjectFile(*llvmModule, object, cpuOptions)))
    return fail("cannot emit " + object);
  std::string error;
  if (failed(cpu::linkExecutable({object}, pathIn(exeName), runtimeLibDir(),
                                 error)))
    return fail(error);
  llvm::sys::fs::remove(object);

  llvm::sys::fs::remove_directories(bundle);
  if (std::error_code ec = llvm::sys::fs::rename(tmp, bundle))
    return fail("cannot move the bundle to '" + bundle + "': " + ec.message());
  return 0;
}
