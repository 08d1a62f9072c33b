//===- RuntimeABITest.cpp - programs call only the runtime's ABI ---------===//

#include "distopt/Conversion/RuntimeABI.h"
#include "distopt/Driver/Driver.h"
#include "distopt/Target/CPU/CPUTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#include <gtest/gtest.h>

#include <string>

TEST(RuntimeABI, NamesTheFunctionsOfABIDef) {
  for (const char *name :
       {"dort_matmul_f32", "_mlir_ciface_dort_matmul_bf16_f32",
        "dort_batch_matmul_f16_f32", "dort_matmul_epilogue_bf16",
        "dort_conv2d_backward_data_f64", "dort_index_fault",
        "_mlir_ciface_dort_shard_all_reduce_bf16", "dort_shard_send_i1",
        "dort_shard_start_reduce_scatter_f32", "dort_shard_wait",
        "dort_grid_coord", "dort_cuda_run", "dort_cuda_launch"})
    EXPECT_TRUE(distopt::isRuntimeFunction(name)) << name;
  for (const char *name :
       {"dort_cuda_matmul_f32", "dort_matmul_f128", "dort_shard_all_reduce",
        "dort_shard_all_reduce_f128", "dort_shard_broadcast_f32",
        "dort_shard_bf16", "matmul_f32", "_mlir_ciface_matmul_f32", "dort_"})
    EXPECT_FALSE(distopt::isRuntimeFunction(name)) << name;
}

TEST(RuntimeABI, ATargetRefusesACallOutsideIt) {
  mlir::DialectRegistry registry;
  distopt::driver::registerCompileDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"(
llvm.func @dort_matmul_f33(!llvm.ptr)
llvm.func @dort_grid_coord(i32) -> i64
)",
                                                        &ctx);
  ASSERT_TRUE(module);
  llvm::LLVMContext llvmContext;
  EXPECT_EQ(distopt::cpu::translateToLLVMIR(*module, llvmContext, {}),
            nullptr);
  EXPECT_NE(diagnostics.find("the program calls the runtime function "
                             "'dort_matmul_f33', which the runtime's ABI"),
            std::string::npos)
      << diagnostics;
  EXPECT_EQ(diagnostics.find("dort_grid_coord"), std::string::npos)
      << diagnostics;
}
