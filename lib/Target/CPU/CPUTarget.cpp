//===- CPUTarget.cpp - dopt -> native CPU code ----------------------------===//

#include "distopt/Target/CPU/CPUTarget.h"

#include "distopt/Conversion/RuntimeABI.h"

#include "distopt/Codegen/Passes.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/Dopt/IR/DoptDialect.h"
#include "distopt/Dialect/Dopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/OptimizationLevel.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <mutex>

using namespace mlir;
using namespace distopt;

void cpu::registerCPUTargetDialects(DialectRegistry &registry) {
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  registry.insert<dopt::DoptDialect>();
}

/// Upstream passes are parsed from a textual pipeline: they must be
/// registered once per process.
static void registerPassesOnce() {
  static bool done = [] {
    registerAllPasses();
    registerDistoptConversionPasses();
    registerDistoptCodegenPasses();
    registerDistoptDoptTransformsPasses();
    return true;
  }();
  (void)done;
}

LogicalResult cpu::runPipeline(ModuleOp module, StringRef pipeline) {
  registerPassesOnce();
  PassManager pm(module->getContext());
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (failed(parsePassPipeline(pipeline, pm, os))) {
    module.emitError("internal error: bad pass pipeline: ") << errors;
    return failure();
  }
  return pm.run(module);
}

LogicalResult cpu::lowerToLinalg(ModuleOp module, bool libraryConvolutions,
                                 bool fuseAttention, bool outlineRepeats) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("no @main function");
  // "main" is the C entry symbol of the executable; the model function is
  // dopt_main.
  main.setName("dopt_main");
  return runPipeline(
      module, std::string(fuseAttention ? "distopt-fuse-attention," : "") +
                  (outlineRepeats ? "distopt-outline-repeats," : "") +
                  "distopt-expand-attention,"
                  "distopt-convert-dopt-to-linalg" +
                  (libraryConvolutions ? "{library-convolutions=true}" : "") +
                  ",canonicalize,"
                  "distopt-fuse-elementwise,canonicalize,cse");
}

/// Adds `int32_t dopt_entry(void **buffers)` calling the lowered dopt_main
/// with one memref descriptor per buffer (static shape, identity layout).
LogicalResult cpu::addEntryPoint(ModuleOp module, ArrayRef<MemRefType> argTypes,
                                StringRef name) {
  auto callee = module.lookupSymbol<LLVM::LLVMFuncOp>("dopt_main");
  if (!callee)
    return module.emitError("internal error: dopt_main was not lowered");
  MLIRContext *ctx = module.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  auto ptrTy = LLVM::LLVMPointerType::get(ctx);
  auto i32 = b.getI32Type(), i64 = b.getI64Type();
  auto fn = LLVM::LLVMFuncOp::create(
      b, loc, name, LLVM::LLVMFunctionType::get(i32, {ptrTy}));
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value bufs = entry->getArgument(0);
  auto c64 = [&](int64_t v) {
    return LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(v));
  };
  SmallVector<Value> args;
  for (auto [i, type] : llvm::enumerate(argTypes)) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, bufs,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)i});
    Value p = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    args.push_back(p);    // allocated
    args.push_back(p);    // aligned
    args.push_back(c64(0)); // offset
    SmallVector<int64_t> strides(type.getRank(), 1);
    for (int64_t d = type.getRank() - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * type.getDimSize(d + 1);
    for (int64_t s : type.getShape())
      args.push_back(c64(s));
    for (int64_t s : strides)
      args.push_back(c64(s));
  }
  if (args.size() != callee.getNumArguments())
    return module.emitError("internal error: dopt_main takes ")
           << callee.getNumArguments() << " LLVM arguments, expected "
           << args.size();
  LLVM::CallOp::create(b, loc, callee, args);
  // dopt_main goes into the entry: its memref arguments (allocated and
  // aligned pointer, offset, sizes, strides per buffer) then fold to the
  // buffers' constants. A call passing them all costs LLVM's instruction
  // selection time quadratic in their number: a MobileNetV2 training
  // step's 6000 scalars took 10 s to compile in its entry alone.
  callee.setAlwaysInline(true);
  callee.setLinkage(LLVM::Linkage::Internal);
  LLVM::ReturnOp::create(
      b, loc, ValueRange{LLVM::ConstantOp::create(b, loc, i32,
                                                  b.getI32IntegerAttr(0))});
  return success();
}

LogicalResult cpu::lowerToLoops(ModuleOp module,
                                SmallVectorImpl<MemRefType> &argTypes,
                                bool gemmEpilogues, int64_t memcpyMaxBytes) {
  // Inputs and weights belong to the runtime (weights are mapped read-only):
  // bufferization must never write into them, except a training step's
  // updates into the weights and state they update (distopt-update-in-place:
  // the train loop's own copies).
  if (auto main = module.lookupSymbol<func::FuncOp>("dopt_main")) {
    for (unsigned i = 0; i < main.getNumArguments(); ++i)
      main.setArgAttr(i, "bufferization.writable",
                      BoolAttr::get(module.getContext(), false));
  }
  // Each result gets its own buffer: a value returned twice becomes a copy
  // (buffer-results-to-out-params crashes on repeated results), in @dopt_main
  // and in the functions it calls (a micro-batch's).
  module.walk([](func::ReturnOp ret) {
    OpBuilder b(ret);
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      Value v = ret.getOperand(i);
      bool repeated = llvm::is_contained(ret.getOperands().take_front(i), v);
      if (!repeated)
        continue;
      auto t = cast<RankedTensorType>(v.getType());
      Value empty = tensor::EmptyOp::create(b, ret.getLoc(), t.getShape(),
                                            t.getElementType());
      ret.setOperand(
          i, linalg::CopyOp::create(b, ret.getLoc(), v, empty).getResult(0));
    }
  });
  // Bufferize; results become out-parameters allocated by the caller.
  if (failed(runPipeline(
          module,
          "distopt-convert-shard-to-runtime,func.func(distopt-privatize-fills,"
          "distopt-update-in-place),"
          "one-shot-bufferize{bufferize-function-boundaries "
          "allow-return-allocs-from-loops "
          "function-boundary-type-conversion=identity-layout-map},"
          "drop-equivalent-buffer-results,"
          "func.func(distopt-drop-in-place-results,"
          "distopt-in-place-loop-buffers),"
          "buffer-results-to-out-params{modify-public-functions "
          "hoist-static-allocs},"
          "distopt-linalg-to-blas{epilogues=" +
              std::string(gemmEpilogues ? "true" : "false") +
              "},"
              "func.func(distopt-copies-to-linalg{memcpy-max-bytes=" +
              std::to_string(memcpyMaxBytes) +
              "},convert-linalg-to-parallel-loops,"
              "distopt-fuse-parallel-loops,buffer-hoisting,distopt-plan-"
              "buffers),"
              "ownership-based-buffer-deallocation,"
              "canonicalize,buffer-deallocation-simplification,"
              "bufferization-lower-deallocations,cse,canonicalize")))
    return failure();
  auto main = module.lookupSymbol<func::FuncOp>("dopt_main");
  if (!main)
    return module.emitError("internal error: no dopt_main after bufferization");
  argTypes.clear();
  for (Type t : main.getArgumentTypes()) {
    auto m = dyn_cast<MemRefType>(t);
    if (!m || !m.hasStaticShape() || !m.getLayout().isIdentity())
      return main.emitError("internal error: entry argument type ")
             << t << " is not a static identity-layout memref";
    argTypes.push_back(m);
  }
  return success();
}

LogicalResult cpu::lowerToLLVMDialect(ModuleOp module,
                                      std::optional<int64_t> outlineMinOps) {
  SmallVector<MemRefType> argTypes;
  if (failed(lowerToLoops(module, argTypes)))
    return failure();
  return lowerLoopsToLLVMDialect(module, argTypes, outlineMinOps);
}

void cpu::markLocalFunctions(ModuleOp module) {
  module.walk([](func::FuncOp f) {
    if (f.isPrivate() && !f.isExternal())
      f->setAttr("dopt.local", UnitAttr::get(f.getContext()));
  });
}

void cpu::internalizeLocalFunctions(ModuleOp module) {
  module.walk([](LLVM::LLVMFuncOp f) {
    if (f->removeAttr("dopt.local"))
      f.setLinkage(LLVM::Linkage::Internal);
  });
}

LogicalResult cpu::lowerLoopsToLLVMDialect(
    ModuleOp module, ArrayRef<MemRefType> argTypes,
    std::optional<int64_t> outlineMinOps) {
  cpu::markLocalFunctions(module);
  std::string outline = "distopt-outline-loop-nests";
  if (outlineMinOps)
    outline += "{min-ops=" + std::to_string(*outlineMinOps) + "}";
  if (failed(runPipeline(
          module,
          "distopt-approximate-math,"
          "func.func(distopt-parallelize-loops,distopt-promote-reductions),"
          + outline + ",convert-scf-to-openmp,canonicalize,convert-scf-to-cf,expand-strided-metadata,lower-affine,"
          "convert-math-to-funcs,convert-math-to-llvm,convert-math-to-libm,"
          // Vector loads and stores (the CUDA mapping's, under cuda-emu).
          "convert-vector-to-llvm,"
          "finalize-memref-to-llvm,convert-arith-to-llvm,convert-cf-to-llvm,"
          "convert-func-to-llvm,convert-index-to-llvm,convert-openmp-to-llvm,"
          "reconcile-unrealized-casts")))
    return failure();
  // distopt-outline-loop-nests' functions: local to their object file (the
  // programs of a bundle each have their own), and the caller's allocations
  // they take are distinct from every other pointer they see.
  cpu::internalizeLocalFunctions(module);
  module.walk([](LLVM::LLVMFuncOp f) {
    auto positions = f->getAttrOfType<DenseI64ArrayAttr>("dopt.outlined");
    if (!positions)
      return;
    f.setLinkage(LLVM::Linkage::Internal);
    for (int64_t i : positions.asArrayRef())
      if (i < f.getNumArguments() &&
          isa<LLVM::LLVMPointerType>(f.getArgumentTypes()[i]))
        f.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                     UnitAttr::get(f.getContext()));
    f->removeAttr("dopt.outlined");
  });
  return addEntryPoint(module, argTypes, "dopt_entry");
}

static llvm::TargetMachine *makeTargetMachine(const cpu::CPUOptions &options,
                                              std::string &error) {
  static bool init = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)init;
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  std::string cpuName = options.cpu, features;
  if (options.cpu == "native") {
    cpuName = llvm::sys::getHostCPUName().str();
    for (auto &f : llvm::sys::getHostCPUFeatures())
      features += (features.empty() ? "" : ",") +
                  std::string(f.second ? "+" : "-") + f.first().str();
  }
  llvm::TargetOptions targetOptions;
  return target->createTargetMachine(
      triple, cpuName, features, targetOptions, llvm::Reloc::PIC_,
      std::nullopt,
      options.optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
      : options.optLevel == 0 ? llvm::CodeGenOptLevel::None
                              : llvm::CodeGenOptLevel::Default);
}

namespace {
/// LLVM fully unrolls loops of a small constant trip count before its loop
/// vectorizer runs. An im2col's or a pool's innermost loop (16 or 32
/// columns) then disappears, and the vectorizer takes the loop around it,
/// whose accesses are strided by a row: AVX-512 gathers and scatters where
/// contiguous vectors were possible (41% of the small CNN's time,
/// 2026-11-26). The same befalls the trailing 3x3 of a weight, or the 4x4
/// and 2x2 of ResNet's last stages, in elementwise loops (a ReLU's
/// gradient). While the CPU module is optimized, full unrolling is kept to
/// loops of at most `limit` trips.
/// LLVM takes the limit only from its command line: the option is set for
/// the scope and reset after (NVPTX's pipeline for the CUDA kernels keeps
/// the default), and one given on distopt's command line is left alone.
class FullUnrollLimit {
public:
  explicit FullUnrollLimit(unsigned limit) {
    auto &all = llvm::cl::getRegisteredOptions();
    auto it = all.find("unroll-full-max-count");
    if (it == all.end() || it->second->getNumOccurrences() > 0)
      return;
    option = it->second;
    option->addOccurrence(0, "unroll-full-max-count", std::to_string(limit));
  }
  ~FullUnrollLimit() {
    if (option)
      option->reset();
  }
  FullUnrollLimit(const FullUnrollLimit &) = delete;
  FullUnrollLimit &operator=(const FullUnrollLimit &) = delete;

private:
  llvm::cl::Option *option = nullptr;
};
} // namespace

/// Every runtime function the program calls is one of the runtime's ABI
/// (Runtime/ABI.def), so a bundle never fails to link, or calls what the
/// runtime does not define, because a lowering built a name wrongly.
static LogicalResult checkRuntimeCalls(ModuleOp module) {
  LogicalResult result = success();
  auto check = [&](Operation *decl, StringRef name) {
    if (name.contains("dort_") && !isRuntimeFunction(name)) {
      decl->emitError("internal error: the program calls the runtime "
                      "function '")
          << name
          << "', which the runtime's ABI (include/distopt/Runtime/ABI.def) "
             "does not declare";
      result = failure();
    }
  };
  for (auto fn : module.getOps<LLVM::LLVMFuncOp>())
    if (fn.isExternal())
      check(fn, fn.getName());
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn.isExternal())
      check(fn, fn.getName());
  return result;
}

/// LLVM's default pipeline at `optLevel` (as MLIR's
/// makeOptimizingTransformer: loops unrolled, interleaved and vectorized,
/// SLP), without CalledValuePropagation: it follows function pointers
/// through every pointer argument of every call, which compiled programs
/// never call through, in time that grew superlinearly with the calls of
/// a deep model's layers (two thirds of a 48-layer step's compile).
static LogicalResult optimizeLLVM(llvm::Module &llvmModule, unsigned optLevel,
                                  llvm::TargetMachine *tm) {
  static const llvm::OptimizationLevel levels[] = {
      llvm::OptimizationLevel::O0, llvm::OptimizationLevel::O1,
      llvm::OptimizationLevel::O2, llvm::OptimizationLevel::O3};
  if (optLevel > 3)
    return failure();
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassInstrumentationCallbacks callbacks;
  callbacks.registerShouldRunOptionalPassCallback(
      [](llvm::StringRef pass, llvm::Any) {
        return pass != "CalledValuePropagationPass";
      });
  llvm::PassBuilder pb(tm, tuning, std::nullopt, &callbacks);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm =
      pb.buildPerModuleDefaultPipeline(levels[optLevel]);
  mpm.run(llvmModule, mam);
  return success();
}

std::unique_ptr<llvm::Module>
cpu::translateToLLVMIR(ModuleOp module, llvm::LLVMContext &context,
                       const CPUOptions &options) {
  if (failed(checkRuntimeCalls(module)))
    return nullptr;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, context, "distopt");
  if (!llvmModule) {
    module.emitError("translation to LLVM IR failed");
    return nullptr;
  }
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm(makeTargetMachine(options, error));
  if (!tm) {
    module.emitError("cannot create a target machine: ") << error;
    return nullptr;
  }
  llvmModule->setDataLayout(tm->createDataLayout());
  llvmModule->setTargetTriple(tm->getTargetTriple());
  // 2: ResNet-18's training step 6% faster than with 4 (which left 3- and
  // 4-trip loops to be unrolled away: 3891 gathers against 77), inference
  // unchanged (docs/benchmarks.md).
  FullUnrollLimit unrollLimit(2);
  if (failed(optimizeLLVM(*llvmModule, options.optLevel, tm.get()))) {
    module.emitError("LLVM optimisation level must be 0 to 3, got ")
        << options.optLevel;
    return nullptr;
  }
  return llvmModule;
}

LogicalResult cpu::emitObjectFile(llvm::Module &llvmModule, StringRef path,
                                  const CPUOptions &options) {
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm(makeTargetMachine(options, error));
  if (!tm) {
    llvm::errs() << "distopt: cannot create a target machine: " << error
                 << "\n";
    return failure();
  }
  std::error_code ec;
  llvm::ToolOutputFile out(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "distopt: cannot write '" << path << "': " << ec.message()
                 << "\n";
    return failure();
  }
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out.os(), nullptr,
                              llvm::CodeGenFileType::ObjectFile)) {
    llvm::errs() << "distopt: the target cannot emit object files\n";
    return failure();
  }
  pm.run(llvmModule);
  out.keep();
  return success();
}

namespace {
/// Which part each defined function of `m` goes to (largest first onto the
/// least loaded part), or nothing where the module is better left whole:
/// one thread, or fewer than `splitMin` instructions (below that, the
/// split costs more than it saves).
std::optional<llvm::DenseMap<const llvm::GlobalValue *, unsigned>>
partitionFunctions(llvm::Module &m, unsigned threads, size_t splitMin) {
  if (threads < 2 || !m.getModuleInlineAsm().empty() ||
      !m.aliases().empty() || !m.ifuncs().empty())
    return std::nullopt;
  SmallVector<std::pair<size_t, llvm::Function *>> sizes;
  size_t total = 0;
  for (llvm::Function &f : m) {
    if (f.isDeclaration())
      continue;
    if (f.hasComdat())
      return std::nullopt;
    sizes.push_back({f.getInstructionCount(), &f});
    total += sizes.back().first;
  }
  for (llvm::GlobalVariable &g : m.globals())
    if (g.hasComdat())
      return std::nullopt;
  size_t parts = std::min<size_t>(
      {threads, sizes.size(), total / std::max<size_t>(1, splitMin / 4)});
  if (total < splitMin || parts < 2)
    return std::nullopt;
  llvm::stable_sort(sizes, [](auto &a, auto &b) { return a.first > b.first; });
  std::vector<size_t> load(parts, 0);
  llvm::DenseMap<const llvm::GlobalValue *, unsigned> partOf;
  for (auto [size, f] : sizes) {
    unsigned k = std::min_element(load.begin(), load.end()) - load.begin();
    load[k] += size;
    partOf[f] = k;
  }
  // Global variables (constants, OpenMP's descriptors) go with part 0.
  for (llvm::GlobalVariable &g : m.globals())
    partOf[&g] = 0;
  return partOf;
}
} // namespace

FailureOr<std::vector<std::string>>
cpu::emitObjectFiles(llvm::Module &llvmModule, StringRef path, StringRef tag,
                     const CPUOptions &options) {
  unsigned threads = options.codegenThreads
                         ? options.codegenThreads
                         : llvm::hardware_concurrency().compute_thread_count();
  auto partOf =
      partitionFunctions(llvmModule, threads, options.codegenSplitMin);
  if (!partOf) {
    if (failed(emitObjectFile(llvmModule, path, options)))
      return failure();
    return std::vector<std::string>{path.str()};
  }
  unsigned parts = 0;
  for (auto &entry : *partOf)
    parts = std::max(parts, entry.second + 1);
  // A part calls and reads what another defines: local symbols become
  // hidden globals, under names no other module of the executable uses.
  for (llvm::GlobalValue &gv : llvmModule.global_values()) {
    if (!gv.hasLocalLinkage())
      continue;
    gv.setName(tag + "." + (gv.hasName() ? gv.getName() : "anon"));
    gv.setLinkage(llvm::GlobalValue::ExternalLinkage);
    gv.setVisibility(llvm::GlobalValue::HiddenVisibility);
  }
  // Each part as bitcode: LLVM contexts are not shared between threads, so
  // each thread reads its part into its own.
  std::vector<SmallVector<char, 0>> bitcode(parts);
  for (unsigned k = 0; k < parts; ++k) {
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> part =
        llvm::CloneModule(llvmModule, map, [&](const llvm::GlobalValue *gv) {
          auto it = partOf->find(gv);
          return it != partOf->end() && it->second == k;
        });
    llvm::raw_svector_ostream os(bitcode[k]);
    llvm::WriteBitcodeToFile(*part, os);
  }
  StringRef stem = path.ends_with(".o") ? path.drop_back(2) : path;
  std::vector<std::string> paths;
  for (unsigned k = 0; k < parts; ++k)
    paths.push_back((stem + ".part" + Twine(k) + ".o").str());
  std::mutex errorsMutex;
  std::string errors;
  {
    llvm::StdThreadPool pool(llvm::hardware_concurrency(threads));
    for (unsigned k = 0; k < parts; ++k)
      pool.async([&, k] {
        llvm::LLVMContext context;
        auto part = llvm::parseBitcodeFile(
            llvm::MemoryBufferRef(StringRef(bitcode[k].data(),
                                            bitcode[k].size()),
                                  paths[k]),
            context);
        std::string error;
        if (!part)
          error = llvm::toString(part.takeError());
        else if (failed(emitObjectFile(**part, paths[k], options)))
          error = "cannot emit " + paths[k];
        if (!error.empty()) {
          std::lock_guard<std::mutex> lock(errorsMutex);
          errors += (errors.empty() ? "" : "; ") + error;
        }
      });
    pool.wait();
  }
  if (!errors.empty()) {
    llvm::errs() << "distopt: code generation of " << path
                 << " in parts failed: " << errors << "\n";
    for (const std::string &p : paths)
      llvm::sys::fs::remove(p);
    return failure();
  }
  return paths;
}

LogicalResult cpu::linkExecutable(ArrayRef<std::string> objects,
                                  StringRef output, StringRef runtimeLibDir,
                                  std::string &errorMessage,
                                  ArrayRef<std::string> targetLibs,
                                  StringRef sharedRuntime, bool library) {
  assert((!library || !sharedRuntime.empty()) &&
         "a program library loads the shared runtime");
  llvm::ErrorOr<std::string> cc = llvm::sys::findProgramByName("cc");
  if (!cc) {
    errorMessage = "no C compiler driver 'cc' on PATH to link with";
    return failure();
  }
  SmallVector<std::string> args = {*cc, "-o", output.str()};
  if (library)
    args.push_back("-shared");
  llvm::append_range(args, objects);
  args.push_back("-L" + runtimeLibDir.str());
  if (!sharedRuntime.empty()) {
    // main() from its archive, the rest from the shared library, found
    // beside the build's archives or through LD_LIBRARY_PATH (a runpath).
    if (!library)
      args.push_back("-ldistopt_runtime_main");
    args.push_back("-l" + sharedRuntime.str());
    args.push_back("-Wl,--enable-new-dtags,-rpath," + runtimeLibDir.str());
    args.push_back("-lopenblas");
  } else {
    // A device target's runtime first: it calls into the common runtime.
    llvm::append_range(args, targetLibs);
    for (const char *lib :
         {"-ldistopt_runtime_main", "-ldistopt_runtime", "-lopenblas"})
      args.push_back(lib);
  }
  // The thread pool of the generated loops and the GEMM kernels: LLVM's
  // libomp, found by the build (an rpath, as it is not on the default
  // library path).
  args.push_back(DISTOPT_OMP_LIBRARY);
  args.push_back("-Wl,-rpath," DISTOPT_OMP_LIBRARY_DIR);
#ifdef DISTOPT_MPI_LIBRARIES
  // The runtime's collectives (Comm.h) use MPI.
  for (StringRef lib : llvm::split(DISTOPT_MPI_LIBRARIES, ','))
    if (!lib.empty())
      args.push_back(lib.str());
#endif
  for (const char *lib : {"-lstdc++", "-lm", "-lpthread"})
    args.push_back(lib);
  SmallVector<StringRef> argRefs(args.begin(), args.end());
  std::string linkErrors;
  SmallString<128> errFile;
  llvm::sys::fs::createTemporaryFile("distopt-link", "txt", errFile);
  std::optional<StringRef> redirects[] = {std::nullopt, errFile.str(),
                                          errFile.str()};
  int rc = llvm::sys::ExecuteAndWait(*cc, argRefs, std::nullopt, redirects, 0,
                                     0, &linkErrors);
  auto log = llvm::MemoryBuffer::getFile(errFile);
  llvm::sys::fs::remove(errFile);
  if (rc != 0) {
    errorMessage = "linking failed (" + llvm::join(argRefs, " ") + ")";
    if (!linkErrors.empty())
      errorMessage += ": " + linkErrors;
    if (log)
      errorMessage += "\n" + (*log)->getBuffer().str();
    return failure();
  }
  return success();
}
