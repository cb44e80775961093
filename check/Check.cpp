//===- Check.cpp - `fagen check`: run a bundle's kernels against a reference =//
//
// The driver of `fagen check`: loads the bundle, runs each kernel that this GPU can run over
// its shapes (CheckForward.cpp, CheckBackward.cpp), prints one table row per kernel and shape,
// and compares the outputs' digests with the golden files or rewrites them (CheckGolden.h).
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"

#include "core/FileIO.h"
#include "check/CheckGolden.h"

#include "check/Reference.h"

#include "compiler/bundle/Bundle.h"
#include "runtime/src/Driver.h"
#include "fagen/fagen.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <variant>

namespace fagen {

namespace {

namespace ref = reference;

/// The GPU and the bundle a check runs on.
struct Session {
  const DriverApi *api = nullptr;
  Bundle records;
  fagen_bundle *bundle = nullptr;
  int major = 0, minor = 0;
  std::string gpuName;
};

/// The golden digests of a run (--golden): the kernel being checked, and the counts.
struct GoldenRun {
  golden::GoldenFile now; ///< the current kernel's digests so far
  bool complete = true;   ///< every case of the current kernel passed and gave its outputs
  unsigned matched = 0, moved = 0, missing = 0, stale = 0; ///< comparing
  unsigned written = 0, unchanged = 0, notWritten = 0;     ///< --update-golden
  bool failed() const { return moved + missing + stale + notWritten > 0; }
};

struct Tally {
  unsigned passed = 0, failed = 0, skipped = 0;
  GoldenRun golden;
};

/// The run-time arguments the check passes to kernel k's variant, for the reader; "" if dense.
std::string variantNotes(const KernelRecord &k) {
  std::vector<std::string> notes;
  if (k.mask == Mask::Window)
    notes.push_back("window left 37 right 0 (bshd shapes), left -1 (unbounded) right 11 (bhsd, "
                    "Sq <= Sk), left 23 right -1 (bhsd, Sq > Sk)");
  if (k.scoreMod == ScoreMod::Softcap)
    notes.push_back(llvm::formatv("softcap {0:f0}, Q scaled by {1:f0}", kCheckSoftcap,
                                  kCheckSoftcapQScale));
  if (k.scoreMod == ScoreMod::Alibi)
    notes.push_back("alibi slopes 2^(-8 (h + 1) / Hq) x (1 + b / 2) (bhsd: one per head)");
  if (k.dropout)
    notes.push_back(llvm::formatv("dropout p {0:f2} ({1}/256)", kCheckDropoutP,
                                  dropout_threshold(kCheckDropoutP)));
  if (k.varlen)
    notes.push_back("varlen: B x Hq/Hkv Sq x Sk runs as B + 2 packed sequences up to Sq x Sk, "
                    "one of 1 query, one of 1 key");
  if (k.sparsity == Sparsity::Runtime)
    notes.push_back(llvm::formatv("runtime block mask of {0}: {1}% of the blocks computed, some "
                                  "block rows none",
                                  k.sparseBlock, kCheckBlockDensityPercent));
  if (k.sparsity == Sparsity::Static)
    notes.push_back(llvm::formatv("static layout {0}: {1} x {2} blocks of {3}, read from the "
                                  "cubin",
                                  k.sparseHash, k.sparseRows, k.sparseCols, k.sparseBlock));
  return llvm::join(notes, "; ");
}

void printHeader() {
  llvm::outs() << llvm::formatv(
      "{0,-56} {1,-7} {2,-24} {3,10} {4,10} {5,10} {6,10} {7,10} {8,10}  {9}\n", "kernel", "arch",
      "B x Hq/Hkv Sq x Sk layout", "err O/dQ", "limit", "err LSE/dK", "limit", "err dV", "limit",
      "result");
}

/// Under a row: the largest error of each output over its bound (every output with --explain).
void printWorst(const std::vector<std::pair<std::string, bool>> &worst, bool explain) {
  for (const auto &[line, over] : worst)
    if (over || explain)
      llvm::outs() << "    " << line << (over ? "  (over the bound)" : "") << "\n";
}

void printForwardRow(const KernelRecord &k, const CheckShape &s, const CaseResult &r,
                     bool explain) {
  std::string verdict = r.failure.empty() ? (r.passed ? "ok" : "MISMATCH") : r.failure;
  llvm::outs() << llvm::formatv(
      "{0,-56} {1,-7} {2,-24} {3,10:e2} {4,10:e2} {5,10:e2} {6,10:e2} {7,10} {7,10}  {8}\n",
      k.name, k.arch, checkShapeText(s), r.kernel.MaxO,
      ref::toleranceBound(r.samePrecision.MaxO, ref::kEpsO), r.kernel.MaxLse,
      ref::toleranceBound(r.samePrecision.MaxLse, ref::kEpsLse), "-", verdict);
  printWorst(r.worst, explain);
}

void printBackwardRow(const KernelRecord &k, const CheckShape &s, const BwdCaseResult &r,
                      bool explain) {
  std::string verdict = r.failure;
  if (verdict.empty()) {
    bool close = ref::withinTolerance(r.kernel, r.samePrecision);
    verdict = close ? "ok" : "MISMATCH";
    if (r.repeatDiffer == 0)
      verdict += ", bitwise repeatable";
    if (r.repeatDiffer > 0)
      verdict += llvm::formatv(", NOT REPEATABLE ({0} elements differ between 2 runs)",
                               r.repeatDiffer);
  }
  auto limit = [&](double same) { return ref::gradientBound(same, r.samePrecision); };
  llvm::outs() << llvm::formatv(
      "{0,-56} {1,-7} {2,-24} {3,10:e2} {4,10:e2} {5,10:e2} {6,10:e2} {7,10:e2} {8,10:e2}  {9}\n",
      k.name, k.arch, checkShapeText(s), r.kernel.MaxDQ, limit(r.samePrecision.MaxDQ),
      r.kernel.MaxDK, limit(r.samePrecision.MaxDK), r.kernel.MaxDV, limit(r.samePrecision.MaxDV),
      verdict);
  printWorst(r.worst, explain);
}

/// Why kernel k is not run here, or "".
std::string skipReason(const KernelRecord &k, const Session &session) {
  if (archRunsOn(k.arch, session.major, session.minor))
    return "";
  return llvm::formatv("skipped: an {0} cubin does not run on sm_{1}{2} (compiled, not run here)",
                       k.arch, session.major, session.minor);
}

/// Adds a case's outputs to the kernel's digests (none when the runtime failed it).
void addGoldenCase(const KernelRecord &k, const CheckShape &s,
                   const std::vector<OutputTensor> &outputs, bool passed, GoldenRun &run) {
  run.complete = run.complete && passed && !outputs.empty();
  if (outputs.empty())
    return;
  golden::CaseDigest c{golden::shapeKey(s), {}};
  for (const OutputTensor &t : outputs)
    c.tensors.push_back(golden::digestTensor(t.name, t.values, golden::bitwiseStable(k, t.name)));
  run.now.cases.push_back(std::move(c));
}

/// The command that rewrites the golden files of `opt`'s bundle (of one kernel: `kernel`).
std::string updateCommand(const CheckOptions &opt, llvm::StringRef kernel = "") {
  return "fagen check " + opt.bundlePath + " --golden " + opt.goldenDir +
         (kernel.empty() ? "" : " --kernel " + kernel.str()) + " --update-golden";
}

/// Compares kernel k's digests with its golden file, or with --update-golden writes the file
/// when they moved (or it has none, or an unreadable one); prints what moved.
void finishGolden(const CheckOptions &opt, const KernelRecord &k, GoldenRun &run) {
  const std::string path = opt.goldenDir + "/" + golden::goldenFileName(k);
  const bool exists = llvm::sys::fs::exists(path);
  std::optional<golden::GoldenFile> stored;
  std::string unreadable;
  if (exists) {
    llvm::Expected<golden::GoldenFile> f = golden::readGolden(path);
    if (f)
      stored = std::move(*f);
    else
      unreadable = llvm::toString(f.takeError());
  }
  const std::vector<std::string> moved =
      stored ? golden::compareGolden(*stored, run.now) : std::vector<std::string>();
  if (!opt.updateGolden) {
    if (!exists)
      llvm::outs() << "  golden: no golden file " << path << " for " << k.name << " " << k.arch
                   << ": record it with `" << updateCommand(opt, k.name) << "`\n";
    if (!unreadable.empty())
      llvm::outs() << "  golden: " << unreadable << "\n";
    for (const std::string &line : moved)
      llvm::outs() << "  golden: " << k.name << " " << k.arch << " " << line << "\n";
    if (stored && !moved.empty())
      llvm::outs() << "  golden: " << path << " was written by fagen " << stored->fagenVersion
                   << " on " << stored->gpu << ", this run is fagen " << run.now.fagenVersion
                   << " on " << run.now.gpu << "; after a deliberate numerics change: `"
                   << updateCommand(opt) << "`\n";
    if (!exists)
      ++run.missing;
    else if (stored && moved.empty())
      ++run.matched;
    else
      ++run.moved;
    return;
  }
  if (stored && moved.empty()) {
    ++run.unchanged;
    return;
  }
  if (!run.complete) {
    llvm::outs() << "  golden: " << path << " not written: a case of " << k.name
                 << " failed\n";
    ++run.notWritten;
    return;
  }
  if (!unreadable.empty())
    llvm::outs() << "  golden (was): " << unreadable << "\n";
  for (const std::string &line : moved)
    llvm::outs() << "  golden (was): " << k.name << " " << k.arch << " " << line << "\n";
  if (llvm::Error e = golden::writeGolden(path, run.now)) {
    llvm::outs() << "  golden: " << llvm::toString(std::move(e)) << "\n";
    ++run.notWritten;
    return;
  }
  llvm::outs() << "  golden: wrote " << path << "\n";
  ++run.written;
}

/// Golden files of kernels the bundle no longer has: reported, or removed by --update-golden.
void staleGolden(const CheckOptions &opt, const Session &session, GoldenRun &run) {
  for (const std::string &name :
       golden::staleGoldenFiles(opt.goldenDir, session.records.kernels, opt.kernelFilter)) {
    const std::string path = opt.goldenDir + "/" + name;
    if (opt.updateGolden && !llvm::sys::fs::remove(path)) {
      llvm::outs() << "golden: removed " << path << " (no kernel of " << opt.bundlePath
                   << " has it)\n";
      continue;
    }
    llvm::outs() << "golden: " << path << " belongs to no kernel of " << opt.bundlePath
                 << ": remove it, or run `" << updateCommand(opt) << "`\n";
    ++run.stale;
  }
}

/// The golden line of the summary.
void printGoldenSummary(const CheckOptions &opt, const GoldenRun &run) {
  if (opt.updateGolden) {
    llvm::outs() << llvm::formatv("golden: {0} files written, {1} unchanged, {2} not written "
                                  "({3})\n",
                                  run.written, run.unchanged, run.notWritten, opt.goldenDir);
    return;
  }
  llvm::outs() << llvm::formatv("golden: {0} kernels match, {1} moved, {2} without a golden "
                                "file, {3} files without a kernel ({4})\n",
                                run.matched, run.moved, run.missing, run.stale, opt.goldenDir);
}

/// Runs case `si` of kernel `index`; prints its row; false after a CUDA failure.
bool checkCase(const CheckOptions &opt, const Session &session, int index,
               const std::vector<uint8_t> &table, const CheckShape &s, size_t si,
               std::string &lastSource, Tally &tally) {
  const KernelRecord &k = session.records.kernels[index];
  const unsigned seed = opt.seed * 1000003u + unsigned(si);
  bool ok = false;
  std::vector<OutputTensor> outputs;
  if (k.pass == Pass::Backward) {
    BwdCaseOutcome outcome = checkBackwardCase(*session.api, session.bundle, session.records,
                                               index, s, seed, table);
    if (auto *cuda = std::get_if<CudaFailure>(&outcome)) {
      llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-24} CUDA error: {3}\n", k.name, k.arch,
                                    checkShapeText(s), cuda->message);
      return false;
    }
    BwdCaseResult &r = std::get<BwdCaseResult>(outcome);
    if (!r.forwardSource.empty() && r.forwardSource != lastSource)
      llvm::outs() << "  O, LSE from " << (lastSource = r.forwardSource) << "\n";
    printBackwardRow(k, s, r, opt.explain);
    ok = r.failure.empty() && r.passed;
    outputs = std::move(r.outputs);
  } else {
    CaseOutcome outcome = checkKernelCase(*session.api, session.bundle, index, k, s, seed, table);
    if (auto *cuda = std::get_if<CudaFailure>(&outcome)) {
      llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-24} CUDA error: {3}\n", k.name, k.arch,
                                    checkShapeText(s), cuda->message);
      return false;
    }
    CaseResult &r = std::get<CaseResult>(outcome);
    printForwardRow(k, s, r, opt.explain);
    ok = r.failure.empty() && r.passed;
    outputs = std::move(r.outputs);
  }
  if (!opt.goldenDir.empty())
    addGoldenCase(k, s, outputs, ok, tally.golden);
  ok ? ++tally.passed : ++tally.failed;
  return true;
}

/// Runs kernel `index` over its shapes; false after a CUDA failure (the context may be unusable
/// after a kernel fault).
bool checkKernel(const CheckOptions &opt, const Session &session, int index, Tally &tally) {
  const KernelRecord &k = session.records.kernels[index];
  if (std::string why = skipReason(k, session); !why.empty()) {
    llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2}\n", k.name, k.arch, why);
    ++tally.skipped;
    return true;
  }
  std::vector<uint8_t> table;
  if (k.sparsity == Sparsity::Static) {
    llvm::Expected<std::vector<uint8_t>> t =
        staticBlockTable(k, session.records.cubins[k.cubinSection]);
    if (!t) {
      llvm::outs() << llvm::formatv("{0,-56} {1,-7} FAILED: {2}\n", k.name, k.arch,
                                    llvm::toString(t.takeError()));
      ++tally.failed;
      return true;
    }
    table = std::move(*t);
  }
  if (std::string notes = variantNotes(k); !notes.empty())
    llvm::outs() << "  " << k.name << ": " << notes << "\n";
  if (opt.nonFinite && k.isPaged()) {
    llvm::outs() << llvm::formatv("{0,-56} {1,-7} skipped: the non-finite cases run on the "
                                  "contiguous decode kernels (the paged one loads the same "
                                  "rows through its block table)\n",
                                  k.name, k.arch);
    ++tally.skipped;
    return true;
  }
  if (opt.nonFinite) {
    const int failed = checkNonFiniteKernel(*session.api, session.bundle, index, k, table,
                                            opt.seed * 1000003u + 99u);
    failed == 0 ? ++tally.passed : ++tally.failed;
    llvm::outs().flush();
    return failed >= 0;
  }
  if (!opt.goldenDir.empty()) {
    tally.golden.now = golden::goldenHeader(k, opt.seed, opt.quick);
    tally.golden.now.fagenVersion = FAGEN_VERSION_STRING;
    tally.golden.now.gpu = session.gpuName;
    tally.golden.complete = true;
  }
  std::vector<CheckShape> shapes = checkShapesFor(k, opt.quick);
  std::string lastSource;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const bool ok = checkCase(opt, session, index, table, shapes[si], si, lastSource, tally);
    // Each case's line as it ends, also into a pipe or file: a long check shows its progress,
    // and one that hangs or is killed (a timeout, a sanitizer) shows the last case that ended
    // (it stopped in the next one).
    llvm::outs().flush();
    if (!ok) {
      ++tally.failed;
      return false;
    }
  }
  if (!opt.goldenDir.empty())
    finishGolden(opt, k, tally.golden);
  return true;
}

/// Loads the bundle (records and runtime handle) into `session`; an exit code on failure.
int openSession(const CheckOptions &opt, Session &session) {
  // The bundle first: a missing or invalid one is reported the same with or without a GPU.
  std::string error;
  std::string bytes;
  if (!readFileBounded(opt.bundlePath, kMaxBundleBytes, ("the bundle " + opt.bundlePath).c_str(),
                       bytes, error)) {
    llvm::errs() << "fagen check: " << error << "\n";
    return 3;
  }
  if (!parseBundle(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(),
                   session.records, error)) {
    llvm::errs() << "fagen check: " << opt.bundlePath << ": " << error << "\n";
    return 1;
  }
  session.api = getDriver(error);
  if (!session.api) {
    llvm::errs() << "fagen check: " << error << "\n";
    return 4;
  }
  if (fagen_bundle_load_file(opt.bundlePath.c_str(), &session.bundle) != FAGEN_OK) {
    llvm::errs() << "fagen check: " << fagen_last_error() << "\n";
    return 1;
  }
  return 0;
}

/// Makes device 0's primary context current and prints the first line; an exit code on failure.
int openDevice(const CheckOptions &opt, Session &session) {
  const DriverApi &api = *session.api;
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  char name[256] = {0};
  if (api.cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      api.cuDevicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS ||
      api.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    llvm::errs() << "fagen check: cannot create a context on device 0\n";
    return 4;
  }
  api.cuDeviceGetAttribute(&session.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  api.cuDeviceGetAttribute(&session.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  api.cuDeviceGetName(name, sizeof(name) - 1, device);
  session.gpuName = name;
  llvm::outs() << llvm::formatv("fagen check: {0} on {1} (sm_{2}{3}), seed {4}\n",
                                opt.bundlePath, name, session.major, session.minor, opt.seed);
  return 0;
}

} // namespace

int runCheck(const CheckOptions &opt) {
  if (!opt.goldenDir.empty() && !opt.updateGolden &&
      !llvm::sys::fs::is_directory(opt.goldenDir)) {
    llvm::errs() << "fagen check: no golden folder " << opt.goldenDir << ": create it with `"
                 << updateCommand(opt) << "`\n";
    return 1;
  }
  Session session;
  if (int code = openSession(opt, session))
    return code;
  if (int code = openDevice(opt, session)) {
    fagen_bundle_destroy(session.bundle);
    return code;
  }
  if (!opt.nonFinite)
    printHeader();
  Tally tally;
  bool usable = true;
  if (opt.summary)
    opt.summary->gpu = session.gpuName;
  for (size_t i = 0; i < session.records.kernels.size() && usable; ++i) {
    const KernelRecord &k = session.records.kernels[i];
    if (!opt.kernelFilter.empty() && k.name.find(opt.kernelFilter) == std::string::npos)
      continue;
    const unsigned passed = tally.passed, failed = tally.failed, skipped = tally.skipped;
    usable = checkKernel(opt, session, int(i), tally);
    if (opt.summary) {
      CheckKernelResult r{k.name, k.arch, "passed", int(tally.passed - passed),
                          int(tally.failed - failed)};
      r.result = tally.skipped > skipped ? "skipped" : r.casesFailed ? "failed" : "passed";
      opt.summary->kernels.push_back(std::move(r));
    }
  }
  if (opt.summary) {
    opt.summary->passed = int(tally.passed);
    opt.summary->failed = int(tally.failed);
    opt.summary->skipped = int(tally.skipped);
  }
  fagen_bundle_destroy(session.bundle);
  if (!opt.goldenDir.empty() && usable) {
    staleGolden(opt, session, tally.golden);
    printGoldenSummary(opt, tally.golden);
  }
  llvm::outs() << llvm::formatv("{0} passed, {1} failed, {2} skipped\n", tally.passed,
                                tally.failed, tally.skipped);
  if (tally.passed == 0 && tally.failed == 0) {
    llvm::errs() << "fagen check: no kernel of " << opt.bundlePath << " runs on this GPU (sm_"
                 << session.major << session.minor << "): rebuild with --arch sm_"
                 << session.major << session.minor << "\n";
    return 1;
  }
  return tally.failed == 0 && !tally.golden.failed() ? 0 : 1;
}

} // namespace fagen
