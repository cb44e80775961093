//===- Report.h - the tuner's summary table and SVG plot ------------------===//
//
// Both read tuning records only (no GPU), so the unit tests render them from synthetic
// records. The SVG is written by hand: no plotting dependency.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_REPORT_H
#define FAGEN_TUNER_REPORT_H

#include "tuner/TuningDb.h"

#include <map>
#include <string>
#include <vector>

namespace fagen {

/// The newest record of each (workload, bucket, config), in first-seen order: what a report
/// shows when a candidate was measured more than once.
std::vector<TuningRecord> latestRecords(const std::vector<TuningRecord> &records);

/// A plain-text table, one row per workload x bucket: the default config's TFLOP/s (the
/// planner's choice, `defaults[workload]`), the winner's config and TFLOP/s, and the
/// winner's speedup over the default (default median / winner median).
std::string formatSummary(const std::vector<TuningRecord> &records,
                          const std::map<std::string, TuneConfig> &defaults);

/// An SVG document: one panel per workload (rows) and bucket (columns), one horizontal bar
/// per candidate with its TFLOP/s, sorted fastest first; the winner is marked (orange bar and
/// "winner"), the default config is labelled, and candidates without timings are listed with
/// their status. Every bar has a <title> with the kernel name and timings.
std::string renderSvgReport(const std::vector<TuningRecord> &records,
                            const std::map<std::string, TuneConfig> &defaults,
                            const std::string &title);

} // namespace fagen

#endif // FAGEN_TUNER_REPORT_H
