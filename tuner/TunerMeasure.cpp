//===- TunerMeasure.cpp - `fagen tune`: time candidates on rotating inputs ===//

#include "tuner/TunerInternal.h"

namespace fagen {
namespace tuner {

/// The p-quantile (0..1) of sorted values, interpolating between neighbours.
double quantile(const std::vector<double> &sorted, double p) {
  if (sorted.empty())
    return 0;
  double pos = p * double(sorted.size() - 1);
  size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

std::vector<uint16_t> timingInput(size_t n, reference::ElementType type, unsigned bucket,
                                  TimingTensor t) {
  std::vector<uint16_t> out(n);
  const uint64_t seed = (uint64_t(bucket) + 1) * 8 + uint64_t(t);
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
                                   const KernelPlan &candidate, const fagen_fwd_problem &problem,
                                   const std::vector<InputSet> &sets) {
  TimingOutcome out;
  fagen_plan plan;
  const bool backward = candidate.pass == Pass::Backward;
  if (fagen_status st = backward ? fagen_plan_backward_kernel(bundle, &problem,
                                                              candidate.deterministic ? 1 : 0,
                                                              index, &plan)
                                 : fagen_plan_forward_kernel(bundle, &problem, index, &plan);
      st != FAGEN_OK) {
    out.kind = TimingOutcome::LaunchFailed;
    out.message = std::string("plan: ") + fagen_status_name(st) + ": " + fagen_last_error();
    return out;
  }
  // The backward's workspace (dq_accum, D, the dQ semaphores), or a decode's (its splits'
  // partial O and LSE): its size is the candidate's (dq_accum rows are whole query tiles; the
  // split count is the candidate's rule's), so each candidate gets its own.
  const bool decode = isDecodePlan(candidate);
  DeviceMemory scratch(Api);
  CUdeviceptr callWorkspace = 0;
  if ((backward || decode) && plan.workspace_bytes > 0)
    FAGEN_TUNE_CU(scratch.alloc(callWorkspace, plan.workspace_bytes));
  // Everything goes to the legacy default stream (null): the flush, the events and the
  // launches are ordered, and the host never waits inside the loop, so the GPU always has the
  // next launch queued when an event fires. The flush lies outside each start/stop pair.
  CUstream stream = nullptr;
  auto launch = [&](unsigned i) {
    const InputSet &s = sets[i % sets.size()];
    auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void *>(p); };
    if (backward) // _pre, the main kernel and _post, as a caller's call runs them
      return fagen_run_backward(&plan, ptr(s.q), ptr(s.k), ptr(s.v), ptr(s.o),
                                reinterpret_cast<const float *>(s.lse), ptr(s.dout), ptr(s.dq),
                                ptr(s.dk), ptr(s.dv), ptr(callWorkspace), plan.workspace_bytes,
                                nullptr, stream);
    return fagen_run_forward_with_workspace(
        &plan, reinterpret_cast<const void *>(s.q), reinterpret_cast<const void *>(s.k),
        reinterpret_cast<const void *>(s.v), reinterpret_cast<void *>(s.o),
        reinterpret_cast<float *>(s.lse), decode ? ptr(callWorkspace) : workspace(plan),
        plan.workspace_bytes, nullptr, stream);
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


/// The LSE rows a backward reads, as a forward would have written them for inputs of unit
/// variance: log of the keys a row sees (causal: bottom-right aligned) plus 1/2, so that P =
/// exp(S - LSE) stays finite and near its real range.
std::vector<float> plausibleLse(const ShapeBucket &bucket, bool causal) {
  std::vector<float> lse(size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ);
  for (size_t row = 0; row < lse.size(); ++row) {
    int64_t i = int64_t(row % size_t(bucket.seqlenQ));
    int64_t keys = causal ? std::clamp<int64_t>(i + 1 + bucket.seqlenK - bucket.seqlenQ, 1,
                                                bucket.seqlenK)
                          : bucket.seqlenK;
    lse[row] = float(std::log(double(keys)) + 0.5);
  }
  return lse;
}

/// Allocates and fills the rotating input sets of bucket b of `w`: at least kMinInputSets, and
/// together at least 4x the L2, so that a launch does not find its inputs in the L2. A forward
/// reads Q, K, V and writes O and LSE; a backward also reads O, LSE and dO and writes dQ, dK,
/// dV. Returns the failed CUDA call's text, or "".
std::string Tuner::makeInputSets(const Workload &w, size_t b, DeviceMemory &memory,
                                 std::vector<InputSet> &sets) {
  const ShapeBucket &bucket = w.buckets[b];
  const bool backward = w.base.pass == Pass::Backward;
  const auto type =
      w.base.dtype == DType::BF16 ? reference::ElementType::BF16 : reference::ElementType::F16;
  const size_t nQ = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ * w.base.headDimQK;
  const size_t nK = size_t(bucket.batch) * bucket.headsKV * bucket.seqlenK * w.base.headDimQK;
  const size_t nV = size_t(bucket.batch) * bucket.headsKV * bucket.seqlenK * w.base.headDimV;
  const size_t nO = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ * w.base.headDimV;
  const size_t nL = size_t(bucket.batch) * bucket.headsQ * bucket.seqlenQ;
  const size_t gradientBytes = backward ? 2 * (nO + nQ + nK + nV) : 0; // dO, dQ, dK, dV
  const size_t setBytes = 2 * (nQ + nK + nV + nO) + 4 * nL + gradientBytes;
  unsigned setCount = unsigned(std::min<size_t>(
      kMaxInputSets,
      std::max<size_t>(kMinInputSets, (size_t(Device.l2Bytes) * 4 + setBytes - 1) / setBytes)));

  sets.resize(setCount);
  const std::vector<uint16_t> hostQ = timingInput(nQ, type, b, TimingTensor::Q);
  const std::vector<uint16_t> hostK = timingInput(nK, type, b, TimingTensor::K);
  const std::vector<uint16_t> hostV = timingInput(nV, type, b, TimingTensor::V);
  const std::vector<uint16_t> hostO = backward ? timingInput(nO, type, b, TimingTensor::O)
                                               : std::vector<uint16_t>();
  const std::vector<uint16_t> hostDOut =
      backward ? timingInput(nO, type, b, TimingTensor::DOut) : std::vector<uint16_t>();
  std::vector<float> lse = backward ? plausibleLse(bucket, w.base.mask == Mask::Causal)
                                    : std::vector<float>();
  std::string cudaError;
  auto upload = [&](CUdeviceptr ptr, const void *data, size_t bytes) {
    if (!cudaError.empty() || !ptr)
      return;
    if (CUresult r = Api.cuMemcpyHtoD(ptr, data, bytes); r != CUDA_SUCCESS)
      cudaError = cudaErrorText(Api, r, "cuMemcpyHtoD");
  };
  for (InputSet &s : sets) {
    std::vector<std::pair<CUdeviceptr *, size_t>> buffers = {
        {&s.q, nQ * 2}, {&s.k, nK * 2}, {&s.v, nV * 2}, {&s.o, nO * 2}, {&s.lse, nL * 4}};
    if (backward)
      buffers.insert(buffers.end(),
                     {{&s.dout, nO * 2}, {&s.dq, nQ * 2}, {&s.dk, nK * 2}, {&s.dv, nV * 2}});
    for (auto [ptr, bytes] : buffers)
      if (cudaError.empty())
        if (CUresult r = memory.alloc(*ptr, bytes); r != CUDA_SUCCESS)
          cudaError = cudaErrorText(Api, r, "cuMemAlloc") +
                      llvm::formatv(" ({0} MB of inputs for bucket {1})",
                                    (setBytes * setCount) >> 20, bucket.name)
                          .str();
    upload(s.q, hostQ.data(), nQ * 2);
    upload(s.k, hostK.data(), nK * 2);
    upload(s.v, hostV.data(), nV * 2);
    if (backward) {
      upload(s.o, hostO.data(), nO * 2);
      upload(s.dout, hostDOut.data(), nO * 2);
      upload(s.lse, lse.data(), nL * 4);
    }
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
  const bool causal = w.base.mask == Mask::Causal;
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
  // A decode call's few tokens (bottom-right aligned) see every key: no causal halving.
  const double flops =
      passFlops(w.base.pass, bucket, w.base.headDimQK, causal && !isDecodePlan(w.base));
  for (size_t i : here) {
    const KernelPlan &candidate = s.jobs[i].candidate.plan;
    TimingOutcome t = timeCandidate(s.loaded, s.indexOf(candidate.name), candidate, problem, sets);
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

} // namespace tuner
} // namespace fagen
