//===- BundleTest.cpp - bundle format: round trip, determinism, corruption -===//
#include "compiler/bundle/Bundle.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <utility>

using namespace fagen;
using fagen::test::fakeCubin;
using fagen::test::makeTestBundle;
using fagen::test::makeTinyBundle;

namespace {

bool sameKernel(const KernelRecord &a, const KernelRecord &b) {
  return a.name == b.name && a.pass == b.pass && a.arch == b.arch && a.templ == b.templ &&
         a.variant == b.variant && a.dtype == b.dtype && a.headDimQK == b.headDimQK &&
         a.headDimV == b.headDimV && a.mask == b.mask && a.blockM == b.blockM &&
         a.blockN == b.blockN && a.warps == b.warps && a.stages == b.stages &&
         a.threads == b.threads && a.smemBytes == b.smemBytes &&
         a.paramsVersion == b.paramsVersion && a.registers == b.registers &&
         a.spillBytes == b.spillBytes && a.tuning == b.tuning && a.cubinSection == b.cubinSection &&
         a.rescaleTau == b.rescaleTau && a.exp2EmuPercent == b.exp2EmuPercent &&
         a.exp2PolyDegree == b.exp2PolyDegree && a.seqlenMin == b.seqlenMin &&
         a.seqlenMax == b.seqlenMax && a.maskAlign == b.maskAlign && a.scoreMod == b.scoreMod &&
         a.dropout == b.dropout && a.varlen == b.varlen && a.sparsity == b.sparsity &&
         a.sparseBlock == b.sparseBlock && a.sparseRows == b.sparseRows &&
         a.sparseCols == b.sparseCols && a.sparseHash == b.sparseHash &&
         a.deterministic == b.deterministic && a.prePostThreads == b.prePostThreads &&
         a.qTokens == b.qTokens && a.pageSize == b.pageSize;
}

void expectSameBundle(const Bundle &a, const Bundle &b) {
  EXPECT_EQ(a.fagenVersion, b.fagenVersion);
  EXPECT_EQ(a.toolchain, b.toolchain);
  EXPECT_EQ(a.archs, b.archs);
  EXPECT_EQ(a.cubins, b.cubins);
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i)
    EXPECT_TRUE(sameKernel(a.kernels[i], b.kernels[i])) << "kernel " << i;
}

std::string parseError(const std::vector<uint8_t> &bytes) {
  Bundle out;
  std::string error;
  if (parseBundle(bytes.data(), bytes.size(), out, error))
    return "";
  EXPECT_FALSE(error.empty());
  return error;
}

uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void put(std::vector<uint8_t> &b, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    b[at + i] = uint8_t(v >> (8 * i));
}

uint64_t get(const std::vector<uint8_t> &b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | b[at + i];
  return v;
}

/// Recomputes the header checksum after a test edited the header or the section table.
void resealHeader(std::vector<uint8_t> &b) {
  size_t count = get(b, 12, 4);
  put(b, 16, fnv1a(b.data() + 24, count * 32, fnv1a(b.data(), 16)), 8);
}

/// An independent writer that follows docs/bundle-format.md, so that a test can feed the
/// reader any manifest text.
std::vector<uint8_t> rawBundle(const std::string &manifest,
                               const std::vector<std::string> &cubins) {
  std::vector<std::string> sections = {manifest};
  sections.insert(sections.end(), cubins.begin(), cubins.end());
  size_t end = 24 + 32 * sections.size();
  std::vector<uint8_t> b(end, 0);
  std::memcpy(b.data(), "FAGENBND", 8);
  put(b, 8, 9, 4);
  put(b, 12, sections.size(), 4);
  for (size_t i = 0; i < sections.size(); ++i) {
    size_t offset = (b.size() + 15) / 16 * 16;
    b.resize(offset, 0);
    b.insert(b.end(), sections[i].begin(), sections[i].end());
    size_t entry = 24 + 32 * i;
    put(b, entry, i == 0 ? 1 : 2, 4);
    put(b, entry + 8, offset, 8);
    put(b, entry + 16, sections[i].size(), 8);
    put(b, entry + 24, fnv1a(b.data() + offset, sections[i].size()), 8);
  }
  resealHeader(b);
  return b;
}

std::string manifestOf(const std::vector<uint8_t> &b) {
  size_t offset = get(b, 24 + 8, 8), size = get(b, 24 + 16, 8);
  return std::string(b.begin() + offset, b.begin() + offset + size);
}

const char *kBundleLine = "bundle archs=sm_80 fagen_version=1 toolchain=\n";
const char *kKernelLine =
    "kernel arch=sm_80 block_m=128 block_n=64 cubin=0 decode_ctas_per_sm=0 decode_min_tiles=0 "
    "deterministic=0 dropout=0 dtype=fp16 "
    "exp2_emu_percent=0 exp2_poly_degree=3 head_dim_qk=64 head_dim_v=64 mask=none "
    "mask_align=bottom_right name=k page_size=0 params_version=6 pass=fwd persistent=0 pre_post_threads=0 q_tokens=0 registers=168 "
    "rescale_tau=0 score_mod=none seqlen_max=1099511627776 seqlen_min=0 smem_bytes=49152 "
    "sparse_block=0 sparse_cols=0 sparse_hash= sparse_rows=0 sparsity=none spill_bytes=0 "
    "stages=2 template=sm80 threads=128 tile_counter=0 tma_store_o=0 tuning= variant=v varlen=0 warps=4\n";

/// The error for the tiny bundle's manifest with each `from` replaced by its `to` in the
/// kernel line.
std::string kernelLineError(std::initializer_list<std::pair<std::string, std::string>> edits) {
  std::string line = kKernelLine;
  for (const auto &[from, to] : edits) {
    size_t at = line.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      line.replace(at, from.size(), to);
  }
  return parseError(rawBundle(kBundleLine + line, {fakeCubin("")}));
}

std::string kernelLineError(const std::string &from, const std::string &to) {
  return kernelLineError({{from, to}});
}

} // namespace

TEST(BundleTest, RoundTrip) {
  Bundle b = makeTestBundle();
  std::vector<uint8_t> bytes = serializeBundle(b);
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(bytes.data(), bytes.size(), parsed, error)) << error;
  expectSameBundle(b, parsed);
}

TEST(BundleTest, SerializationIsDeterministicAndCanonical) {
  std::vector<uint8_t> first = serializeBundle(makeTestBundle());
  EXPECT_EQ(first, serializeBundle(makeTestBundle()));
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(first.data(), first.size(), parsed, error)) << error;
  EXPECT_EQ(first, serializeBundle(parsed));
}

TEST(BundleTest, MatchesTheDocumentedLayout) {
  Bundle tiny = makeTinyBundle();
  std::vector<uint8_t> bytes = serializeBundle(tiny);
  EXPECT_EQ(bytes, rawBundle(std::string(kBundleLine) + kKernelLine, tiny.cubins));
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(get(bytes, 24 + 32 * i + 8, 8) % 16, 0u) << "section " << i << " is not aligned";
}

TEST(BundleTest, ManifestIsSortedEncodedText) {
  Bundle b = makeTestBundle();
  b.toolchain = "nvcc 13.0.88 =100% \n\xc3\xa9";
  b.kernels[0].tuning = "";
  std::vector<uint8_t> bytes = serializeBundle(b);
  std::string manifest = manifestOf(bytes);
  EXPECT_EQ(manifest.substr(0, manifest.find('\n') + 1),
            "bundle archs=sm_80,sm_90a fagen_version=0.1.0 "
            "toolchain=nvcc%2013.0.88%20%3D100%25%20%0A%C3%A9\n");
  EXPECT_NE(manifest.find("\nkernel arch=sm_80 block_m=128 "), std::string::npos);
  EXPECT_EQ(manifest.back(), '\n');
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(bytes.data(), bytes.size(), parsed, error)) << error;
  expectSameBundle(b, parsed);
}

TEST(BundleTest, EmptyBundleRoundTrips) {
  Bundle b;
  b.fagenVersion = "0.1.0";
  std::vector<uint8_t> bytes = serializeBundle(b);
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(bytes.data(), bytes.size(), parsed, error)) << error;
  expectSameBundle(b, parsed);
}

TEST(BundleTest, RefusesEveryTruncation) {
  std::vector<uint8_t> bytes = serializeBundle(makeTinyBundle());
  for (size_t length = 0; length < bytes.size(); ++length) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + length);
    std::string error = parseError(cut);
    if (length < 8)
      EXPECT_NE(error.find("not a fagen bundle"), std::string::npos) << length << ": " << error;
    else
      EXPECT_NE(error.find("bundle is truncated"), std::string::npos) << length << ": " << error;
  }
  std::vector<uint8_t> full = serializeBundle(makeTestBundle());
  for (size_t length = 0; length < full.size(); length += 7)
    EXPECT_NE(parseError(std::vector<uint8_t>(full.begin(), full.begin() + length)), "");
}

TEST(BundleTest, RefusesAFlippedByteAtEveryOffset) {
  std::vector<uint8_t> bytes = serializeBundle(makeTinyBundle());
  for (uint8_t mask : {0x01, 0x80, 0xff}) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= mask;
      EXPECT_NE(parseError(bad), "") << "byte " << i << " ^ " << int(mask) << " was accepted";
    }
  }
}

TEST(BundleTest, NamesTheProblem) {
  std::vector<uint8_t> good = serializeBundle(makeTestBundle());

  std::vector<uint8_t> b = good;
  b[0] = 'X';
  EXPECT_NE(parseError(b).find("does not start with the magic bytes \"FAGENBND\""),
            std::string::npos);

  b = good;
  put(b, 8, 10, 4);
  // A newer format is fixed by a newer fagen, not by rebuilding the bundle.
  EXPECT_EQ(parseError(b), "bundle format version 10 is newer than this fagen reads (format 9): "
                           "the bundle was written by a newer fagen; upgrade fagen (and the "
                           "runtime library) to read it");

  // Version 2 bundles (before the variant and backward keys) are refused the same way.
  b = good;
  put(b, 8, 2, 4);
  EXPECT_EQ(parseError(b), "bundle format version 2 is not supported by this fagen (expects 9): "
                           "rebuild the bundle with this fagen version");

  b = good;
  b[17] ^= 1;
  EXPECT_NE(parseError(b).find("checksum mismatch in the bundle header"), std::string::npos);

  b = good;
  b.back() ^= 1;
  EXPECT_EQ(parseError(b).find("checksum mismatch in section 2 (cubin): stored 0x"), 0u)
      << parseError(b);

  b = good;
  b.push_back(0);
  EXPECT_NE(parseError(b).find("1 bytes of trailing data"), std::string::npos);
}

TEST(BundleTest, RefusesBadSectionTables) {
  std::vector<uint8_t> good = serializeBundle(makeTestBundle());
  const size_t last = 24 + 32 * 2;

  std::vector<uint8_t> b = good;
  put(b, last + 16, get(b, last + 16, 8) + 1000, 8);
  resealHeader(b);
  std::string expected = "bundle is truncated: section 2 (cubin) ends at byte " +
                         std::to_string(good.size() + 1000) + " but the file has " +
                         std::to_string(good.size()) +
                         " bytes: the file was cut short; rebuild or copy it again";
  EXPECT_EQ(parseError(b), expected);

  b = good;
  put(b, last + 16, ~uint64_t(0) - 4, 8);
  resealHeader(b);
  EXPECT_NE(parseError(b).find("truncated: section 2 (cubin) ends at a byte beyond 2^64"),
            std::string::npos);

  b = good;
  put(b, last + 8, get(b, last + 8, 8) - 16, 8);
  resealHeader(b);
  EXPECT_NE(parseError(b).find("section 2 (cubin) starts at byte"), std::string::npos);
  EXPECT_NE(parseError(b).find("overlapping"), std::string::npos);

  b = good;
  put(b, last + 8, get(b, last + 8, 8) + 16, 8);
  resealHeader(b);
  EXPECT_NE(parseError(b).find("expected byte"), std::string::npos) << parseError(b);

  b = good;
  put(b, last, 9, 4);
  resealHeader(b);
  EXPECT_NE(parseError(b).find("section 2 has kind 9, expected 2 (cubin)"), std::string::npos);

  b = good;
  put(b, 12, 1000, 4);
  EXPECT_NE(parseError(b).find("the section table (1000 sections) ends at byte 32024"),
            std::string::npos);

  b = good;
  put(b, 12, 0, 4);
  EXPECT_NE(parseError(b).find("says 0 sections"), std::string::npos);
}

TEST(BundleTest, RefusesACubinWithoutElfMagic) {
  Bundle bad = makeTinyBundle();
  bad.cubins[0] = "not elf";
  EXPECT_NE(parseError(serializeBundle(bad)).find("section 1 (cubin) does not start with the ELF"),
            std::string::npos);
}

TEST(BundleTest, AcceptsTheHandWrittenManifest) {
  std::vector<uint8_t> b = rawBundle(std::string(kBundleLine) + kKernelLine, {fakeCubin("")});
  EXPECT_EQ(parseError(b), "");
}

TEST(BundleTest, RefusesBadManifests) {
  auto error = [](const std::string &manifest) {
    return parseError(rawBundle(manifest, {fakeCubin("")}));
  };
  auto has = [](const std::string &error, const std::string &part) {
    return error.find(part) != std::string::npos;
  };
  std::string bundleLine = kBundleLine, kernelLine = kKernelLine;

  EXPECT_TRUE(has(error(bundleLine + kernelLine.substr(0, kernelLine.size() - 1)),
                  "does not end with a newline"));
  EXPECT_TRUE(has(error(kernelLine), "line 1: expected the 'bundle' record"));
  EXPECT_TRUE(has(error(bundleLine + bundleLine), "line 2: a second 'bundle' record"));
  EXPECT_TRUE(has(error(bundleLine + "\n"), "line 2: expected a record type"));
  EXPECT_TRUE(has(error(bundleLine + "shader a=1\n"), "unknown record type 'shader'"));
  EXPECT_TRUE(has(error("bundle fagen_version=1 toolchain=\n"), "required key 'archs'"));
  EXPECT_TRUE(has(error("bundle archs=sm_80 fagen_version= toolchain=\n"),
                  "key 'fagen_version' is empty"));
  EXPECT_TRUE(has(error("bundle archs=sm_90a,sm_80 fagen_version=1 toolchain=\n"),
                  "'archs' must be sorted and unique"));
  EXPECT_TRUE(has(error("bundle archs=sm_80,,sm_90 fagen_version=1 toolchain=\n"),
                  "arch '' in 'archs'"));
  EXPECT_TRUE(has(error("bundle archs=gfx90a fagen_version=1 toolchain=\n"),
                  "arch 'gfx90a' in 'archs' is not an arch name"));
  EXPECT_TRUE(has(error("bundle archs=sm_80 extra=1 fagen_version=1 toolchain=\n"),
                  "unknown key 'extra'"));

  EXPECT_TRUE(has(kernelLineError(" warps=4", ""), "line 2 (kernel k): required key 'warps'"));
  EXPECT_TRUE(has(kernelLineError("warps=4", "warps=4 zzz=1"), "unknown key 'zzz'"));
  EXPECT_TRUE(has(kernelLineError("warps=4", "warps=4 warps=4"), "'warps' appears twice"));
  EXPECT_TRUE(has(kernelLineError("arch=sm_80 block_m=128", "block_m=128 arch=sm_80"),
                  "key 'arch' is out of order"));
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=abc"),
                  "key 'block_m' has value 'abc', expected a decimal integer"));
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=0128"), "expected a decimal integer"));
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=-0"), "expected a decimal integer"));
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=99999999999999999999"),
                  "expected a decimal integer"));
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=0"),
                  "key 'block_m' is 0, expected a value in [1, 1024]"));
  EXPECT_TRUE(
      has(kernelLineError("cubin=0", "cubin=1"), "key 'cubin' is 1, expected a value in [0, 0]"));
  EXPECT_TRUE(has(kernelLineError("registers=168", "registers=-2"), "'registers' is -2"));
  EXPECT_TRUE(has(kernelLineError("arch=sm_80", "arch=sm_90a"),
                  "arch sm_90a is not in the bundle's archs (sm_80)"));
  EXPECT_TRUE(has(kernelLineError("arch=sm_80", "arch=sm_8"), "arch 'sm_8' is not an arch name"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name="), "key 'name' is empty"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name=%4"), "not followed by two hex digits"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name=%zz"), "not followed by two upper-case hex"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name=%6B"), "must be written as itself"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name=k\tx"), "byte 0x09 must be percent-encoded"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name"), "expected key=value, found 'name'"));
  EXPECT_TRUE(has(kernelLineError("name=k", "=k"), "expected key=value"));
  EXPECT_TRUE(has(kernelLineError("name=k", "Name=k"), "outside [a-z0-9_]"));
  EXPECT_TRUE(has(kernelLineError("name=k", "name=k "), "expected key=value, found ''"));

  // Every message says what to do.
  EXPECT_TRUE(has(kernelLineError("block_m=128", "block_m=0"), "rebuild the bundle"));
}

// Values that parse but that no fagen writes: head dims no template was built for, and one
// kernel recorded twice (the runtime's choice between them would depend on their order).
TEST(BundleTest, RefusesImpossibleManifestSemantics) {
  EXPECT_NE(kernelLineError("head_dim_qk=64", "head_dim_qk=7")
                .find("head_dim_qk 7 is impossible: fagen builds head dims that are multiples "
                      "of 8 in 32..256"),
            std::string::npos);
  EXPECT_NE(kernelLineError("head_dim_v=64", "head_dim_v=512").find("head_dim_v 512 is impossible"),
            std::string::npos);
  std::string twice = parseError(rawBundle(std::string(kBundleLine) + kKernelLine + kKernelLine,
                                           {fakeCubin("")}));
  EXPECT_NE(twice.find("kernel k (sm_80, seqlen 0..1099511627776) is recorded twice"),
            std::string::npos)
      << twice;
  // The same kernel for two seqlen buckets is two kernels.
  std::string second = kKernelLine;
  second.replace(second.find("seqlen_min=0"), 12, "seqlen_min=5000");
  EXPECT_EQ(parseError(rawBundle(std::string(kBundleLine) + kKernelLine + second,
                                 {fakeCubin("")})),
            "");
}

TEST(BundleTest, DecodeKernelsRoundTripAndAreChecked) {
  Bundle b = fagen::test::makeDecodeBundle();
  std::vector<uint8_t> bytes = serializeBundle(b);
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(bytes.data(), bytes.size(), parsed, error)) << error;
  expectSameBundle(b, parsed);
  EXPECT_TRUE(isDecodeKernel(parsed.kernels[4]));
  EXPECT_EQ(parsed.kernels[4].qTokens, 4);
  // A decode kernel needs its query tokens and its merge threads; no other kernel has tokens.
  auto decodeLine = [](const std::string &edit) {
    std::string line = kKernelLine;
    for (auto [from, to] : {std::pair<std::string, std::string>{"template=sm80", "template=sm80decode"},
                            {"q_tokens=0", "q_tokens=4"},
                            {"decode_ctas_per_sm=0", "decode_ctas_per_sm=1"},
                            {"decode_min_tiles=0", "decode_min_tiles=4"},
                            {"pre_post_threads=0", "pre_post_threads=128"}})
      line.replace(line.find(from), from.size(), to);
    const size_t eq = edit.find('=');
    const size_t at = line.find(" " + edit.substr(0, eq + 1));
    const size_t end = line.find_first_of(" \n", at + 1);
    line.replace(at + 1, end - at - 1, edit);
    return parseError(rawBundle(kBundleLine + line, {fakeCubin("")}));
  };
  EXPECT_EQ(decodeLine("q_tokens=4"), "");
  EXPECT_NE(decodeLine("q_tokens=0").find("a kernel of template sm80decode must be a fwd kernel "
                                          "with q_tokens in 1..16"),
            std::string::npos);
  EXPECT_NE(decodeLine("q_tokens=17").find("q_tokens 17"), std::string::npos);
  EXPECT_NE(decodeLine("pre_post_threads=0").find("pre_post_threads 0"), std::string::npos);
  // Its split rule: both numbers in their ranges (templates/common/decode_split.h); none on
  // another template.
  EXPECT_EQ(parsed.kernels[4].decodeCtasPerSm, kDecodeCtasPerSm);
  EXPECT_EQ(parsed.kernels[4].decodeMinTiles, kDecodeMinTilesPerSplit);
  EXPECT_EQ(decodeLine("decode_ctas_per_sm=4"), "");
  EXPECT_EQ(decodeLine("decode_min_tiles=64"), "");
  EXPECT_NE(decodeLine("decode_ctas_per_sm=0").find("needs its split rule: decode_ctas_per_sm in "
                                                    "1..4 and decode_min_tiles in 1..64, got 0 "
                                                    "and 4"),
            std::string::npos);
  EXPECT_NE(decodeLine("decode_min_tiles=0").find("got 1 and 0"), std::string::npos);
  EXPECT_NE(decodeLine("decode_ctas_per_sm=5").find("decode_ctas_per_sm"), std::string::npos);
  EXPECT_NE(decodeLine("decode_min_tiles=65").find("decode_min_tiles"), std::string::npos);
  EXPECT_NE(kernelLineError("decode_min_tiles=0", "decode_min_tiles=4")
                .find("decode_ctas_per_sm and decode_min_tiles are 0 and 4 on a kernel of "
                      "template 'sm80'; only sm80decode kernels have a split rule"),
            std::string::npos);
  EXPECT_NE(decodeLine("pass=bwd").find("pass bwd"), std::string::npos);
  EXPECT_NE(decodeLine("dropout=1").find("has no dropout, varlen, alibi or block sparsity"),
            std::string::npos);
  // A paged decode kernel: page sizes as the spec's; none on other templates.
  EXPECT_EQ(decodeLine("page_size=16"), "");
  EXPECT_EQ(decodeLine("page_size=256"), "");
  EXPECT_NE(decodeLine("page_size=48").find("page_size is 48; a paged decode kernel's pages are "
                                            "a power of two in 16..256 tokens"),
            std::string::npos);
  EXPECT_NE(kernelLineError("page_size=0", "page_size=16")
                .find("page_size is 16 on a fwd kernel of template 'sm80' without varlen; only "
                      "sm80decode kernels and varlen sm80 and sm90ws fwd kernels (chunked "
                      "prefill) read a paged KV cache"),
            std::string::npos);
  // A paged forward (chunked prefill): varlen sm80 fwd kernels, pages as the spec's.
  EXPECT_EQ(kernelLineError({{"page_size=0", "page_size=16"}, {"varlen=0", "varlen=1"}}), "");
  EXPECT_EQ(kernelLineError({{"page_size=0", "page_size=16"},
                            {"varlen=0", "varlen=1"},
                            {"template=sm80", "template=sm90ws"}}),
            "");
  EXPECT_NE(kernelLineError({{"page_size=0", "page_size=16"},
                            {"varlen=0", "varlen=1"},
                            {"template=sm80", "template=sm90"}})
                .find("page_size is 16 on a fwd kernel of template 'sm90'; only"),
            std::string::npos);
  EXPECT_NE(kernelLineError({{"page_size=0", "page_size=48"}, {"varlen=0", "varlen=1"}})
                .find("page_size is 48 on a fwd kernel of template 'sm80'; only"),
            std::string::npos);
  EXPECT_NE(kernelLineError("q_tokens=0", "q_tokens=2")
                .find("q_tokens is 2 on a kernel of template 'sm80'; only sm80decode kernels"),
            std::string::npos);
  EXPECT_NE(kernelLineError("pre_post_threads=0", "pre_post_threads=128")
                .find("pre_post_threads is 128 on a fwd kernel, expected 0"),
            std::string::npos);
}

TEST(BundleTest, RefusesAKernelWhenThereIsNoCubin) {
  std::string error = parseError(rawBundle(std::string(kBundleLine) + kKernelLine, {}));
  EXPECT_NE(error.find("the bundle has no cubin sections"), std::string::npos) << error;
}

TEST(BundleTest, NullDataIsRefused) {
  Bundle out;
  std::string error;
  EXPECT_FALSE(parseBundle(nullptr, 10, out, error));
  EXPECT_FALSE(parseBundle(nullptr, 0, out, error));
}

TEST(BundleTest, ArchComputeCapability) {
  struct Case {
    const char *arch;
    int cc;
  } cases[] = {{"sm_80", 80},  {"sm_86", 86},   {"sm_90", 90},  {"sm_90a", 90},
               {"sm_100a", 100}, {"sm_120", 120}, {"sm_8", -1},   {"sm_", -1},
               {"sm_090", -1}, {"sm_90b", -1},   {"compute_90", -1}, {"", -1},
               {"sm_1000", -1}, {"SM_90", -1},    {"sm_9x", -1},  {"sm_a", -1}};
  for (const Case &c : cases)
    EXPECT_EQ(archComputeCapability(c.arch), c.cc) << c.arch;
}

TEST(BundleTest, ArchRunsOn) {
  struct Case {
    const char *arch;
    int major, minor;
    bool runs;
  } cases[] = {{"sm_80", 8, 0, true},    {"sm_80", 8, 6, true},    {"sm_86", 8, 0, false},
               {"sm_80", 9, 0, false},   {"sm_90", 9, 0, true},    {"sm_90a", 9, 0, true},
               {"sm_90a", 9, 1, false},  {"sm_100a", 10, 0, true}, {"sm_100a", 10, 3, false},
               {"sm_100", 10, 3, true},  {"sm_90", 10, 0, false},  {"sm_bad", 9, 0, false}};
  for (const Case &c : cases)
    EXPECT_EQ(archRunsOn(c.arch, c.major, c.minor), c.runs)
        << c.arch << " on " << c.major << "." << c.minor;
}

TEST(BundleTest, VariantsAndBackwardRoundTrip) {
  Bundle b = fagen::test::makeVariantBundle();
  std::vector<uint8_t> bytes = serializeBundle(b);
  Bundle parsed;
  std::string error;
  ASSERT_TRUE(parseBundle(bytes.data(), bytes.size(), parsed, error)) << error;
  expectSameBundle(b, parsed);
  EXPECT_EQ(bytes, serializeBundle(parsed));
  std::string manifest = manifestOf(bytes);
  EXPECT_NE(manifest.find(" mask=window mask_align=top_left "), std::string::npos) << manifest;
  EXPECT_NE(manifest.find(" pass=bwd persistent=0 pre_post_threads=128 "), std::string::npos);
  EXPECT_NE(manifest.find(" sparse_block=128 sparse_cols=16 sparse_hash=0123abcd sparse_rows=8 "
                          "sparsity=static "),
            std::string::npos);
  EXPECT_NE(manifest.find(" deterministic=1 dropout=0 "), std::string::npos);
  EXPECT_NE(manifest.find(" score_mod=alibi "), std::string::npos);
}

TEST(BundleTest, RefusesBadVariantValues) {
  auto has = [](const std::string &error, const std::string &part) {
    return error.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(kernelLineError("pass=fwd", "pass=both"),
                  "key 'pass' is 'both', expected one of fwd, bwd"));
  EXPECT_TRUE(has(kernelLineError("mask=none", "mask=sliding"),
                  "key 'mask' is 'sliding', expected one of none, causal, window"));
  EXPECT_TRUE(has(kernelLineError("mask_align=bottom_right", "mask_align=center"),
                  "key 'mask_align' is 'center', expected one of bottom_right, top_left"));
  EXPECT_TRUE(has(kernelLineError("score_mod=none", "score_mod=relu"),
                  "key 'score_mod' is 'relu', expected one of none, softcap, alibi"));
  EXPECT_TRUE(has(kernelLineError("sparsity=none", "sparsity=dense"),
                  "key 'sparsity' is 'dense', expected one of none, runtime, static"));
  EXPECT_TRUE(has(kernelLineError("dropout=0", "dropout=2"),
                  "key 'dropout' is 2, expected a value in [0, 1]"));
  EXPECT_TRUE(has(kernelLineError("varlen=0", "varlen=-1"), "key 'varlen' is -1"));
  EXPECT_TRUE(has(kernelLineError(" mask_align=bottom_right", ""),
                  "required key 'mask_align' is missing"));
  EXPECT_TRUE(has(kernelLineError("pre_post_threads=0", "pre_post_threads=2000"),
                  "key 'pre_post_threads' is 2000, expected a value in [0, 1024]"));

  // Rules between keys.
  EXPECT_TRUE(has(kernelLineError("deterministic=0", "deterministic=1"),
                  "deterministic is 1 on a fwd kernel"));
  EXPECT_TRUE(has(kernelLineError("pre_post_threads=0", "pre_post_threads=128"),
                  "pre_post_threads is 128 on a fwd kernel, expected 0"));
  EXPECT_TRUE(has(kernelLineError("persistent=0", "persistent=1"),
                  "persistent is 1 on a kernel of template 'sm80'; only sm90ws kernels"));
  EXPECT_EQ(
      kernelLineError({{"persistent=0", "persistent=1"}, {"template=sm80", "template=sm90ws"}}),
      "");
  EXPECT_TRUE(has(kernelLineError("tile_counter=0", "tile_counter=1"),
                  "tile_counter is 1 on a fwd kernel of template 'sm80'; only sm90ws forward "
                  "kernels take work tiles from a counter"));
  EXPECT_EQ(
      kernelLineError({{"tile_counter=0", "tile_counter=1"}, {"template=sm80", "template=sm90ws"}}),
      "");
  EXPECT_TRUE(has(kernelLineError({{"tile_counter=0", "tile_counter=1"},
                                   {"template=sm80", "template=sm90ws"},
                                   {"pass=fwd", "pass=bwd"},
                                   {"pre_post_threads=0", "pre_post_threads=128"}}),
                  "tile_counter is 1 on a bwd kernel of template 'sm90ws'"));
  EXPECT_TRUE(has(kernelLineError("tile_counter=0", "tile_counter=2"), "tile_counter"));
  EXPECT_TRUE(has(kernelLineError("tma_store_o=0", "tma_store_o=1"),
                  "tma_store_o is 1 on a fwd kernel of template 'sm80'; only sm90ws forward "
                  "kernels without varlen store O through TMA"));
  EXPECT_EQ(
      kernelLineError({{"tma_store_o=0", "tma_store_o=1"}, {"template=sm80", "template=sm90ws"}}),
      "");
  EXPECT_TRUE(has(kernelLineError({{"tma_store_o=0", "tma_store_o=1"},
                                   {"template=sm80", "template=sm90ws"},
                                   {"varlen=0", "varlen=1"}}),
                  "tma_store_o is 1 on a varlen fwd kernel of template 'sm90ws'"));
  EXPECT_TRUE(has(kernelLineError("tma_store_o=0", "tma_store_o=3"), "tma_store_o"));
  EXPECT_TRUE(
      has(kernelLineError("pass=fwd", "pass=bwd"), "pre_post_threads is 0 on a bwd kernel"));
  EXPECT_EQ(kernelLineError({{"params_version=6", "params_version=1"}, {"pass=fwd", "pass=bwd"},
                             {"pre_post_threads=0", "pre_post_threads=128"},
                             {"deterministic=0", "deterministic=1"}}),
            "");
  EXPECT_TRUE(
      has(kernelLineError("sparse_block=0", "sparse_block=128"),
          "sparsity is none but sparse_block, sparse_rows, sparse_cols or sparse_hash is set"));
  EXPECT_TRUE(has(kernelLineError("sparsity=none", "sparsity=runtime"),
                  "sparsity is runtime but sparse_block is 0"));
  EXPECT_TRUE(has(kernelLineError({{"sparse_block=0", "sparse_block=96"},
                                   {"sparsity=none", "sparsity=runtime"}}),
                  "sparse_block 96 is not a multiple of the tile 128x64"));
  EXPECT_EQ(kernelLineError({{"sparse_block=0", "sparse_block=256"},
                             {"sparsity=none", "sparsity=runtime"}}),
            "");
  EXPECT_TRUE(has(kernelLineError({{"sparse_block=0", "sparse_block=128"},
                                   {"sparse_rows=0", "sparse_rows=4"},
                                   {"sparsity=none", "sparsity=runtime"}}),
                  "sparsity is runtime but sparse_rows, sparse_cols or sparse_hash is set"));
  EXPECT_TRUE(has(kernelLineError({{"sparse_block=0", "sparse_block=128"},
                                   {"sparse_rows=0", "sparse_rows=4"},
                                   {"sparse_hash=", "sparse_hash=0123abcd"},
                                   {"sparsity=none", "sparsity=static"}}),
                  "sparsity is static but sparse_rows or sparse_cols is 0"));
  EXPECT_TRUE(has(kernelLineError({{"sparse_block=0", "sparse_block=128"},
                                   {"sparse_cols=0", "sparse_cols=4"},
                                   {"sparse_rows=0", "sparse_rows=4"},
                                   {"sparse_hash=", "sparse_hash=0123ABCD"},
                                   {"sparsity=none", "sparsity=static"}}),
                  "sparse_hash '0123ABCD' is not 8 lower-case hex digits"));
  EXPECT_EQ(kernelLineError({{"sparse_block=0", "sparse_block=128"},
                             {"sparse_cols=0", "sparse_cols=4"},
                             {"sparse_rows=0", "sparse_rows=4"},
                             {"sparse_hash=", "sparse_hash=0123abcd"},
                             {"sparsity=none", "sparsity=static"}}),
            "");
  // Every message says what to do.
  EXPECT_TRUE(has(kernelLineError("pass=fwd", "pass=bwd"), "rebuild the bundle"));
}
