//===- Version.cpp - which distopt this is --------------------------------===//

#include "distopt/Driver/Driver.h"

#include "GitVersion.inc"

#include "llvm/Config/llvm-config.h"

std::string distopt::driver::version() {
  return "distopt " DISTOPT_VERSION " (LLVM/MLIR " LLVM_VERSION_STRING
         ", git " DISTOPT_GIT_COMMIT ")";
}
