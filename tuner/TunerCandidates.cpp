//===- TunerCandidates.cpp - `fagen tune`: compile, prune, numerics gate -===//

#include "tuner/TunerInternal.h"

namespace fagen {
namespace tuner {

/// The two numerics shapes: odd sizes, Sq < Sk and Sq > Sk (causal rows that see no key),
/// both layouts, the workload's GQA ratio. A decode kernel's: one query token over 4099 keys
/// (65 key tiles: split by every rule of the search) and its most tokens over 1000 keys in
/// three sequences, the other layout.
std::vector<CheckShape> numericsShapes(const KernelPlan &plan, int groupSize) {
  int g = std::max(1, groupSize);
  if (isDecodePlan(plan))
    return {{1, g, 1, 1, 4099, false}, {3, g, 1, plan.qTokens, 1000, true}};
  return {{1, g, 1, 257, 577, false}, {2, g, 1, 577, 129, true}};
}

/// Copies the ptxas report of a candidate's kernel into its record.
void setPtxas(TuningRecord &r, const CompiledKernel &kernel) {
  r.registers = kernel.report.registers;
  r.spillBytes = kernel.report.spillBytes();
}

/// The progress line of one compiled candidate.
std::string compileStatus(const std::string &name, const CompiledKernel &kernel) {
  return llvm::formatv("{0}: {1} registers, {2} spill bytes{3}", name, kernel.report.registers,
                       std::max(kernel.report.spillBytes(), 0), kernel.cached ? " (cached)" : "")
      .str();
}

/// The note that ends a run on a CUDA error: the context may be unusable, so the run stops,
/// and a rerun resumes past the candidate, which is already recorded.
std::string cudaErrorNote(const std::string &doing, const std::string &kernel,
                          const std::string &message, const std::string &dbPath) {
  return "fagen tune: CUDA error while " + doing + " " + kernel + ": " + message +
         "\nfagen tune: the results so far are in " + dbPath +
         "; run the same command again to resume (this candidate is recorded as cuda-error and "
         "skipped)";
}

/// The progress line of one measured candidate on one bucket.
std::string timingStatus(const std::string &bucket, const std::string &kernel,
                         const Timings &t) {
  double spread = t.medianMs > 0 ? 100 * (t.p90Ms - t.p10Ms) / t.medianMs : 0;
  return llvm::formatv("{0} {1}: {2:f1} TFLOP/s ({3:f3} ms, p10-p90 {4:f1}%)", bucket, kernel,
                       t.tflops, t.medianMs, spread)
      .str();
}

int StageRun::indexOf(const std::string &kernel) const {
  for (size_t k = 0; k < bundle.kernels.size(); ++k)
    if (bundle.kernels[k].name == kernel)
      return int(k);
  return -1;
}

std::vector<TuningRecord> Tuner::jobRecords(const StageRun &s, size_t i, RecordStatus status,
                                            const std::string &detail,
                                            const CompiledKernel *kernel) const {
  const Job &job = s.jobs[i];
  std::vector<TuningRecord> out;
  for (size_t b : job.buckets) {
    TuningRecord r = makeRecord(s.workloads[job.workload], b, job, status);
    r.detail = detail;
    if (kernel)
      setPtxas(r, *kernel);
    out.push_back(std::move(r));
  }
  return out;
}

/// Compiles every candidate (cached) in parallel, each on its own so that one failure does not
/// hide the others.
void Tuner::compileCandidates(StageRun &s) {
  Log.begin(s.name + ": compile", unsigned(s.jobs.size()));
  std::mutex mutex;
  BuildOptions options;
  options.jobs = 1;
  options.cacheDir = Opt.cacheDir;
  llvm::DefaultThreadPool pool(llvm::hardware_concurrency(Opt.jobs));
  for (size_t i = 0; i < s.jobs.size(); ++i)
    pool.async([&, i] {
      const KernelPlan &plan = s.jobs[i].candidate.plan;
      llvm::Expected<std::vector<CompiledKernel>> r = compileKernels(Tc, {plan}, options);
      std::lock_guard<std::mutex> lock(mutex);
      if (!r) {
        s.errors[i] = llvm::toString(r.takeError());
        Log.step(plan.name + ": compile error");
        return;
      }
      s.compiled[i] = std::move(r->front());
      Log.step(compileStatus(plan.name, *s.compiled[i]));
    });
  pool.wait();
}

/// ptxas pruning: compile errors and spilling kernels are recorded (so that a resumed run
/// skips them) and not run; the others are `runnable`.
int Tuner::recordUnrunnable(StageRun &s, std::vector<size_t> &runnable) {
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const std::optional<CompiledKernel> &kernel = s.compiled[i];
    if (kernel && !(kernel->report.spillBytes() > 0)) {
      runnable.push_back(i);
      continue;
    }
    RecordStatus status = kernel ? RecordStatus::Spills : RecordStatus::CompileError;
    std::string detail =
        kernel ? llvm::formatv("ptxas: {0} bytes spill stores, {1} bytes spill loads",
                               kernel->report.spillStoreBytes, kernel->report.spillLoadBytes)
                     .str()
               : s.errors[i].substr(0, 2000);
    if (!record(jobRecords(s, i, status, detail, kernel ? &*kernel : nullptr)))
      return kExitToolchain;
  }
  return kExitOk;
}

/// Loads one in-memory bundle with every runnable candidate, so that the numerics check and the
/// timing launch them through the runtime as a user's bundle would.
int Tuner::loadCandidates(StageRun &s, const std::vector<size_t> &runnable) {
  std::vector<CompiledKernel> kernels;
  for (size_t i : runnable)
    kernels.push_back(*s.compiled[i]);
  s.bundle = assembleBundle(Tc, kernels);
  std::vector<uint8_t> bytes = serializeBundle(s.bundle);
  if (fagen_bundle_load_memory(bytes.data(), bytes.size(), &s.loaded) != FAGEN_OK) {
    llvm::errs() << "fagen tune: the candidates' bundle does not load: " << fagen_last_error()
                 << "\n";
    return kExitRejected;
  }
  return kExitOk;
}

/// Keeps in (error, limit) the kernel's error that comes closest to its limit so far.
void keepWorst(double error, double limit, double &worstRatio, double &keptError,
               double &keptLimit) {
  if (error / limit <= worstRatio)
    return;
  worstRatio = error / limit;
  keptError = error;
  keptLimit = limit;
}

/// Runs candidate i on the numerics shapes into s.numerics[i], keeping for each output (O and
/// LSE; dQ, dK and dV) the error that comes closest to its limit. A plan or run error of the
/// runtime stops it and lands in `failure`; a deterministic backward that did not repeat
/// bitwise is named in `note`; a CUDA error is returned.
std::optional<CudaFailure> Tuner::checkNumerics(StageRun &s, size_t i, std::string &failure,
                                                std::string &note) {
  const Job &job = s.jobs[i];
  int index = s.indexOf(job.candidate.plan.name);
  NumericsResult &n = s.numerics[i];
  n.passed = true;
  n.backward = job.candidate.plan.pass == Pass::Backward;
  double worst[3] = {-1, -1, -1};
  std::vector<CheckShape> shapes =
      numericsShapes(job.candidate.plan, s.workloads[job.workload].groupSize);
  for (size_t si = 0; si < shapes.size(); ++si) {
    const unsigned seed = 4321u + unsigned(si);
    bool passed = false;
    std::string caseFailure;
    if (n.backward) {
      // The bundle holds no forward kernel (runStage), so O and LSE are the float64
      // reference's, rounded to the dtype, as `fagen check` takes them without one.
      BwdCaseOutcome outcome =
          checkBackwardCase(Api, s.loaded, s.bundle, index, shapes[si], seed);
      if (auto *cuda = std::get_if<CudaFailure>(&outcome))
        return *cuda;
      const BwdCaseResult &c = std::get<BwdCaseResult>(outcome);
      caseFailure = c.failure;
      passed = c.passed;
      if (c.repeatDiffer > 0)
        note = llvm::formatv("; not bitwise repeatable: {0} elements of dQ, dK, dV differed "
                             "between two runs on {1}",
                             c.repeatDiffer, checkShapeText(shapes[si]))
                   .str();
      using reference::gradientBound;
      keepWorst(c.kernel.MaxDQ, gradientBound(c.samePrecision.MaxDQ, c.samePrecision),
                worst[0], n.maxErrorDq, n.limitDq);
      keepWorst(c.kernel.MaxDK, gradientBound(c.samePrecision.MaxDK, c.samePrecision),
                worst[1], n.maxErrorDk, n.limitDk);
      keepWorst(c.kernel.MaxDV, gradientBound(c.samePrecision.MaxDV, c.samePrecision),
                worst[2], n.maxErrorDv, n.limitDv);
    } else {
      CaseOutcome outcome =
          checkKernelCase(Api, s.loaded, index, s.bundle.kernels[index], shapes[si], seed);
      if (auto *cuda = std::get_if<CudaFailure>(&outcome))
        return *cuda;
      const CaseResult &c = std::get<CaseResult>(outcome);
      caseFailure = c.failure;
      passed = c.passed;
      using reference::toleranceBound, reference::kEpsO, reference::kEpsLse;
      keepWorst(c.kernel.MaxO, toleranceBound(c.samePrecision.MaxO, kEpsO), worst[0],
                n.maxErrorO, n.limitO);
      keepWorst(c.kernel.MaxLse, toleranceBound(c.samePrecision.MaxLse, kEpsLse), worst[1],
                n.maxErrorLse, n.limitLse);
    }
    if (!caseFailure.empty()) {
      failure = caseFailure;
      return std::nullopt;
    }
    n.passed = n.passed && passed;
    ++n.shapes;
  }
  return std::nullopt;
}

/// The numerics line of a candidate: its largest error against the limit, per output.
std::string numericsText(const NumericsResult &n) {
  if (n.backward)
    return llvm::formatv("max |dQ error| {0:e2} (limit {1:e2}), max |dK error| {2:e2} (limit "
                         "{3:e2}), max |dV error| {4:e2} (limit {5:e2})",
                         n.maxErrorDq, n.limitDq, n.maxErrorDk, n.limitDk, n.maxErrorDv,
                         n.limitDv)
        .str();
  return llvm::formatv("max |O error| {0:e2} (limit {1:e2}), max |LSE error| {2:e2} (limit "
                       "{3:e2})",
                       n.maxErrorO, n.limitO, n.maxErrorLse, n.limitLse)
      .str();
}

/// The numerics gate: a candidate may only be timed (and win) if it passes; the others are
/// recorded with why they failed.
int Tuner::gateNumerics(StageRun &s, const std::vector<size_t> &runnable,
                        std::vector<size_t> &passing) {
  Log.begin(s.name + ": numerics", unsigned(runnable.size()));
  for (size_t i : runnable) {
    const std::string &kernel = s.jobs[i].candidate.plan.name;
    const NumericsResult &n = s.numerics[i];
    std::string failure, note;
    if (std::optional<CudaFailure> cuda = checkNumerics(s, i, failure, note)) {
      record(jobRecords(s, i, RecordStatus::CudaError, "numerics check: " + cuda->message,
                        nullptr));
      Log.note(cudaErrorNote("checking", kernel, cuda->message, Db.path()));
      return kExitRejected;
    }
    if (failure.empty() && n.passed) {
      passing.push_back(i);
      Log.step(n.backward ? llvm::formatv("{0}: ok (dQ error {1:e2} <= {2:e2})", kernel,
                                          n.maxErrorDq, n.limitDq)
                                .str()
                          : llvm::formatv("{0}: ok (O error {1:e2} <= {2:e2})", kernel,
                                          n.maxErrorO, n.limitO)
                                .str());
      continue;
    }
    RecordStatus st = failure.empty() ? RecordStatus::NumericsFailed : RecordStatus::LaunchFailed;
    std::string detail = failure.empty() ? numericsText(n) + note : failure;
    std::vector<TuningRecord> out = jobRecords(s, i, st, detail, &*s.compiled[i]);
    if (failure.empty())
      for (TuningRecord &r : out)
        r.numerics = n;
    if (!record(std::move(out)))
      return kExitToolchain;
    Log.step(kernel + ": " + statusName(st));
  }
  return kExitOk;
}

} // namespace tuner
} // namespace fagen
