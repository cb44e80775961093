//===- TuningTable.cpp - a tuning database -> the planner's TuningTable ----===//

#include "tuner/TuningTable.h"

#include "tuner/TuningDb.h"

#include "llvm/ADT/StringExtras.h"
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
  auto sameGpu = [&](const TuningRecord &record) -> llvm::Error {
    if (!gpu.empty() && record.validators.gpu != gpu)
      return llvm::createStringError(
          std::errc::invalid_argument,
          "%s holds winners measured on two GPUs (%s and %s): a bundle is tuned for one; keep "
          "one GPU's records in a database",
          dbPath.c_str(), gpu.c_str(), record.validators.gpu.c_str());
    gpu = record.validators.gpu;
    return llvm::Error::success();
  };
  for (const std::string &workload : db->workloads()) {
    // A decode kernel's split rule: one config over every measured call (ruleWinner), of
    // this toolchain and fagen unless allowed.
    if (isDecodeWorkload(workload)) {
      bool anyMatching = false;
      const TuningRecord *anyOk = nullptr;
      for (const TuningRecord &r : db->records())
        if (r.workload == workload && r.status == RecordStatus::Ok) {
          anyOk = anyOk ? anyOk : &r;
          anyMatching |= matches(r);
        }
      std::vector<std::string> missing;
      std::optional<RuleWinner> rule =
          anyMatching || !allowMismatch ? db->ruleWinner(workload, matches, &missing)
                                        : db->ruleWinner(workload, nullptr, &missing);
      if (!anyOk)
        continue; // no pair passed anywhere: the kernel keeps the default (tune reported it)
      if (!rule && !anyMatching && !allowMismatch) // another toolchain's records only
        return checkValidators(*anyOk, toolchain, FAGEN_VERSION_STRING);
      if (!rule)
        return llvm::createStringError(
            std::errc::invalid_argument,
            "%s: no split rule of '%s' was measured on every call its records hold; the most "
            "complete pair lacks %s: run the same `fagen tune` again (it resumes where it "
            "stopped), or tune into a new database",
            dbPath.c_str(), workload.c_str(), llvm::join(missing, ", ").c_str());
      if (llvm::Error err = sameGpu(rule->record))
        return std::move(err);
      const bool mismatched = std::any_of(rule->used.begin(), rule->used.end(),
                                          [&](const TuningRecord *r) { return !matches(*r); });
      TunedConfig c;
      c.seqlenMin = 1;
      c.seqlenMax = kSeqlenUnbounded;
      c.config = rule->record.config;
      c.provenance = ruleProvenance(*rule) +
                     (mismatched ? " (another toolchain or fagen version: allowed by "
                                   "--tuning-allow-mismatch)"
                                 : "");
      table[workload].push_back(std::move(c));
      continue;
    }
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
      if (llvm::Error err = sameGpu(record))
        return std::move(err);
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
