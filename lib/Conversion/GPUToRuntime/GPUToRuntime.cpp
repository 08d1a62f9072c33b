//===- GPUToRuntime.cpp - gpu.launch_func -> distopt CUDA runtime calls ---===//
//
// The host side of the CUDA pipeline. Upstream's gpu-to-llvm lowers each
// launch to a stream created, synchronised and destroyed per kernel, with the
// modules loaded by global constructors before main() on device 0; distopt's
// runtime owns the device, the stream and module loading instead (one device
// per local rank, chosen after MPI starts). Here:
//  - each gpu.binary's object (a fatbin, cubin or PTX image) becomes an
//    internal LLVM global holding its bytes;
//  - each gpu.launch_func becomes
//      dort_cuda_launch(image, "kernel", gx, gy, gz, bx, by, bz, smem,
//                       args, nargs)
//    where args points at nargs 8-byte slots on the stack, one per kernel
//    argument: a buffer's aligned pointer (kernels use the bare-pointer
//    convention), an index or integer zero-extended, a float's bits;
//  - the gpu.binary ops and the gpu.container_module marker are removed.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace distopt {
#define GEN_PASS_DEF_CONVERTGPULAUNCHTORUNTIMEPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace distopt

using namespace mlir;

namespace {

constexpr StringLiteral kLaunchFn = "dort_cuda_launch";

/// An internal constant global holding `bytes` (NUL-terminated, so a PTX
/// image is a C string), 64-byte aligned.
LLVM::GlobalOp makeBytesGlobal(OpBuilder &b, ModuleOp module, Location loc,
                               StringRef name, StringRef bytes) {
  std::string data = bytes.str();
  data.push_back('\0');
  auto type = LLVM::LLVMArrayType::get(b.getI8Type(), data.size());
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(module.getBody());
  auto global = LLVM::GlobalOp::create(b, loc, type, /*isConstant=*/true,
                                       LLVM::Linkage::Internal, name,
                                       b.getStringAttr(data), /*alignment=*/64);
  SymbolTable(module).insert(global); // uniquifies the name if needed
  return global;
}

struct ConvertGPULaunchToRuntimePass
    : public distopt::impl::ConvertGPULaunchToRuntimePassBase<
          ConvertGPULaunchToRuntimePass> {
  using ConvertGPULaunchToRuntimePassBase::ConvertGPULaunchToRuntimePassBase;

  /// The 64-bit slot of one kernel argument.
  FailureOr<Value> slotValue(OpBuilder &b, Location loc, Value v) {
    Type t = v.getType();
    auto i64 = b.getI64Type();
    if (auto m = dyn_cast<MemRefType>(t)) {
      if (!m.getLayout().isIdentity())
        return failure();
      Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, v);
      return arith::IndexCastUIOp::create(b, loc, i64, p).getResult();
    }
    if (t.isIndex())
      return arith::IndexCastUIOp::create(b, loc, i64, v).getResult();
    if (auto it = dyn_cast<IntegerType>(t)) {
      if (it.getWidth() == 64)
        return v;
      if (it.getWidth() < 64)
        return arith::ExtUIOp::create(b, loc, i64, v).getResult();
      return failure();
    }
    if (auto ft = dyn_cast<FloatType>(t)) {
      unsigned w = ft.getWidth();
      if (w != 16 && w != 32 && w != 64)
        return failure();
      Value bits =
          arith::BitcastOp::create(b, loc, b.getIntegerType(w), v).getResult();
      if (w == 64)
        return bits;
      return arith::ExtUIOp::create(b, loc, i64, bits).getResult();
    }
    return failure();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    auto ptr = LLVM::LLVMPointerType::get(ctx);
    auto i64 = b.getI64Type(), i32 = b.getI32Type();

    // Images.
    llvm::StringMap<LLVM::GlobalOp> images;
    SmallVector<gpu::BinaryOp> binaries;
    for (auto bin : module.getOps<gpu::BinaryOp>()) {
      binaries.push_back(bin);
      auto objects = bin.getObjects();
      if (objects.size() != 1) {
        bin.emitError("expected one object (a fatbin of every architecture) "
                      "in the binary, found ")
            << objects.size();
        return signalPassFailure();
      }
      auto object = cast<gpu::ObjectAttr>(objects[0]);
      images[bin.getName()] =
          makeBytesGlobal(b, module, bin.getLoc(),
                          ("__dopt_cuda_image_" + bin.getName()).str(),
                          object.getObject().getValue());
    }

    // The runtime entry point.
    auto launchType = b.getFunctionType(
        {ptr, ptr, i64, i64, i64, i64, i64, i64, i32, ptr, i32}, {});
    auto launchFn = module.lookupSymbol<func::FuncOp>(kLaunchFn);
    if (!launchFn) {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToEnd(module.getBody());
      launchFn = func::FuncOp::create(b, module.getLoc(), kLaunchFn, launchType);
      launchFn.setPrivate();
    }

    llvm::StringMap<LLVM::GlobalOp> names;
    SmallVector<gpu::LaunchFuncOp> launches;
    module.walk([&](gpu::LaunchFuncOp l) { launches.push_back(l); });
    for (gpu::LaunchFuncOp launch : launches) {
      Location loc = launch.getLoc();
      StringRef moduleName = launch.getKernelModuleName().getValue();
      StringRef kernel = launch.getKernelName().getValue();
      auto image = images.find(moduleName);
      if (image == images.end()) {
        launch.emitError("no gpu.binary @")
            << moduleName << " for this launch (compile the kernels first)";
        return signalPassFailure();
      }
      if (launch.getAsyncToken() || !launch.getAsyncDependencies().empty() ||
          launch.hasClusterSize()) {
        launch.emitError("asynchronous or clustered launches are not "
                         "supported by the distopt runtime");
        return signalPassFailure();
      }
      std::string key = (moduleName + "::" + kernel).str();
      if (!names.count(key))
        names[key] = makeBytesGlobal(b, module, loc,
                                     ("__dopt_cuda_kernel_" + kernel).str(),
                                     kernel);

      b.setInsertionPoint(launch);
      auto operands = launch.getKernelOperands();
      int64_t n = operands.size();
      Value count = LLVM::ConstantOp::create(b, loc, i64,
                                             b.getI64IntegerAttr(std::max<int64_t>(n, 1)));
      Value slots = LLVM::AllocaOp::create(b, loc, ptr, i64, count);
      for (auto [i, v] : llvm::enumerate(operands)) {
        FailureOr<Value> slot = slotValue(b, loc, v);
        if (failed(slot)) {
          launch.emitError("kernel argument #")
              << i << " of type " << v.getType()
              << " cannot be passed to the GPU (buffers must have an "
                 "identity layout; scalars at most 64 bits)";
          return signalPassFailure();
        }
        Value addr = LLVM::GEPOp::create(b, loc, ptr, i64, slots,
                                         ArrayRef<LLVM::GEPArg>{(int32_t)i});
        LLVM::StoreOp::create(b, loc, *slot, addr);
      }
      auto toI64 = [&](Value v) -> Value {
        return arith::IndexCastUIOp::create(b, loc, i64, v);
      };
      gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
      gpu::KernelDim3 block = launch.getBlockSizeOperandValues();
      Value smem = launch.getDynamicSharedMemorySize();
      if (!smem)
        smem = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
      Value imageAddr =
          LLVM::AddressOfOp::create(b, loc, image->second).getResult();
      Value nameAddr =
          LLVM::AddressOfOp::create(b, loc, names[key]).getResult();
      Value nargs =
          arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(n));
      func::CallOp::create(
          b, loc, launchFn,
          ValueRange{imageAddr, nameAddr, toI64(grid.x), toI64(grid.y),
                     toI64(grid.z), toI64(block.x), toI64(block.y),
                     toI64(block.z), smem, slots, nargs});
      launch.erase();
    }
    for (gpu::BinaryOp bin : binaries)
      bin.erase();
    module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  }
};

} // namespace
