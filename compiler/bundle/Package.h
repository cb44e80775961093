//===- Package.h - compiled kernels -> one bundle -------------------------===//
//
// Last stage. Assembles the manifest (every kernel's plan, resources and tuning provenance)
// and the cubins into a Bundle (compiler/bundle/Bundle.h), sorted so that the same inputs give
// the same bytes, and says which template/arch pairs have run on real hardware.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_PACKAGE_H
#define FAGEN_COMPILER_PACKAGE_H

#include "compiler/build/Build.h"

#include "compiler/bundle/Bundle.h"

#include <string>
#include <vector>

namespace fagen {

/// The bundle for `kernels`, deterministic in content and order.
Bundle assembleBundle(const Toolchain &toolchain, const std::vector<CompiledKernel> &kernels);

/// Where a template built for an arch has been verified on real hardware by this project's GPU
/// tests (e.g. "NVIDIA H200"), or "" when it has only been compiled ("compiled, not run").
std::string verifiedOn(const std::string &templ, Pass pass, const std::string &arch);

/// verifiedOn for one kernel: "" also where its template's record does not cover its variant
/// (the sm80 paged forward, chunked prefill, has not run).
std::string verifiedOn(const KernelRecord &k);

} // namespace fagen

#endif // FAGEN_COMPILER_PACKAGE_H
