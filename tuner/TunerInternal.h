//===- TunerInternal.h - `fagen tune`'s internals (private) ----------------===//
//
// Tuner.cpp drives the stages (plan the workloads, run each stage, write the database);
// TunerCandidates.cpp compiles candidates, prunes them by the ptxas report and gates their
// numerics; TunerMeasure.cpp times them on rotating inputs with CUDA events. Not included
// outside tuner/.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_TUNERINTERNAL_H
#define FAGEN_TUNER_TUNERINTERNAL_H

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
namespace tuner {

constexpr int kExitOk = 0, kExitRejected = 1, kExitToolchain = 3, kExitNoGpu = 4;

/// CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (cuda.h); not in Driver.h's list because only the tuner
/// asks for it.
constexpr int kAttributeL2CacheSize = 38;

/// The L2 flush writes at least this much (the H200's L2 is 60 MB).
constexpr size_t kMinFlushBytes = size_t(256) << 20;

/// Rotating input sets per bucket: at least this many, and together at least 4x the L2.
constexpr unsigned kMinInputSets = 3;
constexpr unsigned kMaxInputSets = 8;

/// "m:ss" (Tuner.cpp).
std::string minutesText(double seconds);

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

/// Q, K, V, O and LSE of one problem; a backward's dO (read) and dQ, dK, dV (written) too.
struct InputSet {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  CUdeviceptr dout = 0, dq = 0, dk = 0, dv = 0;
};

/// How one candidate's timing ended.
struct TimingOutcome {
  enum Kind { Measured, LaunchFailed, CudaError } kind = Measured;
  Timings timings;
  std::string message;
};

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
  int runStageBundle(const std::string &stage, const std::vector<Workload> &workloads,
                     std::vector<Job> jobs);
  void compileCandidates(StageRun &s);
  int recordUnrunnable(StageRun &s, std::vector<size_t> &runnable);
  int loadCandidates(StageRun &s, const std::vector<size_t> &runnable);
  std::optional<CudaFailure> checkNumerics(StageRun &s, size_t i, std::string &failure,
                                           std::string &note);
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
  TimingOutcome timeCandidate(const fagen_bundle *bundle, int index, const KernelPlan &candidate,
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

// TunerMeasure.cpp
/// The timing inputs' tensors, each drawn from its own stream.
enum class TimingTensor { Q, K, V, O, DOut };
/// Pseudo-random values of roughly unit variance (the sum of four uniforms) in the dtype, for
/// tensor `t` of bucket `bucket`: the same on every call, different between tensors, so that
/// S = Q K^T is a product of independent inputs (with K a copy of Q, S's diagonal stood near
/// sqrt(head dim) above the rest, and the forward's conditional rescaling redid most rows:
/// tau-8 candidates took 1.3-1.6x the time of tau 0 at 512-1k tokens on an H100 where
/// bench_fwd.py timed them equal).
std::vector<uint16_t> timingInput(size_t n, reference::ElementType type, unsigned bucket,
                                  TimingTensor t);

// TunerCandidates.cpp
/// Copies the ptxas report of a candidate's kernel into its record.
void setPtxas(TuningRecord &r, const CompiledKernel &kernel);
/// The note that ends a run on a CUDA error: the context may be unusable, so the run stops,
/// and a rerun resumes past the candidate, which is already recorded.
std::string cudaErrorNote(const std::string &doing, const std::string &kernel,
                          const std::string &message, const std::string &dbPath);
/// The progress line of one measured candidate on one bucket.
std::string timingStatus(const std::string &bucket, const std::string &kernel,
                         const Timings &t);
} // namespace tuner
} // namespace fagen

#endif // FAGEN_TUNER_TUNERINTERNAL_H
