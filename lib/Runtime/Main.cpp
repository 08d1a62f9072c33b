//===- Main.cpp - main() of a compiled model executable -------------------===//
//
// Library `distopt_runtime_main`. The compiled model's object file defines
// dopt_entry; everything else is dort_main in `distopt_runtime`.
//
//===----------------------------------------------------------------------===//

#include "distopt/Runtime/Runtime.h"

extern "C" int32_t dopt_entry(void **buffers);

int main(int argc, char **argv) { return dort_main(argc, argv, dopt_entry); }
