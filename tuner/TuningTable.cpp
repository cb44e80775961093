//===- TuningTable.cpp - a tuning database -> the planner's TuningTable ----===//

#include "tuner/TuningTable.h"

#include "tuner/TuningDb.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

namespace fagen {

llvm::Expected<TuningTable> loadTuningTable(const std::string &dbPath, const Toolchain &toolchain,
                                            bool allowMismatch) {
  llvm::Expected<TuningDb> db = TuningDb::load(dbPath);
  if (!db)
    return db.takeError();
  if (db->records().empty())
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s has no tuning records: run `fagen tune` on the target GPU "
                                   "first (it writes the database)",
                                   dbPath.c_str());
  auto matches = [&](const TuningRecord &r) {
    llvm::Error err = checkValidators(r, toolchain, FAGEN_VERSION_STRING);
    bool ok = !err;
    llvm::consumeError(std::move(err));
    return ok;
  };
  TuningTable table;
  std::string gpu;
  for (const std::string &workload : db->workloads()) {
    // Records of this toolchain and fagen first; others only when allowed, and only where no
    // matching record exists for the bucket.
    std::map<std::string, TuningRecord> best = db->winners(workload, matches);
    for (auto &[bucket, record] : db->winners(workload)) {
      if (best.count(bucket))
        continue;
      if (llvm::Error err = checkValidators(record, toolchain, FAGEN_VERSION_STRING)) {
        if (!allowMismatch)
          return err;
        consumeError(std::move(err));
      }
      best.emplace(bucket, record);
    }
    for (auto &[bucket, record] : best) {
      if (!gpu.empty() && record.validators.gpu != gpu)
        return llvm::createStringError(
            std::errc::invalid_argument,
            "%s holds winners measured on two GPUs (%s and %s): a bundle is tuned for one; keep "
            "one GPU's records in a database",
            dbPath.c_str(), gpu.c_str(), record.validators.gpu.c_str());
      gpu = record.validators.gpu;
      std::string note = matches(record) ? "" : " (another toolchain or fagen version: allowed by "
                                                "--tuning-allow-mismatch)";
      TunedConfig c;
      c.seqlenMin = record.bucket.seqlenMin;
      c.seqlenMax = record.bucket.seqlenMax;
      c.config = record.config;
      c.provenance = provenance(record) + note;
      table[workload].push_back(std::move(c));
    }
  }
  for (auto &[workload, configs] : table)
    std::sort(configs.begin(), configs.end(), [](const TunedConfig &a, const TunedConfig &b) {
      return a.seqlenMin < b.seqlenMin;
    });
  return table;
}

} // namespace fagen
