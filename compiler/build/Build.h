//===- Build.h - generated source -> cubin, with a content-addressed cache ===//
//
// Fourth stage. Finds the CUDA toolkit, compiles every planned kernel with nvcc in parallel,
// parses ptxas's resource report, and caches cubins under a key that covers everything that
// can change them (source, templates, flags, toolchain, arch, fagen version). Cache entries
// are written to a temporary file and renamed, so a crash never leaves a torn entry.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_BUILD_H
#define FAGEN_COMPILER_BUILD_H

#include "compiler/plan/Plan.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace fagen {

/// The CUDA compiler in use.
struct Toolchain {
  std::string nvcc;    ///< path to nvcc
  std::string version; ///< e.g. "13.0.88"
  /// What identifies this nvcc beyond its version number: its resolved path and its whole
  /// `--version` text (build date, branch). Part of the compile cache key.
  std::string identity;
  /// "nvcc 13.0.88", as recorded in bundles.
  std::string describe() const { return "nvcc " + version; }
};

/// Finds nvcc: $CUDA_HOME/bin, then PATH, then /usr/local/cuda/bin. The error says how to
/// install it or point fagen at it.
llvm::Expected<Toolchain> findToolchain();

/// What ptxas says about one kernel (-1 = not reported). For a plan whose cubin has several
/// entry points (a backward plan: NAME_pre, NAME, NAME_post), the fields are the main kernel's
/// (NAME), the max fields the largest over every entry point.
struct PtxasReport {
  int registers = -1;
  int spillStoreBytes = -1;
  int spillLoadBytes = -1;
  int stackFrameBytes = -1;
  int maxRegisters = -1;  ///< over every entry point of the cubin
  int maxSpillBytes = -1; ///< over every entry point of the cubin
  std::string text; ///< ptxas's own lines about the kernel(s)
  int spillBytes() const {
    return spillStoreBytes < 0 ? -1 : spillStoreBytes + std::max(spillLoadBytes, 0);
  }
};

/// Extracts the report of `kernel` from `nvcc -Xptxas -v` output (maxima = its own values).
PtxasReport parsePtxasReport(const std::string &output, const std::string &kernel);

/// The report of a plan's cubin: the main kernel's values, the maxima over every entry point
/// (entryPointNames(plan)), and every entry point's lines. Registers stay -1 when ptxas reported
/// on one of them.
PtxasReport parsePlanReport(const std::string &output, const KernelPlan &plan);

/// The nvcc arguments (after the input file) for `arch`: "-gencode arch=compute_90a,code=sm_90a"…
std::vector<std::string> nvccFlags(const std::string &arch);

/// The compile cache key of one kernel: SHA-256 (hex) over fagen's version, nvcc's version and
/// identity, the nvcc flags, the environment variables nvcc reads flags from
/// (NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS), the templates and the generated source.
std::string compileCacheKey(const Toolchain &toolchain, const std::vector<std::string> &flags,
                            const std::string &source);

/// SHA-256 (hex) over every embedded template file's path and bytes.
std::string templatesHash();

/// The default cache folder: $FAGEN_CACHE_DIR, else $XDG_CACHE_HOME/fagen, else ~/.cache/fagen.
std::string defaultCacheDir();

struct BuildOptions {
  unsigned jobs = 0;          ///< 0 = one per core
  std::string cacheDir;       ///< "" = defaultCacheDir()
  bool useCache = true;
  std::string dumpDir;        ///< keep .cu/.ptx/.cubin/.ptxas.txt here when non-empty
  /// Compile a plan's spillFallback instead when ptxas reports more than spillFallbackBytes()
  /// of spills for the plan (`fagen build`); off for the tuner, which times exactly the
  /// configs it asks for.
  bool spillFallbacks = false;
  /// Called (under a lock) after each kernel: index done so far, total, a one-line status.
  std::function<void(unsigned, unsigned, const std::string &)> progress;
};

struct CompiledKernel {
  KernelPlan plan;
  std::string cubin;
  PtxasReport report;
  bool cached = false;
  double seconds = 0;         ///< wall time of this kernel's compile (0 when cached)
  /// Set when this kernel replaced a planned one that spilled: that kernel's name and spill bytes.
  std::string replaced;
  int replacedSpillBytes = 0;
};

/// Compiles every plan; on any failure returns an error naming each failed kernel with the
/// compiler's message. Results are in the order of `plans`. With options.spillFallbacks, a
/// plan that spills more than spillFallbackBytes() and has a spillFallback is replaced by that
/// config's kernel when it builds and spills less (the result's plan says which was built; a
/// replacement that duplicates another result is merged into it).

llvm::Expected<std::vector<CompiledKernel>> compileKernels(const Toolchain &toolchain,
                                                           const std::vector<KernelPlan> &plans,
                                                           const BuildOptions &options);

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
llvm::Error writeFileAtomically(const std::string &path, const std::string &bytes);

} // namespace fagen

#endif // FAGEN_COMPILER_BUILD_H
