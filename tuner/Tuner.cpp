//===- Tuner.cpp - `fagen tune`: measure kernel configs on this GPU -------===//

#include "tuner/Tuner.h"

#include "check/Check.h"
#include "compiler/bundle/Package.h"
#include "tuner/Report.h"

#include "device/DeviceMemory.h"

#include "compiler/bundle/Bundle.h"
#include "runtime/src/Driver.h"
#include "fagen/fagen.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <optional>
#include <set>
#include <unistd.h>

namespace fagen {

namespace {

constexpr int kExitOk = 0, kExitRejected = 1, kExitToolchain = 3, kExitNoGpu = 4;

/// CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (cuda.h); not in Driver.h's list because only the tuner
/// asks for it.
constexpr int kAttributeL2CacheSize = 38;

/// The L2 flush writes at least this much (the H200's L2 is 60 MB).
constexpr size_t kMinFlushBytes = size_t(256) << 20;

/// Rotating input sets per bucket: at least this many, and together at least 4x the L2.
constexpr unsigned kMinInputSets = 3;
constexpr unsigned kMaxInputSets = 8;

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string minutesText(double seconds) {
  int s = int(std::lround(std::max(seconds, 0.0)));
  return llvm::formatv("{0}:{1:d2}", s / 60, s % 60).str();
}

/// "[phase i/n] what  ETA m:ss" per finished step on stderr; on a terminal one line that
/// updates in place.
class Progress {
public:
  explicit Progress(bool tty) : Tty(tty) {}

  void begin(std::string phase, unsigned total) {
    Phase = std::move(phase);
    Total = total;
    Done = 0;
    Start = std::chrono::steady_clock::now();
  }

  void step(const std::string &what) {
    ++Done;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - Start).count();
    double eta = Done ? elapsed / Done * (Total - Done) : 0;
    std::string line = llvm::formatv("[{0} {1}/{2}] {3}", Phase, Done, Total, what).str();
    if (Done < Total)
      line += "  ETA " + minutesText(eta);
    llvm::errs() << (Tty ? "\r\033[K" : "") << line << (Tty && Done < Total ? "" : "\n");
    llvm::errs().flush();
  }

  /// A message between steps; on a terminal it first ends the in-place line.
  void note(const std::string &text) {
    if (Tty && Done > 0 && Done < Total)
      llvm::errs() << "\n";
    llvm::errs() << text << "\n";
    llvm::errs().flush();
  }

private:
  bool Tty;
  std::string Phase;
  unsigned Total = 0, Done = 0;
  std::chrono::steady_clock::time_point Start;
};

/// The GPU the tuner measures on (device 0, primary context).
struct Gpu {
  CUdevice device = 0;
  CUcontext context = nullptr;
  int major = 0, minor = 0, sms = 0, l2Bytes = 0;
  std::string name;
};

/// One kernel of the spec and what the tuner measures for it.
struct Workload {
  std::string key;       ///< workloadKey(base)
  KernelPlan base;       ///< the planner's plan (its config is the "default")
  std::vector<ShapeBucket> buckets;
  int groupSize = 1;
};

/// A candidate and the buckets it still has to be measured on.
struct Job {
  size_t workload = 0;
  Candidate candidate;
  std::vector<size_t> buckets;
};

using device::DeviceMemory;

/// Q, K, V, O and LSE of one problem.
struct InputSet {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
};

/// How one candidate's timing ended.
struct TimingOutcome {
  enum Kind { Measured, LaunchFailed, CudaError } kind = Measured;
  Timings timings;
  std::string message;
};

/// The p-quantile (0..1) of sorted values, interpolating between neighbours.
double quantile(const std::vector<double> &sorted, double p) {
  if (sorted.empty())
    return 0;
  double pos = p * double(sorted.size() - 1);
  size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

/// Pseudo-random values of roughly unit variance (the sum of four uniforms), in the dtype.
std::vector<uint16_t> randomValues(size_t n, reference::ElementType type, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = next();
    float sum = 0;
    for (int j = 0; j < 4; ++j)
      sum += float((r >> (16 * j)) & 0xFFFF) / 65535.0f;
    out[i] = reference::fromFloat((sum - 2.0f) * 1.7320508f, type);
  }
  return out;
}

/// One stage's candidates on their way through compile, ptxas pruning, numerics and timing:
/// compiled[i], errors[i] and numerics[i] belong to jobs[i]. Owns the loaded bundle.
struct StageRun {
  StageRun(std::string stage, const std::vector<Workload> &all, std::vector<Job> pending)
      : name(std::move(stage)), workloads(all), jobs(std::move(pending)), compiled(jobs.size()),
        errors(jobs.size()), numerics(jobs.size()) {}
  StageRun(const StageRun &) = delete;
  StageRun &operator=(const StageRun &) = delete;
  ~StageRun() {
    if (loaded)
      fagen_bundle_destroy(loaded);
  }

  /// The index of `kernel` in the bundle, or -1.
  int indexOf(const std::string &kernel) const;

  std::string name;
  const std::vector<Workload> &workloads;
  std::vector<Job> jobs;
  std::vector<std::optional<CompiledKernel>> compiled; ///< empty: a compile error
  std::vector<std::string> errors;                     ///< the compile error, or ""
  std::vector<NumericsResult> numerics;
  Bundle bundle;                  ///< the runnable candidates
  fagen_bundle *loaded = nullptr; ///< `bundle`, loaded by the runtime
};

class Tuner {
public:
  Tuner(const TuneOptions &options, const DriverApi &api, const Gpu &gpu,
        const Toolchain &toolchain, TuningDb &db, Validators validators)
      : Opt(options), Api(api), Device(gpu), Tc(toolchain), Db(db),
        Current(std::move(validators)), Log(isatty(STDERR_FILENO)) {}

  ~Tuner() {
    for (CUevent e : Events)
      Api.cuEventDestroy(e);
    if (FlushBuffer)
      Api.cuMemFree(FlushBuffer);
  }

  /// Both stages over every workload; an exit code.
  int run(const std::vector<Workload> &workloads);

private:
  int runStage(const std::string &stage, const std::vector<Workload> &workloads,
               std::vector<Job> jobs);
  void compileCandidates(StageRun &s);
  int recordUnrunnable(StageRun &s, std::vector<size_t> &runnable);
  int loadCandidates(StageRun &s, const std::vector<size_t> &runnable);
  std::optional<CudaFailure> checkNumerics(StageRun &s, size_t i, std::string &failure);
  int gateNumerics(StageRun &s, const std::vector<size_t> &runnable,
                   std::vector<size_t> &passing);
  int timeCandidates(const StageRun &s, const std::vector<size_t> &passing);
  int timeBucket(const StageRun &s, size_t wi, size_t b, const std::vector<size_t> &here);
  std::string makeInputSets(const Workload &w, size_t b, DeviceMemory &memory,
                            std::vector<InputSet> &sets);
  int recordTiming(const StageRun &s, size_t i, size_t b, TimingOutcome t, double flops);
  std::vector<Job> pendingJobs(const std::vector<Workload> &workloads, size_t wi,
                               const std::vector<Candidate> &candidates,
                               const std::vector<size_t> &buckets, unsigned &resumed) const;
  bool matches(const TuningRecord &r) const {
    return Opt.allowMismatch ? r.validators.sameGpu(Current) : r.validators == Current;
  }
  TuningRecord makeRecord(const Workload &w, size_t bucket, const Job &job,
                          RecordStatus status) const;
  /// One record of job i per bucket it still has to be measured on; `kernel` adds its ptxas
  /// report.
  std::vector<TuningRecord> jobRecords(const StageRun &s, size_t i, RecordStatus status,
                                       const std::string &detail,
                                       const CompiledKernel *kernel) const;
  /// Appends to the database; false (after printing why) when it cannot be written.
  bool record(std::vector<TuningRecord> records);
  int setUpTiming();
  TimingOutcome timeCandidate(const fagen_bundle *bundle, int index,
                              const fagen_fwd_problem &problem,
                              const std::vector<InputSet> &sets);
  int finish(const std::vector<Workload> &workloads);

  const TuneOptions &Opt;
  const DriverApi &Api;
  Gpu Device;
  Toolchain Tc;
  TuningDb &Db;
  Validators Current;
  Progress Log;
  CUdeviceptr FlushBuffer = 0;
  size_t FlushBytes = 0;
  static constexpr size_t kWorkspaceBytes = 256; ///< after the flush bytes
  void *workspace(const fagen_plan &plan) const {
    return plan.workspace_bytes == 0 || plan.workspace_bytes > kWorkspaceBytes
               ? nullptr
               : reinterpret_cast<void *>(uintptr_t(FlushBuffer + FlushBytes));
  }
  std::vector<CUevent> Events; ///< 2 per timed run: start, stop
  bool DbFailed = false;
};

TuningRecord Tuner::makeRecord(const Workload &w, size_t bucket, const Job &job,
                               RecordStatus status) const {
  TuningRecord r;
  r.workload = w.key;
  r.bucket = w.buckets[bucket];
  r.config = job.candidate.config;
  r.kernel = job.candidate.plan.name;
  r.stage = job.candidate.stage;
  r.status = status;
  r.validators = Current;
  r.date = utcNow();
  return r;
}

bool Tuner::record(std::vector<TuningRecord> records) {
  if (llvm::Error err = Db.append(records)) {
    Log.note("fagen tune: " + llvm::toString(std::move(err)));
    DbFailed = true;
    return false;
  }
  return true;
}

std::vector<Job> Tuner::pendingJobs(const std::vector<Workload> &workloads, size_t wi,
                                    const std::vector<Candidate> &candidates,
                                    const std::vector<size_t> &buckets,
                                    unsigned &resumed) const {
  const Workload &w = workloads[wi];
  std::vector<Job> jobs;
  for (const Candidate &c : candidates) {
    Job job{wi, c, {}};
    for (size_t b : buckets) {
      if (Db.find(w.key, w.buckets[b], c.config, Current, Opt.allowMismatch))
        ++resumed;
      else
        job.buckets.push_back(b);
    }
    if (!job.buckets.empty())
      jobs.push_back(std::move(job));
  }
  return jobs;
}

int Tuner::setUpTiming() {
  FlushBytes = std::max(kMinFlushBytes, size_t(Device.l2Bytes) * 4);
  // The flush buffer, then kWorkspaceBytes for the forward workspace of kernels with a tile
  // counter (timed as callers with a workspace run them).
  if (CUresult r = Api.cuMemAlloc(&FlushBuffer, FlushBytes + kWorkspaceBytes);
      r != CUDA_SUCCESS) {
    FlushBuffer = 0;
    llvm::errs() << "fagen tune: " << cudaErrorText(Api, r, "cuMemAlloc")
                 << " (L2 flush buffer of " << (FlushBytes >> 20) << " MB)\n";
    return kExitRejected;
  }
  Events.resize(2 * size_t(Opt.runs));
  for (CUevent &e : Events)
    if (CUresult r = Api.cuEventCreate(&e, CU_EVENT_DEFAULT); r != CUDA_SUCCESS) {
      e = nullptr;
      Events.erase(std::remove(Events.begin(), Events.end(), nullptr), Events.end());
      llvm::errs() << "fagen tune: " << cudaErrorText(Api, r, "cuEventCreate") << "\n";
      return kExitRejected;
    }
  return kExitOk;
}

#define FAGEN_TUNE_CU(call)                                                                        \
  do {                                                                                             \
    CUresult rc_ = (call);                                                                         \
    if (rc_ != CUDA_SUCCESS) {                                                                     \
      out.kind = TimingOutcome::CudaError;                                                         \
      out.message = cudaErrorText(Api, rc_, #call);                                                \
      return out;                                                                                  \
    }                                                                                              \
  } while (0)

TimingOutcome Tuner::timeCandidate(const fagen_bundle *bundle, int index,
                                   const fagen_fwd_problem &problem,
                                   const std::vector<InputSet> &sets) {
  TimingOutcome out;
  fagen_plan plan;
  if (fagen_status st = fagen_plan_forward_kernel(bundle, &problem, index, &plan);
      st != FAGEN_OK) {
    out.kind = TimingOutcome::LaunchFailed;
    out.message = std::string("plan: ") + fagen_status_name(st) + ": " + fagen_last_error();
    return out;
  }
  // Everything goes to the legacy default stream (null): the flush, the events and the
  // launches are ordered, and the host never waits inside the loop, so the GPU always has the
  // next launch queued when an event fires. The flush lies outside each start/stop pair.
  CUstream stream = nullptr;
  auto launch = [&](unsigned i) {
    const InputSet &s = sets[i % sets.size()];
    return fagen_run_forward_with_workspace(
        &plan, reinterpret_cast<const void *>(s.q), reinterpret_cast<const void *>(s.k),
        reinterpret_cast<const void *>(s.v), reinterpret_cast<void *>(s.o),
        reinterpret_cast<float *>(s.lse), workspace(plan), nullptr, stream);
  };
  // Warm-up: Opt.warmup launches, more if they take under Opt.warmupMs (one launch timed to
  // size them; at most 1000).
  unsigned warmup = Opt.warmup;
  if (Opt.warmupMs > 0 && Opt.runs > 0) {
    FAGEN_TUNE_CU(Api.cuEventRecord(Events[0], stream));
    if (fagen_status st = launch(0); st != FAGEN_OK) {
      out.kind = TimingOutcome::LaunchFailed;
      out.message = std::string("run: ") + fagen_status_name(st) + ": " + fagen_last_error();
      FAGEN_TUNE_CU(Api.cuCtxSynchronize());
      return out;
    }
    FAGEN_TUNE_CU(Api.cuEventRecord(Events[1], stream));
    FAGEN_TUNE_CU(Api.cuEventSynchronize(Events[1]));
    float once = 0;
    FAGEN_TUNE_CU(Api.cuEventElapsedTime(&once, Events[0], Events[1]));
    if (once > 0)
      warmup = unsigned(std::min(1000.0, std::max(double(warmup), Opt.warmupMs / once)));
  }
  unsigned total = warmup + Opt.runs;
  for (unsigned i = 0; i < total; ++i) {
    FAGEN_TUNE_CU(Api.cuMemsetD8(FlushBuffer, static_cast<unsigned char>(i), FlushBytes));
    bool timed = i >= warmup;
    unsigned run = i - warmup;
    if (timed)
      FAGEN_TUNE_CU(Api.cuEventRecord(Events[2 * run], stream));
    if (fagen_status st = launch(i); st != FAGEN_OK) {
      out.kind = TimingOutcome::LaunchFailed;
      out.message = std::string("run: ") + fagen_status_name(st) + ": " + fagen_last_error();
      // Drain what was queued; a sticky error shows here.
      FAGEN_TUNE_CU(Api.cuCtxSynchronize());
      return out;
    }
    if (timed)
      FAGEN_TUNE_CU(Api.cuEventRecord(Events[2 * run + 1], stream));
  }
  FAGEN_TUNE_CU(Api.cuEventSynchronize(Events[2 * size_t(Opt.runs) - 1]));
  FAGEN_TUNE_CU(Api.cuCtxSynchronize());
  std::vector<double> ms;
  for (unsigned run = 0; run < Opt.runs; ++run) {
    float t = 0;
    FAGEN_TUNE_CU(Api.cuEventElapsedTime(&t, Events[2 * run], Events[2 * run + 1]));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  out.timings.medianMs = quantile(ms, 0.5);
  out.timings.p10Ms = quantile(ms, 0.1);
  out.timings.p90Ms = quantile(ms, 0.9);
  out.timings.runs = int(Opt.runs);
  return out;
}

/// The two numerics shapes: odd sizes, Sq < Sk and Sq > Sk (causal rows that see no key),
/// both layouts, the workload's GQA ratio.
std::vector<CheckShape> numericsShapes(int groupSize) {
  int g = std::max(1, groupSize);
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

/// Runs candidate i on the numerics shapes into s.numerics[i], keeping for O and LSE the error
/// that comes closest to its limit. A plan or run error of the runtime stops it and lands in
/// `failure`; a CUDA error is returned.
std::optional<CudaFailure> Tuner::checkNumerics(StageRun &s, size_t i, std::string &failure) {
  const Job &job = s.jobs[i];
  int index = s.indexOf(job.candidate.plan.name);
  NumericsResult &n = s.numerics[i];
  n.passed = true;
  double worstO = -1, worstLse = -1;
  std::vector<CheckShape> shapes = numericsShapes(s.workloads[job.workload].groupSize);
  for (size_t si = 0; si < shapes.size(); ++si) {
    CaseOutcome outcome = checkKernelCase(Api, s.loaded, index, s.bundle.kernels[index],
                                          shapes[si], 4321u + unsigned(si));
    if (auto *cuda = std::get_if<CudaFailure>(&outcome))
      return *cuda;
    const CaseResult &c = std::get<CaseResult>(outcome);
    if (!c.failure.empty()) {
      failure = c.failure;
      return std::nullopt;
    }
    double limitO = 2 * c.samePrecision.MaxO + reference::kEpsO;
    double limitLse = 2 * c.samePrecision.MaxLse + reference::kEpsLse;
    if (c.kernel.MaxO / limitO > worstO) {
      worstO = c.kernel.MaxO / limitO;
      n.maxErrorO = c.kernel.MaxO;
      n.limitO = limitO;
    }
    if (c.kernel.MaxLse / limitLse > worstLse) {
      worstLse = c.kernel.MaxLse / limitLse;
      n.maxErrorLse = c.kernel.MaxLse;
      n.limitLse = limitLse;
    }
    n.passed = n.passed && c.passed;
    ++n.shapes;
  }
  return std::nullopt;
}

/// The numerics gate: a candidate may only be timed (and win) if it passes; the others are
/// recorded with why they failed.
int Tuner::gateNumerics(StageRun &s, const std::vector<size_t> &runnable,
                        std::vector<size_t> &passing) {
  Log.begin(s.name + ": numerics", unsigned(runnable.size()));
  for (size_t i : runnable) {
    const std::string &kernel = s.jobs[i].candidate.plan.name;
    const NumericsResult &n = s.numerics[i];
    std::string failure;
    if (std::optional<CudaFailure> cuda = checkNumerics(s, i, failure)) {
      record(jobRecords(s, i, RecordStatus::CudaError, "numerics check: " + cuda->message,
                        nullptr));
      Log.note(cudaErrorNote("checking", kernel, cuda->message, Db.path()));
      return kExitRejected;
    }
    if (failure.empty() && n.passed) {
      passing.push_back(i);
      Log.step(llvm::formatv("{0}: ok (O error {1:e2} <= {2:e2})", kernel, n.maxErrorO, n.limitO)
                   .str());
      continue;
    }
    RecordStatus st = failure.empty() ? RecordStatus::NumericsFailed : RecordStatus::LaunchFailed;
    std::string detail =
        failure.empty() ? llvm::formatv("max |O error| {0:e2} (limit {1:e2}), max |LSE error| "
                                        "{2:e2} (limit {3:e2})",
                                        n.maxErrorO, n.limitO, n.maxErrorLse, n.limitLse)
                              .str()
                        : failure;
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

/// Allocates and fills the rotating input sets of bucket b of `w`: at least kMinInputSets, and
/// together at least 4x the L2, so that a launch does not find its inputs in the L2. Returns
/// the failed CUDA call's text, or "".
std::string Tuner::makeInputSets(const Workload &w, size_t b, DeviceMemory &memory,
                                 std::vector<InputSet> &sets) {
  const ShapeBucket &bucket = w.buckets[b];
  const auto type =
      w.base.dtype == "bf16" ? reference::ElementType::BF16 : reference::ElementType::F16;
  const size_t nQ = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ * w.base.headDimQK;
  const size_t nK = size_t(bucket.batch) * bucket.headsKV * bucket.seqlenK * w.base.headDimQK;
  const size_t nV = size_t(bucket.batch) * bucket.headsKV * bucket.seqlenK * w.base.headDimV;
  const size_t nO = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ * w.base.headDimV;
  const size_t nL = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ;
  const size_t setBytes = 2 * (nQ + nK + nV + nO) + 4 * nL;
  unsigned setCount = unsigned(std::min<size_t>(
      kMaxInputSets,
      std::max<size_t>(kMinInputSets, (size_t(Device.l2Bytes) * 4 + setBytes - 1) / setBytes)));

  sets.resize(setCount);
  std::vector<uint16_t> host = randomValues(std::max({nQ, nK, nV}), type, b + 1);
  std::string cudaError;
  for (InputSet &s : sets) {
    for (auto [ptr, bytes] : {std::pair<CUdeviceptr *, size_t>{&s.q, nQ * 2},
                              {&s.k, nK * 2},
                              {&s.v, nV * 2},
                              {&s.o, nO * 2},
                              {&s.lse, nL * 4}})
      if (cudaError.empty())
        if (CUresult r = memory.alloc(*ptr, bytes); r != CUDA_SUCCESS)
          cudaError = cudaErrorText(Api, r, "cuMemAlloc") +
                      llvm::formatv(" ({0} MB of inputs for bucket {1})",
                                    (setBytes * setCount) >> 20, bucket.name)
                          .str();
    if (cudaError.empty())
      for (auto [ptr, n] : {std::pair<CUdeviceptr, size_t>{s.q, nQ}, {s.k, nK}, {s.v, nV}})
        if (CUresult r = Api.cuMemcpyHtoD(ptr, host.data(), n * 2);
            r != CUDA_SUCCESS && cudaError.empty())
          cudaError = cudaErrorText(Api, r, "cuMemcpyHtoD");
  }
  if (cudaError.empty())
    if (CUresult r = Api.cuCtxSynchronize(); r != CUDA_SUCCESS)
      cudaError = cudaErrorText(Api, r, "cuCtxSynchronize");
  return cudaError;
}

/// Records candidate i's timing on bucket b and prints its progress line. A CUDA error ends the
/// run: the context is unusable, so the candidate's remaining buckets are recorded too, so that
/// a resumed run does not fault on it again.
int Tuner::recordTiming(const StageRun &s, size_t i, size_t b, TimingOutcome t, double flops) {
  const Job &job = s.jobs[i];
  const Workload &w = s.workloads[job.workload];
  const std::string &bucket = w.buckets[b].name, &kernel = job.candidate.plan.name;
  std::vector<TuningRecord> out;
  TuningRecord r = makeRecord(w, b, job, RecordStatus::Ok);
  setPtxas(r, *s.compiled[i]);
  r.numerics = s.numerics[i];
  std::string status;
  if (t.kind == TimingOutcome::Measured) {
    t.timings.tflops = flops / (t.timings.medianMs * 1e-3) / 1e12;
    r.timings = t.timings;
    status = timingStatus(bucket, kernel, t.timings);
    out.push_back(std::move(r));
  } else {
    r.status = t.kind == TimingOutcome::LaunchFailed ? RecordStatus::LaunchFailed
                                                     : RecordStatus::CudaError;
    r.detail = t.message;
    status = bucket + " " + kernel + ": " + statusName(r.status);
    out.push_back(std::move(r));
    if (t.kind == TimingOutcome::CudaError)
      for (size_t later : job.buckets)
        if (later > b) {
          TuningRecord rest = makeRecord(w, later, job, RecordStatus::CudaError);
          rest.detail = "not measured: the context failed on bucket " + bucket;
          out.push_back(std::move(rest));
        }
  }
  if (!record(std::move(out)))
    return kExitToolchain;
  Log.step(status);
  if (t.kind != TimingOutcome::CudaError)
    return kExitOk;
  Log.note(cudaErrorNote("timing", kernel, t.message, Db.path()));
  return kExitRejected;
}

/// Times the candidates `here` (of workload wi) on bucket b, all on one set of input buffers.
int Tuner::timeBucket(const StageRun &s, size_t wi, size_t b, const std::vector<size_t> &here) {
  const Workload &w = s.workloads[wi];
  const ShapeBucket &bucket = w.buckets[b];
  const bool causal = w.base.mask == "causal";
  const CheckShape shape{bucket.batch, bucket.headsQ, bucket.headsKV, bucket.seqlenQ,
                         bucket.seqlenK, /*bhsd=*/false};
  const fagen_fwd_problem problem =
      forwardProblem(w.base.dtype, w.base.headDimQK, w.base.headDimV, causal, shape);

  DeviceMemory memory(Api);
  std::vector<InputSet> sets;
  if (std::string cudaError = makeInputSets(w, b, memory, sets); !cudaError.empty()) {
    Log.note("fagen tune: " + cudaError);
    return kExitRejected;
  }
  const double flops = forwardFlops(bucket, w.base.headDimQK, causal);
  for (size_t i : here) {
    TimingOutcome t =
        timeCandidate(s.loaded, s.indexOf(s.jobs[i].candidate.plan.name), problem, sets);
    if (int rc = recordTiming(s, i, b, std::move(t), flops))
      return rc;
  }
  return kExitOk;
}

/// Times the candidates that passed, bucket by bucket: one set of input buffers per bucket,
/// every candidate of the bucket on it.
int Tuner::timeCandidates(const StageRun &s, const std::vector<size_t> &passing) {
  unsigned total = 0;
  for (size_t i : passing)
    total += unsigned(s.jobs[i].buckets.size());
  Log.begin(s.name + ": timing", total);
  for (size_t wi = 0; wi < s.workloads.size(); ++wi) {
    for (size_t b = 0; b < s.workloads[wi].buckets.size(); ++b) {
      std::vector<size_t> here;
      for (size_t i : passing) {
        const std::vector<size_t> &buckets = s.jobs[i].buckets;
        if (s.jobs[i].workload == wi &&
            std::find(buckets.begin(), buckets.end(), b) != buckets.end())
          here.push_back(i);
      }
      if (here.empty())
        continue;
      if (int rc = timeBucket(s, wi, b, here))
        return rc;
    }
  }
  return kExitOk;
}

/// One stage: compile the jobs' candidates, prune by ptxas, gate by numerics, time the rest.
/// Every outcome is recorded as soon as it is known.
int Tuner::runStage(const std::string &stage, const std::vector<Workload> &workloads,
                    std::vector<Job> jobs) {
  if (jobs.empty())
    return kExitOk;
  StageRun s(stage, workloads, std::move(jobs));
  compileCandidates(s);
  std::vector<size_t> runnable;
  if (int rc = recordUnrunnable(s, runnable))
    return rc;
  if (runnable.empty())
    return kExitOk;
  if (int rc = loadCandidates(s, runnable))
    return rc;
  std::vector<size_t> passing;
  if (int rc = gateNumerics(s, runnable, passing))
    return rc;
  return timeCandidates(s, passing);
}

int Tuner::run(const std::vector<Workload> &workloads) {
  if (int rc = setUpTiming())
    return rc;

  // Stage 1: the tile grid with the exact softmax, every bucket.
  std::vector<Job> jobs;
  unsigned resumed = 0, measurements = 0;
  for (size_t wi = 0; wi < workloads.size(); ++wi) {
    const Workload &w = workloads[wi];
    unsigned pruned = 0;
    std::vector<Candidate> candidates = tileCandidates(w.base, searchSpaceFor(w.base), &pruned);
    std::vector<size_t> buckets;
    for (size_t b = 0; b < w.buckets.size(); ++b)
      buckets.push_back(b);
    measurements += unsigned(candidates.size() * buckets.size());
    Log.note(llvm::formatv("{0}: {1} tile candidates ({2} of the grid refused by the planner's "
                           "checks), {3} buckets",
                           w.key, candidates.size(), pruned, buckets.size())
                 .str());
    std::vector<Job> more = pendingJobs(workloads, wi, candidates, buckets, resumed);
    jobs.insert(jobs.end(), more.begin(), more.end());
  }
  if (resumed)
    Log.note(llvm::formatv("stage tile: {0} of {1} measurements already in {2} (resumed)",
                           resumed, measurements, Db.path())
                 .str());
  if (int rc = runStage("tile", workloads, std::move(jobs)))
    return rc;

  // Stage 2: rescaling threshold and exp2 emulation on each bucket's best tiles.
  jobs.clear();
  resumed = measurements = 0;
  for (size_t wi = 0; wi < workloads.size(); ++wi) {
    const Workload &w = workloads[wi];
    for (size_t b = 0; b < w.buckets.size(); ++b) {
      std::vector<const TuningRecord *> tileRecords;
      for (const TuningRecord &r : Db.records())
        if (r.workload == w.key && r.bucket == w.buckets[b] && r.stage == "tile" && matches(r))
          tileRecords.push_back(&r);
      const SearchSpace space = searchSpaceFor(w.base);
      std::vector<TuneConfig> tiles = bestTiles(tileRecords, space.softmaxTiles);
      std::vector<Candidate> candidates = softmaxCandidates(w.base, space, tiles);
      measurements += unsigned(candidates.size());
      std::vector<Job> more = pendingJobs(workloads, wi, candidates, {b}, resumed);
      // Merge with the same candidate pending on another bucket: one compile, one check.
      for (Job &job : more) {
        auto same = std::find_if(jobs.begin(), jobs.end(), [&](const Job &j) {
          return j.workload == wi && j.candidate.config == job.candidate.config;
        });
        if (same == jobs.end())
          jobs.push_back(std::move(job));
        else
          same->buckets.push_back(b);
      }
    }
  }
  if (resumed)
    Log.note(llvm::formatv("stage softmax: {0} of {1} measurements already in {2} (resumed)",
                           resumed, measurements, Db.path())
                 .str());
  if (int rc = runStage("softmax", workloads, std::move(jobs)))
    return rc;
  return finish(workloads);
}

int Tuner::finish(const std::vector<Workload> &workloads) {
  std::vector<TuningRecord> shown;
  std::map<std::string, TuneConfig> defaults;
  for (const Workload &w : workloads) {
    defaults[w.key] = configOf(w.base);
    for (const TuningRecord &r : Db.records())
      if (r.workload == w.key && matches(r) &&
          std::find(w.buckets.begin(), w.buckets.end(), r.bucket) != w.buckets.end())
        shown.push_back(r);
  }
  llvm::outs() << "\n" << formatSummary(shown, defaults);
  llvm::outs().flush();
  if (!Opt.reportPath.empty()) {
    std::string svg = renderSvgReport(
        latestRecords(shown), defaults,
        llvm::formatv("fagen tune: {0} on {1}", Opt.specPath, Current.gpu).str());
    if (llvm::Error err = writeFileAtomically(Opt.reportPath, svg)) {
      llvm::errs() << "fagen tune: " << llvm::toString(std::move(err)) << "\n";
      return kExitToolchain;
    }
    llvm::errs() << "fagen tune: wrote " << Opt.reportPath << "\n";
  }
  int rc = kExitOk;
  for (const Workload &w : workloads) {
    std::map<std::string, TuningRecord> best =
        Db.winners(w.key, [&](const TuningRecord &r) {
          return matches(r) &&
                 std::find(w.buckets.begin(), w.buckets.end(), r.bucket) != w.buckets.end();
        });
    for (const ShapeBucket &b : w.buckets)
      if (!best.count(b.name)) {
        llvm::errs() << "fagen tune: no candidate of " << w.key << " passed in bucket " << b.name
                     << ": see the records in " << Db.path() << "\n";
        rc = kExitRejected;
      }
  }
  llvm::errs() << "fagen tune: " << Db.path() << " holds " << Db.records().size()
               << " records; build with them: fagen build " << Opt.specPath << " --tuning "
               << Db.path() << "\n";
  return rc;
}

/// The workloads of the spec, one per canonical key (the first plan of each is its base).
/// Whether `fagen tune` can time this kernel: a dense forward (the timing launches through
/// forwardProblem, which knows no variant's run-time arguments).
bool isTunable(const KernelPlan &p) {
  return p.pass == "fwd" && (p.mask == "none" || p.mask == "causal") &&
         p.maskAlign == "bottom_right" && p.scoreMod == "none" && !p.dropout && !p.varlen &&
         p.sparsity == "none";
}

llvm::Expected<std::vector<Workload>> planWorkloads(const TuneOptions &opt) {
  llvm::Expected<AttentionSpec> spec = parseSpecFile(opt.specPath);
  if (!spec)
    return spec.takeError();
  std::vector<std::string> archs;
  for (const std::string &a : opt.archs) {
    llvm::Expected<std::string> c = canonicalArch(a);
    if (!c)
      return c.takeError();
    archs.push_back(*c);
  }
  // One default per workload: the candidates are measured against it, not against the
  // planner's built-in seqlen buckets.
  llvm::Expected<std::vector<KernelPlan>> plans =
      planKernels(*spec, archs, nullptr, /*builtinBuckets=*/false);
  if (!plans)
    return plans.takeError();
  std::vector<int> seqlens = opt.seqlens.empty() ? defaultBucketSeqlens() : opt.seqlens;
  std::vector<Workload> out;
  std::set<std::string> untuned;
  for (const KernelPlan &p : *plans) {
    std::string key = workloadKey(p);
    if (!isTunable(p)) {
      untuned.insert(key);
      continue;
    }
    if (!opt.kernelFilter.empty() && p.name.find(opt.kernelFilter) == std::string::npos &&
        key.find(opt.kernelFilter) == std::string::npos)
      continue;
    if (std::any_of(out.begin(), out.end(), [&](const Workload &w) { return w.key == key; }))
      continue;
    Workload w;
    w.key = key;
    w.base = p;
    w.groupSize = groupSizeOf(p, *spec);
    w.buckets = makeBuckets(seqlens, p.headDimQK, w.groupSize);
    out.push_back(std::move(w));
  }
  for (const std::string &key : untuned)
    llvm::errs() << "fagen tune: not tuned (keeps the planner's defaults): " << key
                 << ": only dense forward kernels are tuned so far\n";
  return out;
}

/// The workloads this GPU runs; the others are named on stderr.
llvm::Expected<std::vector<Workload>> runnableWorkloads(std::vector<Workload> all,
                                                        const TuneOptions &opt, const Gpu &gpu) {
  std::vector<Workload> out;
  std::vector<std::string> skipped;
  for (Workload &w : all) {
    if (archRunsOn(w.base.arch, gpu.major, gpu.minor))
      out.push_back(std::move(w));
    else
      skipped.push_back(w.base.name + " (" + w.base.arch + ")");
  }
  std::string gpuArch = llvm::formatv("sm_{0}{1}", gpu.major, gpu.minor).str();
  for (const std::string &s : skipped)
    llvm::errs() << "fagen tune: skipping " << s << ": it does not run on this GPU (" << gpuArch
                 << ")\n";
  if (out.empty())
    return llvm::createStringError(
        std::errc::invalid_argument,
        "nothing to tune in %s on this GPU (%s)%s: tune with --arch %s%s", opt.specPath.c_str(),
        gpuArch.c_str(), opt.kernelFilter.empty() ? "" : " matching --kernel",
        gpuArch.c_str(), gpu.major >= 9 ? (" or --arch " + gpuArch + "a").c_str() : "");
  return out;
}

} // namespace

int runTune(const TuneOptions &opt) {
  if (opt.runs < 1 || opt.runs > 1000) {
    llvm::errs() << "fagen tune: --runs must be in 1..1000, got " << opt.runs << "\n";
    return 2;
  }
  // The spec first: its errors do not need a GPU to be found.
  llvm::Expected<std::vector<Workload>> planned = planWorkloads(opt);
  if (!planned) {
    llvm::errs() << "fagen: " << llvm::toString(planned.takeError()) << "\n";
    return kExitRejected;
  }
  std::string error;
  const DriverApi *api = getDriver(error);
  if (!api) {
    llvm::errs() << "fagen tune: " << error
                 << "\nfagen tune: tuning times kernels on a GPU; run it on the machine (or one "
                    "with the same GPU) that will serve the bundle\n";
    return kExitNoGpu;
  }
  Gpu gpu;
  char name[256] = {0};
  if (CUresult r = api->cuDeviceGet(&gpu.device, 0); r != CUDA_SUCCESS) {
    llvm::errs() << "fagen tune: " << cudaErrorText(*api, r, "cuDeviceGet(0)") << "\n";
    return kExitNoGpu;
  }
  if (CUresult r = api->cuDevicePrimaryCtxRetain(&gpu.context, gpu.device); r != CUDA_SUCCESS) {
    llvm::errs() << "fagen tune: " << cudaErrorText(*api, r, "cuDevicePrimaryCtxRetain") << "\n";
    return kExitNoGpu;
  }
  if (CUresult r = api->cuCtxSetCurrent(gpu.context); r != CUDA_SUCCESS) {
    llvm::errs() << "fagen tune: " << cudaErrorText(*api, r, "cuCtxSetCurrent") << "\n";
    return kExitNoGpu;
  }
  struct {
    int *out;
    int attribute;
    const char *what;
  } queries[] = {{&gpu.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability"},
                 {&gpu.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability"},
                 {&gpu.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count"},
                 {&gpu.l2Bytes, kAttributeL2CacheSize, "L2 size"}};
  for (auto &q : queries)
    if (CUresult r = api->cuDeviceGetAttribute(q.out, q.attribute, gpu.device); r != CUDA_SUCCESS) {
      llvm::errs() << "fagen tune: " << cudaErrorText(*api, r, "cuDeviceGetAttribute") << " ("
                   << q.what << ")\n";
      return kExitNoGpu;
    }
  if (CUresult r = api->cuDeviceGetName(name, sizeof name - 1, gpu.device); r != CUDA_SUCCESS) {
    llvm::errs() << "fagen tune: " << cudaErrorText(*api, r, "cuDeviceGetName") << "\n";
    return kExitNoGpu;
  }
  gpu.name = name;

  llvm::Expected<std::vector<Workload>> workloads =
      runnableWorkloads(std::move(*planned), opt, gpu);
  if (!workloads) {
    llvm::errs() << "fagen tune: " << llvm::toString(workloads.takeError()) << "\n";
    return kExitRejected;
  }
  llvm::Expected<Toolchain> toolchain = findToolchain();
  if (!toolchain) {
    llvm::errs() << "fagen: " << llvm::toString(toolchain.takeError()) << "\n";
    return kExitToolchain;
  }
  llvm::Expected<TuningDb> db = TuningDb::load(opt.dbPath);
  if (!db) {
    std::string message = llvm::toString(db.takeError());
    llvm::errs() << "fagen tune: " << message << "\n";
    return llvm::StringRef(message).starts_with("cannot read") ? kExitToolchain : kExitRejected;
  }

  Validators validators;
  validators.gpu = gpu.name;
  validators.sms = gpu.sms;
  validators.cc = llvm::formatv("{0}.{1}", gpu.major, gpu.minor).str();
  validators.driver =
      llvm::formatv("{0}.{1}", api->driverVersion / 1000, (api->driverVersion % 1000) / 10).str();
  validators.toolchain = toolchain->describe();
  validators.fagen = FAGEN_VERSION_STRING;

  llvm::errs() << llvm::formatv("fagen tune: {0} on {1} ({2} SMs, sm_{3}{4}, {5} MB L2), driver "
                                "{6}, {7}; {8} workload(s); database {9} ({10} records)\n",
                                opt.specPath, gpu.name, gpu.sms, gpu.major, gpu.minor,
                                gpu.l2Bytes >> 20, validators.driver, validators.toolchain,
                                workloads->size(), opt.dbPath, db->records().size());
  for (const Workload &w : *workloads) {
    std::string buckets;
    for (const ShapeBucket &b : w.buckets)
      buckets += llvm::formatv("{0}{1} (B={2} Hq={3} Hkv={4})", buckets.empty() ? "" : ", ",
                               b.name, b.batch, b.headsQ, b.headsKV)
                     .str();
    llvm::errs() << "  " << w.key << " [default " << configOf(w.base).text() << "]: " << buckets
                 << "\n";
  }
  Tuner tuner(opt, *api, gpu, *toolchain, *db, validators);
  return tuner.run(*workloads);
}

} // namespace fagen
