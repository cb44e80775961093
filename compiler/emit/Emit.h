//===- Emit.h - KernelPlan -> CUDA source --------------------------------===//
//
// Third stage. The generated file holds no logic: it includes a template header, spells the
// plan as a config type, checks that template and planner agree, and instantiates the kernel
// under its symbol. Deterministic: the same plan gives the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_EMIT_H
#define FAGEN_COMPILER_EMIT_H

#include "compiler/plan/Plan.h"

#include <string>

namespace fagen {

/// The .cu source for one planned kernel: a forward plan's one entry point NAME, or a backward
/// plan's three (NAME_pre, NAME, NAME_post), all in one file.
std::string emitKernelSource(const KernelPlan &plan);

} // namespace fagen

#endif // FAGEN_COMPILER_EMIT_H
