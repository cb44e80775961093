//===- TuningDb.cpp - the tuning database: measured kernel configs --------===//

#include "tuner/TuningDb.h"

#include "core/FileIO.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <regex>
#include <set>
#include <tuple>

namespace fagen {

//===----------------------------------------------------------------------===//
// Value types
//===----------------------------------------------------------------------===//

bool ShapeBucket::operator==(const ShapeBucket &o) const {
  return std::tie(name, seqlenMin, seqlenMax, batch, headsQ, headsKV, seqlenQ, seqlenK) ==
         std::tie(o.name, o.seqlenMin, o.seqlenMax, o.batch, o.headsQ, o.headsKV, o.seqlenQ,
                  o.seqlenK);
}

bool Validators::operator==(const Validators &o) const {
  return std::tie(gpu, sms, cc, driver, toolchain, fagen) ==
         std::tie(o.gpu, o.sms, o.cc, o.driver, o.toolchain, o.fagen);
}

bool Validators::sameGpu(const Validators &o) const {
  return std::tie(gpu, sms, cc) == std::tie(o.gpu, o.sms, o.cc);
}

static const RecordStatus kAllStatuses[] = {
    RecordStatus::Ok,           RecordStatus::Spills,       RecordStatus::CompileError,
    RecordStatus::NumericsFailed, RecordStatus::LaunchFailed, RecordStatus::CudaError};

const char *statusName(RecordStatus status) {
  switch (status) {
  case RecordStatus::Ok:
    return "ok";
  case RecordStatus::Spills:
    return "spills";
  case RecordStatus::CompileError:
    return "compile-error";
  case RecordStatus::NumericsFailed:
    return "numerics-failed";
  case RecordStatus::LaunchFailed:
    return "launch-failed";
  case RecordStatus::CudaError:
    return "cuda-error";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

int recordFormat(const TuningRecord &r) {
  if (r.config.decodeCtasPerSm != 0 || r.config.decodeMinTiles != 0)
    return 4;
  if (r.config.dqWriter)
    return 3;
  return r.numerics && r.numerics->backward ? 2 : 1;
}

llvm::json::Value toJson(const TuningRecord &r) {
  using llvm::json::Object;
  Object bucket{{"name", r.bucket.name},
                {"seqlen_min", r.bucket.seqlenMin},
                {"seqlen_max", r.bucket.seqlenMax >= kSeqlenUnbounded
                                   ? llvm::json::Value(nullptr)
                                   : llvm::json::Value(r.bucket.seqlenMax)},
                {"batch", r.bucket.batch},
                {"heads_q", r.bucket.headsQ},
                {"heads_kv", r.bucket.headsKV},
                {"seqlen_q", r.bucket.seqlenQ},
                {"seqlen_k", r.bucket.seqlenK}};
  const TuneConfig &c = r.config;
  Object config{{"block_m", c.blockM},
                {"block_n", c.blockN},
                {"warps", c.warps},
                {"stages", c.stages},
                {"rescale_tau", c.rescaleTau},
                {"exp2_emu_percent", c.exp2EmuPercent},
                {"exp2_poly_degree", c.exp2PolyDegree},
                {"staged_epilogue", c.stagedEpilogue},
                {"rotate_query_walk", c.rotateQueryWalk},
                {"kernel", r.kernel}};
  if (c.dqWriter)
    config["dq_writer"] = *c.dqWriter;
  if (c.decodeCtasPerSm != 0 || c.decodeMinTiles != 0) {
    config["decode_ctas_per_sm"] = c.decodeCtasPerSm;
    config["decode_min_tiles"] = c.decodeMinTiles;
  }
  const Validators &v = r.validators;
  Object validators{{"gpu", v.gpu},       {"sms", v.sms},
                    {"cc", v.cc},         {"driver", v.driver},
                    {"toolchain", v.toolchain}, {"fagen", v.fagen}};
  Object out{{"format", recordFormat(r)},
             {"workload", r.workload},
             {"bucket", std::move(bucket)},
             {"config", std::move(config)},
             {"stage", r.stage},
             {"status", statusName(r.status)},
             {"validators", std::move(validators)},
             {"resources", Object{{"registers", r.registers}, {"spill_bytes", r.spillBytes}}},
             {"date", r.date}};
  if (r.timings)
    out["timings"] = Object{{"median_ms", r.timings->medianMs},
                            {"p10_ms", r.timings->p10Ms},
                            {"p90_ms", r.timings->p90Ms},
                            {"runs", r.timings->runs},
                            {"tflops", r.timings->tflops}};
  if (r.numerics && r.numerics->backward)
    out["numerics"] = Object{{"max_error_dq", r.numerics->maxErrorDq},
                             {"limit_dq", r.numerics->limitDq},
                             {"max_error_dk", r.numerics->maxErrorDk},
                             {"limit_dk", r.numerics->limitDk},
                             {"max_error_dv", r.numerics->maxErrorDv},
                             {"limit_dv", r.numerics->limitDv},
                             {"shapes", r.numerics->shapes},
                             {"passed", r.numerics->passed}};
  else if (r.numerics)
    out["numerics"] = Object{{"max_error_o", r.numerics->maxErrorO},
                             {"limit_o", r.numerics->limitO},
                             {"max_error_lse", r.numerics->maxErrorLse},
                             {"limit_lse", r.numerics->limitLse},
                             {"shapes", r.numerics->shapes},
                             {"passed", r.numerics->passed}};
  if (!r.detail.empty())
    out["detail"] = r.detail;
  return llvm::json::Value(std::move(out));
}

std::string formatRecordLine(const TuningRecord &record) {
  std::string line;
  llvm::raw_string_ostream os(line);
  os << toJson(record); // llvm::json prints object keys sorted
  return line;
}

namespace {

/// Reads typed fields out of a JSON object; the first problem is kept, naming the key path.
class FieldReader {
public:
  FieldReader(const llvm::json::Object &object, std::string prefix, std::string &error)
      : Obj(object), Prefix(std::move(prefix)), Error(error) {}

  const llvm::json::Object *object(llvm::StringRef key) {
    const llvm::json::Object *o = Obj.getObject(key);
    if (!o)
      fail(key, "an object");
    return o;
  }
  std::string string(llvm::StringRef key) {
    if (std::optional<llvm::StringRef> s = Obj.getString(key))
      return s->str();
    fail(key, "a string");
    return "";
  }
  int64_t integer(llvm::StringRef key) {
    if (std::optional<int64_t> i = Obj.getInteger(key))
      return *i;
    fail(key, "an integer");
    return 0;
  }
  /// An integer, or null for `nullValue`.
  int64_t integerOrNull(llvm::StringRef key, int64_t nullValue) {
    const llvm::json::Value *v = Obj.get(key);
    if (v && v->kind() == llvm::json::Value::Null)
      return nullValue;
    return integer(key);
  }
  double number(llvm::StringRef key) {
    if (std::optional<double> d = Obj.getNumber(key))
      return *d;
    fail(key, "a number");
    return 0;
  }
  bool boolean(llvm::StringRef key) {
    if (std::optional<bool> b = Obj.getBoolean(key))
      return *b;
    fail(key, "true or false");
    return false;
  }

private:
  void fail(llvm::StringRef key, const char *what) {
    if (!Error.empty())
      return;
    Error = llvm::formatv("'{0}{1}' must be {2}{3}", Prefix, key, what,
                          Obj.get(key) ? "" : " (missing)")
                .str();
  }
  const llvm::json::Object &Obj;
  std::string Prefix;
  std::string &Error;
};

llvm::Expected<TuningRecord> recordFromJson(const llvm::json::Value &value) {
  const llvm::json::Object *obj = value.getAsObject();
  if (!obj)
    return llvm::createStringError(std::errc::invalid_argument, "a record must be a JSON object");
  std::string error;
  FieldReader top(*obj, "", error);
  int64_t format = top.integer("format");
  if (error.empty() && (format < 1 || format > kTuningDbFormat))
    return llvm::createStringError(std::errc::invalid_argument,
                                   "record format %lld, this fagen reads formats 1 to %d: re-tune "
                                   "with this fagen into a new database",
                                   (long long)format, kTuningDbFormat);
  TuningRecord r;
  r.workload = top.string("workload");
  r.stage = top.string("stage");
  r.date = top.string("date");
  std::string status = top.string("status");
  if (const llvm::json::Value *d = obj->get("detail")) {
    if (std::optional<llvm::StringRef> s = d->getAsString())
      r.detail = s->str();
    else if (error.empty())
      error = "'detail' must be a string";
  }
  if (const llvm::json::Object *b = top.object("bucket")) {
    FieldReader f(*b, "bucket.", error);
    r.bucket.name = f.string("name");
    r.bucket.seqlenMin = f.integer("seqlen_min");
    r.bucket.seqlenMax = f.integerOrNull("seqlen_max", kSeqlenUnbounded);
    r.bucket.batch = int(f.integer("batch"));
    r.bucket.headsQ = int(f.integer("heads_q"));
    r.bucket.headsKV = int(f.integer("heads_kv"));
    r.bucket.seqlenQ = int(f.integer("seqlen_q"));
    r.bucket.seqlenK = int(f.integer("seqlen_k"));
  }
  if (const llvm::json::Object *c = top.object("config")) {
    FieldReader f(*c, "config.", error);
    r.config.blockM = int(f.integer("block_m"));
    r.config.blockN = int(f.integer("block_n"));
    r.config.warps = int(f.integer("warps"));
    r.config.stages = int(f.integer("stages"));
    r.config.rescaleTau = int(f.integer("rescale_tau"));
    r.config.exp2EmuPercent = int(f.integer("exp2_emu_percent"));
    r.config.exp2PolyDegree = int(f.integer("exp2_poly_degree"));
    // Absent in records made before the field existed: those kernels had no staged epilogue.
    r.config.stagedEpilogue = c->get("staged_epilogue") ? f.boolean("staged_epilogue") : false;
    // Absent in records made before the field existed: forward kernels, which never rotate.
    r.config.rotateQueryWalk =
        c->get("rotate_query_walk") ? f.boolean("rotate_query_walk") : false;
    // Only the sm90ws backward's records have it (absent in those made before it existed:
    // the plan's default dQ strategy then).
    if (c->get("dq_writer"))
      r.config.dqWriter = f.boolean("dq_writer");
    // Only a decode kernel's records have its split rule (format 4).
    if (c->get("decode_ctas_per_sm") || c->get("decode_min_tiles")) {
      r.config.decodeCtasPerSm = int(f.integer("decode_ctas_per_sm"));
      r.config.decodeMinTiles = int(f.integer("decode_min_tiles"));
    }
    r.kernel = f.string("kernel");
  }
  if (const llvm::json::Object *v = top.object("validators")) {
    FieldReader f(*v, "validators.", error);
    r.validators.gpu = f.string("gpu");
    r.validators.sms = int(f.integer("sms"));
    r.validators.cc = f.string("cc");
    r.validators.driver = f.string("driver");
    r.validators.toolchain = f.string("toolchain");
    r.validators.fagen = f.string("fagen");
  }
  if (const llvm::json::Object *res = top.object("resources")) {
    FieldReader f(*res, "resources.", error);
    r.registers = int(f.integer("registers"));
    r.spillBytes = int(f.integer("spill_bytes"));
  }
  if (const llvm::json::Object *t = obj->getObject("timings")) {
    FieldReader f(*t, "timings.", error);
    r.timings = Timings{f.number("median_ms"), f.number("p10_ms"), f.number("p90_ms"),
                        int(f.integer("runs")), f.number("tflops")};
  }
  if (const llvm::json::Object *n = obj->getObject("numerics")) {
    FieldReader f(*n, "numerics.", error);
    NumericsResult nr;
    // A backward's record (format 2 or 3) has the gradients' errors instead of O's and LSE's.
    nr.backward = n->get("max_error_dq") != nullptr;
    if (nr.backward) {
      nr.maxErrorDq = f.number("max_error_dq");
      nr.limitDq = f.number("limit_dq");
      nr.maxErrorDk = f.number("max_error_dk");
      nr.limitDk = f.number("limit_dk");
      nr.maxErrorDv = f.number("max_error_dv");
      nr.limitDv = f.number("limit_dv");
    } else {
      nr.maxErrorO = f.number("max_error_o");
      nr.limitO = f.number("limit_o");
      nr.maxErrorLse = f.number("max_error_lse");
      nr.limitLse = f.number("limit_lse");
    }
    nr.shapes = int(f.integer("shapes"));
    nr.passed = f.boolean("passed");
    r.numerics = nr;
  }
  if (!error.empty())
    return llvm::createStringError(std::errc::invalid_argument, "%s", error.c_str());
  bool known = false;
  for (RecordStatus s : kAllStatuses)
    if (status == statusName(s)) {
      r.status = s;
      known = true;
    }
  if (!known)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "unknown status '%s': expected ok, spills, compile-error, "
                                   "numerics-failed, launch-failed or cuda-error",
                                   status.c_str());
  if (r.status == RecordStatus::Ok && !r.timings)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "an 'ok' record must have 'timings'");
  return r;
}

} // namespace

llvm::Expected<TuningRecord> parseRecordLine(llvm::StringRef line) {
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(line);
  if (!value)
    return value.takeError();
  return recordFromJson(*value);
}

//===----------------------------------------------------------------------===//
// The database
//===----------------------------------------------------------------------===//

namespace {

/// "PATH:LINE:COL: error: MESSAGE" for a line of the database. llvm::json's syntax errors
/// carry "[1:COL, byte=N]: MESSAGE", which gives the column.
llvm::Error lineError(const std::string &name, size_t lineNo, llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  int col = 1;
  std::smatch m;
  if (std::regex_search(message, m, std::regex(R"(^\[(\d+):(\d+), byte=\d+\]: )"))) {
    col = std::stoi(m[2]);
    message = "invalid JSON: " + m.suffix().str();
  }
  return llvm::createStringError(
      std::errc::invalid_argument,
      "%s:%zu:%d: error: %s (one JSON record per line; fix or delete the line, or start a new "
      "database with -o)",
      name.c_str(), lineNo, col, message.c_str());
}

} // namespace

llvm::Expected<TuningDb> TuningDb::parse(llvm::StringRef text, const std::string &name) {
  TuningDb db;
  db.Path = name;
  size_t lineNo = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    ++lineNo;
    if (line.trim().empty())
      continue;
    llvm::Expected<TuningRecord> record = parseRecordLine(line);
    if (!record)
      return lineError(name, lineNo, record.takeError());
    db.Records.push_back(std::move(*record));
  }
  return db;
}

llvm::Expected<TuningDb> TuningDb::load(const std::string &path) {
  if (!llvm::sys::fs::exists(path)) {
    TuningDb db;
    db.Path = path;
    return db;
  }
  std::string text, error;
  if (!readFileBounded(path, kMaxTextFileBytes, ("the tuning database " + path).c_str(), text,
                       error))
    return llvm::createStringError(std::errc::io_error, "%s", error.c_str());
  return parse(text, path);
}

llvm::Error TuningDb::append(llvm::ArrayRef<TuningRecord> records) {
  if (records.empty())
    return llvm::Error::success();
  // Re-read the file rather than re-serializing Records: existing lines stay byte for byte.
  std::string bytes, error;
  if (llvm::sys::fs::exists(Path) &&
      !readFileBounded(Path, kMaxTextFileBytes, ("the tuning database " + Path).c_str(), bytes,
                       error))
    return llvm::createStringError(std::errc::io_error, "%s", error.c_str());
  if (!bytes.empty() && bytes.back() != '\n')
    bytes += '\n'; // a hand-edited last line without its newline
  for (const TuningRecord &r : records)
    bytes += formatRecordLine(r) + "\n";
  if (llvm::Error err = writeFileAtomically(Path, bytes))
    return err;
  Records.insert(Records.end(), records.begin(), records.end());
  return llvm::Error::success();
}

const TuningRecord *TuningDb::find(const std::string &workload, const ShapeBucket &bucket,
                                   const TuneConfig &config, const Validators &validators,
                                   bool ignoreVersions) const {
  for (auto it = Records.rbegin(); it != Records.rend(); ++it) {
    const TuningRecord &r = *it;
    if (r.workload != workload || !(r.bucket == bucket) || r.config != config)
      continue;
    if (ignoreVersions ? r.validators.sameGpu(validators) : r.validators == validators)
      return &r;
  }
  return nullptr;
}

std::map<std::string, TuningRecord>
TuningDb::winners(const std::string &workload,
                  const std::function<bool(const TuningRecord &)> &accept) const {
  std::map<std::string, TuningRecord> best;
  for (const TuningRecord &r : Records) {
    if (r.workload != workload || r.status != RecordStatus::Ok || !r.timings)
      continue;
    if (accept && !accept(r))
      continue;
    auto it = best.find(r.bucket.name);
    if (it == best.end())
      best.emplace(r.bucket.name, r);
    else if (r.timings->medianMs < it->second.timings->medianMs)
      it->second = r;
  }
  return best;
}

std::optional<RuleWinner>
TuningDb::ruleWinner(const std::string &workload,
                     const std::function<bool(const TuningRecord &)> &accept,
                     std::vector<std::string> *missing) const {
  auto wanted = [&](const TuningRecord &r) {
    return r.workload == workload && (!accept || accept(r));
  };
  // The GPU that measured the workload last: a database may hold several GPUs' runs.
  const TuningRecord *newest = nullptr;
  for (const TuningRecord &r : Records)
    if (wanted(r))
      newest = &r;
  if (missing)
    missing->clear();
  if (!newest)
    return std::nullopt;
  // A bucket is its name and its shape; only buckets where some config passed count.
  auto bucketKey = [](const ShapeBucket &b) {
    return llvm::formatv("{0} (B={1} Hq={2} Hkv={3} Sq={4} Sk={5})", b.name, b.batch, b.headsQ,
                         b.headsKV, b.seqlenQ, b.seqlenK)
        .str();
  };
  std::map<TuneConfig, std::map<std::string, const TuningRecord *>> measured;
  std::set<std::string> buckets;
  for (const TuningRecord &r : Records) {
    if (!wanted(r) || !r.validators.sameGpu(newest->validators) ||
        r.status != RecordStatus::Ok || !r.timings || !(r.timings->medianMs > 0))
      continue;
    const std::string key = bucketKey(r.bucket);
    buckets.insert(key);
    measured[r.config][key] = &r; // the newest record of (config, bucket)
  }
  std::optional<RuleWinner> best;
  const std::map<std::string, const TuningRecord *> *mostComplete = nullptr;
  for (const auto &[config, byBucket] : measured) {
    if (!mostComplete || byBucket.size() > mostComplete->size())
      mostComplete = &byBucket;
    if (byBucket.size() != buckets.size())
      continue; // not measured (or failed) on every bucket
    double logSum = 0;
    const TuningRecord *last = nullptr;
    std::vector<const TuningRecord *> used;
    for (const auto &[bucket, r] : byBucket) {
      logSum += std::log(r->timings->medianMs);
      used.push_back(r);
      if (!last || r > last)
        last = r;
    }
    const double geomean = std::exp(logSum / double(byBucket.size()));
    if (!best || geomean < best->geomeanMs)
      best = RuleWinner{*last, geomean, int(byBucket.size()), std::move(used)};
  }
  if (!best && missing && mostComplete)
    for (const std::string &b : buckets)
      if (!mostComplete->count(b))
        missing->push_back(b);
  return best;
}

std::string ruleProvenance(const RuleWinner &w) {
  const TuningRecord &r = w.record;
  std::string out = llvm::formatv("tuned split rule {0}x{1} over {2} calls on {3} ({4} SMs, cc "
                                  "{5}): geometric mean {6:f3} ms",
                                  r.config.decodeCtasPerSm, r.config.decodeMinTiles, w.buckets,
                                  r.validators.gpu, r.validators.sms, r.validators.cc,
                                  w.geomeanMs)
                        .str();
  if (!r.date.empty())
    out += ", " + r.date;
  return out;
}

std::vector<std::string> TuningDb::workloads() const {
  std::set<std::string> names;
  for (const TuningRecord &r : Records)
    names.insert(r.workload);
  return {names.begin(), names.end()};
}

llvm::Error checkValidators(const TuningRecord &record, const Toolchain &toolchain,
                            const std::string &fagenVersion) {
  std::string want = toolchain.describe() + ", fagen " + fagenVersion;
  std::string have = record.validators.toolchain + ", fagen " + record.validators.fagen;
  if (record.validators.toolchain == toolchain.describe() && record.validators.fagen == fagenVersion)
    return llvm::Error::success();
  return llvm::createStringError(
      std::errc::invalid_argument,
      "tuning record for '%s' bucket %s (kernel %s) was measured with %s; this build uses %s: "
      "re-tune, or pass --tuning-allow-mismatch",
      record.workload.c_str(), record.bucket.name.c_str(), record.kernel.c_str(), have.c_str(),
      want.c_str());
}

std::string provenance(const TuningRecord &r) {
  std::string range = r.bucket.seqlenMax >= kSeqlenUnbounded
                          ? llvm::formatv("{0}..", r.bucket.seqlenMin).str()
                          : llvm::formatv("{0}..{1}", r.bucket.seqlenMin, r.bucket.seqlenMax).str();
  std::string out = llvm::formatv("tuned {0} ({1}) on {2} ({3} SMs, cc {4})", r.bucket.name, range,
                                  r.validators.gpu, r.validators.sms, r.validators.cc)
                        .str();
  if (r.timings)
    out += llvm::formatv(": {0:f3} ms, {1:f1} TFLOP/s", r.timings->medianMs, r.timings->tflops)
               .str();
  if (!r.date.empty())
    out += ", " + r.date;
  return out;
}

} // namespace fagen
