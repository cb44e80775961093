//===- DecodeTest.cpp - the split-KV decode: plans, emitted source, split rule ===//

#include "check/Check.h"
#include "compiler/bundle/Package.h"
#include "compiler/emit/Emit.h"
#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"
#include "templates/abi/decode_params.h"
#include "templates/common/decode_split.h"
#include "templates/common/smem_layout.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <vector>

using namespace fagen;

namespace {

std::vector<KernelPlan> plansOf(const std::string &yaml, std::vector<std::string> archs) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  EXPECT_TRUE(bool(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, archs, nullptr, false);
  EXPECT_TRUE(bool(plans)) << (plans ? "" : llvm::toString(plans.takeError()));
  return plans ? *plans : std::vector<KernelPlan>();
}

std::string planError(const std::string &yaml, std::vector<std::string> archs) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  if (!spec)
    return llvm::toString(spec.takeError());
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, archs);
  return plans ? "" : llvm::toString(plans.takeError());
}

const KernelPlan *decodeOf(const std::vector<KernelPlan> &plans) {
  for (const KernelPlan &p : plans)
    if (isDecodePlan(p))
      return &p;
  return nullptr;
}

} // namespace

TEST(DecodePlan, DefaultsPerHeadDimAndArch) {
  struct Case {
    int headDim;
    const char *arch;
    int blockN, warps, stages, smem;
  } cases[] = {
      // Two CTAs per SM on sm_90 (114 KB each, less 1 KB reserved): 6, 3 and 2 stages.
      {64, "sm_90a", 64, 4, 6, 16 * 144 + 6 * 64 * 288},
      {128, "sm_90", 64, 4, 3, 16 * 272 + 3 * 64 * 544},
      {256, "sm_100a", 64, 4, 2, 16 * 512 + 2 * 64 * 1024},
      // sm_80 (82 KB a CTA): 2 stages at hd 128; sm_86 fits hd 256 only with 32 keys, 2 warps.
      {128, "sm_80", 64, 4, 2, 16 * 272 + 2 * 64 * 544},
      {256, "sm_86", 32, 2, 2, 16 * 512 + 2 * 32 * 1024},
  };
  for (const Case &c : cases) {
    std::vector<KernelPlan> plans =
        plansOf("variants: [{name: d, dtype: bf16, head_dim: " + std::to_string(c.headDim) +
                    ", mask: causal, passes: [decode]}]",
                {c.arch});
    ASSERT_EQ(plans.size(), 1u) << c.headDim << " " << c.arch;
    const KernelPlan &p = plans[0];
    EXPECT_EQ(p.templ, "sm80decode");
    EXPECT_EQ(p.pass, Pass::Forward);
    EXPECT_EQ(p.blockM, 16);
    EXPECT_EQ(p.qTokens, 1);
    EXPECT_EQ(p.blockN, c.blockN) << c.headDim << " " << c.arch;
    EXPECT_EQ(p.warps, c.warps) << c.headDim << " " << c.arch;
    EXPECT_EQ(p.stages, c.stages) << c.headDim << " " << c.arch;
    EXPECT_EQ(p.smemBytes, c.smem) << c.headDim << " " << c.arch;
    EXPECT_EQ(p.threads, 32 * c.warps);
    EXPECT_EQ(p.prePostThreads, FAGEN_MERGE_THREADS);
    EXPECT_LE(p.smemBytes, archSmemLimit(c.arch));
  }
}

TEST(DecodePlan, EveryHeadDimFitsEveryArch) {
  for (int hd = 32; hd <= 256; hd += 8)
    for (const std::string &arch : knownArchs()) {
      std::string yaml = "variants: [{name: d, dtype: fp16, head_dim: " + std::to_string(hd) +
                         ", passes: [decode], decode: {q_tokens: 16}}]";
      std::vector<KernelPlan> plans = plansOf(yaml, {arch});
      ASSERT_EQ(plans.size(), 1u) << hd << " " << arch;
      EXPECT_LE(plans[0].smemBytes, archSmemLimit(arch)) << hd << " " << arch;
      // The reduction of the warps' O fits where the K/V ring was.
      EXPECT_GE(plans[0].smemBytes - plans[0].blockM * (paddedHeadDim(hd) * 2 + 16),
                sm80_decode_reduce_bytes(paddedHeadDim(hd), plans[0].blockM, plans[0].warps));
    }
}

TEST(DecodePlan, RowBlockFromTheGroupAndTokens) {
  // 32 packed rows where the spec's heads x q_tokens exceed 16, up to head_dim_v 128.
  auto blockM = [](const std::string &extra, int hd) {
    std::vector<KernelPlan> plans =
        plansOf("variants: [{name: d, dtype: bf16, head_dim: " + std::to_string(hd) +
                    ", passes: [decode]" + extra + "}]",
                {"sm_90a"});
    return plans.empty() ? 0 : plans[0].blockM;
  };
  EXPECT_EQ(blockM("", 128), 16);
  EXPECT_EQ(blockM(", heads: {q: 32, kv: 8}", 128), 16);                           // 4 rows
  EXPECT_EQ(blockM(", heads: {q: 32, kv: 8}, decode: {q_tokens: 4}", 128), 16);   // 16 rows
  EXPECT_EQ(blockM(", heads: {q: 32, kv: 8}, decode: {q_tokens: 5}", 128), 32);   // 20 rows
  EXPECT_EQ(blockM(", heads: {q: 32, kv: 8}, decode: {q_tokens: 16}", 256), 16);  // registers
  EXPECT_EQ(blockM(", decode: {q_tokens: 16}", 64), 16);
}

TEST(DecodePlan, BesideTheForwardWithItsOwnNameAndEntryPoints) {
  std::vector<KernelPlan> plans = plansOf(
      "variants: [{name: d, dtype: bf16, head_dim: 128, mask: causal, passes: [fwd, decode]}]",
      {"sm_90"});
  ASSERT_EQ(plans.size(), 2u);
  const KernelPlan *d = decodeOf(plans);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "fagen_fwd_bf16_hd128_causal_sm80decode_m16n64w4s3");
  EXPECT_EQ(entryPointNames(*d),
            (std::vector<std::string>{d->name, d->name + "_combine", d->name + "_merge"}));
  EXPECT_EQ(workloadKey(*d), "fwd bf16 hd128x128 causal decode sm_90");
  EXPECT_FALSE(d->spillFallback.has_value());
  const std::string printed = formatPlans({*d});
  EXPECT_NE(printed.find("template=sm80decode"), std::string::npos) << printed;
  EXPECT_NE(printed.find("up to q_tokens=1 query tokens"), std::string::npos) << printed;
}

TEST(DecodePlan, OneKernelForVariantsThatPlanItTakesTheMostTokens) {
  std::vector<KernelPlan> plans =
      plansOf("variants:\n"
              "  - {name: a, dtype: bf16, head_dim: 64, passes: [decode], decode: {q_tokens: 2}}\n"
              "  - {name: b, dtype: bf16, head_dim: 64, passes: [decode], decode: {q_tokens: 7}}\n"
              "  - {name: c, dtype: bf16, head_dim: 64, passes: [decode]}\n",
              {"sm_90a"});
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].qTokens, 7);
  EXPECT_EQ(plans[0].variant, "a,b,c");
}

TEST(DecodePlan, RefusesWhatTheTemplateDoesNotServe) {
  const std::string served = " (it serves masks none, causal and window in either alignment, "
                             "score mods none and softcap; no alibi, dropout, block sparsity or "
                             "varlen): remove decode from passes, or ";
  EXPECT_EQ(planError("variants:\n"
                      "  - name: d\n"
                      "    dtype: bf16\n"
                      "    head_dim: 128\n"
                      "    score_mod: alibi\n"
                      "    passes: [fwd, decode]\n",
                      {"sm_90a"}),
            "t.yaml:6:19: error: the decode kernel does not serve score_mod alibi" + served +
                "score_mod alibi");
  EXPECT_EQ(planError("variants: [{name: d, dtype: bf16, head_dim: 128, dropout: true, passes: "
                      "[decode]}]",
                      {"sm_90a"}),
            "t.yaml:1:74: error: the decode kernel does not serve dropout" + served + "dropout");
  EXPECT_EQ(planError("variants: [{name: d, dtype: bf16, head_dim: 128, varlen: true, passes: "
                      "[decode]}]",
                      {"sm_90a"}),
            "t.yaml:1:73: error: the decode kernel does not serve varlen" + served + "varlen");
  EXPECT_EQ(planError("variants: [{name: d, dtype: bf16, head_dim: 128, passes: [decode], "
                      "block_sparse: {block: 128, layout: runtime}}]",
                      {"sm_90a"}),
            "t.yaml:1:59: error: the decode kernel does not serve block_sparse" + served +
                "block_sparse");
  // What it serves plans: every mask, both alignments, softcap.
  EXPECT_EQ(planError("variants:\n"
                      "  - {name: a, dtype: fp16, head_dim: 96, mask: window, mask_align: "
                      "top_left, score_mod: softcap, passes: [decode]}\n"
                      "  - {name: b, dtype: bf16, head_dim_qk: 192, head_dim_v: 128, mask: "
                      "causal, passes: [decode]}\n",
                      {"sm_80", "sm_90a", "sm_100a"}),
            "");
}

TEST(DecodePlan, ConfigProblemsMirrorTheTemplatesAsserts) {
  std::vector<KernelPlan> plans =
      plansOf("variants: [{name: d, dtype: bf16, head_dim: 256, passes: [decode]}]", {"sm_90a"});
  ASSERT_EQ(plans.size(), 1u);
  auto problem = [&](auto edit) {
    KernelConfig c = configOf(plans[0]);
    edit(c);
    llvm::Expected<KernelPlan> p = applyConfig(plans[0], c);
    return p ? std::string() : llvm::toString(p.takeError());
  };
  auto has = [](const std::string &error, const char *what) {
    return error.find(what) != std::string::npos;
  };
  EXPECT_EQ(problem([](KernelConfig &) {}), "");
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.blockM = 48; }), "decode block_m must be 16 or 32"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.warps = 3; }), "decode warps must be 2, 4 or 8"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.blockN = 96; }),
                  "decode block_n must be a multiple of 16 x warps (64) up to 256, got 96"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.stages = 1; }), "decode stages must be in 2..8"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.blockM = 32; }),
                  "block_m 32 needs head_dim_v <= 128"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.rescaleTau = 8; }),
                  "the decode template has no rescale_tau or exp2 emulation"));
  EXPECT_TRUE(has(problem([](KernelConfig &c) { c.stages = 4; }),
                  "decode tile 16x64 with 4 stages needs 270336 bytes of shared memory; sm_90a "
                  "allows 232448"));
}

TEST(DecodePlan, TheSplitRuleIsTheHeadersOrATunedOne) {
  std::vector<KernelPlan> plans = plansOf(
      "variants: [{name: d, dtype: bf16, head_dim: 128, mask: causal, passes: [fwd, decode]}]",
      {"sm_90a"});
  const KernelPlan *d = decodeOf(plans);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->decodeCtasPerSm, kDecodeCtasPerSm);
  EXPECT_EQ(d->decodeMinTiles, kDecodeMinTilesPerSplit);
  EXPECT_EQ(configOf(*d).text(), "m16n64w4s3 split1x4");
  for (const KernelPlan &p : plans) // the forward has none
    if (!isDecodePlan(p))
      EXPECT_EQ(configOf(p).decodeCtasPerSm + configOf(p).decodeMinTiles, 0) << p.name;
  // Another rule: the same code, the name spells it.
  KernelConfig c = configOf(*d);
  c.decodeCtasPerSm = 2;
  c.decodeMinTiles = 1;
  llvm::Expected<KernelPlan> tuned = applyConfig(*d, c);
  ASSERT_TRUE(bool(tuned)) << llvm::toString(tuned.takeError());
  EXPECT_EQ(tuned->name, d->name + "_split2x1");
  EXPECT_EQ(tuned->smemBytes, d->smemBytes);
  c.decodeCtasPerSm = 0;
  llvm::Expected<KernelPlan> bad = applyConfig(*d, c);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError())
                .find("the decode split rule must aim at 1..4 CTAs per SM with splits of at "
                      "least 1..64 key tiles, got 0 and 1"),
            std::string::npos);
  // No other template takes one.
  const KernelPlan &fwd = isDecodePlan(plans[0]) ? plans[1] : plans[0];
  KernelConfig f = configOf(fwd);
  f.decodeMinTiles = 4;
  bad = applyConfig(fwd, f);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError())
                .find("the split rule is a parameter of the decode template (sm80decode)"),
            std::string::npos);

  // A tuning table's rule replaces the default: the plan takes its config and provenance.
  llvm::Expected<AttentionSpec> spec = parseSpec(
      "variants: [{name: d, dtype: bf16, head_dim: 128, mask: causal, passes: [decode]}]",
      "t.yaml");
  ASSERT_TRUE(bool(spec));
  TunedConfig rule;
  rule.seqlenMin = 1;
  rule.seqlenMax = kSeqlenUnbounded;
  rule.config = configOf(*d);
  rule.config.decodeMinTiles = 8;
  rule.provenance = "tuned split rule 1x8 over 9 calls";
  TuningTable table{{workloadKey(*d), {rule}}};
  llvm::Expected<std::vector<KernelPlan>> withRule = planKernels(*spec, {"sm_90a"}, &table);
  ASSERT_TRUE(bool(withRule)) << llvm::toString(withRule.takeError());
  ASSERT_EQ(withRule->size(), 1u);
  EXPECT_EQ((*withRule)[0].decodeMinTiles, 8);
  EXPECT_EQ((*withRule)[0].name, d->name + "_split1x8");
  EXPECT_EQ((*withRule)[0].tuning, "tuned split rule 1x8 over 9 calls");
  EXPECT_EQ((*withRule)[0].seqlenMin, d->seqlenMin); // every call, as the default's
}

TEST(DecodePlan, PagedConfigProblemsMirrorTheTemplatesAsserts) {
  std::vector<KernelPlan> plans = plansOf("variants: [{name: d, dtype: fp16, head_dim: 64, passes: "
                                          "[decode], kv_cache: paged, page_size: 256}]",
                                          {"sm_90a"});
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].pageSize, 256);
  EXPECT_NE(plans[0].name.find("_paged256_"), std::string::npos) << plans[0].name;
  const std::string &n = plans[0].name; // a paged cubin also holds NAME_append
  EXPECT_EQ(entryPointNames(plans[0]),
            (std::vector<std::string>{n, n + "_combine", n + "_merge", n + "_append"}));
  auto problem = [&](auto edit) {
    KernelConfig c = configOf(plans[0]);
    edit(c);
    llvm::Expected<KernelPlan> p = applyConfig(plans[0], c);
    return p ? std::string() : llvm::toString(p.takeError());
  };
  EXPECT_EQ(problem([](KernelConfig &) {}), "");
  // 192 keys a tile straddle 256-token pages (the template's static_assert).
  EXPECT_NE(problem([](KernelConfig &c) {
              c.blockN = 192;
              c.stages = 2;
            }).find("decode block_n 192 and page_size 256: a key tile must lie in one page or "
                    "span whole pages"),
            std::string::npos);
}

TEST(DecodeEmit, SourceFillsTheConfigAndThreeEntryPoints) {
  std::vector<KernelPlan> plans =
      plansOf("variants: [{name: d, dtype: fp16, head_dim: 64, mask: window, score_mod: softcap, "
              "passes: [decode], decode: {q_tokens: 8}, heads: {q: 8, kv: 2}}]",
              {"sm_90a"});
  ASSERT_EQ(plans.size(), 1u);
  const std::string src = emitKernelSource(plans[0]);
  for (const char *line : {
           "#include \"sm80/decode_kernel.cuh\"",
           "using KernelVariant = fagen::Variant<fagen::WindowMask, fagen::Softcap, "
           "fagen::NoDropout,",
           "struct KernelOptions : fagen::sm80::DecodeOptions {",
           "  using Element = fagen::half_t;",
           "  static constexpr int kBlockM = 32, kBlockN = 64, kWarps = 4, kStages = 6;",
           "using Config = fagen::sm80::DecodeConfig<KernelOptions>;",
           "static_assert(Config::kMergeThreads == 128,",
           "(const __grid_constant__ fagen_decode_params params) {",
           "  fagen::sm80::decode_kernel<Config>(params);",
           "_combine(const __grid_constant__ fagen_merge_params params) {",
           "  fagen::sm80::decode_combine<Config>(params);",
           "_merge(const __grid_constant__ fagen_merge_params params) {",
           "  fagen::sm80::decode_merge<Config>(params);",
           "//   q_tokens=8 merge_threads=128",
       })
    EXPECT_NE(src.find(line), std::string::npos) << line << "\n" << src;
  EXPECT_EQ(src.find("if ("), std::string::npos) << "generated code holds no logic";
}

/// The tiles split `s` takes, in its order.
static std::vector<int> splitTiles(int begin, int end, int splits, int s) {
  std::vector<int> out;
  const DecodeSplitTiles t = decode_split_tiles(begin, end, splits, s);
  for (int n = t.first; n < t.end; n += t.stride)
    out.push_back(n);
  return out;
}

TEST(DecodeSplit, SplitsCoverTheTilesOnceEvenly) {
  for (int begin : {0, 3})
    for (int tiles : {0, 1, 2, 7, 64, 100, 2048})
      for (int splits : {1, 2, 3, 7, 33, 128}) {
        std::vector<int> seen(size_t(tiles), 0);
        size_t fewest = size_t(tiles), most = 0;
        for (int s = 0; s < splits; ++s) {
          const std::vector<int> mine = splitTiles(begin, begin + tiles, splits, s);
          fewest = std::min(fewest, mine.size());
          most = std::max(most, mine.size());
          for (int n : mine) {
            ASSERT_GE(n, begin);
            ASSERT_LT(n, begin + tiles);
            ++seen[size_t(n - begin)];
          }
        }
        for (int n = 0; n < tiles; ++n)
          EXPECT_EQ(seen[size_t(n)], 1) << tiles << " tiles, " << splits << " splits, tile " << n;
        EXPECT_LE(most, fewest + 1) << tiles << " tiles, " << splits << " splits";
      }
  EXPECT_TRUE(splitTiles(5, 2, 4, 0).empty()); // an empty range stays empty
  // A split's first tiles do not depend on where the range ends (a paged kernel looks their
  // pages up before the sequence's length arrives).
  EXPECT_EQ(splitTiles(0, 32, 8, 3), (std::vector<int>{3, 11, 19, 27}));
  EXPECT_EQ(splitTiles(0, 20, 8, 3), (std::vector<int>{3, 11, 19}));
  EXPECT_EQ(splitTiles(0, 10, 8, 3), (std::vector<int>{3}));
}

TEST(DecodeSplit, TheRuleFillsTheGpuWithoutEmptySplits) {
  // 132 SMs (H100 SXM): the grid aims at one wave of one CTA per SM.
  EXPECT_EQ(decode_num_splits(8, 2048, 132), 16);     // 1 x 8 kv heads, 128k keys (64-key tiles)
  EXPECT_EQ(decode_num_splits(8 * 64, 2048, 132), 1); // batch 64 fills the GPU alone
  EXPECT_EQ(decode_num_splits(32, 2048, 132), 4);     // batch 4: 128 CTAs, one wave of 132
  EXPECT_EQ(decode_num_splits(128, 2048, 132), 1);    // batch 16: a second split, two waves
  EXPECT_EQ(decode_num_splits(8, 32, 132), 8);        // 2k keys: splits of 4 tiles at least
  EXPECT_EQ(decode_num_splits(8, 7, 132), 1);         // too few tiles to split
  EXPECT_EQ(decode_num_splits(1, 1 << 20, 132), kDecodeMaxSplits);
  EXPECT_EQ(decode_num_splits(8, 0, 132), 1);
  // Every answer leaves no split empty and none shorter than the minimum (but the last).
  for (int64_t ctas : {1, 4, 8, 24, 100, 264, 1000})
    for (int tiles : {1, 2, 5, 31, 32, 33, 100, 257, 2048, 4096})
      for (int sms : {1, 46, 108, 132, 148}) {
        const int splits = decode_num_splits(ctas, tiles, sms);
        ASSERT_GE(splits, 1);
        ASSERT_LE(splits, kDecodeMaxSplits);
        for (int s = 0; s < splits; ++s)
          EXPECT_FALSE(splitTiles(0, tiles, splits, s).empty())
              << ctas << " " << tiles << " " << sms << ": split " << s << " empty";
        if (splits > 1)
          EXPECT_GE((tiles + splits - 1) / splits, kDecodeMinTilesPerSplit);
      }
}

TEST(DecodeSplit, TheRuleTakesAKernelsPair) {
  // Two CTAs per SM double the slots; the fewest tiles a split takes bounds the count.
  EXPECT_EQ(decode_num_splits(8, 2048, 132, 2, 4), 33);
  EXPECT_EQ(decode_num_splits(8, 32, 132, 1, 1), 16);  // 2k keys: 16 of 132 / 8
  EXPECT_EQ(decode_num_splits(8, 32, 132, 1, 16), 2);  // splits of 16 tiles at least
  EXPECT_EQ(decode_num_splits(128, 2048, 132, 2, 4), 2); // batch 16: two waves' worth
  // The defaults are the header's pair; values outside the ranges count as the nearest inside.
  EXPECT_EQ(decode_num_splits(8, 2048, 132),
            decode_num_splits(8, 2048, 132, kDecodeCtasPerSm, kDecodeMinTilesPerSplit));
  EXPECT_EQ(decode_num_splits(8, 2048, 132, 0, 0), decode_num_splits(8, 2048, 132, 1, 1));
  EXPECT_EQ(decode_num_splits(1, 1 << 20, 132, 99, 999),
            decode_num_splits(1, 1 << 20, 132, kDecodeMaxCtasPerSm, kDecodeMaxMinTiles));
  for (int perSm = 1; perSm <= kDecodeMaxCtasPerSm; ++perSm)
    for (int minTiles : {1, 2, 4, 8, 16, kDecodeMaxMinTiles})
      for (int64_t ctas : {1, 8, 100, 1000})
        for (int tiles : {1, 7, 33, 2048}) {
          const int splits = decode_num_splits(ctas, tiles, 132, perSm, minTiles);
          ASSERT_GE(splits, 1);
          ASSERT_LE(splits, kDecodeMaxSplits);
          EXPECT_LE(splits * ctas, std::max<int64_t>(ctas, int64_t(perSm) * 132));
          if (splits > 1)
            EXPECT_GE((tiles + splits - 1) / splits, minTiles);
        }
}

TEST(DecodeSplit, WorkspaceLayout) {
  fagen_decode_workspace w = fagen_decode_workspace_layout(3, 2, 32, 4, 128, 0);
  EXPECT_EQ(w.o_offset, 0u);
  EXPECT_EQ(w.lse_offset, 3u * 2 * 32 * 4 * 128 * 4); // already a multiple of 256
  EXPECT_EQ(w.total_bytes, w.lse_offset + 3u * 2 * 32 * 4 * 4);
  EXPECT_EQ(w.status_offset, w.total_bytes); // no status without a paged cache
  fagen_decode_workspace odd = fagen_decode_workspace_layout(3, 1, 1, 1, 40, 0);
  EXPECT_EQ(odd.lse_offset, 512u); // 480 bytes, 256-aligned
  EXPECT_EQ(odd.total_bytes, 768u);
  EXPECT_EQ(w.lengths_offset, w.total_bytes); // nor lengths
  // Paged: the status records after the partials (16 bytes each, 256-aligned), then the
  // lengths an append writes (int32 [batch], 256-aligned); one split has no partials.
  fagen_decode_workspace paged = fagen_decode_workspace_layout(3, 1, 1, 1, 40, 1);
  EXPECT_EQ(paged.status_offset, 768u);
  EXPECT_EQ(paged.lengths_offset, 1024u);
  EXPECT_EQ(paged.total_bytes, 1280u);
  fagen_decode_workspace one = fagen_decode_workspace_layout(1, 65, 32, 1, 128, 1);
  EXPECT_EQ(one.status_offset, 0u);
  EXPECT_EQ(one.lengths_offset, 256u);
  EXPECT_EQ(one.total_bytes, 256u + 512u); // 65 lengths: 260 bytes
  fagen_decode_workspace many = fagen_decode_workspace_layout(1, 65, 32, 1, 128, 17);
  EXPECT_EQ(many.lengths_offset, 512u); // 17 records: 272 bytes
  EXPECT_EQ(fagen_append_blocks(4, 8, 128, 128), 4); // 4 tokens x 8 heads x 16 chunks / 128
  EXPECT_EQ(fagen_append_blocks(1, 1, 192, 128), 1); // the wider head dim's 24 chunks
  EXPECT_GE(256u, FAGEN_KV_STATUS_WORDS * sizeof(int32_t));
  EXPECT_EQ(fagen_merge_blocks(32, 128, 1), 4);  // 32 rows x 16 chunks / 128 threads
  EXPECT_EQ(fagen_merge_blocks(1, 64, 1), 1);
  EXPECT_EQ(fagen_merge_blocks(32, 128, 8), 32); // the combine: 8 threads a chunk
}

TEST(DecodeCheck, ShapesStayWithinTheKernelsTokens) {
  KernelRecord k;
  k.templ = "sm80decode";
  for (int tokens : {1, 4, 16})
    for (bool quick : {false, true}) {
      k.qTokens = tokens;
      const std::vector<CheckShape> shapes = checkShapesFor(k, quick);
      ASSERT_GE(shapes.size(), 3u);
      bool oneKey = false, gqa7 = false, mqa = false, noKeyRows = false, most = false;
      for (const CheckShape &s : shapes) {
        EXPECT_LE(s.seqlenQ, tokens) << checkShapeText(s);
        EXPECT_GE(s.seqlenQ, 1);
        EXPECT_EQ(s.headsQ % s.headsKV, 0) << checkShapeText(s);
        oneKey |= s.seqlenK == 1;
        gqa7 |= s.headsQ == 7 * s.headsKV;
        mqa |= s.headsKV == 1 && s.headsQ > 1;
        noKeyRows |= s.seqlenQ > s.seqlenK;
        most |= s.seqlenQ == tokens;
      }
      EXPECT_TRUE(oneKey && gqa7 && mqa && most) << tokens << (quick ? " quick" : "");
      if (!quick && tokens >= 3)
        EXPECT_TRUE(noKeyRows) << tokens;
    }
}

TEST(PagedCheck, LengthsCoverThePageBoundaries) {
  EXPECT_EQ(pagedLengths(8, 1000, 16), (std::vector<int32_t>{1000, 17, 0, 15, 1, 16, 33, 999}));
  EXPECT_EQ(pagedLengths(4, 2, 16), (std::vector<int32_t>{2, 2, 0, 2}));
}

TEST(PagedCheck, LayoutHoldsEverySequencesKeysAndNothingElse) {
  KernelRecord k;
  k.templ = "sm80decode";
  k.qTokens = 2;
  k.pageSize = 16;
  k.dtype = DType::BF16;
  k.headDimQK = k.headDimV = 64;
  for (bool bhsd : {false, true})
    for (bool uniform : {false, true}) {
      CaseInputs in = makeCaseInputs(k, CheckShape{7, 8, 2, 2, 100, bhsd}, 5);
      const PagedLayout l = makePagedLayout(in, 16, 5, uniform);
      const fagen_fwd_problem &p = in.problem;
      ASSERT_EQ(l.maxPages, 8); // ceil(100 / 16) + 1
      ASSERT_EQ(l.seqused.size(), 7u);
      std::vector<int> uses(l.numPages, 0);
      for (int b = 0; b < 7; ++b)
        for (int slot = 0; slot < l.maxPages; ++slot) {
          const int page = l.blockTable[b * l.maxPages + slot];
          if (slot * 16 >= l.seqused[b]) {
            EXPECT_EQ(page, -1) << b << " " << slot; // never read
            continue;
          }
          ASSERT_GE(page, 0);
          ASSERT_LT(page, l.numPages);
          ++uses[page];
          for (int row = 0; row < 16 && slot * 16 + row < l.seqused[b]; ++row)
            for (int h = 0; h < 2; ++h) {
              const int key = slot * 16 + row;
              const size_t at = ((size_t(page) * 16 + row) * 2 + h) * 64;
              const size_t src = b * p.k_strides[0] + h * p.k_strides[1] + key * p.k_strides[2];
              ASSERT_TRUE(std::equal(&in.k[src], &in.k[src] + 64, &l.kCache[at]))
                  << b << " " << key;
              ASSERT_TRUE(std::equal(&in.v[src], &in.v[src] + 64, &l.vCache[at]));
            }
        }
      int spare = 0, shared = 0;
      for (int page = 0; page < l.numPages; ++page) {
        spare += uses[page] == 0;
        shared += uses[page] == 2;
        EXPECT_LE(uses[page], 2);
      }
      EXPECT_EQ(spare, 2);
      EXPECT_EQ(shared, uniform ? 0 : 1); // sequence 1's first page is sequence 0's
      if (!uniform)
        EXPECT_EQ(l.blockTable[0], l.blockTable[l.maxPages]);
      // Spare pages hold NaN only.
      for (int page = 0; page < l.numPages; ++page)
        if (uses[page] == 0)
          EXPECT_EQ(l.kCache[size_t(page) * 16 * 2 * 64], 0x7fff);
    }
}


// Chunked prefill: a varlen forward over a paged cache is the sm80 forward (its K/V tiles
// gathered page by page), entry point fwd_paged_kernel over a fagen_decode_params; on sm_90a the
// sm90ws forward (its producer warpgroup gathers the pages), entry point fwd_ws_paged_kernel over
// a fagen_decode_params and the tensor maps, on 128-row tiles and without a tile counter.
TEST(PagedPrefill, PlansTheSm80ForwardOrOnSm90aTheSm90wsForward) {
  const std::string spec = "variants: [{name: p, dtype: bf16, head_dim: 128, mask: causal, "
                           "varlen: true, kv_cache: paged, page_size: 16}]";
  std::vector<KernelPlan> plans = plansOf(spec, {"sm_80", "sm_90a", "sm_100a"});
  ASSERT_EQ(plans.size(), 3u);
  for (const KernelPlan &p : plans) {
    const std::string templ = p.arch == "sm_90a" ? "sm90ws" : "sm80";
    EXPECT_EQ(p.templ, templ) << p.arch;
    EXPECT_EQ(p.pass, Pass::Forward);
    EXPECT_EQ(p.pageSize, 16);
    EXPECT_NE(p.name.find("_varlen_paged16_" + templ + "_"), std::string::npos) << p.name;
  }
  auto on = [&](const std::string &arch) {
    return *std::find_if(plans.begin(), plans.end(),
                         [&](const KernelPlan &p) { return p.arch == arch; });
  };
  const std::string source = emitKernelSource(on("sm_80"));
  EXPECT_NE(source.find("static constexpr int kPageSize = 16;"), std::string::npos);
  EXPECT_NE(source.find("(const __grid_constant__ fagen_decode_params params)"),
            std::string::npos);
  EXPECT_NE(source.find("fagen::sm80::fwd_paged_kernel<Config>(params);"), std::string::npos);
  const KernelPlan ws90 = on("sm_90a");
  const std::string ws = emitKernelSource(ws90);
  EXPECT_NE(ws.find("static constexpr int kPageSize = 16;"), std::string::npos);
  EXPECT_NE(ws.find("kTileCounter = false"), std::string::npos);
  EXPECT_NE(ws.find("(const __grid_constant__ fagen_decode_params params,\n    const "
                    "__grid_constant__ fagen_fwd_tma_maps maps)"),
            std::string::npos)
      << ws;
  EXPECT_NE(ws.find("fagen::sm90::fwd_ws_paged_kernel<Config>(params, maps);"),
            std::string::npos);
  EXPECT_FALSE(ws90.tileCounter);
  EXPECT_EQ(ws90.blockM, 128);
  // At hd 64 too (its contiguous kernels take 192 rows, 3 consumer warpgroups).
  std::vector<KernelPlan> hd64 = plansOf(
      "variants: [{name: p, dtype: fp16, head_dim: 64, varlen: true, kv_cache: paged, "
      "page_size: 256}, {name: c, dtype: fp16, head_dim: 64, varlen: true}]",
      {"sm_90a"});
  ASSERT_EQ(hd64.size(), 2u);
  for (const KernelPlan &p : hd64)
    EXPECT_EQ(p.blockM, p.isPaged() ? 128 : 192) << p.name;
  // A contiguous forward keeps its entry point and has no page size.
  std::vector<KernelPlan> contiguous =
      plansOf("variants: [{name: c, dtype: bf16, head_dim: 128, varlen: true}]",
              {"sm_80", "sm_90a"});
  ASSERT_EQ(contiguous.size(), 2u);
  const bool wsFirst = contiguous[0].templ == "sm90ws";
  const std::string plain = emitKernelSource(contiguous[wsFirst ? 1 : 0]);
  EXPECT_EQ(plain.find("kPageSize"), std::string::npos);
  EXPECT_NE(plain.find("fagen::sm80::fwd_kernel<Config>(params);"), std::string::npos);
  const std::string plainWs = emitKernelSource(contiguous[wsFirst ? 0 : 1]);
  EXPECT_EQ(plainWs.find("kPageSize"), std::string::npos);
  EXPECT_NE(plainWs.find("fagen::sm90::fwd_ws_kernel<Config>(params, maps);"),
            std::string::npos);
}

TEST(PagedPrefill, ConfigProblemsMirrorTheTemplatesAsserts) {
  std::vector<KernelPlan> plans =
      plansOf("variants: [{name: p, dtype: fp16, head_dim: 64, varlen: true, kv_cache: paged, "
              "page_size: 256}]",
              {"sm_80"});
  ASSERT_EQ(plans.size(), 1u);
  KernelConfig c = configOf(plans[0]);
  c.blockM = 64;
  c.blockN = 96;
  llvm::Expected<KernelPlan> p = applyConfig(plans[0], c);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError())
                .find("block_n 96 and page_size 256: a key tile must lie in one page or span "
                      "whole pages"),
            std::string::npos)
      << llvm::toString(applyConfig(plans[0], c).takeError());
  // sm90ws reads a page id per row: any key tile of its own.
  std::vector<KernelPlan> ws =
      plansOf("variants: [{name: p, dtype: bf16, head_dim: 128, varlen: true, kv_cache: paged, "
              "page_size: 256, tile: {template: sm90ws, block_m: 128, block_n: 96, warps: 8, "
              "stages: 2}}]",
              {"sm_90a"});
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_EQ(ws[0].templ, "sm90ws");
  EXPECT_EQ(ws[0].blockN, 96);
  // 192-row tiles (3 consumer warpgroups) are refused: the producer's page walk needs the
  // register split of 2.
  const std::string rows = planError(
      "variants: [{name: p, dtype: fp16, head_dim: 64, varlen: true, kv_cache: paged, "
      "page_size: 256, tile: {template: sm90ws, block_m: 192, block_n: 128, warps: 12, "
      "stages: 2}}]",
      {"sm_90a"});
  EXPECT_NE(rows.find("block_m 192: a paged sm90ws forward takes 128-row tiles"),
            std::string::npos)
      << rows;
  // A pinned sm90 (cp.async, contiguous) tile is refused, naming why.
  const std::string error = planError(
      "variants: [{name: p, dtype: bf16, head_dim: 128, varlen: true, kv_cache: paged, "
      "page_size: 16, tile: {template: sm90}}]",
      {"sm_90a"});
  EXPECT_NE(error.find("template sm90 does not serve a paged KV cache"), std::string::npos)
      << error;
}

TEST(PagedCheck, AVarlenLayoutHoldsEachSequencesOwnKeys) {
  KernelRecord k;
  k.templ = "sm80";
  k.varlen = true;
  k.pageSize = 16;
  k.dtype = DType::FP16;
  k.headDimQK = k.headDimV = 64;
  CaseInputs in = makeCaseInputs(k, CheckShape{2, 4, 2, 40, 50, false}, 3);
  const PagedLayout l = makePagedLayout(in, 16, 3, /*uniform=*/false);
  const fagen_fwd_problem &p = in.problem;
  ASSERT_EQ(p.varlen, 1);
  ASSERT_EQ(l.seqused.size(), size_t(p.batch));
  // Lengths of varlenLengths: (50 + 1) / 2, 50, 1, 50 - 29.
  EXPECT_EQ(l.seqused, (std::vector<int32_t>{25, 50, 1, 21}));
  // Both of the first two fill a page: sequence 1's first page is sequence 0's.
  EXPECT_EQ(l.blockTable[0], l.blockTable[l.maxPages]);
  for (int b = 0; b < p.batch; ++b)
    for (int key = 0; key < l.seqused[b]; ++key) {
      const int page = l.blockTable[b * l.maxPages + key / 16];
      ASSERT_GE(page, 0);
      for (int h = 0; h < 2; ++h) {
        const size_t at = ((size_t(page) * 16 + key % 16) * 2 + h) * 64;
        const size_t src = (in.cuSeqlensK[b] + key) * p.k_strides[2] + h * p.k_strides[1];
        ASSERT_TRUE(std::equal(&in.k[src], &in.k[src] + 64, &l.kCache[at])) << b << " " << key;
      }
    }
}

TEST(PagedPrefill, InspectNamesItsOwnRecord) {
  KernelRecord k;
  k.templ = "sm80";
  k.pass = Pass::Forward;
  k.arch = "sm_90";
  EXPECT_EQ(verifiedOn(k), "NVIDIA H200 (fagen check, 2026-11-30)"); // the contiguous forward
  k.varlen = true;
  k.pageSize = 16;
  EXPECT_EQ(verifiedOn(k), "NVIDIA H100 (fagen check, 2026-12-06)"); // check-paged.yaml, sm_90
  k.arch = "sm_90a";
  EXPECT_EQ(verifiedOn(k), ""); // compiled, not run
}
