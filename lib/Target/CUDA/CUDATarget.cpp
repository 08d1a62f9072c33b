//===- CUDATarget.cpp - dopt -> CUDA kernels + host code ------------------===//

#include "distopt/Target/CUDA/CUDATarget.h"

#include "distopt/Codegen/InPlaceUpdates.h"

#include "distopt/Conversion/RuntimeABI.h"
#include "distopt/Target/CPU/CPUTarget.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

using namespace mlir;
using namespace distopt;

std::string cuda::defaultToolkit() {
#ifdef DISTOPT_CUDA_TOOLKIT_DIR
  return DISTOPT_CUDA_TOOLKIT_DIR;
#else
  return "";
#endif
}

bool cuda::runtimeAvailable() {
#ifdef DISTOPT_CUDA_RUNTIME_LIBS
  return true;
#else
  return false;
#endif
}

static std::string toolPath(const cuda::CUDAOptions &options, StringRef tool) {
  SmallString<256> p(options.toolkit);
  llvm::sys::path::append(p, "bin", tool);
  return std::string(p);
}

bool cuda::cudnnConvolutions() {
#ifdef DISTOPT_CUDA_CUDNN
  return true;
#else
  return false;
#endif
}

/// "sm_90" -> 90 (0 when malformed).
static int smNumber(StringRef arch) {
  int n = 0;
  if (!arch.consume_front("sm_") || arch.getAsInteger(10, n))
    return 0;
  return n;
}

std::string cuda::checkOptions(const CUDAOptions &options) {
  if (options.toolkit.empty())
    return "no CUDA toolkit: this distopt was configured without one; pass "
           "--cuda-toolkit DIR (the directory holding bin/ptxas)";
  for (StringRef tool : {"ptxas", "fatbinary"})
    if (!llvm::sys::fs::can_execute(toolPath(options, tool)))
      return ("no '" + tool + "' in the CUDA toolkit '" + options.toolkit +
              "/bin' (pass --cuda-toolkit DIR)")
          .str();
  SmallString<256> libdevice(options.toolkit);
  llvm::sys::path::append(libdevice, "nvvm", "libdevice", "libdevice.10.bc");
  if (!llvm::sys::fs::exists(libdevice))
    return ("the CUDA toolkit '" + options.toolkit + "' has no " +
            libdevice.str() + " (needed for exp, erf, tanh, ...)")
        .str();
  if (options.archs.empty())
    return "--cuda-arch names no architecture";
  for (const std::string &a : options.archs) {
    int n = smNumber(a);
    if (n < 75)
      return "unknown or unsupported CUDA architecture '" + a +
             "' (expected sm_75 or newer, e.g. sm_80,sm_90)";
  }
  return "";
}

/// Moves every outlined kernel into the first gpu.module, so a program has
/// one image (one ptxas run per architecture, one module load).
static LogicalResult mergeKernelModules(ModuleOp module) {
  SmallVector<gpu::GPUModuleOp> mods(module.getOps<gpu::GPUModuleOp>());
  if (mods.size() < 2)
    return success();
  gpu::GPUModuleOp first = mods.front();
  SymbolTable firstTable(first);
  MLIRContext *ctx = module.getContext();
  llvm::DenseMap<std::pair<StringAttr, StringAttr>, StringAttr> renamed;
  for (gpu::GPUModuleOp mod : ArrayRef(mods).drop_front()) {
    SmallVector<Operation *> ops;
    for (Operation &op : mod.getBody()->getOperations())
      ops.push_back(&op);
    for (Operation *op : ops) {
      auto sym = dyn_cast<SymbolOpInterface>(op);
      if (!sym)
        continue;
      if (auto fn = dyn_cast<gpu::GPUFuncOp>(op)) {
        StringAttr old = fn.getNameAttr();
        op->remove();
        firstTable.insert(op); // renames on a clash
        renamed[{mod.getNameAttr(), old}] = fn.getNameAttr();
        continue;
      }
      // Globals the kernels read (cloned per module by the outlining).
      if (firstTable.lookup(sym.getName()))
        continue;
      op->remove();
      firstTable.insert(op);
    }
  }
  module.walk([&](gpu::LaunchFuncOp launch) {
    auto it = renamed.find({launch.getKernelModuleName(),
                            launch.getKernelName()});
    if (it != renamed.end())
      launch.setKernelAttr(SymbolRefAttr::get(
          first.getNameAttr(), {FlatSymbolRefAttr::get(ctx, it->second)}));
  });
  for (gpu::GPUModuleOp mod : ArrayRef(mods).drop_front())
    mod.erase();
  return success();
}

LogicalResult cuda::lowerToGPU(ModuleOp module,
                               SmallVectorImpl<MemRefType> &argTypes,
                               std::vector<int8_t> &bufferKinds) {
  auto main = module.lookupSymbol<func::FuncOp>("dopt_main");
  if (!main)
    return module.emitError("no dopt_main function");
  // What the runtime does with each entry buffer: inputs are uploaded on
  // every run, weights once, outputs downloaded.
  // A training step (distopt-optimizer) returns updated weights that the
  // train loop passes back in: its weights change between runs and are
  // uploaded like inputs.
  bool updatesWeights = false;
  for (unsigned i = 0; i < main.getNumResults(); ++i)
    updatesWeights |= bool(main.getResultAttr(i, "dopt.updates_weight"));
  bufferKinds.clear();
  for (unsigned i = 0; i < main.getNumArguments(); ++i)
    bufferKinds.push_back(
        main.getArgAttr(i, "dopt.weight") && !updatesWeights ? 1 : 0);
  // A training step's updates written in place have no buffer of their own.
  bufferKinds.insert(
      bufferKinds.end(),
      main.getNumResults() - distopt::inPlaceUpdates(main).size(), 2);
  if (failed(cpu::lowerToLoops(module, argTypes, /*gemmEpilogues=*/true,
                                 /*memcpyMaxBytes=*/0)))
    return failure();
  if (argTypes.size() != bufferKinds.size())
    return module.emitError("internal error: dopt_main has ")
           << argTypes.size() << " buffers after bufferization, expected "
           << bufferKinds.size();
  // The runtime calls stay as they are: a CUDA bundle's runtime registers
  // the CUDA device, which the ABI's entry points call (Runtime/Device.h).
  // Integer powers become functions (the NVVM lowering has no math.ipowi);
  // the outlining copies them into the kernels' module.
  if (failed(cpu::runPipeline(module, "convert-math-to-funcs{convert-ctlz=false},"
                                      "func.func(distopt-map-loops-to-gpu),"
                                      "gpu-kernel-outlining,canonicalize,cse")))
    return failure();
  return mergeKernelModules(module);
}

LogicalResult cuda::lowerForEmulation(ModuleOp module, bool emitGPU,
                                      bool forward,
                                      std::optional<int64_t> outlineMinOps) {
  SmallVector<MemRefType> argTypes;
  if (failed(cpu::lowerToLoops(module, argTypes, /*gemmEpilogues=*/true,
                                 /*memcpyMaxBytes=*/0)))
    return failure();
  if (failed(cpu::runPipeline(module, "func.func(distopt-map-loops-to-gpu)")))
    return failure();
  if (emitGPU)
    return success();
  // The thread order is the run's choice (DISTOPT_EMULATE_THREADS), `forward`
  // the default: one executable checks both orders.
  if (!module.lookupSymbol("dort_emulate_threads_forward")) {
    OpBuilder b(module.getBodyRegion());
    Type i32 = b.getI32Type();
    auto decl = func::FuncOp::create(b, module.getLoc(),
                                     "dort_emulate_threads_forward",
                                     b.getFunctionType({i32}, {i32}));
    decl.setPrivate();
  }
  if (failed(cpu::runPipeline(
          module, std::string("func.func(distopt-emulate-gpu-launches{"
                              "runtime-order=true forward=") +
                      (forward ? "true" : "false") + "}),canonicalize,cse")))
    return failure();
  return cpu::lowerLoopsToLLVMDialect(module, argTypes, outlineMinOps);
}

/// Runs `tool args...`; on failure `error` holds the command and its output.
static LogicalResult runTool(StringRef tool, ArrayRef<std::string> args,
                             std::string &error) {
  SmallVector<StringRef> argv = {tool};
  for (const std::string &a : args)
    argv.push_back(a);
  SmallString<128> log;
  llvm::sys::fs::createTemporaryFile("distopt-cuda", "log", log);
  std::optional<StringRef> redirects[] = {std::nullopt, log.str(), log.str()};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(tool, argv, std::nullopt, redirects, 0, 0,
                                     &execError);
  auto text = llvm::MemoryBuffer::getFile(log);
  llvm::sys::fs::remove(log);
  if (rc == 0)
    return success();
  error = llvm::join(argv, " ") + " failed";
  if (!execError.empty())
    error += ": " + execError;
  if (text)
    error += "\n" + (*text)->getBuffer().str();
  return failure();
}

LogicalResult cuda::compileKernels(ModuleOp module, const CUDAOptions &options,
                                   std::string *ptx) {
  std::string problem = checkOptions(options);
  if (!problem.empty())
    return module.emitError(problem);
  if (module.getOps<gpu::GPUModuleOp>().empty())
    return success(); // nothing runs on the device (GEMMs only, say)
  // PTX for the lowest architecture; ptxas assembles it for each.
  std::string lowest = *llvm::min_element(
      options.archs, [](const std::string &a, const std::string &b) {
        return smNumber(a) < smNumber(b);
      });
  std::string pipeline =
      "nvvm-attach-target{chip=" + lowest +
      " features=+ptx80 O=3},"
      "gpu.module(lower-affine,convert-scf-to-cf,expand-strided-metadata,"
      "lower-affine,strip-debuginfo,"
      "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},"
      "convert-vector-to-llvm{use-vector-alignment=true},canonicalize,cse,"
      "reconcile-unrealized-casts),"
      "gpu-module-to-binary{format=isa toolkit=" +
      options.toolkit + "}";
  if (failed(cpu::runPipeline(module, pipeline)))
    return failure();

  SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("distopt-cuda", dir))
    return module.emitError("cannot create a temporary directory: ")
           << ec.message();
  llvm::scope_exit cleanup([&] { llvm::sys::fs::remove_directories(dir); });
  auto fileIn = [&](const Twine &name) {
    SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  MLIRContext *ctx = module.getContext();
  for (auto bin : module.getOps<gpu::BinaryOp>()) {
    auto objects = bin.getObjects();
    if (objects.size() != 1)
      return bin.emitError("internal error: expected one PTX object");
    auto object = cast<gpu::ObjectAttr>(objects[0]);
    StringRef text = object.getObject().getValue();
    if (ptx)
      *ptx += text.str();
    // libdevice left unresolved would only show up at load time on a GPU.
    if (text.contains(".extern .func __nv_"))
      return bin.emitError("internal error: the PTX calls libdevice functions "
                           "that were not linked in (toolkit '")
             << options.toolkit << "')";
    std::string ptxFile = fileIn(bin.getName() + ".ptx");
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(ptxFile, ec);
      if (ec)
        return bin.emitError("cannot write ") << ptxFile << ": " << ec.message();
      os << text;
    }
    std::vector<std::string> fatArgs = {"--create=" + fileIn("k.fatbin"),
                                        "-64"};
    for (const std::string &arch : options.archs) {
      std::string cubin = fileIn(bin.getName() + "." + arch + ".cubin");
      std::string error;
      if (failed(runTool(toolPath(options, "ptxas"),
                         {"-arch=" + arch, "-O3", ptxFile, "-o", cubin},
                         error)))
        return bin.emitError("ptxas rejected the generated kernels for ")
               << arch << ": " << error;
      fatArgs.push_back("--image3=kind=elf,sm=" +
                        std::to_string(smNumber(arch)) + ",file=" + cubin);
    }
    fatArgs.push_back("--image3=kind=ptx,sm=" +
                      std::to_string(smNumber(lowest)) + ",file=" + ptxFile);
    std::string error;
    if (failed(runTool(toolPath(options, "fatbinary"), fatArgs, error)))
      return bin.emitError("fatbinary failed: ") << error;
    auto fatbin = llvm::MemoryBuffer::getFile(fileIn("k.fatbin"));
    if (!fatbin)
      return bin.emitError("cannot read the fatbin");
    bin.setObjectsAttr(ArrayAttr::get(
        ctx, {gpu::ObjectAttr::get(ctx, object.getTarget(),
                                   gpu::CompilationTarget::Fatbin,
                                   StringAttr::get(ctx, (*fatbin)->getBuffer()),
                                   DictionaryAttr(), nullptr)}));
  }
  return success();
}

LogicalResult cuda::lowerHostToLLVM(ModuleOp module,
                                    ArrayRef<MemRefType> argTypes,
                                    ArrayRef<int8_t> bufferKinds) {
  cpu::markLocalFunctions(module);
  if (failed(cpu::runPipeline(
          module,
          "distopt-convert-gpu-launch-to-runtime,"
          "canonicalize,convert-scf-to-cf,expand-strided-metadata,lower-affine,"
          // Host allocations (the arena) are device memory: the runtime's
          // _mlir_memref_to_llvm_alloc/free.
          "finalize-memref-to-llvm{use-generic-functions=true},"
          "convert-arith-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,"
          "convert-index-to-llvm,reconcile-unrealized-casts")))
    return failure();
  cpu::internalizeLocalFunctions(module);
  if (failed(cpu::addEntryPoint(module, argTypes, "dopt_device_entry")))
    return failure();
  auto device = module.lookupSymbol<LLVM::LLVMFuncOp>("dopt_device_entry");
  device.setLinkage(LLVM::Linkage::Internal);

  // int32_t dopt_entry(void **host) {
  //   return dort_cuda_run(host, dopt_device_entry, n, kinds, bytes); }
  MLIRContext *ctx = module.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto i32 = b.getI32Type(), i64 = b.getI64Type(), i8 = b.getI8Type();
  SmallVector<int64_t> bytes;
  for (MemRefType t : argTypes) {
    unsigned bits = t.getElementTypeBitWidth();
    // i1 buffers hold one byte per element, as on the CPU.
    bytes.push_back(t.getNumElements() * std::max(1u, (bits + 7) / 8));
  }
  int64_t n = argTypes.size();
  auto kindsType = LLVM::LLVMArrayType::get(i8, std::max<int64_t>(n, 1));
  auto bytesType = LLVM::LLVMArrayType::get(i64, std::max<int64_t>(n, 1));
  SmallVector<int8_t> kindsData(bufferKinds.begin(), bufferKinds.end());
  SmallVector<int64_t> bytesData(bytes);
  if (n == 0) {
    kindsData.push_back(0);
    bytesData.push_back(0);
  }
  auto kinds = LLVM::GlobalOp::create(
      b, loc, kindsType, true, LLVM::Linkage::Internal, "__dopt_cuda_kinds",
      DenseElementsAttr::get(
          RankedTensorType::get({(int64_t)kindsData.size()}, i8),
          ArrayRef(kindsData)));
  auto sizes = LLVM::GlobalOp::create(
      b, loc, bytesType, true, LLVM::Linkage::Internal, "__dopt_cuda_bytes",
      DenseElementsAttr::get(
          RankedTensorType::get({(int64_t)bytesData.size()}, i64),
          ArrayRef(bytesData)));
  auto runType = LLVM::LLVMFunctionType::get(i32, {ptr, ptr, i32, ptr, ptr});
  auto run = LLVM::LLVMFuncOp::create(b, loc, "dort_cuda_run", runType);
  auto entry = LLVM::LLVMFuncOp::create(b, loc, "dopt_entry",
                                        LLVM::LLVMFunctionType::get(i32, {ptr}));
  Block *body = entry.addEntryBlock(b);
  b.setInsertionPointToStart(body);
  Value fn = LLVM::AddressOfOp::create(b, loc, device);
  Value count = LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(n));
  Value k = LLVM::AddressOfOp::create(b, loc, kinds);
  Value s = LLVM::AddressOfOp::create(b, loc, sizes);
  Value rc = LLVM::CallOp::create(b, loc, run,
                                  ValueRange{body->getArgument(0), fn, count,
                                             k, s})
                 .getResult();
  LLVM::ReturnOp::create(b, loc, rc);
  return success();
}

std::vector<std::string> cuda::linkLibraries() {
  std::vector<std::string> libs = {"-ldistopt_runtime_cuda"};
#ifdef DISTOPT_CUDA_RUNTIME_LIBS
  // The CUDA runtime statically (the executable starts without a driver and
  // says so), cuBLAS from the toolkit the runtime was built against.
  for (StringRef lib : llvm::split(DISTOPT_CUDA_RUNTIME_LIBS, '|'))
    if (!lib.empty())
      libs.push_back(lib.str());
#endif
  return libs;
}
