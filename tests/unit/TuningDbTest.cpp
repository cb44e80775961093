//===- TuningDbTest.cpp - tuning database, search space, report -----------===//

#include "tuner/Report.h"
#include "tuner/SearchSpace.h"
#include "tuner/TuningDb.h"
#include "tuner/TuningTable.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cmath>
#include <set>

using namespace fagen;

namespace {

Validators h200() {
  return {"NVIDIA H200", 132, "9.0", "13.0", "nvcc 13.0.88", "0.1.0"};
}

ShapeBucket bucket(const std::string &name, int64_t lo, int64_t hi, int seqlen) {
  ShapeBucket b;
  b.name = name;
  b.seqlenMin = lo;
  b.seqlenMax = hi;
  b.batch = 16384 / seqlen;
  b.headsQ = 16;
  b.headsKV = 16;
  b.seqlenQ = seqlen;
  b.seqlenK = seqlen;
  return b;
}

TuningRecord okRecord(const std::string &bucketName, TuneConfig config, double ms,
                      const std::string &workload = "fwd bf16 hd128x128 causal sm_90a") {
  TuningRecord r;
  r.workload = workload;
  r.bucket = bucketName == "s512"    ? bucket("s512", 1, 1024, 512)
             : bucketName == "s2048" ? bucket("s2048", 1025, 4096, 2048)
                                     : bucket("s8192", 4097, kSeqlenUnbounded, 8192);
  r.config = config;
  r.kernel = "fagen_fwd_bf16_hd128_causal_sm80_" + config.text();
  r.stage = config.rescaleTau == 0 && config.exp2EmuPercent == 0 ? "tile" : "softmax";
  r.status = RecordStatus::Ok;
  r.validators = h200();
  r.timings = Timings{ms, ms * 0.98, ms * 1.03, 30, 100.0 / ms};
  r.numerics = NumericsResult{1e-3, 4e-3, 1e-5, 2e-4, 2, true};
  r.registers = 200;
  r.spillBytes = 0;
  r.date = "2026-11-30T10:00:00Z";
  return r;
}

TuneConfig tile(int m, int n, int w, int s, int tau = 0, int emu = 0) {
  TuneConfig c;
  c.blockM = m;
  c.blockN = n;
  c.warps = w;
  c.stages = s;
  c.rescaleTau = tau;
  c.exp2EmuPercent = emu;
  return c;
}

/// A temporary folder, removed at the end of the test.
struct TempDir {
  llvm::SmallString<128> path;
  TempDir() { EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("fagen-tunedb", path)); }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(const std::string &name) const { return (path + "/" + name).str(); }
};

std::string readAll(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : "";
}

KernelPlan basePlan(int headDim, const std::string &arch = "sm_90a") {
  KernelPlan p;
  p.variant = "v";
  p.pass = Pass::Forward;
  p.arch = arch;
  p.templ = "sm80";
  p.dtype = DType::BF16;
  p.headDimQK = headDim;
  p.headDimV = headDim;
  p.mask = Mask::Causal;
  p.blockM = 128;
  p.blockN = 64;
  p.warps = 4;
  p.stages = 2;
  p.tuning = "default";
  finalizePlan(p);
  return p;
}

//===----------------------------------------------------------------------===//
// The database
//===----------------------------------------------------------------------===//

TEST(TuningDb, RecordRoundTripsWithSortedKeys) {
  TuningRecord r = okRecord("s8192", tile(128, 64, 4, 2, 8, 10), 1.5);
  std::string line = formatRecordLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("{\"bucket\":", 0), 0u) << line; // keys sorted: bucket first
  EXPECT_NE(line.find("\"seqlen_max\":null"), std::string::npos) << line;
  llvm::Expected<TuningRecord> back = parseRecordLine(line);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->workload, r.workload);
  EXPECT_TRUE(back->bucket == r.bucket);
  EXPECT_EQ(back->bucket.seqlenMax, kSeqlenUnbounded);
  EXPECT_TRUE(back->config == r.config);
  EXPECT_EQ(back->kernel, r.kernel);
  EXPECT_EQ(back->stage, "softmax");
  EXPECT_EQ(back->status, RecordStatus::Ok);
  EXPECT_TRUE(back->validators == r.validators);
  ASSERT_TRUE(back->timings && back->numerics);
  EXPECT_DOUBLE_EQ(back->timings->medianMs, 1.5);
  EXPECT_EQ(back->timings->runs, 30);
  EXPECT_TRUE(back->numerics->passed);
  EXPECT_EQ(back->registers, 200);
  EXPECT_EQ(formatRecordLine(*back), line);
}

TEST(TuningDb, StagedEpilogueRoundTripsAndDefaultsToOff) {
  TuningRecord r = okRecord("s2048", tile(128, 128, 8, 2, 0, 0), 1.0);
  r.config.stagedEpilogue = true;
  std::string line = formatRecordLine(r);
  EXPECT_NE(line.find("\"staged_epilogue\":true"), std::string::npos) << line;
  llvm::Expected<TuningRecord> back = parseRecordLine(line);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_TRUE(back->config.stagedEpilogue);
  // Records written before the field existed read as without it.
  std::string old = line;
  old.replace(old.find("\"staged_epilogue\":true,"), std::string("\"staged_epilogue\":true,").size(), "");
  llvm::Expected<TuningRecord> legacy = parseRecordLine(old);
  ASSERT_TRUE(bool(legacy)) << llvm::toString(legacy.takeError()) << old;
  EXPECT_FALSE(legacy->config.stagedEpilogue);
}

/// A backward record: dQ, dK and dV numerics (format 2).
TuningRecord backwardRecord(const std::string &bucketName, TuneConfig config, double ms) {
  TuningRecord r = okRecord(bucketName, config, ms, "bwd bf16 hd128x128 causal sm_90a");
  r.kernel = "fagen_bwd_bf16_hd128_causal_sm90ws_" + config.text();
  r.stage = "tile";
  NumericsResult n;
  n.backward = true;
  n.maxErrorDq = 2e-3, n.limitDq = 8e-3;
  n.maxErrorDk = 3e-3, n.limitDk = 9e-3;
  n.maxErrorDv = 1e-3, n.limitDv = 5e-3;
  n.shapes = 2;
  n.passed = true;
  r.numerics = n;
  return r;
}

TEST(TuningDb, BackwardRecordsRoundTripInFormat2) {
  TuningRecord r = backwardRecord("s2048", tile(64, 128, 8, 1), 2.5);
  std::string line = formatRecordLine(r);
  EXPECT_NE(line.find("\"format\":2"), std::string::npos) << line;
  EXPECT_NE(line.find("\"max_error_dk\":0.003"), std::string::npos) << line;
  EXPECT_EQ(line.find("max_error_o"), std::string::npos) << line;
  llvm::Expected<TuningRecord> back = parseRecordLine(line);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  ASSERT_TRUE(back->numerics);
  EXPECT_TRUE(back->numerics->backward);
  EXPECT_DOUBLE_EQ(back->numerics->maxErrorDq, 2e-3);
  EXPECT_DOUBLE_EQ(back->numerics->limitDv, 5e-3);
  EXPECT_EQ(back->workload, "bwd bf16 hd128x128 causal sm_90a");
  EXPECT_EQ(formatRecordLine(*back), line);
  // The query walk round-trips; a record without the field (made before it existed) reads as
  // not rotated.
  TuningRecord rotated = r;
  rotated.config.rotateQueryWalk = true;
  std::string rotatedLine = formatRecordLine(rotated);
  EXPECT_NE(rotatedLine.find("\"rotate_query_walk\":true"), std::string::npos) << rotatedLine;
  llvm::Expected<TuningRecord> rotatedBack = parseRecordLine(rotatedLine);
  ASSERT_TRUE(bool(rotatedBack)) << llvm::toString(rotatedBack.takeError());
  EXPECT_TRUE(rotatedBack->config.rotateQueryWalk);
  std::string legacy = line;
  legacy.replace(legacy.find("\"rotate_query_walk\":false,"), 26, "");
  llvm::Expected<TuningRecord> legacyBack = parseRecordLine(legacy);
  ASSERT_TRUE(bool(legacyBack)) << llvm::toString(legacyBack.takeError()) << legacy;
  EXPECT_FALSE(legacyBack->config.rotateQueryWalk);
  // The dQ strategy round-trips in format 3 (a fagen that reads format 2 refuses the line
  // instead of building its own strategy); a record without it reads as unset.
  EXPECT_EQ(line.find("dq_writer"), std::string::npos) << line;
  EXPECT_FALSE(back->config.dqWriter.has_value());
  for (bool value : {false, true}) {
    TuningRecord strategy = r;
    strategy.config.dqWriter = value;
    std::string strategyLine = formatRecordLine(strategy);
    EXPECT_NE(strategyLine.find(value ? "\"dq_writer\":true" : "\"dq_writer\":false"),
              std::string::npos)
        << strategyLine;
    EXPECT_NE(strategyLine.find("\"format\":3"), std::string::npos) << strategyLine;
    llvm::Expected<TuningRecord> strategyBack = parseRecordLine(strategyLine);
    ASSERT_TRUE(bool(strategyBack)) << llvm::toString(strategyBack.takeError());
    EXPECT_EQ(strategyBack->config.dqWriter, std::optional<bool>(value));
    EXPECT_EQ(formatRecordLine(*strategyBack), strategyLine);
  }
  // Forward records keep format 1 (a fagen that reads only format 1 still reads them), and a
  // record of a layout newer than this fagen's is refused with the fix.
  std::string forward = formatRecordLine(okRecord("s2048", tile(128, 64, 4, 2), 1.0));
  EXPECT_NE(forward.find("\"format\":1"), std::string::npos) << forward;
  std::string newer = line;
  newer.replace(newer.find("\"format\":2"), 10, "\"format\":5");
  llvm::Expected<TuningRecord> refused = parseRecordLine(newer);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("record format 5, this fagen reads formats "
                                                     "1 to 4: re-tune"),
            std::string::npos);
  // A gradient error missing is named.
  std::string broken = line;
  broken.replace(broken.find("\"limit_dq\""), 10, "\"limit_xx\"");
  llvm::Expected<TuningRecord> missing = parseRecordLine(broken);
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("'numerics.limit_dq' must be a number"),
            std::string::npos);
}

TEST(TuningDb, FailedRecordsRoundTrip) {
  TuningRecord r = okRecord("s512", tile(128, 128, 4, 3), 1);
  r.status = RecordStatus::Spills;
  r.timings.reset();
  r.numerics.reset();
  r.detail = "ptxas: 16 bytes spill stores";
  llvm::Expected<TuningRecord> back = parseRecordLine(formatRecordLine(r));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->status, RecordStatus::Spills);
  EXPECT_FALSE(back->timings);
  EXPECT_EQ(back->detail, r.detail);
  EXPECT_EQ(back->bucket.seqlenMax, 1024);
}

TEST(TuningDb, AppendIsAtomicAndKeepsExistingLinesVerbatim) {
  TempDir dir;
  std::string path = dir.file("tuning.db");
  // A hand-formatted existing line (spaces, other key order) stays byte for byte.
  std::string existing = formatRecordLine(okRecord("s512", tile(128, 64, 4, 2), 2.0));
  existing.insert(1, " ");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << existing << "\n";
  }
  llvm::Expected<TuningDb> db = TuningDb::load(path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  ASSERT_EQ(db->records().size(), 1u);
  ASSERT_FALSE(bool(db->append({okRecord("s512", tile(64, 64, 4, 2), 1.0),
                                okRecord("s2048", tile(64, 64, 4, 2), 3.0)})));
  EXPECT_EQ(db->records().size(), 3u);
  std::string text = readAll(path);
  EXPECT_EQ(text.rfind(existing + "\n", 0), 0u);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  // Nothing but the database is left in the folder (the temporary file was renamed).
  std::error_code ec;
  unsigned files = 0;
  for (llvm::sys::fs::directory_iterator it(dir.path, ec), end; it != end && !ec;
       it.increment(ec))
    ++files;
  EXPECT_EQ(files, 1u);
  llvm::Expected<TuningDb> again = TuningDb::load(path);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->records().size(), 3u);
}

TEST(TuningDb, MissingFileIsEmpty) {
  TempDir dir;
  llvm::Expected<TuningDb> db = TuningDb::load(dir.file("none.db"));
  ASSERT_TRUE(bool(db));
  EXPECT_TRUE(db->records().empty());
}

TEST(TuningDb, CorruptLineNamesLineAndColumn) {
  std::string good = formatRecordLine(okRecord("s512", tile(128, 64, 4, 2), 1.0));
  llvm::Expected<TuningDb> db = TuningDb::parse(good + "\n" + good + "\n{\"bucket\": oops}\n",
                                                "t.db");
  ASSERT_FALSE(bool(db));
  std::string message = llvm::toString(db.takeError());
  EXPECT_NE(message.find("t.db:3:12: error: invalid JSON"), std::string::npos) << message;

  // A torn last line (no closing brace) is an error too.
  db = TuningDb::parse(good + "\n" + good.substr(0, 40), "t.db");
  ASSERT_FALSE(bool(db));
  message = llvm::toString(db.takeError());
  EXPECT_NE(message.find("t.db:2:"), std::string::npos) << message;

  // Valid JSON, missing key.
  std::string noWorkload = good;
  size_t at = noWorkload.find("\"workload\"");
  noWorkload = noWorkload.substr(0, at - 1) + "}";
  db = TuningDb::parse(noWorkload, "t.db");
  ASSERT_FALSE(bool(db));
  message = llvm::toString(db.takeError());
  EXPECT_NE(message.find("t.db:1:1: error: 'workload' must be a string (missing)"),
            std::string::npos)
      << message;
}

TEST(TuningDb, WinnersArePerBucketFastestOkRecords) {
  TempDir dir;
  llvm::Expected<TuningDb> fileDb = TuningDb::load(dir.file("w.db"));
  ASSERT_TRUE(bool(fileDb));
  TuningRecord spills = okRecord("s512", tile(64, 32, 4, 1), 0.1);
  spills.status = RecordStatus::Spills;
  spills.timings.reset();
  TuningRecord failed = okRecord("s512", tile(64, 32, 4, 2), 0.2);
  failed.status = RecordStatus::NumericsFailed;
  TuningRecord otherGpu = okRecord("s2048", tile(64, 64, 4, 1), 0.5);
  otherGpu.validators.gpu = "NVIDIA H100";
  ASSERT_FALSE(bool(fileDb->append({okRecord("s512", tile(128, 64, 4, 2), 2.0),
                                    okRecord("s512", tile(64, 64, 4, 2), 1.0), spills, failed,
                                    okRecord("s2048", tile(128, 64, 4, 2), 3.0),
                                    okRecord("s2048", tile(128, 64, 8, 2), 4.0), otherGpu,
                                    okRecord("s512", tile(64, 64, 4, 2), 0.5,
                                             "fwd fp16 hd64x64 none sm_90a")})));
  std::map<std::string, TuningRecord> w = fileDb->winners("fwd bf16 hd128x128 causal sm_90a");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_TRUE(w["s512"].config == tile(64, 64, 4, 2));
  EXPECT_TRUE(w["s2048"].config == tile(64, 64, 4, 1)); // the H100 record, without a filter
  Validators mine = h200();
  w = fileDb->winners("fwd bf16 hd128x128 causal sm_90a",
                      [&](const TuningRecord &r) { return r.validators == mine; });
  EXPECT_TRUE(w["s2048"].config == tile(128, 64, 4, 2));
  EXPECT_EQ(fileDb->workloads(),
            (std::vector<std::string>{"fwd bf16 hd128x128 causal sm_90a",
                                      "fwd fp16 hd64x64 none sm_90a"}));
  EXPECT_TRUE(fileDb->winners("fwd bf16 hd64x64 causal sm_90a").empty());
}

/// A decode kernel's record: rule perSm x minTiles on call `cell` ("b1k2048").
TuningRecord ruleRecord(const std::string &cell, int perSm, int minTiles, double ms) {
  TuneConfig c = tile(16, 64, 4, 3);
  c.decodeCtasPerSm = perSm;
  c.decodeMinTiles = minTiles;
  TuningRecord r = okRecord("s512", c, ms, "fwd bf16 hd128x128 causal decode sm_90a");
  r.bucket = bucket(cell, 1, kSeqlenUnbounded, 1);
  r.kernel = "fagen_fwd_bf16_hd128_causal_sm80decode_m16n64w4s3";
  r.stage = "split";
  return r;
}

TEST(TuningDb, DecodeSplitRulesRoundTripInFormat4AndWinOverEveryCall) {
  TuningRecord r = ruleRecord("b1k2048", 2, 8, 0.02);
  std::string line = formatRecordLine(r);
  EXPECT_NE(line.find("\"format\":4"), std::string::npos) << line;
  EXPECT_NE(line.find("\"decode_ctas_per_sm\":2"), std::string::npos) << line;
  EXPECT_NE(line.find("\"decode_min_tiles\":8"), std::string::npos) << line;
  llvm::Expected<TuningRecord> back = parseRecordLine(line);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_TRUE(back->config == r.config);
  EXPECT_EQ(back->config.text(), "m16n64w4s3 split2x8");
  // Another kernel's record keeps its older format and has no rule.
  EXPECT_EQ(formatRecordLine(okRecord("s512", tile(128, 64, 4, 2), 1.0)).find("decode_"),
            std::string::npos);

  // Rule 1x4 is fastest on one call, 2x1 over both (geometric means 0.0245 and 0.0141); 1x1
  // failed on a call and 2x8 was measured on one only: neither can win.
  TempDir dir;
  llvm::Expected<TuningDb> db = TuningDb::load(dir.file("d.db"));
  ASSERT_TRUE(bool(db));
  TuningRecord failed = ruleRecord("b16k2048", 1, 1, 0.001);
  failed.status = RecordStatus::NumericsFailed;
  failed.timings.reset();
  ASSERT_FALSE(bool(db->append({ruleRecord("b1k2048", 1, 4, 0.01), ruleRecord("b16k2048", 1, 4, 0.06),
                                ruleRecord("b1k2048", 2, 1, 0.02), ruleRecord("b16k2048", 2, 1, 0.01),
                                ruleRecord("b1k2048", 1, 1, 0.001), failed,
                                ruleRecord("b1k2048", 2, 8, 0.001)})));
  std::optional<RuleWinner> w = db->ruleWinner("fwd bf16 hd128x128 causal decode sm_90a");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->record.config.decodeCtasPerSm, 2);
  EXPECT_EQ(w->record.config.decodeMinTiles, 1);
  EXPECT_EQ(w->buckets, 2);
  EXPECT_NEAR(w->geomeanMs, std::sqrt(0.02 * 0.01), 1e-12);
  EXPECT_EQ(ruleProvenance(*w).rfind("tuned split rule 2x1 over 2 calls on NVIDIA H200 (132 SMs, "
                                     "cc 9.0): geometric mean 0.014 ms", 0),
            0u)
      << ruleProvenance(*w);
  // A filter narrows the calls: on b1k2048 alone 1x1 and 2x8 tie at 0.001 (the first in config
  // order wins).
  w = db->ruleWinner("fwd bf16 hd128x128 causal decode sm_90a",
                     [](const TuningRecord &r) { return r.bucket.name == "b1k2048"; });
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->record.config.text(), "m16n64w4s3 split1x1");
  EXPECT_FALSE(db->ruleWinner("fwd bf16 hd64x64 none decode sm_90a").has_value());

  // The build's table: one rule for every call, with its provenance.
  llvm::Expected<TuningTable> table =
      loadTuningTable(dir.file("d.db"), Toolchain{"/usr/local/cuda/bin/nvcc", "13.0.88"},
                      /*allowMismatch=*/true);
  ASSERT_TRUE(bool(table)) << llvm::toString(table.takeError());
  const std::vector<TunedConfig> &rule = (*table)["fwd bf16 hd128x128 causal decode sm_90a"];
  ASSERT_EQ(rule.size(), 1u);
  EXPECT_EQ(rule[0].config.text(), "m16n64w4s3 split2x1");
  EXPECT_EQ(rule[0].seqlenMin, 1);
  EXPECT_EQ(rule[0].seqlenMax, kSeqlenUnbounded);
  EXPECT_NE(rule[0].provenance.find("tuned split rule 2x1 over 2 calls"), std::string::npos);
  EXPECT_EQ(rule[0].provenance.find("another toolchain"), std::string::npos);

  // A bucket of the same name but another shape is another call: 2x1 lacks it, and so does
  // every other pair, so no pair wins and the build names what is missing.
  TuningRecord reshaped = ruleRecord("b16k2048", 2, 16, 0.07);
  reshaped.bucket.batch = 32;
  ASSERT_FALSE(bool(db->append({reshaped})));
  std::vector<std::string> missing;
  EXPECT_FALSE(db->ruleWinner("fwd bf16 hd128x128 causal decode sm_90a", nullptr, &missing));
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].find("b16k2048 (B=32"), std::string::npos) << missing[0];
  table = loadTuningTable(dir.file("d.db"), Toolchain{"/usr/local/cuda/bin/nvcc", "13.0.88"},
                          /*allowMismatch=*/true);
  ASSERT_FALSE(bool(table));
  EXPECT_NE(llvm::toString(table.takeError())
                .find("no split rule of 'fwd bf16 hd128x128 causal decode sm_90a' was measured "
                      "on every call its records hold; the most complete pair lacks b16k2048 (B=32"),
            std::string::npos);
  // Measured on another GPU since: only that GPU's records count (one pair, one call).
  TuningRecord h100 = ruleRecord("b1k2048", 1, 2, 0.5);
  h100.validators.gpu = "NVIDIA H100";
  ASSERT_FALSE(bool(db->append({h100})));
  w = db->ruleWinner("fwd bf16 hd128x128 causal decode sm_90a");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->record.config.text(), "m16n64w4s3 split1x2");
  EXPECT_EQ(w->buckets, 1);
}

TEST(TuningDb, DecodeSplitRulesOfAnotherToolchainNeedTheFlag) {
  TempDir dir;
  llvm::Expected<TuningDb> db = TuningDb::load(dir.file("o.db"));
  ASSERT_TRUE(bool(db));
  TuningRecord a = ruleRecord("b1k2048", 2, 1, 0.02), b = ruleRecord("b16k2048", 2, 1, 0.01);
  a.validators.fagen = b.validators.fagen = "0.0.1-old";
  ASSERT_FALSE(bool(db->append({a, b})));
  const Toolchain tc{"/usr/local/cuda/bin/nvcc", "13.0.88"};
  llvm::Expected<TuningTable> table = loadTuningTable(dir.file("o.db"), tc, false);
  ASSERT_FALSE(bool(table));
  EXPECT_NE(llvm::toString(table.takeError()).find("--tuning-allow-mismatch"), std::string::npos);
  table = loadTuningTable(dir.file("o.db"), tc, true);
  ASSERT_TRUE(bool(table)) << llvm::toString(table.takeError());
  const std::vector<TunedConfig> &rule = (*table)["fwd bf16 hd128x128 causal decode sm_90a"];
  ASSERT_EQ(rule.size(), 1u);
  EXPECT_NE(rule[0].provenance.find("split rule 2x1 over 2 calls"), std::string::npos);
  EXPECT_NE(rule[0].provenance.find("allowed by --tuning-allow-mismatch"), std::string::npos);
}

TEST(TuningDb, ValidatorMismatchIsRefusedWithTheFix) {
  TuningRecord r = okRecord("s2048", tile(128, 64, 4, 2), 1.0);
  Toolchain same{"/usr/local/cuda/bin/nvcc", "13.0.88"};
  EXPECT_FALSE(bool(checkValidators(r, same, "0.1.0")));
  Toolchain newer{"/usr/local/cuda/bin/nvcc", "13.1.20"};
  std::string message = llvm::toString(checkValidators(r, newer, "0.1.0"));
  EXPECT_NE(message.find("measured with nvcc 13.0.88, fagen 0.1.0"), std::string::npos) << message;
  EXPECT_NE(message.find("this build uses nvcc 13.1.20, fagen 0.1.0"), std::string::npos)
      << message;
  EXPECT_NE(message.find("re-tune, or pass --tuning-allow-mismatch"), std::string::npos);
  message = llvm::toString(checkValidators(r, same, "0.2.0"));
  EXPECT_NE(message.find("fagen 0.2.0"), std::string::npos) << message;
  EXPECT_NE(provenance(r).find("on NVIDIA H200 (132 SMs, cc 9.0)"), std::string::npos)
      << provenance(r);
}

TEST(TuningDb, ResumeFindsOnlyMatchingMeasurements) {
  TempDir dir;
  llvm::Expected<TuningDb> db = TuningDb::load(dir.file("r.db"));
  ASSERT_TRUE(bool(db));
  TuningRecord done = okRecord("s2048", tile(128, 64, 4, 2), 1.0);
  ASSERT_FALSE(bool(db->append({done})));
  const std::string wl = done.workload;
  Validators v = h200();
  EXPECT_NE(db->find(wl, done.bucket, done.config, v), nullptr);
  EXPECT_EQ(db->find(wl, done.bucket, tile(128, 64, 4, 3), v), nullptr);
  ShapeBucket otherShape = done.bucket;
  otherShape.headsKV = 4; // the same bucket name measured at another GQA ratio
  EXPECT_EQ(db->find(wl, otherShape, done.config, v), nullptr);
  Validators newer = v;
  newer.fagen = "0.2.0";
  EXPECT_EQ(db->find(wl, done.bucket, done.config, newer), nullptr);
  EXPECT_NE(db->find(wl, done.bucket, done.config, newer, /*ignoreVersions=*/true), nullptr);
  Validators otherGpu = v;
  otherGpu.sms = 114;
  EXPECT_EQ(db->find(wl, done.bucket, done.config, otherGpu, true), nullptr);

  // Which stage-1 candidates are still pending for a bucket, given the database.
  KernelPlan base = basePlan(128);
  std::vector<Candidate> candidates = tileCandidates(base, SearchSpace());
  unsigned pending = 0;
  for (const Candidate &c : candidates)
    pending += db->find(wl, done.bucket, c.config, v) == nullptr;
  EXPECT_EQ(pending, candidates.size() - 1);
}

//===----------------------------------------------------------------------===//
// The search space
//===----------------------------------------------------------------------===//

TEST(SearchSpace, TileStageIsPrunedByThePlannerChecks) {
  KernelPlan base = basePlan(128);
  unsigned pruned = 0;
  std::vector<Candidate> c = tileCandidates(base, SearchSpace(), &pruned);
  // 2 x 3 x 2 x 3 = 36 grid points: 9 have 8 rows per warp (64 rows, 8 warps); 128x128 with
  // 4 warps needs 256 accumulator registers per thread (3 stage counts); 128x128x8 with 3
  // stages needs 896 rows x 272 bytes > 227 KB at hd128.
  EXPECT_EQ(pruned, 13u);
  EXPECT_EQ(c.size(), 23u);
  EXPECT_TRUE(c.front().config == configOf(base)); // the default comes first
  std::set<std::string> names;
  for (const Candidate &x : c) {
    EXPECT_FALSE(bool(checkKernelPlan(x.plan))) << x.plan.name;
    EXPECT_EQ(x.plan.blockM / x.plan.warps >= 16, true) << x.plan.name;
    EXPECT_LE(x.plan.smemBytes, archSmemLimit("sm_90a")) << x.plan.name;
    EXPECT_EQ(x.config.rescaleTau, 0);
    EXPECT_EQ(x.config.exp2EmuPercent, 0);
    EXPECT_EQ(x.stage, "tile");
    EXPECT_EQ(x.plan.name, kernelName(x.plan));
    names.insert(x.plan.name);
  }
  EXPECT_EQ(names.size(), c.size());

  // hd 256: shared memory prunes much more; nothing over the limit survives.
  std::vector<Candidate> big = tileCandidates(basePlan(256), SearchSpace(), &pruned);
  EXPECT_LT(big.size(), c.size());
  for (const Candidate &x : big)
    EXPECT_LE(x.plan.smemBytes, archSmemLimit("sm_90a")) << x.plan.name;
}

TEST(SearchSpace, WarpSpecializedTemplateHasItsOwnSpace) {
  KernelPlan base = basePlan(128);
  EXPECT_EQ(searchSpaceFor(base).blockN, SearchSpace().blockN); // sm80: the default space
  base.templ = "sm90ws";
  base.blockN = 128;
  base.warps = 8;
  base.stages = 2;
  base.rescaleTau = 0;
  finalizePlan(base);
  ASSERT_FALSE(bool(checkKernelPlan(base)));
  unsigned pruned = 0;
  std::vector<Candidate> c = tileCandidates(base, searchSpaceFor(base), &pruned);
  std::set<std::string> configs;
  for (const Candidate &x : c) {
    EXPECT_EQ(x.plan.templ, "sm90ws");
    EXPECT_EQ(x.plan.threads, 32 * x.plan.warps + 128) << x.plan.name;
    configs.insert(x.config.text());
  }
  // 2 x 6 x 2 x 1 = 24 grid points: warps must be block_m / 16 (12 refused), and three consumer
  // warpgroups (160 registers) hold S + O + P at hd 128 only up to 80 keys (4 more).
  EXPECT_EQ(configs, (std::set<std::string>{"m128n128w8s2", "m128n64w8s2", "m128n80w8s2",
                                            "m128n96w8s2", "m128n112w8s2", "m128n176w8s2",
                                            "m192n64w12s2", "m192n80w12s2"}));
  EXPECT_EQ(pruned, 16u);
  // Stage 2: the rescale threshold (0 or sm90ws's default 8), emulated exp2 and the staged
  // epilogue; the default's own config (tau 8 alone) is measured here, stage 1 ran tau 0.
  std::vector<Candidate> soft =
      softmaxCandidates(base, searchSpaceFor(base), {configOf(base)});
  std::set<std::string> stage2;
  for (const Candidate &x : soft) {
    stage2.insert(x.config.text());
    EXPECT_EQ(x.plan.name.find("_so") != std::string::npos, x.config.stagedEpilogue)
        << x.plan.name;
  }
  EXPECT_EQ(stage2, (std::set<std::string>{
                        "m128n128w8s2 emu25d3", "m128n128w8s2 staged",
                        "m128n128w8s2 emu25d3 staged", "m128n128w8s2 tau8",
                        "m128n128w8s2 tau8 emu25d3", "m128n128w8s2 tau8 staged",
                        "m128n128w8s2 tau8 emu25d3 staged"}));
  // A base pinned to the staged epilogue: stage 1 timed its tiles staged, so stage 2 times
  // the unstaged exact point instead, and the base's own config is not repeated.
  KernelPlan stagedBase = base;
  stagedBase.stagedEpilogue = true;
  finalizePlan(stagedBase);
  ASSERT_FALSE(bool(checkKernelPlan(stagedBase)));
  std::set<std::string> stagedStage2;
  for (const Candidate &x :
       softmaxCandidates(stagedBase, searchSpaceFor(stagedBase), {configOf(base)}))
    stagedStage2.insert(x.config.text());
  EXPECT_EQ(stagedStage2, (std::set<std::string>{
                              "m128n128w8s2", "m128n128w8s2 emu25d3",
                              "m128n128w8s2 emu25d3 staged", "m128n128w8s2 tau8",
                              "m128n128w8s2 tau8 emu25d3", "m128n128w8s2 tau8 staged",
                              "m128n128w8s2 tau8 emu25d3 staged"}));
  // Where O is wider than Q the staged epilogue cannot be built.
  KernelPlan wideV = base;
  wideV.headDimQK = 64;
  finalizePlan(wideV);
  KernelConfig staged = configOf(wideV);
  staged.stagedEpilogue = true;
  llvm::Expected<KernelPlan> refused = applyConfig(wideV, staged);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("staged_epilogue writes O through the Q tile"),
            std::string::npos);
}

/// The planner's default kernels of `yaml` for `arch`, without built-in seqlen buckets (the
/// tuner's view).
std::vector<KernelPlan> plansOf(const std::string &yaml, const std::string &arch,
                                const TuningTable *tuning = nullptr) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  EXPECT_TRUE(bool(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
  llvm::Expected<std::vector<KernelPlan>> plans =
      planKernels(*spec, {arch}, tuning, /*builtinBuckets=*/false);
  EXPECT_TRUE(bool(plans)) << (plans ? "" : llvm::toString(plans.takeError()));
  return plans ? *plans : std::vector<KernelPlan>();
}

const char *kBackwardSpec = R"(variants:
  - {name: d64, dtype: bf16, head_dim: 64, mask: causal, passes: [bwd]}
  - {name: d128, dtype: bf16, head_dim: 128, passes: [bwd]}
  - {name: c128det, dtype: bf16, head_dim: 128, mask: causal, deterministic: true, passes: [bwd]}
  - {name: d256, dtype: fp16, head_dim: 256, mask: causal, passes: [bwd]}
)";

/// Every backward candidate is a plan the planner accepts, of the default's template, with
/// the default first; stage 2 adds nothing (no softmax parameters).
std::map<std::string, std::set<std::string>> backwardCandidates(const std::string &arch) {
  std::map<std::string, std::set<std::string>> out;
  for (const KernelPlan &base : plansOf(kBackwardSpec, arch)) {
    EXPECT_EQ(base.pass, Pass::Backward);
    const SearchSpace space = searchSpaceFor(base);
    std::vector<Candidate> c = tileCandidates(base, space);
    EXPECT_TRUE(!c.empty() && c.front().config == configOf(base)) << base.name;
    for (const Candidate &x : c) {
      EXPECT_FALSE(bool(checkKernelPlan(x.plan))) << x.plan.name;
      EXPECT_EQ(x.plan.templ, base.templ) << x.plan.name;
      EXPECT_EQ(x.plan.deterministic, base.deterministic) << x.plan.name;
      EXPECT_LE(x.plan.smemBytes, archSmemLimit(arch)) << x.plan.name;
      out[workloadKey(base)].insert(x.config.text());
    }
    std::vector<TuneConfig> tiles;
    for (const Candidate &x : c)
      tiles.push_back(x.config);
    EXPECT_TRUE(softmaxCandidates(base, space, tiles).empty()) << base.name;
  }
  return out;
}

TEST(SearchSpace, BackwardCandidatesArePlannableWithTheDefaultFirst) {
  // sm90ws: one tile per head dim (its static_asserts), the stages that fit 227 KB, each with
  // the query walk rotated or not and the dQ writer or not (the deterministic mode only from
  // the first tile, with the writer).
  std::map<std::string, std::set<std::string>> ws = backwardCandidates("sm_90a");
  using Set = std::set<std::string>;
  // Every tile with and without the suffixes in `suffixes`' combinations.
  auto with = [](std::vector<std::string> tiles, std::vector<std::string> suffixes) {
    Set out;
    for (const std::string &t : tiles)
      for (const std::string &s : suffixes)
        out.insert(t + s);
    return out;
  };
  const std::vector<std::string> walkAndWriter = {"", " rotq", " dqw", " rotq dqw"};
  EXPECT_EQ(ws["bwd bf16 hd64x64 causal sm_90a"],
            with({"m128n128w8s1", "m128n128w8s2"}, walkAndWriter));
  EXPECT_EQ(ws["bwd bf16 hd128x128 none sm_90a"],
            with({"m64n128w8s1", "m64n128w8s2", "m64n128w8s3"}, walkAndWriter));
  EXPECT_EQ(ws["bwd bf16 hd128x128 causal det sm_90a"],
            with({"m64n128w8s1", "m64n128w8s2", "m64n128w8s3"}, {" dqw"}));
  EXPECT_EQ(ws["bwd fp16 hd256x256 causal sm_90a"],
            with({"m64n64w8s1", "m64n64w8s2"}, walkAndWriter));
  EXPECT_EQ(ws.size(), 4u);

  // Kernel names spell the query walk only where it is not the head dim's default.
  for (const KernelPlan &base : plansOf(kBackwardSpec, "sm_90a")) {
    EXPECT_EQ(base.name.find("_q"), std::string::npos) << base.name;
    KernelConfig other = configOf(base);
    other.rotateQueryWalk = !other.rotateQueryWalk;
    llvm::Expected<KernelPlan> flipped = applyConfig(base, other);
    if (base.deterministic) {
      ASSERT_FALSE(bool(flipped));
      EXPECT_NE(llvm::toString(flipped.takeError()).find("does not serve the deterministic mode"),
                std::string::npos);
      continue;
    }
    ASSERT_TRUE(bool(flipped)) << llvm::toString(flipped.takeError());
    EXPECT_EQ(base.rotateQueryWalk, base.headDimQK == 64) << base.name;
    EXPECT_EQ(flipped->name, base.name + (base.rotateQueryWalk ? "_qf" : "_qr"));
  }
  // Kernel names spell the dQ strategy only where it is not the variant's default; the
  // deterministic mode keeps the writer.
  for (const KernelPlan &base : plansOf(kBackwardSpec, "sm_90a")) {
    EXPECT_FALSE(llvm::StringRef(base.name).ends_with("_dw") ||
                 llvm::StringRef(base.name).ends_with("_dc"))
        << base.name;
    KernelConfig other = configOf(base);
    ASSERT_TRUE(other.dqWriter.has_value()) << base.name;
    other.dqWriter = !base.dqWriter;
    llvm::Expected<KernelPlan> flipped = applyConfig(base, other);
    if (base.deterministic) {
      ASSERT_FALSE(bool(flipped));
      EXPECT_NE(llvm::toString(flipped.takeError()).find("the dQ writer's"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(bool(flipped)) << llvm::toString(flipped.takeError());
    EXPECT_EQ(flipped->name, base.name + (base.dqWriter ? "_dc" : "_dw"));
    // A config without the field (a record made before it existed) keeps the plan's.
    other.dqWriter.reset();
    llvm::Expected<KernelPlan> kept = applyConfig(base, other);
    ASSERT_TRUE(bool(kept)) << llvm::toString(kept.takeError());
    EXPECT_EQ(kept->dqWriter, base.dqWriter) << base.name;
    EXPECT_EQ(kept->name, base.name);
  }
  // A forward plan has no dQ writer.
  KernelConfig writer = configOf(basePlan(128));
  EXPECT_FALSE(writer.dqWriter.has_value());
  writer.dqWriter = true;
  llvm::Expected<KernelPlan> noWriter = applyConfig(basePlan(128), writer);
  ASSERT_FALSE(bool(noWriter));
  EXPECT_NE(llvm::toString(noWriter.takeError()).find("an option of the sm90ws backward"),
            std::string::npos);
  // A forward or portable plan has no query walk to rotate.
  KernelConfig rotated = configOf(basePlan(128));
  rotated.rotateQueryWalk = true;
  llvm::Expected<KernelPlan> refused = applyConfig(basePlan(128), rotated);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("an option of the sm90ws backward"),
            std::string::npos);

  // sm80 (the portable template, here for sm_90): 1 or 2 stages, tiles whose warp grids
  // split and whose shared memory fits (ptxas prunes the ones that spill, on the GPU machine).
  std::map<std::string, std::set<std::string>> portable = backwardCandidates("sm_90");
  EXPECT_EQ(portable["bwd bf16 hd64x64 causal sm_90"].size(), 16u); // the whole grid
  EXPECT_EQ(portable["bwd bf16 hd128x128 none sm_90"],
            (Set{"m64n64w4s1", "m64n64w4s2", "m64n64w8s1", "m64n64w8s2", "m64n128w4s1",
                 "m64n128w4s2", "m64n128w8s1", "m64n128w8s2", "m128n64w4s1", "m128n64w4s2",
                 "m128n64w8s1", "m128n64w8s2", "m128n128w4s1", "m128n128w8s1"}));
  EXPECT_EQ(portable["bwd fp16 hd256x256 causal sm_90"],
            (Set{"m64n64w4s1", "m64n64w4s2", "m64n64w8s1", "m64n64w8s2", "m64n128w4s1",
                 "m64n128w8s1"}));
  EXPECT_EQ(portable["bwd bf16 hd128x128 causal det sm_90"],
            portable["bwd bf16 hd128x128 none sm_90"]);
}

TEST(SearchSpace, SoftmaxStageRunsOnTheBestTiles) {
  std::vector<TuningRecord> records = {okRecord("s2048", tile(128, 64, 4, 2), 1.2),
                                       okRecord("s2048", tile(128, 32, 4, 2), 1.0),
                                       okRecord("s2048", tile(64, 64, 4, 1), 0.9),
                                       okRecord("s2048", tile(128, 32, 4, 2, 8, 0), 0.8)};
  records[2].status = RecordStatus::NumericsFailed;
  std::vector<const TuningRecord *> ptrs;
  for (const TuningRecord &r : records)
    ptrs.push_back(&r);
  std::vector<TuneConfig> best = bestTiles(ptrs, 2);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_TRUE(best[0] == tile(128, 32, 4, 2)); // tau stripped, counted once
  EXPECT_TRUE(best[1] == tile(128, 64, 4, 2));

  std::vector<Candidate> c = softmaxCandidates(basePlan(128), SearchSpace(), best);
  EXPECT_EQ(c.size(), 16u); // (3 x 3 - 1) per tile
  for (const Candidate &x : c) {
    EXPECT_FALSE(x.config.rescaleTau == 0 && x.config.exp2EmuPercent == 0);
    EXPECT_EQ(x.stage, "softmax");
    EXPECT_EQ(x.plan.rescaleTau, x.config.rescaleTau);
    EXPECT_EQ(x.plan.exp2EmuPercent, x.config.exp2EmuPercent);
  }
  EXPECT_TRUE(bestTiles({}, 2).empty());

  // A default off the stage-1 grid (the planner's tau 8) is measured in stage 2 even when
  // its tile lost stage 1, once, as it is.
  KernelPlan tau8 = basePlan(128);
  tau8.rescaleTau = 8;
  finalizePlan(tau8);
  ASSERT_FALSE(bool(checkKernelPlan(tau8)));
  std::vector<Candidate> withDefault = softmaxCandidates(tau8, SearchSpace(), {best[0]});
  ASSERT_EQ(withDefault.size(), 9u);
  EXPECT_TRUE(withDefault.back().config == configOf(tau8));
  EXPECT_EQ(withDefault.back().plan.rescaleTau, 8);
  EXPECT_EQ(withDefault.back().stage, "softmax");
  // Its tile among the best: already one of the (tau, emu) points, not added twice.
  std::vector<Candidate> ownTile =
      softmaxCandidates(tau8, SearchSpace(), {tile(128, 64, 4, 2)});
  EXPECT_EQ(ownTile.size(), 8u);
  EXPECT_EQ(std::count_if(ownTile.begin(), ownTile.end(),
                          [&](const Candidate &x) { return x.config == configOf(tau8); }),
            1);
  // A stage-1 default (tau 0) is not repeated.
  EXPECT_EQ(softmaxCandidates(basePlan(128), SearchSpace(), best).size(), 16u);
}

TEST(SearchSpace, DefaultBucketsCoverEverySeqlen) {
  std::vector<ShapeBucket> b = makeBuckets(defaultBucketSeqlens(), 128, 4);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].name, "s512");
  EXPECT_EQ(b[0].seqlenMin, 1);
  EXPECT_EQ(b[0].seqlenMax, 1024);
  EXPECT_EQ(b[1].seqlenMin, 1025);
  EXPECT_EQ(b[1].seqlenMax, 4096);
  EXPECT_EQ(b[2].seqlenMin, 4097);
  EXPECT_EQ(b[2].seqlenMax, kSeqlenUnbounded);
  EXPECT_EQ(b[0].batch, 32);
  EXPECT_EQ(b[2].batch, 2);
  EXPECT_EQ(b[1].headsQ, 16);
  EXPECT_EQ(b[1].headsKV, 4);
  EXPECT_EQ(b[1].seqlenQ, 2048);
  EXPECT_EQ(makeBuckets({8192, 512}, 64, 1)[0].headsQ, 32);
  EXPECT_EQ(makeBuckets({100000}, 64, 1)[0].batch, 1);

  llvm::Expected<std::vector<int>> s = parseSeqlenList("512,2048, 8192");
  ASSERT_TRUE(bool(s));
  EXPECT_EQ(*s, (std::vector<int>{512, 2048, 8192}));
  EXPECT_FALSE(bool(parseSeqlenList("512,abc")));
  EXPECT_FALSE(bool(parseSeqlenList("")));
  EXPECT_FALSE(bool(parseSeqlenList("0")));
  EXPECT_DOUBLE_EQ(forwardFlops(b[1], 128, true), 2.0 * 8 * 16 * 2048.0 * 2048 * 128);
}

//===----------------------------------------------------------------------===//
// The report
//===----------------------------------------------------------------------===//

/// A tiny well-formedness check: every tag closes in order, attributes are quoted, and the
/// only entities are the five XML ones.
std::string xmlProblem(const std::string &s) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = s.find_first_of("<&", i)) != std::string::npos) {
    if (s[i] == '&') {
      bool ok = false;
      for (const char *e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
        ok = ok || s.compare(i, strlen(e), e) == 0;
      if (!ok)
        return "bad entity at " + std::to_string(i);
      ++i;
      continue;
    }
    size_t end = s.find('>', i);
    if (end == std::string::npos)
      return "unclosed tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '?' || tag[0] == '!')
      continue;
    if (std::count(tag.begin(), tag.end(), '"') % 2)
      return "unbalanced quotes in <" + tag + ">";
    if (tag.find('<') != std::string::npos)
      return "'<' inside a tag: " + tag;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return "</" + tag.substr(1) + "> does not close <" +
               (stack.empty() ? "" : stack.back()) + ">";
      stack.pop_back();
      continue;
    }
    if (tag.back() == '/')
      continue;
    stack.push_back(tag.substr(0, tag.find(' ')));
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

TEST(Report, SvgShowsEveryCandidateAndMarksWinners) {
  std::vector<TuningRecord> records = {okRecord("s512", tile(128, 64, 4, 2), 2.0),
                                       okRecord("s512", tile(64, 64, 4, 2), 1.0),
                                       okRecord("s2048", tile(128, 64, 4, 2), 3.0),
                                       okRecord("s2048", tile(128, 32, 4, 2, -1, 10), 2.5)};
  TuningRecord failed = okRecord("s512", tile(128, 128, 8, 3), 1.0);
  failed.status = RecordStatus::CompileError;
  failed.timings.reset();
  failed.detail = "error: <bad> & \"quoted\"";
  records.push_back(failed);
  std::map<std::string, TuneConfig> defaults = {
      {"fwd bf16 hd128x128 causal sm_90a", tile(128, 64, 4, 2)}};
  std::string svg = renderSvgReport(records, defaults, "tune <test> & report");
  EXPECT_EQ(xmlProblem(svg), "");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  for (const TuningRecord &r : records)
    EXPECT_NE(svg.find("data-kernel=\"" + r.kernel + "\""), std::string::npos) << r.kernel;
  size_t winners = 0;
  for (size_t at = 0; (at = svg.find("class=\"candidate winner\"", at)) != std::string::npos; ++at)
    ++winners;
  EXPECT_EQ(winners, 2u); // one per bucket
  EXPECT_NE(svg.find("m64n64w4s2"), std::string::npos);
  EXPECT_NE(svg.find("(default)"), std::string::npos);
  EXPECT_NE(svg.find("compile-error"), std::string::npos);
  EXPECT_NE(svg.find("TFLOP/s"), std::string::npos);

  std::string summary = formatSummary(records, defaults);
  EXPECT_NE(summary.find("s512"), std::string::npos) << summary;
  EXPECT_NE(summary.find("m64n64w4s2"), std::string::npos) << summary;
  EXPECT_NE(summary.find("2.00x"), std::string::npos) << summary;
  EXPECT_NE(summary.find("m128n32w4s2 tau-1 emu10d3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("1.20x"), std::string::npos) << summary;
}

TEST(Report, LatestRecordWinsForARemeasuredCandidate) {
  std::vector<TuningRecord> records = {okRecord("s512", tile(128, 64, 4, 2), 2.0),
                                       okRecord("s512", tile(128, 64, 4, 2), 1.5)};
  std::vector<TuningRecord> latest = latestRecords(records);
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_DOUBLE_EQ(latest[0].timings->medianMs, 1.5);
}

} // namespace
