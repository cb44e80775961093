//===- TuningTable.h - a tuning database -> the planner's TuningTable ------===//
//
// What `fagen build --tuning DB` does with a database: take each workload's winner per shape
// bucket, refuse records made with another toolchain or fagen version (unless allowed), and
// hand the planner one TunedConfig per bucket with its provenance.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_TUNINGTABLE_H
#define FAGEN_TUNER_TUNINGTABLE_H

#include "compiler/build/Build.h"
#include "compiler/plan/Plan.h"

#include "llvm/Support/Error.h"

#include <string>

namespace fagen {

/// Loads `dbPath` and turns its winners into a TuningTable. With `allowMismatch`, records of
/// another toolchain or fagen version are used anyway (their provenance says so).
llvm::Expected<TuningTable> loadTuningTable(const std::string &dbPath, const Toolchain &toolchain,
                                            bool allowMismatch);

} // namespace fagen

#endif // FAGEN_TUNER_TUNINGTABLE_H
