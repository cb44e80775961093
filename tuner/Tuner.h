//===- Tuner.h - `fagen tune`: measure kernel configs on this GPU ---------===//
//
// For every kernel a spec plans (that this GPU can run) and every shape bucket, enumerates the
// template's parameter space (SearchSpace.h, staged), prunes statically and by ptxas, compiles
// the candidates in parallel (through the build cache), checks each candidate's numerics
// against the CPU reference, and times the survivors with CUDA events: warm-up, then many
// launches, each after an L2 flush and on rotating input buffers, reporting median, p10 and p90.
// Every result is appended to the tuning database as soon as it is known, so an interrupted
// run resumes where it stopped. docs/tuning.md describes the search and the database.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_TUNER_H
#define FAGEN_TUNER_TUNER_H

#include "tuner/SearchSpace.h"

#include <string>
#include <vector>

namespace fagen {

struct TuneOptions {
  std::string specPath;
  std::vector<std::string> archs; ///< replaces the spec's targets when non-empty
  std::vector<int> seqlens;       ///< bucket seqlens; empty = defaultBucketSeqlens()
  /// Decode kernels' cache lengths (decodeBuckets); empty = defaultDecodeContexts().
  std::vector<int> decodeContexts;
  std::string dbPath = "tuning.db";
  std::string reportPath;         ///< SVG plot of every candidate; "" = none
  unsigned jobs = 0;              ///< parallel nvcc jobs; 0 = one per core
  unsigned runs = 30;             ///< timed launches per candidate and bucket
  unsigned warmup = 5;            ///< untimed launches before them, at least
  /// ... and at least this much GPU time of them: after the compiles and numerics checks the
  /// GPU's clocks ramp up over tens of milliseconds (H200: the first candidate of a bucket,
  /// warmed by 5 launches, had a 11-13 % p10-p90 spread and lost 6 % to later ones).
  double warmupMs = 100.0;
  /// Resume from records of the same GPU made with another toolchain, driver or fagen.
  bool allowMismatch = false;
  std::string kernelFilter;       ///< only workloads whose default kernel or key contains it
  std::string cacheDir;           ///< compile cache; "" = defaultCacheDir()
};

/// Exit codes: 0 every workload x bucket has a winner; 1 a spec error, a corrupt database, a
/// bucket where no candidate passed, or a CUDA error during measurement (rerun to resume);
/// 3 nvcc missing or the database unwritable; 4 no GPU or no CUDA driver.
int runTune(const TuneOptions &options);

} // namespace fagen

#endif // FAGEN_TUNER_TUNER_H
