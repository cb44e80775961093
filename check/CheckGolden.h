//===- CheckGolden.h - `fagen check --golden`: digests of seeded outputs ---===//
//
// A golden file holds, for one kernel, a digest of every output tensor on every shape of the
// check grid: the element count, a SHA-256 of the fp32 values where the kernel is bitwise
// stable, and always the finite elements' sum, rms and max |x| with 32 probe values at fixed
// strided elements (written exactly, as hex floats), so that a mismatch can say by how much a
// tensor moved. The one tensor that is not bitwise stable, dQ of a backward kernel that adds
// it up with fp32 atomics, is compared by its statistics and probes within a tolerance
// (goldenTolerance) instead. The files are small sorted text, committed under tests/golden/;
// docs/numerics.md describes the format and the tolerance. Needs no GPU
// (tests/unit/GoldenTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_CHECKGOLDEN_H
#define FAGEN_COMPILER_CHECKGOLDEN_H

#include "check/Check.h"

#include "compiler/bundle/Bundle.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fagen {
namespace golden {

/// The first line of a golden file is "fagen-golden <version>". Version 1 was the raw fp32
/// dump of one shape's O that `fagen check` wrote before digests.
constexpr int kFormatVersion = 2;

/// Probe values per tensor (all elements of a smaller one).
constexpr int kProbes = 32;

/// The digest of one output tensor of one case.
struct TensorDigest {
  std::string name; ///< "O", "LSE" (forward); "dQ", "dK", "dV" (backward)
  uint64_t elements = 0;
  std::string sha256;     ///< of the fp32 values' bytes, lowercase hex; "" if not bitwise
  uint64_t nonFinite = 0; ///< NaN and +-inf elements (LSE is -inf where a query sees no key)
  double sum = 0, rms = 0, maxAbs = 0; ///< over the finite elements
  std::vector<float> probes;           ///< the elements at probeIndices(elements)

  bool bitwise() const { return !sha256.empty(); }
};

/// One case: a shape of the check grid and its output tensors, in output order.
struct CaseDigest {
  std::string shape; ///< shapeKey()
  std::vector<TensorDigest> tensors;
};

/// The contents of one golden file.
struct GoldenFile {
  std::string kernel, arch;
  std::string seqlenRange; ///< "" for an untuned kernel, else "MIN-MAX" (MAX "inf")
  std::string dtype;       ///< "bf16" | "fp16": the tolerance's unit
  unsigned seed = 0;
  std::string grid;              ///< "full" | "quick"
  std::string fagenVersion, gpu; ///< informational: who wrote the file
  std::vector<CaseDigest> cases; ///< in the check's shape order
};

/// The elements a tensor of `elements` values is probed at: min(elements, kProbes) indices,
/// evenly strided from the first element to the last.
std::vector<uint64_t> probeIndices(uint64_t elements);

/// The digest of `values`, with a SHA-256 when `bitwise`.
TensorDigest digestTensor(llvm::StringRef name, llvm::ArrayRef<float> values, bool bitwise);

/// Whether output `tensor` of kernel `k` is bitwise stable, so compared by its hash. Forward
/// kernels' O and LSE are (the check also requires their persistent and tile-counter launches
/// to give the same bits); so are a backward's dK and dV (one CTA per key tile sums them in
/// registers over every query tile of its heads). dQ is a sum over key tiles, added into an
/// fp32 buffer with atomics (templates/sm80/bwd_tile_ops.cuh, red_add_f32x4) in an order that
/// changes from run to run, except in deterministic kernels (KernelRecord::deterministic),
/// whose order is fixed and whose two runs the check requires to agree bitwise.
bool bitwiseStable(const KernelRecord &k, llvm::StringRef tensor);

/// A shape as one token: "B" "x" "Hq/Hkv" "_" "Sq" "x" "Sk" "_" layout, plus "_rise" for the
/// rising keys, e.g. "2x2/1_64x1000_bshd_rise".
std::string shapeKey(const CheckShape &shape);

/// The golden file's name for kernel `k`: "NAME.ARCH.golden", or "NAME.ARCH.MIN-MAX.golden"
/// for a kernel tuned for a seqlen range (one name may serve several).
std::string goldenFileName(const KernelRecord &k);

/// The header fields of `k`'s golden file (no cases).
GoldenFile goldenHeader(const KernelRecord &k, unsigned seed, bool quick);

/// The largest change an element of a tensor that is not bitwise stable may show: two steps
/// of the output dtype at the golden tensor's largest magnitude, plus `fagen check`'s
/// epsilon for gradients (reference::kEpsGrad).
double goldenTolerance(const TensorDigest &golden, llvm::StringRef dtype);

/// The golden file as text: deterministic (no timestamps; cases in the given order).
std::string formatGolden(const GoldenFile &file);

/// Parses golden file text; errors say "PATH:LINE: what was expected".
llvm::Expected<GoldenFile> parseGolden(llvm::StringRef text, llvm::StringRef path);

/// Reads and parses the golden file at `path`.
llvm::Expected<GoldenFile> readGolden(llvm::StringRef path);

/// Writes `file` to `path` atomically (a temporary file in the same folder, then a rename).
llvm::Error writeGolden(llvm::StringRef path, const GoldenFile &file);

/// "" when `now` matches `golden`, else how tensor `now.name` moved: for a bitwise tensor a
/// different hash; otherwise a probe, max |x|, rms or sum outside the tolerance; with the
/// largest probe difference and the relative change of rms and sum.
std::string compareTensor(const TensorDigest &golden, const TensorDigest &now,
                          llvm::StringRef dtype);

/// Every difference between a golden file and this run's digests of the same kernel, one
/// line each, naming the shape and tensor: a header that does not fit (another kernel, seed
/// or grid), tensors that moved, and shapes that only one side has.
std::vector<std::string> compareGolden(const GoldenFile &golden, const GoldenFile &now);

/// The golden files in `dir` ("*.golden", sorted) that no kernel of `kernels` has; with a
/// `filter`, only those whose name contains it.
std::vector<std::string> staleGoldenFiles(llvm::StringRef dir,
                                          const std::vector<KernelRecord> &kernels,
                                          llvm::StringRef filter);

} // namespace golden
} // namespace fagen

#endif // FAGEN_COMPILER_CHECKGOLDEN_H
