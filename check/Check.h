//===- Check.h - `fagen check`: run a bundle's kernels against a reference -===//
//
// Runs every kernel of a bundle that the current GPU can run, forward and backward, of every
// attention variant, on seeded random inputs over a grid of shapes with odd sizes, against a
// float64 CPU reference (check/Reference.h), with FlashAttention's tolerance rule: the
// kernel's error against the float64 reference may be at most twice the error of a
// same-precision reference, plus a small epsilon (O and LSE; each of dQ, dK, dV).
// Deterministic backward kernels must also give bitwise equal dQ, dK, dV in two runs.
// Optionally writes or compares golden digests of every output (CheckGolden.h), so that a
// change in numerics between commits is caught.
//
// The host side of a case (the problem of the kernel's variant, inputs, run-time arguments,
// the reference's problem) is built without a GPU, so that it can be unit-tested.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_CHECK_H
#define FAGEN_COMPILER_CHECK_H

#include "check/Reference.h"

#include "compiler/bundle/Bundle.h"
#include "runtime/src/Driver.h"
#include "fagen/fagen.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <variant>
#include <vector>

namespace fagen {

/// One problem shape a kernel is checked on.
struct CheckShape {
  int batch, headsQ, headsKV, seqlenQ, seqlenK;
  bool bhsd; ///< layout [batch, heads, seq, dim] instead of [batch, seq, heads, dim]
  /// Forward kernels, not varlen: key row j scaled by 2^min(j / 48, 7), so that the logits'
  /// row max grows from key tile to key tile by more than the FA4 rescale threshold, and
  /// from one tile to a later one by more than exp2 spans (kernels that start the
  /// exponentials from a kept max must notice and redo them).
  bool risingKeys = false;
};

/// The shapes `fagen check` runs a kernel on: the grid's (or the quick grid's) shapes whose
/// max(seqlen_q, seqlen_k) lies in the kernel's [seqlenMin, seqlenMax], plus two odd shapes at
/// the bottom of the range where fewer than two of the grid's are left (tuned kernels).
std::vector<CheckShape> checkShapesFor(int64_t seqlenMin, int64_t seqlenMax, bool quick);

/// The shapes for kernel `k`: as above, and for a static block layout only those the layout
/// covers (seqlen_q <= sparseRows * sparseBlock, seqlen_k <= sparseCols * sparseBlock), with
/// odd covered shapes added where fewer than two are left. A decode kernel gets decode shapes
/// instead: at most its q_tokens query tokens, one key to 16k keys, GQA 4:1 and 7:1, MQA,
/// batches, rows that see no key (CheckInputs.cpp decodeShapes); a paged decode kernel
/// batches of the cache lengths of pagedLengths (CheckInputs.cpp pagedShapes); a paged forward
/// varlen batches of cache lengths near page boundaries (prefillShapes).
std::vector<CheckShape> checkShapesFor(const KernelRecord &k, bool quick);

/// The forward problem of `shape` for a kernel of this dtype ("bf16" or "fp16"), head dims and
/// mask, with the strides of dense tensors in the shape's layout and the default softmax scale.
/// The tuner's timing launches dense kernels through it.
fagen_fwd_problem forwardProblem(DType dtype, int headDimQK, int headDimV, bool causal,
                                 const CheckShape &shape);

/// The packed sequences a varlen kernel runs a shape as: shape.batch + 2 sequences of uneven
/// lengths, the longest seqlen_q x seqlen_k, one with a single query, one with a single key.
struct VarlenLengths {
  std::vector<int32_t> q, k;
};
VarlenLengths varlenLengths(const CheckShape &shape);

/// A window mask's run-time sizes for a shape (-1: unbounded): left 37 / right 0 on BSHD
/// shapes; on BHSD shapes an unbounded side (left when seqlen_q <= seqlen_k, else right).
struct WindowSizes {
  int left, right;
};
WindowSizes windowSizes(const CheckShape &shape);

/// Run-time values of the variants (docs/design/variants-and-backward.md).
constexpr float kCheckSoftcap = 20.0f;
constexpr float kCheckSoftcapQScale = 10.0f; ///< Q is scaled so that tanh saturates
constexpr float kCheckDropoutP = 0.17f;      ///< quantized to 44/256 by the keep rule
constexpr int kCheckBlockDensityPercent = 30; ///< runtime block mask: blocks computed

/// The host side of one case: the call's problem for the kernel's variant, seeded inputs, and
/// the variant's run-time arguments as host data (uploaded by the check).
struct CaseInputs {
  fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT;
  reference::ElementType type = reference::ElementType::BF16;
  std::vector<uint16_t> q, k, v, dout; ///< dout: backward kernels only
  std::vector<float> alibiSlopes;      ///< slope of (b, h) at b * alibiBatchStride + h
  int64_t alibiBatchStride = 0;
  std::vector<uint8_t> blockMask;      ///< runtime block mask, one byte per block
  int64_t blockMaskStrides[3] = {0, 0, 0}; ///< batch, head, row (bytes)
  std::vector<int32_t> cuSeqlensQ, cuSeqlensK; ///< varlen: batch + 1 offsets
  uint64_t dropoutSeed = 0, dropoutOffset = 0;
  std::vector<uint8_t> staticTable;    ///< static layout: sparseRows x sparseCols
};

/// Builds case `shape` of kernel `k` from `seed`. `staticTable` is the kernel's static block
/// layout (staticBlockTable), empty for other kernels. Dense forward kernels draw Q, K, V
/// exactly as before variants existed, so their golden outputs are unchanged.
CaseInputs makeCaseInputs(const KernelRecord &k, const CheckShape &shape, unsigned seed,
                          const std::vector<uint8_t> &staticTable = {});

/// The paged KV cache a paged decode kernel's case runs on (CheckPaged.cpp), built on the host
/// from a contiguous case's K and V: each sequence's cache length, its pages in the cache in a
/// shuffled order, sequence 1's first page shared with sequence 0 (their first page_size keys
/// made equal), spare pages and the rows past each length filled with NaN (never read), and
/// block-table entries past a length set to -1 (never read). `uniform`: every length seqlen_k
/// and no shared page, the inputs of the contiguous kernel (paged vs contiguous equality).
struct PagedLayout {
  int pageSize = 0, numPages = 0, maxPages = 0;
  std::vector<int32_t> seqused;    ///< [batch]; decode: seqused[0] = seqlen_k (the longest)
  std::vector<int32_t> blockTable; ///< [batch, maxPages], -1 past each length
  std::vector<uint16_t> kCache, vCache; ///< [numPages, pageSize, heads_kv, head_dim]
};
/// The cache lengths of a shape's sequences: seqlen_k first, then the page boundary + 1 (the
/// sequence sharing the first page), an empty sequence, the boundary - 1, one key, the
/// boundary, two pages + 1, ..., each at most seqlen_k.
std::vector<int32_t> pagedLengths(int batch, int seqlenK, int pageSize);
/// The layout of case `in` (a decode case of the paged kernel's variant, its K and V dense
/// BSHD or BHSD; a paged forward's varlen case, each sequence's keys its cache); makes
/// sequence 1's first page equal to sequence 0's in `in` unless uniform (varlen: where both
/// fill it).
PagedLayout makePagedLayout(CaseInputs &in, int pageSize, unsigned seed, bool uniform);

/// Elements of each tensor of a problem (varlen: packed rows).
struct CaseSizes {
  size_t q, k, v, o, lse;
};
CaseSizes caseSizes(const fagen_fwd_problem &problem);

/// The reference's problem for `in`: host pointers into `in` (which must outlive it), the
/// strides, and the same variant arguments the runtime gives the kernel.
reference::FwdProblem referenceProblem(const KernelRecord &k, const CaseInputs &in);

/// Device addresses of a case's run-time argument arrays (0 where the variant has none).
struct DeviceRunArgs {
  CUdeviceptr alibiSlopes = 0, blockMask = 0, cuSeqlensQ = 0, cuSeqlensK = 0;
};
fagen_run_args runArgsFor(const CaseInputs &in, const DeviceRunArgs &device);

/// Whether kernel `k` is dense attention (no variant feature beyond none/causal bottom-right).
bool isDenseKernel(const KernelRecord &k);

/// The static block layout compiled into kernel `k`'s cubin (the fagen_block_table symbol),
/// sparseRows x sparseCols bytes; verified against the kernel's sparse_hash.
llvm::Expected<std::vector<uint8_t>> staticBlockTable(const KernelRecord &k,
                                                      llvm::StringRef cubin);

/// One output tensor of a case as fp32, dense in the reference's result layout (for the
/// golden digests).
struct OutputTensor {
  const char *name; ///< "O", "LSE" (forward); "dQ", "dK", "dV" (backward)
  std::vector<float> values;
};

/// The outcome of one forward kernel on one shape against both references.
struct CaseResult {
  reference::FwdError kernel, samePrecision;
  bool passed = false;
  std::string failure;        ///< a plan/run error of the runtime (not sticky), or ""
  std::vector<OutputTensor> outputs; ///< O and LSE as the kernel wrote them
  /// Per output (O, LSE): its largest error (ref::describeWorst), and whether over its bound.
  std::vector<std::pair<std::string, bool>> worst;
};

/// A failed CUDA driver call; the context may be unusable afterwards (a kernel fault).
struct CudaFailure {
  std::string message;
};

using CaseOutcome = std::variant<CaseResult, CudaFailure>;

/// Runs forward kernel `kernelIndex` of `bundle` (described by `kernel`) once on seeded random
/// inputs of `shape` in the current context and compares it with the float64 and
/// same-precision CPU references (FlashAttention's tolerance rule, reference::withinTolerance).
CaseOutcome checkKernelCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                            const KernelRecord &kernel, const CheckShape &shape, unsigned seed,
                            const std::vector<uint8_t> &staticTable = {});

/// The outcome of one backward kernel on one shape.
struct BwdCaseResult {
  reference::BwdError kernel, samePrecision;
  bool passed = false;       ///< within tolerance and (deterministic kernels) repeatable
  std::string failure;       ///< a plan/run error of the runtime, or ""
  std::string forwardSource; ///< where O and LSE came from: a forward kernel or the CPU
  int64_t repeatDiffer = -1; ///< deterministic: elements differing between 2 runs; else -1
  std::vector<OutputTensor> outputs; ///< dQ, dK, dV as the kernel wrote them (first run)
  /// Per gradient (dQ, dK, dV): its largest error (ref::describeWorst), and whether over its bound.
  std::vector<std::pair<std::string, bool>> worst;
};

using BwdCaseOutcome = std::variant<BwdCaseResult, CudaFailure>;

/// Runs backward kernel `kernelIndex` on seeded inputs and random dO of `shape`: O and LSE from
/// a forward kernel of the same variant in `bundle` where one runs here, else from the float64
/// reference rounded to the dtype; dQ, dK, dV poisoned first and compared with the float64
/// and same-precision references; a deterministic kernel is run twice and must repeat bitwise.
/// `records`: the bundle's manifest, as `bundle` was loaded from it.
BwdCaseOutcome checkBackwardCase(const DriverApi &api, const fagen_bundle *bundle,
                                 const Bundle &records, int kernelIndex,
                                 const CheckShape &shape, unsigned seed,
                                 const std::vector<uint8_t> &staticTable = {});

//===--- Non-finite inputs: `fagen check --nonfinite` (CheckNonFinite.cpp) -===//

/// Which input element a non-finite case poisons.
enum class NonFiniteKind { NanInK, NanInV, NanInQ, InfInQ, NanInDOut };

/// One non-finite input: `kind` at element (batch, head, row, dim) of its tensor. head is a kv
/// head for K and V, a query head for Q and dO; row counts within the batch entry's sequence.
struct NonFiniteCase {
  NonFiniteKind kind;
  int batch, head, row, dim;
};

/// What the guarantee (docs/numerics.md) allows one output element to be.
enum class NonFiniteExpect : uint8_t {
  Finite,    ///< finite (or the reference's -inf) and within tolerance
  NaN,       ///< NaN
  NotFinite, ///< NaN or +-inf (LSE of a row whose every visible logit is NaN)
  MayBeNaN,  ///< NaN, or finite and within tolerance: the same tile pair as a NaN element
};

/// Per output element, in the reference's result layouts: O and LSE (forward), dQ, dK and dV
/// (backward); the other pass's vectors are empty.
struct NonFiniteExpectation {
  std::vector<NonFiniteExpect> O, Lse, DQ, DK, DV;
};

/// The shape kernel `k`'s non-finite cases run on: 2x4/2 127x577 BSHD where the kernel serves
/// it (a decode kernel: min(q_tokens, 3) queries), else the shape of checkShapesFor(k) with the
/// most keys.
CheckShape nonFiniteShape(const KernelRecord &k);

/// The cases of kernel `k` on inputs `in`: forward, a NaN in K and in V (last batch entry, last
/// kv head, key Sk - 64 of that sequence: column 1 of a key tile), a NaN and a +Inf in Q (batch
/// entry 0, head 0, query Sq / 2); backward, a NaN in dO (last batch entry, last head, query
/// 3 Sq / 4). Where no query sees that key, or that query sees no key (a runtime block mask
/// hides whole heads), the next (batch, head) inward.
std::vector<NonFiniteCase> nonFiniteCases(const KernelRecord &k, const CaseInputs &in);

/// Writes the case's NaN or +Inf into its tensor of `in`.
void injectNonFinite(CaseInputs &in, const NonFiniteCase &c);

/// The guarantee for case `c` on problem `pb`, for a kernel of blockM x blockN tiles. A NaN in K
/// reaches only the rows that see the key (through S, where masked logits are -inf); a NaN in V
/// or dO also reaches, through 0 * NaN in an MMA, rows or keys of the tile pairs the kernel
/// visits (MayBeNaN). InfInQ has no rule of its own: NaN where `exact` (the float64 reference
/// on the same inputs, required then) is NaN.
NonFiniteExpectation expectNonFinite(const reference::FwdProblem &pb, const NonFiniteCase &c,
                                     int blockM, int blockN,
                                     const reference::FwdResult *exact = nullptr);

/// One output tensor of a non-finite case against its expectation.
struct NonFiniteCount {
  int64_t expectedNan = 0; ///< elements that must be NaN (or not finite)
  int64_t missing = 0;     ///< of those, finite in the kernel's output
  int64_t unexpected = 0;  ///< NaN (or a wrong infinity) where the output must be finite
  int64_t leaked = 0;      ///< NaN where MayBeNaN allows it
  int64_t negInf = 0;      ///< -inf where NotFinite allows NaN or +-inf
  double error = 0, limit = 0; ///< max |kernel - float64| over the rest, and its tolerance
  bool passed() const { return missing == 0 && unexpected == 0 && error <= limit; }
};

/// Judges `got` against `expect`; the rest is compared with the float64 reference `exact` by
/// the tolerance rule (twice the same-precision reference's error `same`, plus `eps`).
NonFiniteCount judgeNonFinite(const std::vector<NonFiniteExpect> &expect,
                              const std::vector<double> &exact, const std::vector<double> &same,
                              const std::vector<double> &got, double eps);

/// Runs the non-finite cases of kernel `kernelIndex` on nonFiniteShape(kernel) and prints one
/// PASS/FAIL line per case. Returns the failed cases, or -1 after a CUDA failure (the context
/// may be unusable then).
int checkNonFiniteKernel(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                         const KernelRecord &kernel, const std::vector<uint8_t> &staticTable,
                         unsigned seed);

/// "B x Hq/Hkv Sq x Sk layout", as the check table prints a shape.
std::string checkShapeText(const CheckShape &shape);

/// What a check found, kernel by kernel (for `fagen check --json`).
struct CheckKernelResult {
  std::string name, arch;
  std::string result; ///< "passed", "failed" or "skipped"
  int casesPassed = 0, casesFailed = 0;
};
struct CheckSummary {
  std::string gpu; ///< "" when no GPU was opened
  int passed = 0, failed = 0, skipped = 0;
  std::vector<CheckKernelResult> kernels;
};

struct CheckOptions {
  std::string bundlePath;
  std::string goldenDir;      ///< "" = no golden digests, else their folder (CheckGolden.h)
  bool updateGolden = false;  ///< write the golden files that moved instead of failing
  unsigned seed = 1234;
  bool quick = false;         ///< a reduced grid (for compute-sanitizer runs)
  std::string kernelFilter;   ///< only kernels whose name contains this
  bool nonFinite = false;     ///< the non-finite input cases instead of the shape grid
  bool explain = false;       ///< print every case's largest errors, not only a mismatch's
  CheckSummary *summary = nullptr; ///< filled when set
};

/// Exit codes: 0 all passed, 1 a mismatch, 4 no GPU / driver, 3 other errors.
int runCheck(const CheckOptions &options);

} // namespace fagen

#endif // FAGEN_COMPILER_CHECK_H
