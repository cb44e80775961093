//===- Check.h - `fagen check`: run a bundle's kernels against a reference -===//
//
// Runs every kernel of a bundle that the current GPU can run, on seeded random inputs over a
// grid of shapes with odd sizes, against a float64 CPU reference, with FlashAttention's
// tolerance rule: the kernel's error against the float64 reference may be at most twice the
// error of a same-precision reference, plus a small epsilon. Optionally writes or compares
// golden outputs, so that a change in numerics between fagen versions is caught.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_CHECK_H
#define FAGEN_COMPILER_CHECK_H

#include "Reference.h"

#include "Bundle.h"
#include "Driver.h"
#include "fagen/fagen.h"

#include <string>
#include <variant>
#include <vector>

namespace fagen {

/// One problem shape a kernel is checked on.
struct CheckShape {
  int batch, headsQ, headsKV, seqlenQ, seqlenK;
  bool bhsd; ///< layout [batch, heads, seq, dim] instead of [batch, seq, heads, dim]
};

/// The shapes `fagen check` runs a kernel on: the grid's (or the quick grid's) shapes whose
/// max(seqlen_q, seqlen_k) lies in the kernel's [seqlenMin, seqlenMax], plus two odd shapes at
/// the bottom of the range where fewer than two of the grid's are left (tuned kernels).
std::vector<CheckShape> checkShapesFor(int64_t seqlenMin, int64_t seqlenMax, bool quick);

/// The forward problem of `shape` for a kernel of this dtype ("bf16" or "fp16"), head dims and
/// mask, with the strides of dense tensors in the shape's layout and the default softmax scale.
/// The check and the tuner's timing both launch through it, so they describe a shape alike.
fagen_fwd_problem forwardProblem(const std::string &dtype, int headDimQK, int headDimV,
                                 bool causal, const CheckShape &shape);

/// The outcome of one kernel on one shape against both references.
struct CaseResult {
  reference::FwdError kernel, samePrecision;
  bool passed = false;
  std::string failure;        ///< a plan/run error of the runtime (not sticky), or ""
  std::vector<float> outputO; ///< the kernel's O as fp32, dense (for golden files)
};

/// A failed CUDA driver call; the context may be unusable afterwards (a kernel fault).
struct CudaFailure {
  std::string message;
};

using CaseOutcome = std::variant<CaseResult, CudaFailure>;

/// Runs kernel `kernelIndex` of `bundle` (described by `kernel`) once on seeded random inputs of
/// `shape` in the current context and compares it with the float64 and same-precision CPU
/// references (FlashAttention's tolerance rule, reference::withinTolerance).
CaseOutcome checkKernelCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                            const KernelRecord &kernel, const CheckShape &shape, unsigned seed);

/// "B x Hq/Hkv Sq x Sk layout", as the check table prints a shape.
std::string checkShapeText(const CheckShape &shape);

struct CheckOptions {
  std::string bundlePath;
  std::string goldenDir;      ///< "" = no golden outputs
  bool updateGolden = false;  ///< write golden outputs instead of comparing
  unsigned seed = 1234;
  bool quick = false;         ///< a reduced grid (for compute-sanitizer runs)
  std::string kernelFilter;   ///< only kernels whose name contains this
};

/// Exit codes: 0 all passed, 1 a mismatch, 4 no GPU / driver, 3 other errors.
int runCheck(const CheckOptions &options);

} // namespace fagen

#endif // FAGEN_COMPILER_CHECK_H
