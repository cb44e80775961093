//===- TuningDb.h - the tuning database: measured kernel configs ----------===//
//
// What `fagen tune` measured, as JSON Lines (one record per line, keys sorted), so that a
// person can read it, grep it and diff it. Append-only: a record is never rewritten; a new
// measurement of the same candidate is a new line, and the newest matching record wins on
// lookup. Every append writes the whole file through a temporary file and a rename, so a
// crash or a full disk never leaves a torn file. One tuner per database at a time. The format
// is documented in docs/tuning.md.
//
// `fagen build --tuning DB` reads the winners(): per workload and shape bucket, the fastest
// record whose candidate passed every check.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_TUNINGDB_H
#define FAGEN_TUNER_TUNINGDB_H

#include "compiler/build/Build.h"
#include "compiler/plan/Plan.h"

#include "compiler/bundle/Bundle.h" // kSeqlenUnbounded: "seqlen_max": null in the database

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fagen {

/// The newest record layout this fagen reads and writes; a record of a newer one is refused on
/// load. 1: forward numerics (O, LSE); 2: also the backward's (dQ, dK, dV); 3: also the sm90ws
/// backward's dQ strategy (config.dq_writer); 4: also a decode kernel's split rule
/// (config.decode_ctas_per_sm, config.decode_min_tiles). A record is
/// written in the oldest layout that holds it (recordFormat), so a database of forward records
/// stays readable by a fagen that knows only layout 1.
constexpr int kTuningDbFormat = 4;

/// One point of a template's parameter space: the planner's KernelConfig.
using TuneConfig = KernelConfig;

/// A range of sequence lengths one tuned kernel serves, and the shape it was measured on.
/// A call is in the bucket when seqlenMin <= max(seqlen_q, seqlen_k) <= seqlenMax, the same
/// rule as KernelPlan::seqlenMin/seqlenMax.
struct ShapeBucket {
  std::string name;                     ///< "s2048"
  int64_t seqlenMin = 1;
  int64_t seqlenMax = kSeqlenUnbounded; ///< inclusive; kSeqlenUnbounded = no upper bound
  int batch = 0, headsQ = 0, headsKV = 0, seqlenQ = 0, seqlenK = 0; ///< the measured shape
  bool operator==(const ShapeBucket &o) const;
};

/// Under what a measurement was made. A record is only reused (resume) or trusted (build)
/// where these match; gpu/sms/cc can only be checked on the GPU, toolchain/fagen at build time.
struct Validators {
  std::string gpu;       ///< "NVIDIA H200"
  int sms = 0;           ///< multiprocessor count
  std::string cc;        ///< compute capability, "9.0"
  std::string driver;    ///< CUDA driver API version, "13.0"
  std::string toolchain; ///< Toolchain::describe(), "nvcc 13.0.88"
  std::string fagen;     ///< FAGEN_VERSION_STRING
  bool operator==(const Validators &o) const;
  bool operator!=(const Validators &o) const { return !(*this == o); }
  /// The same GPU model and configuration (gpu, sms, cc).
  bool sameGpu(const Validators &o) const;
};

/// CUDA-event timings of one candidate on its bucket's shape.
struct Timings {
  double medianMs = 0, p10Ms = 0, p90Ms = 0; ///< percentiles over `runs` timed launches
  int runs = 0;
  double tflops = 0; ///< 4*B*Hq*Sq*Sk*D / median (halved when causal)
};

/// The candidate's numerics check (max over the checked shapes) against the float64 reference:
/// O and LSE of a forward kernel, dQ, dK and dV of a backward one (`backward`).
struct NumericsResult {
  double maxErrorO = 0, limitO = 0;     ///< limit: 2x the same-precision reference + eps
  double maxErrorLse = 0, limitLse = 0;
  int shapes = 0;                       ///< how many shapes were checked
  bool passed = false;
  bool backward = false;                ///< the gradients below, not O and LSE, were checked
  double maxErrorDq = 0, limitDq = 0;
  double maxErrorDk = 0, limitDk = 0;
  double maxErrorDv = 0, limitDv = 0;
};

/// What happened to a candidate. Only Ok records have timings and can win.
enum class RecordStatus {
  Ok,             ///< "ok": checked and timed
  Spills,         ///< "spills": ptxas reports spill bytes; pruned before timing
  CompileError,   ///< "compile-error": nvcc failed (detail holds the first lines)
  NumericsFailed, ///< "numerics-failed": outside the tolerance; never timed
  LaunchFailed,   ///< "launch-failed": the runtime refused to plan or launch it
  CudaError,      ///< "cuda-error": a sticky CUDA error (a fault); the run stopped there
};
const char *statusName(RecordStatus status);

/// One line of the database.
struct TuningRecord {
  std::string workload; ///< canonical: "fwd bf16 hd128x128 causal sm_90a" (workloadKey)
  ShapeBucket bucket;
  TuneConfig config;
  std::string kernel;   ///< the candidate's kernel name (kernelName of its plan)
  std::string stage;    ///< search stage that produced it: "tile" or "softmax"
  RecordStatus status = RecordStatus::Ok;
  Validators validators;
  std::optional<Timings> timings;        ///< Ok records only
  std::optional<NumericsResult> numerics; ///< Ok and NumericsFailed records
  int registers = -1;    ///< from the ptxas report; -1 unknown
  int spillBytes = -1;   ///< spill stores + loads; -1 unknown
  std::string detail;    ///< why it failed, for non-Ok records
  std::string date;      ///< UTC, ISO 8601, when it was measured
};

/// A decode kernel's split rule serves every call, so one config wins over all of a workload's
/// buckets (TuningDb::ruleWinner): `record` is its newest record (its date and validators),
/// `geomeanMs` the geometric mean of its medians over the `buckets` buckets, `used` the records
/// of those medians (pointers into the database).
struct RuleWinner {
  TuningRecord record;
  double geomeanMs = 0;
  int buckets = 0;
  std::vector<const TuningRecord *> used;
};

/// The layout version a record is written in: 4 with a decode split rule, 3 with a dQ
/// strategy, 2 with a backward's numerics, else 1.
int recordFormat(const TuningRecord &record);
/// The record as a JSON object (keys are printed sorted).
llvm::json::Value toJson(const TuningRecord &record);
/// One line of the database, without the newline.
std::string formatRecordLine(const TuningRecord &record);
/// Parses one database line; the error names the missing or mistyped key.
llvm::Expected<TuningRecord> parseRecordLine(llvm::StringRef line);

/// The database: the records of one file, in file order.
class TuningDb {
public:
  /// Reads `path`; a missing file is an empty database. Errors are "PATH:LINE:COL: ..." with
  /// what is wrong, for a line that is not JSON or not a record of this format.
  static llvm::Expected<TuningDb> load(const std::string &path);
  /// Parses database text; `name` stands for the file in errors.
  static llvm::Expected<TuningDb> parse(llvm::StringRef text, const std::string &name);

  /// Appends records to the file (atomically: the current bytes plus the new lines go to a
  /// temporary file that is renamed over the database) and to records(). Existing lines are
  /// kept byte for byte.
  llvm::Error append(llvm::ArrayRef<TuningRecord> records);

  const std::vector<TuningRecord> &records() const { return Records; }
  const std::string &path() const { return Path; }

  /// The newest record of exactly this candidate measurement, or null: same workload, bucket
  /// (name and shape) and config, with validators equal to `validators` -- or, when
  /// `ignoreVersions`, measured on the same GPU (gpu, sms, cc) with any toolchain, driver or
  /// fagen version. This is what makes an interrupted `fagen tune` resume.
  const TuningRecord *find(const std::string &workload, const ShapeBucket &bucket,
                           const TuneConfig &config, const Validators &validators,
                           bool ignoreVersions = false) const;

  /// Per bucket name, the fastest Ok record of `workload` (lowest median; ties: the earlier
  /// record). `accept`, when given, filters the records considered (e.g. by validators).
  /// The caller checks each winner's validators (checkValidators) before trusting it.
  std::map<std::string, TuningRecord>
  winners(const std::string &workload,
          const std::function<bool(const TuningRecord &)> &accept = nullptr) const;

  /// The config of `workload` with the lowest geometric mean of its medians over the buckets
  /// (name and shape) where some accepted Ok record of the GPU that measured the workload last
  /// lies, among the configs measured Ok on every one of them (ties: the first in config
  /// order); none when no config was, and then `missing` (when given) names the buckets the
  /// most complete config lacks. A decode kernel's split rule is chosen this way: it serves
  /// every call, so it must be good across the measured calls, not on one.
  std::optional<RuleWinner>
  ruleWinner(const std::string &workload,
             const std::function<bool(const TuningRecord &)> &accept = nullptr,
             std::vector<std::string> *missing = nullptr) const;

  /// Every workload in the database, sorted.
  std::vector<std::string> workloads() const;

private:
  std::string Path;
  std::vector<TuningRecord> Records;
};

/// Refuses a record measured with another toolchain or fagen version than the build's: the
/// message names the record, the expected and actual versions, and the fix ("re-tune, or pass
/// --tuning-allow-mismatch"). GPU identity is not checked here (see provenance()).
llvm::Error checkValidators(const TuningRecord &record, const Toolchain &toolchain,
                            const std::string &fagenVersion);

/// One line for a bundle's tuning provenance: "tuning.db: s2048 on NVIDIA H200 (132 SMs,
/// cc 9.0), 0.812 ms, 338.5 TFLOP/s, 2026-11-30T10:00:00Z".
std::string provenance(const TuningRecord &record);
/// The same for a decode split rule: "tuned split rule 2x1 over 9 calls on NVIDIA H100 80GB
/// HBM3 (132 SMs, cc 9.0): geometric mean 0.031 ms, 2026-12-07T10:00:00Z".
std::string ruleProvenance(const RuleWinner &winner);

} // namespace fagen

#endif // FAGEN_TUNER_TUNINGDB_H
