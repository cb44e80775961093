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

#include <string>

namespace fagen {

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
