//===- Tuner.cpp - `fagen tune`: measure kernel configs on this GPU -------===//

#include "tuner/TunerInternal.h"

namespace fagen {
namespace tuner {

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

/// One stage, forward candidates first, then backward ones, each in a bundle of their own: a
/// backward's numerics check reads O and LSE from a forward kernel of its bundle where one
/// serves the call, and forward candidates are themselves unchecked; without one it takes the
/// float64 reference's, as `fagen check` does.
int Tuner::runStage(const std::string &stage, const std::vector<Workload> &workloads,
                    std::vector<Job> jobs) {
  for (Pass pass : {Pass::Forward, Pass::Backward}) {
    std::vector<Job> part;
    for (Job &job : jobs)
      if (workloads[job.workload].base.pass == pass)
        part.push_back(std::move(job));
    if (int rc = runStageBundle(stage, workloads, std::move(part)))
      return rc;
  }
  return kExitOk;
}

/// One stage's candidates of one bundle: compile them, prune by ptxas, gate by numerics, time
/// the rest. Every outcome is recorded as soon as it is known.
int Tuner::runStageBundle(const std::string &stage, const std::vector<Workload> &workloads,
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
    Log.note(llvm::formatv("{0}: {1} {2} candidates ({3} of the grid refused by the planner's "
                           "checks), {4} buckets",
                           w.key, candidates.size(),
                           isDecodePlan(w.base) ? "split-rule" : "tile", pruned, buckets.size())
                 .str());
    std::vector<Job> more = pendingJobs(workloads, wi, candidates, buckets, resumed);
    jobs.insert(jobs.end(), more.begin(), more.end());
  }
  if (resumed)
    Log.note(llvm::formatv("stage tile: {0} of {1} measurements already in {2} (resumed)",
                           resumed, measurements, Db.path())
                 .str());
  // Decode kernels' split rules apart: the same stage, named for what it searches.
  std::vector<Job> rules;
  for (auto it = jobs.begin(); it != jobs.end();)
    if (isDecodePlan(workloads[it->workload].base)) {
      rules.push_back(std::move(*it));
      it = jobs.erase(it);
    } else {
      ++it;
    }
  if (int rc = runStage("tile", workloads, std::move(jobs)))
    return rc;
  if (int rc = runStage("split", workloads, std::move(rules)))
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
  // A decode kernel's split rule: one config over all its calls (what `fagen build --tuning`
  // takes), against the planner's default rule on the same calls.
  for (const Workload &w : workloads) {
    if (!isDecodePlan(w.base))
      continue;
    auto measuredHere = [&](const TuningRecord &r) {
      return matches(r) &&
             std::find(w.buckets.begin(), w.buckets.end(), r.bucket) != w.buckets.end();
    };
    std::optional<RuleWinner> rule = Db.ruleWinner(w.key, measuredHere);
    if (!rule) {
      llvm::errs() << "fagen tune: no split rule of " << w.key << " passed on all "
                   << w.buckets.size() << " calls: see the records in " << Db.path() << "\n";
      rc = kExitRejected;
      continue;
    }
    const TuneConfig own = configOf(w.base);
    std::optional<RuleWinner> def = Db.ruleWinner(
        w.key, [&](const TuningRecord &r) { return measuredHere(r) && r.config == own; });
    const TuneConfig &c = rule->record.config;
    llvm::outs() << llvm::formatv("{0}: split rule {1}x{2} (CTAs per SM x fewest key tiles a "
                                  "split takes), geometric mean over {3} calls {4:f4} ms",
                                  w.key, c.decodeCtasPerSm, c.decodeMinTiles, rule->buckets,
                                  rule->geomeanMs);
    if (def && def->buckets == rule->buckets)
      llvm::outs() << llvm::formatv("; the default {0}x{1}: {2:f4} ms ({3:f2}x)",
                                    own.decodeCtasPerSm, own.decodeMinTiles, def->geomeanMs,
                                    def->geomeanMs / rule->geomeanMs);
    llvm::outs() << "\n";
  }
  llvm::outs().flush();
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

/// Whether `fagen tune` can time this kernel: a dense forward or backward (deterministic or
/// not; the timing launches through forwardProblem, which knows no variant's run-time
/// arguments), or a decode kernel over a contiguous cache (its split rule, on decodeBuckets).
bool isTunable(const KernelPlan &p) {
  if (isDecodePlan(p)) // its split rule, on a contiguous cache
    return !p.isPaged() && (p.mask == Mask::None || p.mask == Mask::Causal) &&
           p.maskAlign == MaskAlign::BottomRight && p.scoreMod == ScoreMod::None;
  return (p.mask == Mask::None || p.mask == Mask::Causal) &&
         p.maskAlign == MaskAlign::BottomRight && p.scoreMod == ScoreMod::None && !p.dropout &&
         !p.varlen && p.sparsity == Sparsity::None;
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
  std::map<std::string, bool> untuned; ///< key -> a paged decode kernel's
  for (const KernelPlan &p : *plans) {
    std::string key = workloadKey(p);
    if (!isTunable(p)) {
      untuned[key] = isDecodePlan(p) && p.isPaged();
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
    w.buckets = isDecodePlan(p) ? decodeBuckets(opt.decodeContexts.empty()
                                                    ? defaultDecodeContexts()
                                                    : opt.decodeContexts,
                                                w.groupSize)
                                : makeBuckets(seqlens, p.headDimQK, w.groupSize);
    out.push_back(std::move(w));
  }
  for (const auto &[key, pagedDecode] : untuned) {
    if (pagedDecode) {
      llvm::errs() << "fagen tune: not timed: " << key
                   << ": a paged decode kernel takes the split rule tuned for its variant's "
                      "contiguous-cache decode kernel (the same spec without kv_cache: paged), "
                      "else the default\n";
      continue;
    }
    llvm::errs() << "fagen tune: not tuned (keeps the planner's defaults): " << key
                 << ": only dense forward and backward kernels (no mask or a bottom-right causal "
                    "one; no score mod, dropout, varlen or block sparsity) and the split rule of "
                    "decode kernels over a contiguous cache (the same masks) are tuned so far\n";
  }
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

} // namespace tuner

using namespace tuner;

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

