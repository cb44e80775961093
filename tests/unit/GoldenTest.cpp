//===- GoldenTest.cpp - `fagen check --golden`'s digests, without a GPU ---===//
//
// The golden digest of an output tensor, its text format (round trip, file:line errors), the
// comparison (a bitwise tensor's hash, a non-deterministic tensor's tolerance, with how far
// the probes moved), and the files of a folder (missing, extra, atomic writes).
//
//===----------------------------------------------------------------------===//

#include "check/CheckGolden.h"

#include "../common/TestBundles.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

using namespace fagen;
using namespace fagen::golden;

namespace {

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

/// `n` values that look like a bf16 output: multiples of 2^-8 in (-2, 2).
std::vector<float> tensor(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = float(int((i * 2654435761u + seed * 40503u) % 1021) - 510) / 256.0f;
  return v;
}

/// The golden file of a backward kernel that adds dQ with atomics, on two shapes.
GoldenFile backwardFile(const std::vector<float> &dq) {
  KernelRecord k = test::testBackwardKernel("bwd_k", "sm_90", "bf16", 64, "causal", 0);
  GoldenFile f = goldenHeader(k, 1234, false);
  f.fagenVersion = "0.1.0";
  f.gpu = "NVIDIA H200";
  for (const char *shape : {"1x1/1_1x1_bshd", "2x2/1_64x1000_bshd_rise"}) {
    CaseDigest c{shape, {}};
    c.tensors.push_back(digestTensor("dQ", dq, bitwiseStable(k, "dQ")));
    c.tensors.push_back(digestTensor("dK", tensor(300, 2), bitwiseStable(k, "dK")));
    c.tensors.push_back(digestTensor("dV", tensor(20, 3), bitwiseStable(k, "dV")));
    f.cases.push_back(std::move(c));
  }
  return f;
}

/// A scratch folder under the build tree, emptied first.
std::string scratchDir(const std::string &name) {
  std::string dir = std::string(FAGEN_BINARY_DIR) + "/unit-golden/" + name;
  llvm::sys::fs::remove_directories(dir);
  llvm::sys::fs::create_directories(dir);
  return dir;
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string parseError(const std::string &text) {
  llvm::Expected<GoldenFile> f = parseGolden(text, "g/k.sm_90.golden");
  if (f)
    return "";
  return llvm::toString(f.takeError());
}

} // namespace

TEST(GoldenDigest, ProbesAreEvenlyStrided) {
  EXPECT_TRUE(probeIndices(0).empty());
  EXPECT_EQ(probeIndices(1), std::vector<uint64_t>{0});
  EXPECT_EQ(probeIndices(5), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  std::vector<uint64_t> p = probeIndices(1000);
  ASSERT_EQ(p.size(), size_t(kProbes));
  EXPECT_EQ(p.front(), 0u);
  EXPECT_EQ(p.back(), 999u);
  EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
}

TEST(GoldenDigest, HashStatisticsAndNonFinite) {
  // SHA-256 of no bytes.
  EXPECT_EQ(digestTensor("O", {}, true).sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const float inf = std::numeric_limits<float>::infinity();
  TensorDigest t = digestTensor("LSE", {1.0f, -inf, -3.0f, 0.5f}, true);
  EXPECT_EQ(t.elements, 4u);
  EXPECT_EQ(t.nonFinite, 1u);
  EXPECT_EQ(t.sum, -1.5);
  EXPECT_DOUBLE_EQ(t.rms, std::sqrt((1 + 9 + 0.25) / 3.0));
  EXPECT_EQ(t.maxAbs, 3.0);
  EXPECT_EQ(t.probes.size(), 4u);
  // -0 and +0 are different bits.
  EXPECT_NE(digestTensor("O", {0.0f}, true).sha256, digestTensor("O", {-0.0f}, true).sha256);
  EXPECT_FALSE(digestTensor("dQ", {1.0f}, false).bitwise());
}

TEST(GoldenDigest, OnlyAtomicallyAddedDqIsNotBitwise) {
  KernelRecord fwd = test::testKernel("f", "sm_90", "bf16", 64, "none", 0);
  KernelRecord bwd = test::testBackwardKernel("b", "sm_90", "bf16", 64, "none", 0);
  KernelRecord det = bwd;
  det.deterministic = true;
  EXPECT_TRUE(bitwiseStable(fwd, "O"));
  EXPECT_TRUE(bitwiseStable(fwd, "LSE"));
  EXPECT_FALSE(bitwiseStable(bwd, "dQ"));
  EXPECT_TRUE(bitwiseStable(bwd, "dK"));
  EXPECT_TRUE(bitwiseStable(bwd, "dV"));
  EXPECT_TRUE(bitwiseStable(det, "dQ"));
}

TEST(GoldenDigest, NamesOfShapesAndFiles) {
  EXPECT_EQ(shapeKey({2, 2, 1, 64, 1000, false, true}), "2x2/1_64x1000_bshd_rise");
  EXPECT_EQ(shapeKey({1, 2, 2, 127, 577, true}), "1x2/2_127x577_bhsd");
  KernelRecord k = test::testKernel("fagen_fwd_bf16_d64", "sm_90a", "bf16", 64, "none", 0);
  EXPECT_EQ(goldenFileName(k), "fagen_fwd_bf16_d64.sm_90a.golden");
  k.seqlenMin = 2049;
  EXPECT_EQ(goldenFileName(k), "fagen_fwd_bf16_d64.sm_90a.2049-inf.golden");
  k.seqlenMin = 0, k.seqlenMax = 2048;
  EXPECT_EQ(goldenFileName(k), "fagen_fwd_bf16_d64.sm_90a.0-2048.golden");
}

TEST(GoldenFormat, RoundTripIsExact) {
  GoldenFile f = backwardFile(tensor(1000, 1));
  // Values that need the hex floats: -inf, -0, a subnormal, fp32's last bit.
  const float inf = std::numeric_limits<float>::infinity();
  f.cases[0].tensors.push_back(
      digestTensor("LSE", {-inf, -0.0f, 1e-40f, 1.0f + 0x1p-23f, 3.14159274f}, true));
  f.seqlenRange = "2049-inf";
  const std::string text = formatGolden(f);
  llvm::Expected<GoldenFile> back = parseGolden(text, "x.golden");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(formatGolden(*back), text);
  EXPECT_TRUE(compareGolden(*back, f).empty());
  EXPECT_EQ(back->kernel, "bwd_k");
  EXPECT_EQ(back->arch, "sm_90");
  EXPECT_EQ(back->seqlenRange, "2049-inf");
  EXPECT_EQ(back->seed, 1234u);
  EXPECT_EQ(back->grid, "full");
  EXPECT_EQ(back->gpu, "NVIDIA H200");
  ASSERT_EQ(back->cases.size(), 2u);
  EXPECT_EQ(back->cases[1].shape, "2x2/1_64x1000_bshd_rise");
  const TensorDigest &lse = back->cases[0].tensors.back();
  EXPECT_TRUE(std::isinf(lse.probes[0]) && lse.probes[0] < 0);
  EXPECT_TRUE(std::signbit(lse.probes[1]));
  EXPECT_EQ(lse.probes[2], 1e-40f);
  EXPECT_EQ(lse.probes[3], 1.0f + 0x1p-23f);
  // No timestamps: the same digests give the same bytes.
  EXPECT_EQ(formatGolden(backwardFile(tensor(1000, 1))),
            formatGolden(backwardFile(tensor(1000, 1))));
  EXPECT_TRUE(contains(text, "sha256=- ")) << "dQ of an atomic backward has no hash";
}

TEST(GoldenCompare, HashMismatchSaysWhichProbeMovedAndHowFar) {
  KernelRecord k = test::testKernel("f", "sm_90", "bf16", 64, "none", 0);
  std::vector<float> o = tensor(1000, 7);
  GoldenFile golden = goldenHeader(k, 1234, false), now = golden;
  golden.cases.push_back({"1x1/1_17x17_bshd", {digestTensor("O", o, true)}});
  const uint64_t probed = probeIndices(o.size())[5];
  o[probed] += 0x1p-6f; // two bf16 steps at 1..2 (or more below)
  now.cases.push_back({"1x1/1_17x17_bshd", {digestTensor("O", o, true)}});
  std::vector<std::string> moved = compareGolden(golden, now);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(contains(moved[0], "1x1/1_17x17_bshd O: sha256 differs")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "max |diff| 0.015625 over the 32 probes (1 moved")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "element " + std::to_string(probed))) << moved[0];
  EXPECT_TRUE(contains(moved[0], "rms ")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "sum ")) << moved[0];

  // Between the probes: the hash still catches it, and the statistics say how much.
  o[probed] -= 0x1p-6f;
  o[probed + 1] += 1.0f;
  now.cases[0].tensors = {digestTensor("O", o, true)};
  moved = compareGolden(golden, now);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(contains(moved[0], "the 32 probes agree")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "sum +")) << moved[0];
}

TEST(GoldenCompare, AtomicTensorWithinToleranceOnlyByStatistics) {
  const std::vector<float> dq = tensor(1000, 1);
  const GoldenFile golden = backwardFile(dq);
  const TensorDigest &g = golden.cases[0].tensors[0];
  ASSERT_FALSE(g.bitwise());
  // bf16 at max |x| in [1, 2): a step of 2^-7; twice that plus kEpsGrad.
  ASSERT_GE(g.maxAbs, 1.0);
  ASSERT_LT(g.maxAbs, 2.0);
  EXPECT_DOUBLE_EQ(goldenTolerance(g, "bf16"), 0x1p-6 + reference::kEpsGrad);
  EXPECT_DOUBLE_EQ(goldenTolerance(g, "fp16"), 0x1p-9 + reference::kEpsGrad);

  // Every element one bf16 step off (an atomic order's rounding): passes.
  std::vector<float> near = dq;
  for (size_t i = 0; i < near.size(); ++i)
    near[i] += (i % 2 ? 1 : -1) * 0x1p-7f;
  EXPECT_TRUE(compareGolden(golden, backwardFile(near)).empty());

  // One probed element 3 steps off: fails, with the tolerance stated.
  std::vector<float> far = dq;
  far[probeIndices(far.size())[9]] += 3 * 0x1p-7f;
  std::vector<std::string> moved = compareGolden(golden, backwardFile(far));
  ASSERT_EQ(moved.size(), 2u); // both shapes
  EXPECT_TRUE(contains(moved[0], "1x1/1_1x1_bshd dQ: a probe moved more than the tolerance"))
      << moved[0];
  EXPECT_TRUE(contains(moved[0], "max |diff| 0.0234375")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "tolerance 0.01563")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "2 bf16 steps at max |x|")) << moved[0];

  // Unprobed elements scaled: the probes agree, rms catches it.
  std::vector<float> scaled = dq;
  for (size_t i = 0; i < scaled.size(); ++i)
    if (i % 3 == 1 && std::fabs(scaled[i]) < 1)
      scaled[i] *= 1.5f;
  for (uint64_t i : probeIndices(scaled.size()))
    scaled[i] = dq[i];
  moved = compareGolden(golden, backwardFile(scaled));
  ASSERT_FALSE(moved.empty());
  EXPECT_TRUE(contains(moved[0], "rms moved more than the tolerance")) << moved[0];
  EXPECT_TRUE(contains(moved[0], "the 32 probes agree")) << moved[0];
}

TEST(GoldenCompare, HeadersAndShapes) {
  const GoldenFile golden = backwardFile(tensor(1000, 1));
  GoldenFile now = golden;
  now.seed = 99;
  std::vector<std::string> moved = compareGolden(golden, now);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(contains(moved[0], "written with seed 1234, this check runs seed 99: pass --seed "
                                 "1234"))
      << moved[0];
  now = golden;
  now.grid = "quick";
  EXPECT_TRUE(contains(compareGolden(golden, now).at(0), "the full grid"));
  // fagen version and GPU are informational.
  now = golden;
  now.fagenVersion = "0.2.0", now.gpu = "NVIDIA H100 80GB HBM3";
  EXPECT_TRUE(compareGolden(golden, now).empty());
  // A shape only one side has, a tensor only one side has.
  now = golden;
  now.cases[1].shape = "3x2/2_1000x17_bhsd";
  now.cases[0].tensors.pop_back();
  moved = compareGolden(golden, now);
  ASSERT_EQ(moved.size(), 3u);
  EXPECT_EQ(moved[0], "1x1/1_1x1_bshd dV: in the golden file, not written by this check");
  EXPECT_TRUE(contains(moved[1], "3x2/2_1000x17_bhsd: not in the golden file")) << moved[1];
  EXPECT_TRUE(contains(moved[2], "2x2/1_64x1000_bshd_rise: in the golden file, no outputs in "
                                 "this check"))
      << moved[2];
  // Another element count.
  now = golden;
  now.cases[0].tensors[1] = digestTensor("dK", tensor(301, 2), true);
  moved = compareGolden(golden, now);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0], "1x1/1_1x1_bshd dK: 300 elements in the golden file, 301 now");
}

TEST(GoldenFormat, MalformedFilesNameTheLine) {
  const std::string good = formatGolden(backwardFile(tensor(40, 1)));
  EXPECT_EQ(parseError(good), "");
  EXPECT_TRUE(contains(parseError(""), "g/k.sm_90.golden:1: expected 'fagen-golden 2'"));
  EXPECT_TRUE(contains(parseError("fagen-golden 1 seed=1234 elements=4\n...."),
                       "g/k.sm_90.golden:1: golden format 'fagen-golden 1 seed=1234 "
                       "elements=4', this fagen reads 'fagen-golden 2': rewrite it with "
                       "--update-golden"));
  // The line numbers of the header and of the first tensor line.
  std::vector<std::string> lines;
  for (size_t at = 0, next; at < good.size(); at = next + 1)
    lines.push_back(good.substr(at, (next = good.find('\n', at)) - at));
  size_t kernelLine = 0, tensorLine = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!kernelLine && lines[i].rfind("kernel ", 0) == 0)
      kernelLine = i;
    if (!tensorLine && lines[i].rfind("tensor ", 0) == 0)
      tensorLine = i;
  }
  auto withLine = [&](size_t i, const std::string &text) {
    std::vector<std::string> l = lines;
    l[i] = text;
    std::string out;
    for (const std::string &x : l)
      out += x + "\n";
    return out;
  };
  const std::string at = "g/k.sm_90.golden:" + std::to_string(tensorLine + 1) + ": ";
  std::string tensorText = lines[tensorLine];
  std::string e = parseError(withLine(tensorLine, "tensor 1x1/1_1x1_bshd dQ n=12"));
  EXPECT_TRUE(contains(e, at + "expected 'tensor SHAPE NAME n=..")) << e;
  std::string badSum = tensorText;
  badSum.replace(badSum.find(" sum=") + 5, 0, "zz");
  e = parseError(withLine(tensorLine, badSum));
  EXPECT_TRUE(contains(e, at + "bad value of sum: 'zz")) << e;
  std::string fewProbes = tensorText.substr(0, tensorText.rfind(','));
  e = parseError(withLine(tensorLine, fewProbes));
  EXPECT_TRUE(contains(e, at + "31 probes for 40 elements, expected 32")) << e;
  std::string badHash = tensorText;
  badHash.replace(badHash.find("sha256=") + 7, 1, "xyz");
  e = parseError(withLine(tensorLine, badHash));
  EXPECT_TRUE(contains(e, at + "bad value of sha256")) << e;
  e = parseError(withLine(tensorLine, tensorText + "\n" + tensorText));
  EXPECT_TRUE(contains(e, "g/k.sm_90.golden:" + std::to_string(tensorLine + 2) +
                              ": tensor dQ of shape 1x1/1_1x1_bshd again"))
      << e;
  e = parseError(good + tensorText + "\n");
  EXPECT_TRUE(contains(e, "g/k.sm_90.golden:" + std::to_string(lines.size() + 1) +
                              ": shape 1x1/1_1x1_bshd again after other shapes"))
      << e;
  e = parseError(withLine(kernelLine, "kernel only_a_name"));
  EXPECT_TRUE(contains(e, ":" + std::to_string(kernelLine + 1) + ": expected 'kernel NAME ARCH'"))
      << e;
  e = parseError(withLine(kernelLine, "colour blue"));
  EXPECT_TRUE(contains(e, ":" + std::to_string(kernelLine + 1) + ": unknown line 'colour'")) << e;
  e = parseError(withLine(kernelLine, "seed 1234"));
  EXPECT_TRUE(contains(e, "a second 'seed' line")) << e;
  e = parseError(withLine(kernelLine, "# no kernel line"));
  EXPECT_TRUE(contains(e, "g/k.sm_90.golden: no 'kernel' line")) << e;
}

TEST(GoldenFiles, AtomicWriteReadBackAndStaleFiles) {
  const std::string dir = scratchDir("files");
  KernelRecord a = test::testKernel("a", "sm_90", "bf16", 64, "none", 0);
  KernelRecord b = test::testBackwardKernel("b", "sm_90", "bf16", 64, "causal", 0);
  KernelRecord c = test::testKernel("c", "sm_90a", "fp16", 128, "none", 0);
  const GoldenFile f = backwardFile(tensor(100, 4));
  for (const KernelRecord *k : {&a, &b})
    ASSERT_FALSE(bool(writeGolden(dir + "/" + goldenFileName(*k), f)));
  // Rewriting replaces the file whole; no temporary file is left.
  ASSERT_FALSE(bool(writeGolden(dir + "/" + goldenFileName(a), f)));
  writeText(dir + "/gone.sm_90.golden", "fagen-golden 2\n");
  writeText(dir + "/notes.txt", "not a golden file\n");
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a.sm_90.golden", "b.sm_90.golden",
                                             "gone.sm_90.golden", "notes.txt"}));

  llvm::Expected<GoldenFile> back = readGolden(dir + "/" + goldenFileName(a));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(formatGolden(*back), formatGolden(f));

  // Missing: kernel c has no file, and reading it says which file.
  llvm::Expected<GoldenFile> missing = readGolden(dir + "/" + goldenFileName(c));
  ASSERT_FALSE(bool(missing));
  EXPECT_TRUE(
      contains(llvm::toString(missing.takeError()), "cannot read " + dir + "/c.sm_90a.golden"));
  // Extra: a file of a kernel the bundle does not have (with a filter, only matching ones).
  EXPECT_EQ(staleGoldenFiles(dir, {a, b, c}, ""), std::vector<std::string>{"gone.sm_90.golden"});
  EXPECT_EQ(staleGoldenFiles(dir, {a, b, c}, "gone"),
            std::vector<std::string>{"gone.sm_90.golden"});
  EXPECT_TRUE(staleGoldenFiles(dir, {a, b, c}, "a").empty());
  EXPECT_EQ(staleGoldenFiles(dir, {a}, ""),
            (std::vector<std::string>{"b.sm_90.golden", "gone.sm_90.golden"}));
  // A file that does not parse names its line.
  llvm::Expected<GoldenFile> broken = readGolden(dir + "/gone.sm_90.golden");
  ASSERT_FALSE(bool(broken));
  EXPECT_TRUE(contains(llvm::toString(broken.takeError()), "gone.sm_90.golden: no 'kernel' line"));

  // Only regular files: a folder or a FIFO named like a golden file is refused (reading a FIFO
  // would block) and never listed as stale.
  const std::string fifo = dir + "/fifo.sm_90.golden";
  ASSERT_FALSE(llvm::sys::fs::create_directory(dir + "/folder.sm_90.golden"));
  unlink(fifo.c_str()); // a FIFO left by an earlier failed run
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const char *name : {"folder.sm_90.golden", "fifo.sm_90.golden"}) {
    llvm::Expected<GoldenFile> odd = readGolden(dir + "/" + name);
    ASSERT_FALSE(bool(odd));
    EXPECT_TRUE(contains(llvm::toString(odd.takeError()), "not a regular file")) << name;
  }
  EXPECT_EQ(staleGoldenFiles(dir, {a, b, c}, ""), std::vector<std::string>{"gone.sm_90.golden"});
  unlink(fifo.c_str()); // remove_directories leaves FIFOs behind
}

TEST(GoldenCompare, ModeAndNonFiniteChanges) {
  const std::vector<float> v = tensor(100, 5);
  // A kernel that became deterministic (or stopped being): the file must be rewritten.
  std::string move = compareTensor(digestTensor("dQ", v, false), digestTensor("dQ", v, true),
                                   "bf16");
  EXPECT_TRUE(contains(move, "dQ: now bitwise stable, the golden file has no hash: rewrite it "
                             "with --update-golden"))
      << move;
  move = compareTensor(digestTensor("dQ", v, true), digestTensor("dQ", v, false), "bf16");
  EXPECT_TRUE(contains(move, "no longer bitwise stable")) << move;
  // A NaN where there was none fails a tolerance compare, wherever it is.
  std::vector<float> nan = v;
  nan[1] = std::numeric_limits<float>::quiet_NaN();
  move = compareTensor(digestTensor("dQ", v, false), digestTensor("dQ", nan, false), "fp16");
  EXPECT_TRUE(contains(move, "dQ: non-finite elements differ")) << move;
  EXPECT_TRUE(contains(move, "non-finite elements 0 -> 1")) << move;
  EXPECT_TRUE(contains(move, "2 fp16 steps")) << move;
}
