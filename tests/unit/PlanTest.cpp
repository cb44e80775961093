//===- PlanTest.cpp - planner, emitter and ptxas-report unit tests --------===//

#include "compiler/build/Build.h"
#include "check/Check.h"
#include "compiler/emit/Emit.h"
#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"
#include "templates/common/ws_bwd_layout.h"

#include "gtest/gtest.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>

using namespace fagen;

namespace {

/// The planner's defaults, one kernel per workload (without its built-in seqlen buckets, which
/// Plan.BuiltinSeqlenBuckets covers).
std::vector<KernelPlan> planOf(const std::string &yaml, std::vector<std::string> archs,
                               bool builtinBuckets = false) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  EXPECT_TRUE(bool(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
  llvm::Expected<std::vector<KernelPlan>> plans =
      planKernels(*spec, archs, nullptr, builtinBuckets);
  EXPECT_TRUE(bool(plans)) << (plans ? "" : llvm::toString(plans.takeError()));
  return *plans;
}

std::string planError(const std::string &yaml, std::vector<std::string> archs) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  if (!spec)
    return llvm::toString(spec.takeError());
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, archs);
  if (plans)
    return "";
  return llvm::toString(plans.takeError());
}

TEST(Plan, SmemFormulaMirrorsTemplate) {
  // (kBlockM + 2 * kStages * kBlockN) * (kHeadDim * 2 + 16), as templates/sm80/fwd_config.cuh.
  EXPECT_EQ(sm80FwdSmemBytes(128, 128, 128, 64, 2), 104448);
  EXPECT_EQ(sm80FwdSmemBytes(64, 64, 128, 128, 2), 92160);
  // Head dims 192 and 256: rows unpadded (swizzled 128-byte lines), 512 bytes at hd 256.
  EXPECT_EQ(sm80FwdSmemBytes(256, 256, 64, 64, 1), 64 * 512 + 64 * 1024);
  // Head dims that are not multiples of 16 are stored padded to 16.
  EXPECT_EQ(paddedHeadDim(72), 80);
  EXPECT_EQ(paddedHeadDim(80), 80);
  EXPECT_EQ(sm80FwdSmemBytes(72, 72, 128, 64, 2), sm80FwdSmemBytes(80, 80, 128, 64, 2));
  // qk != v: Q (and the O epilogue) holds max(qk, v), K holds qk and V holds v (192: 384-byte
  // swizzled rows, 128: 272-byte padded ones).
  EXPECT_EQ(sm80FwdSmemBytes(192, 128, 64, 64, 1), 64 * 384 + 64 * (384 + 272));
}

TEST(Plan, EveryDefaultFitsItsArch) {
  for (int hd = 32; hd <= 256; hd += 16)
    for (const std::string &arch : knownArchs()) {
      std::string yaml = "variants: [{name: v, dtype: bf16, head_dim: " + std::to_string(hd) + "}]";
      std::vector<KernelPlan> plans = planOf(yaml, {arch});
      ASSERT_EQ(plans.size(), 1u) << hd << " " << arch;
      EXPECT_LE(plans[0].smemBytes, archSmemLimit(arch)) << hd << " " << arch;
      // The warp-specialized template's producer warpgroup comes on top of its warps.
      EXPECT_EQ(plans[0].threads, 32 * plans[0].warps + (plans[0].templ == "sm90ws" ? 128 : 0));
    }
}

TEST(Plan, ArchSpecificDefaults) {
  std::vector<KernelPlan> p = planOf(
      "variants: [{name: v, dtype: bf16, head_dim: 128, mask: causal}]", {"sm_80", "sm_90", "sm_90a"});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].arch, "sm_80");
  EXPECT_EQ(p[0].stages, 1);
  EXPECT_EQ(p[1].arch, "sm_90");
  EXPECT_EQ(p[1].stages, 2);
  EXPECT_EQ(p[1].name, "fagen_fwd_bf16_hd128_causal_sm80_m128n64w4s2_r8");
  EXPECT_EQ(p[1].rescaleTau, 8); // measured default at hd 128
  EXPECT_EQ(p[1].tuning, "default");
  // sm_90a: the warp-specialized TMA template, a producer and two consumer warpgroups.
  EXPECT_EQ(p[2].templ, "sm90ws");
  EXPECT_EQ(p[2].name, "fagen_fwd_bf16_hd128_causal_sm90ws_m128n128w8s2_r8");
  EXPECT_EQ(p[2].rescaleTau, 8); // FlashAttention-4's threshold, measured on sm90ws too
  EXPECT_EQ(p[2].threads, 384);
  // Causal tiles cost unequal amounts: the kernel can take them from a counter.
  EXPECT_TRUE(p[2].tileCounter);
  EXPECT_FALSE(p[1].tileCounter); // the portable template has no tile scheduler
  // Head dims 128: O goes out through an O tile and TMA stores.
  EXPECT_TRUE(p[2].tmaStoreO);
  EXPECT_FALSE(p[1].tmaStoreO);
  EXPECT_EQ(p[2].smemBytes, sm90WsFwdSmemBytes(128, 128, 128, 128, 2, true, true));
  // + 10 mbarriers, + the tile ring's 4 mbarriers and two 16-byte entries, + the O tile
  EXPECT_EQ(p[2].smemBytes,
            sm90FwdSmemBytes(128, 128, 128, 2) + 8 * 10 + 8 * 4 + 16 * 2 + 128 * 128 * 2);
  EXPECT_FALSE(bool(applyConfig(p[2], [] {
    KernelConfig c;
    c.blockM = 128, c.blockN = 64, c.warps = 4, c.stages = 2; // 4 warps cannot be 2 warpgroups
    return c;
  }())));
  EXPECT_FALSE(bool(applyConfig(p[2], [] {
    KernelConfig c;
    c.blockM = 64, c.blockN = 128, c.warps = 4, c.stages = 2; // one consumer: no register split
    return c;
  }())));
  // Three consumer warpgroups at hd 128 x 128 keys: S + O + P need 160 registers; a consumer
  // thread has 128 for them (160 less 32).
  llvm::Expected<KernelPlan> wide = applyConfig(p[2], [] {
    KernelConfig c;
    c.blockM = 192, c.blockN = 128, c.warps = 12, c.stages = 2;
    return c;
  }());
  ASSERT_FALSE(bool(wide));
  EXPECT_NE(llvm::toString(wide.takeError()).find("lower block_n or block_m"), std::string::npos);
}

TEST(Plan, Sm90WsDefaults) {
  // FlashAttention-3's tiles, measured on the H200 (docs/perf/sm90-fwd.md run 4).
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: a, dtype: bf16, head_dim: 64}
  - {name: b, dtype: fp16, head_dim: 256, mask: causal}
)",
                                     {"sm_90a"});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].templ, "sm90ws");
  EXPECT_EQ(configOf(p[0]).text(), "m192n128w12s2 tau8");
  EXPECT_EQ(p[0].threads, 512);
  EXPECT_EQ(configOf(p[1]).text(), "m128n80w8s2 tau8");
  EXPECT_EQ(p[1].smemBytes, (128 + 4 * 80) * 256 * 2 + 1024 + 80 + 64); // + the tile ring
  EXPECT_FALSE(p[0].tileCounter);
  EXPECT_TRUE(p[1].tileCounter);
}

TEST(Plan, KernelNamesSpellTheVariant) {
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: a, dtype: bf16, head_dim_qk: 192, head_dim_v: 128, mask: window, mask_align: top_left,
     score_mod: softcap, dropout: true, varlen: true, passes: [bwd], deterministic: true,
     block_sparse: {block: 128, layout: runtime}}
  - {name: b, dtype: fp16, head_dim: 64, mask: causal, score_mod: alibi,
     block_sparse: {block: 64, layout: strided, stride: 2, max_seqlen: 256}}
)",
                                     {"sm_90"});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name,
            "fagen_bwd_bf16_hd192x128_windowtl_softcap_drop_bsr128_varlen_det_sm80_m64n64w8s2");
  EXPECT_EQ(workloadKey(p[0]),
            "bwd bf16 hd192x128 windowtl softcap drop bsr128 varlen det sm_90");
  EXPECT_EQ(p[0].prePostThreads, 256);
  EXPECT_EQ(p[0].smemBytes, sm80BwdSmemBytes(192, 128, 64, 64, 2, /*varlen=*/true));
  EXPECT_EQ(p[1].name, "fagen_fwd_fp16_hd64_causal_alibi_bs64_" + p[1].sparseHash +
                           "_sm80_m64n64w4s2_ra");
  EXPECT_EQ(p[1].sparseHash.size(), 8u);
  EXPECT_EQ(p[1].sparsity, Sparsity::Static);
  EXPECT_EQ(p[1].prePostThreads, 0);
  EXPECT_FALSE(p[1].deterministic);
  EXPECT_EQ(p[1].maskToken(), "causal");
  // Dense plain kernels keep the workload keys existing tuning records use.
  std::vector<KernelPlan> dense =
      planOf("variants: [{name: d, dtype: bf16, head_dim: 128, mask: causal}]", {"sm_90a"});
  EXPECT_EQ(workloadKey(dense[0]), "fwd bf16 hd128x128 causal sm_90a");
  EXPECT_TRUE(dense[0].featureTokens().empty());
}

/// The plan of variant `name` (plans come sorted by kernel name, not in spec order).
const KernelPlan &planNamed(const std::vector<KernelPlan> &plans, const std::string &name) {
  for (const KernelPlan &p : plans)
    if (p.variant == name)
      return p;
  ADD_FAILURE() << "no plan of variant " << name;
  return plans.front();
}

TEST(Plan, Sm90WsServesEveryForwardVariant) {
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: dense, dtype: bf16, head_dim: 64, mask: causal}
  - {name: tl, dtype: bf16, head_dim: 64, mask: causal, mask_align: top_left}
  - {name: win, dtype: bf16, head_dim: 64, mask: window}
  - {name: cap, dtype: bf16, head_dim: 64, score_mod: softcap}
  - {name: drop, dtype: bf16, head_dim: 64, dropout: true}
  - {name: vl, dtype: bf16, head_dim: 64, varlen: true}
  - {name: bs, dtype: bf16, head_dim: 64, block_sparse: {block: 128, layout: runtime}}
  - {name: mla, dtype: bf16, head_dim_qk: 192, head_dim_v: 128}
  - {name: hd96, dtype: bf16, head_dim: 96}
  - {name: bs64, dtype: bf16, head_dim: 64, block_sparse: {block: 64, layout: runtime}}
  - {name: hd72, dtype: bf16, head_dim: 72}
  - {name: bwd, dtype: bf16, head_dim: 64, passes: [bwd]}
)",
                                     {"sm_90a"});
  ASSERT_EQ(p.size(), 12u);
  for (const KernelPlan &k : p) {
    // Blocks of 64 tokens are below its 128-row query tiles; hd 72 is not one of its head dims.
    // (The backward at hd 64 takes sm90ws too: Plan.Sm90WsBackwardServes.)
    bool portable = k.variant == "bs64" || k.variant == "hd72";
    EXPECT_EQ(k.templ, portable ? "sm80" : "sm90ws") << k.name;
    EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
  }
  // Sparse blocks of 128 take query tiles of 128 rows (hd 64's default is 192).
  EXPECT_EQ(configOf(planNamed(p, "bs")).text(), "m128n128w8s2 tau8");
  // Even work tiles (no mask, varlen or sparsity) and 64-wide head dims run persistent.
  EXPECT_TRUE(planNamed(p, "dense").persistent);
  const KernelPlan &mla = planNamed(p, "mla");
  EXPECT_TRUE(mla.persistent);
  EXPECT_TRUE(planNamed(p, "hd96").persistent);
  EXPECT_EQ(mla.smemBytes, sm90WsFwdSmemBytes(192, 128, 128, 128, 2));
  EXPECT_EQ(mla.smemBytes, 128 * 192 * 2 + 2 * 128 * (192 + 128) * 2 + 1024 + 8 * 10);
  // hd 96 is padded to 128 columns.
  EXPECT_EQ(planNamed(p, "hd96").smemBytes, sm90WsFwdSmemBytes(128, 128, 128, 128, 2));
}

TEST(Plan, BuiltinSeqlenBuckets) {
  // Dense sm90ws forwards at hd 128 and 256, and hd 64 causal, get the H200-measured kernels
  // per seqlen range.
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: a, dtype: bf16, head_dim: 128, mask: causal}
  - {name: b, dtype: bf16, head_dim: 128}
  - {name: c, dtype: fp16, head_dim: 256, mask: causal}
  - {name: d, dtype: bf16, head_dim: 64}
  - {name: e, dtype: bf16, head_dim: 128, mask: causal, score_mod: softcap}
  - {name: f, dtype: bf16, head_dim: 128, tile: {template: sm90ws}}
  - {name: g, dtype: bf16, head_dim: 256}
  - {name: h, dtype: bf16, head_dim: 64, mask: causal}
)",
                                     {"sm_90a"}, /*builtinBuckets=*/true);
  std::map<std::string, std::string> ranges;
  for (const KernelPlan &k : p)
    ranges[k.name] = llvm::formatv("{0}..{1}", k.seqlenMin, k.seqlenMax).str();
  const std::string all = llvm::formatv("0..{0}", int64_t(1) << 40).str();
  const std::string from4k = llvm::formatv("4097..{0}", int64_t(1) << 40).str();
  const std::string from1k = llvm::formatv("1025..{0}", int64_t(1) << 40).str();
  const std::string from1 = llvm::formatv("1..{0}", int64_t(1) << 40).str();
  EXPECT_EQ(ranges, (std::map<std::string, std::string>{
                        {"fagen_fwd_bf16_hd128_causal_sm90ws_m128n128w8s2_r8", "1..4096"},
                        {"fagen_fwd_bf16_hd128_causal_sm90ws_m192n80w12s2_r8", from4k},
                        {"fagen_fwd_bf16_hd128_none_sm90ws_m128n128w8s2_r8", "1..1024"},
                        {"fagen_fwd_bf16_hd128_none_sm90ws_m192n80w12s2_r8", from1k},
                        {"fagen_fwd_bf16_hd64_causal_sm90ws_m128n128w8s2_r8", "1..1024"},
                        {"fagen_fwd_bf16_hd64_causal_sm90ws_m192n128w12s2_r8", from1k},
                        {"fagen_fwd_fp16_hd256_causal_sm90ws_m128n64w8s2_r8_so", "1..4096"},
                        {"fagen_fwd_fp16_hd256_causal_sm90ws_m128n80w8s2_r8_so", from4k},
                        // Equal configs in both ranges: one kernel for every length.
                        {"fagen_fwd_bf16_hd256_none_sm90ws_m128n64w8s2_r8", from1},
                        // Variants without measured buckets, and pinned tiles: one kernel.
                        {"fagen_fwd_bf16_hd64_none_sm90ws_m192n128w12s2_r8", all},
                        {"fagen_fwd_bf16_hd128_causal_softcap_sm90ws_m128n128w8s2_r8", all},
                    }))
      << "plans: " << p.size();
  for (const KernelPlan &k : p)
    EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
}

TEST(Plan, Sm90WsTilesFitEachHeadDim) {
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: a, dtype: bf16, head_dim: 192, mask: causal}
  - {name: b, dtype: bf16, head_dim: 256}
  - {name: c, dtype: bf16, head_dim: 256, dropout: true}
  - {name: d, dtype: bf16, head_dim: 128, block_sparse: {block: 192, layout: runtime}}
  - {name: e, dtype: bf16, head_dim: 192, dropout: true}
  - {name: f, dtype: bf16, head_dim: 256, block_sparse: {block: 192, layout: runtime}}
)",
                                     {"sm_90a"});
  ASSERT_EQ(p.size(), 6u);
  // No sm90ws tile divides a 192-token block at hd 256 within the registers: portable.
  EXPECT_EQ(planNamed(p, "f").templ, "sm80");
  EXPECT_EQ(configOf(planNamed(p, "a")).text(), "m128n112w8s2 tau8"); // 128 keys: 240 KB of smem
  EXPECT_EQ(configOf(planNamed(p, "b")).text(), "m128n80w8s2 tau8");
  EXPECT_EQ(configOf(planNamed(p, "c")).text(), "m128n64w8s2 tau8");  // dropout: 80 keys spilled
  EXPECT_EQ(configOf(planNamed(p, "d")).text(), "m192n64w12s2 tau8"); // 96 keys: 136 registers
  EXPECT_EQ(configOf(planNamed(p, "e")).text(), "m128n96w8s2 tau8");  // dropout: 112 keys spilled
  for (const KernelPlan &k : p)
    EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
}

TEST(Plan, Sm90AtHeadDim256) {
  // The cp.async wgmma template's hd 256 default (pinned: the planner's default is sm90ws):
  // two warpgroups of 64 rows, 64 keys (H200 measured).
  std::vector<KernelPlan> p = planOf("variants: [{name: a, dtype: bf16, head_dim: 256, mask: "
                                     "causal, tile: {template: sm90}}]",
                                     {"sm_90a"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].templ, "sm90");
  EXPECT_EQ(configOf(p[0]).text(), "m128n64w8s2");
  EXPECT_EQ(p[0].smemBytes, 197632);
  // One warpgroup loads 4 rows of a 256-wide head a round: not a whole 8-row swizzle atom.
  KernelConfig c = configOf(p[0]);
  c.blockM = 64;
  c.warps = 4;
  llvm::Expected<KernelPlan> refused = applyConfig(p[0], c);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("rows a round"), std::string::npos);
  // The cp.async template serves head dims 64, 128 and 256 only.
  EXPECT_NE(planError("variants: [{name: a, dtype: bf16, head_dim: 192, mask: causal, tile: "
                      "{template: sm90}}]",
                      {"sm_90a"})
                .find("template sm90 does not serve head dims other than 64, 128 and 256"),
            std::string::npos);
}

TEST(Plan, SparseBlocksShrinkTheTiles) {
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: a, dtype: bf16, head_dim: 64, block_sparse: {block: 64, layout: runtime}}
  - {name: b, dtype: bf16, head_dim: 256, block_sparse: {block: 64, layout: runtime}}
  - {name: c, dtype: bf16, head_dim: 128, block_sparse: {block: 192, layout: runtime}}
)",
                                     {"sm_80", "sm_90"});
  for (const KernelPlan &k : p) {
    EXPECT_EQ(k.sparseBlock % k.blockM, 0) << k.name;
    EXPECT_EQ(k.sparseBlock % k.blockN, 0) << k.name;
    EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
  }
  // The tuner's candidates that do not divide the block are refused.
  KernelConfig c = configOf(p[0]);
  c.blockM = 128;
  llvm::Expected<KernelPlan> refused = applyConfig(p[0], c);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("must divide block_sparse.block"),
            std::string::npos);
}

TEST(Plan, BackwardDefaultsFitEveryArch) {
  for (int qk = 32; qk <= 256; qk += 8)
    for (int v : {32, 128, qk, 256})
      for (const std::string &arch : knownArchs()) {
        std::string yaml = "variants: [{name: v, dtype: bf16, head_dim_qk: " + std::to_string(qk) +
                           ", head_dim_v: " + std::to_string(v) + ", passes: [bwd]}]";
        std::vector<KernelPlan> plans = planOf(yaml, {arch});
        ASSERT_EQ(plans.size(), 1u) << qk << " " << v << " " << arch;
        const KernelPlan &k = plans[0];
        // sm_90a: the sm90ws backward at equal head dims 64, 96, 128, 192 and 256, and 192/128
        // (+ a producer warpgroup).
        const bool ws = arch == "sm_90a" &&
                        ((qk == v && (qk == 64 || qk == 96 || qk == 128 || qk == 192 ||
                                      qk == 256)) ||
                         (qk == 192 && v == 128));
        EXPECT_EQ(k.templ, ws ? "sm90ws" : "sm80") << k.name;
        EXPECT_LE(k.smemBytes, archSmemLimit(arch)) << k.name;
        EXPECT_EQ(k.threads, 32 * k.warps + (ws ? 128 : 0));
        EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
      }
  // The measured defaults per head dim, on an arch where everything fits.
  auto tileOf = [](int hd) {
    std::vector<KernelPlan> p = planOf("variants: [{name: v, dtype: bf16, head_dim: " +
                                           std::to_string(hd) + ", passes: [bwd]}]",
                                       {"sm_90"});
    return configOf(p[0]).text();
  };
  EXPECT_EQ(tileOf(64), "m128n128w8s2");
  EXPECT_EQ(tileOf(128), "m64n128w8s2");
  EXPECT_EQ(tileOf(256), "m64n64w8s2");
}

TEST(Plan, EveryForwardHeadDimFits) {
  for (int qk = 32; qk <= 256; qk += 8)
    for (int v : {qk, 64})
      for (const std::string &arch : knownArchs()) {
        std::string yaml = "variants: [{name: v, dtype: bf16, head_dim_qk: " + std::to_string(qk) +
                           ", head_dim_v: " + std::to_string(v) + "}]";
        std::vector<KernelPlan> plans = planOf(yaml, {arch});
        ASSERT_EQ(plans.size(), 1u);
        EXPECT_LE(plans[0].smemBytes, archSmemLimit(arch)) << plans[0].name;
        EXPECT_FALSE(bool(checkKernelPlan(plans[0]))) << plans[0].name;
      }
}

TEST(Plan, BlockTables) {
  BlockSparseSpec lg;
  lg.block = 64;
  lg.layout = "local_global";
  lg.local = 2;
  lg.global = 1;
  lg.maxSeqlen = 257; // 5 blocks
  BlockTable t = blockTable(lg);
  EXPECT_EQ(t.rows, 5);
  EXPECT_EQ(t.cols, 5);
  EXPECT_EQ(t.table, (std::vector<uint8_t>{1, 1, 1, 1, 1, //
                                           1, 1, 1, 0, 0, //
                                           1, 1, 1, 1, 0, //
                                           1, 0, 1, 1, 1, //
                                           1, 0, 0, 1, 1}));
  BlockSparseSpec st;
  st.block = 128;
  st.layout = "strided";
  st.stride = 3;
  st.local = 1;
  st.maxSeqlen = 512; // 4 blocks
  BlockTable s = blockTable(st);
  EXPECT_EQ(s.table, (std::vector<uint8_t>{1, 0, 0, 1, //
                                           0, 1, 0, 0, //
                                           0, 0, 1, 0, //
                                           1, 0, 0, 1}));
  st.local = 2; // plus the neighbours of the diagonal
  EXPECT_EQ(blockTable(st).table, (std::vector<uint8_t>{1, 1, 0, 1, //
                                                        1, 1, 1, 0, //
                                                        0, 1, 1, 1, //
                                                        1, 0, 1, 1}));
  BlockSparseSpec file;
  file.block = 64;
  file.layout = "file";
  file.fileRows = {{1, 0, 1}, {0, 1, 1}};
  BlockTable f = blockTable(file);
  EXPECT_EQ(f.rows, 2);
  EXPECT_EQ(f.cols, 3);
  EXPECT_EQ(f.table, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1}));
  // The hash names the table: stable, and different for a different block, shape or table.
  EXPECT_EQ(f.hash, blockTable(file).hash);
  EXPECT_EQ(f.hash.size(), 8u);
  file.block = 128;
  EXPECT_NE(blockTable(file).hash, f.hash);
  file.block = 64;
  file.fileRows = {{1, 0, 1, 0, 1, 1}};
  EXPECT_NE(blockTable(file).hash, f.hash);
}

TEST(Plan, SpillFallbackOnlyWhereNoVariantPinsTheKernel) {
  // A window variant on the default tile gets a spill fallback; pinning the same tile in
  // another variant merges the two into one kernel, which then keeps no fallback, in either
  // order (the pinned kernel is built as written).
  const std::string dflt = "  - {name: a, dtype: bf16, head_dim: 64, mask: window}\n";
  const std::string pinned = "  - {name: b, dtype: bf16, head_dim: 64, mask: window, tile: "
                             "{block_m: 128, block_n: 128, warps: 4, stages: 2}}\n";
  std::vector<KernelPlan> alone = planOf("variants:\n" + dflt, {"sm_90"});
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_TRUE(alone[0].spillFallback.has_value());
  EXPECT_EQ(alone[0].spillFallback->text(), "m128n64w4s2");
  for (const std::string &yaml : {"variants:\n" + dflt + pinned, "variants:\n" + pinned + dflt}) {
    std::vector<KernelPlan> merged = planOf(yaml, {"sm_90"});
    ASSERT_EQ(merged.size(), 1u) << yaml;
    EXPECT_FALSE(merged[0].spillFallback.has_value()) << yaml;
  }
  // Tuned and sm90ws-pinned configs: none either.
  std::vector<KernelPlan> ws = planOf(
      "variants:\n  - {name: c, dtype: bf16, head_dim: 64, mask: causal, score_mod: softcap, "
      "tile: {template: sm90ws, block_m: 192}}\n",
      {"sm_90a"});
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_FALSE(ws[0].spillFallback.has_value());
}

TEST(Plan, BackwardSmemFormulaMirrorsTemplate) {
  // K + V + kStages x (Q + dO) rows and P, dS tiles, as templates/sm80/bwd_config.cuh's
  // kSmemBytes: head dims that are multiples of 64 unpadded (swizzled 128-byte lines), others
  // padded by 16 bytes, P and dS rows by 16 bytes.
  EXPECT_EQ(sm80BwdSmemBytes(128, 128, 64, 128, 1, false),
            128 * (256 + 256) + 64 * (256 + 256) + 2 * 64 * (128 * 2 + 16));
  EXPECT_EQ(sm80BwdSmemBytes(64, 64, 128, 128, 2, false),
            128 * (128 + 128) + 2 * 128 * (128 + 128) + 2 * 128 * (128 * 2 + 16));
  // Varlen kernels keep padded rows below 192.
  EXPECT_EQ(sm80BwdSmemBytes(128, 128, 64, 128, 2, /*varlen=*/true),
            128 * (272 + 272) + 2 * 64 * (272 + 272) + 2 * 64 * (128 * 2 + 16));
  EXPECT_EQ(sm80BwdSmemBytes(256, 256, 64, 64, 2, true), sm80BwdSmemBytes(256, 256, 64, 64, 2, false));
  EXPECT_EQ(sm80BwdSmemBytes(96, 96, 64, 128, 2, false),
            128 * (208 + 208) + 2 * 64 * (208 + 208) + 2 * 64 * (128 * 2 + 16));
  // Head dims 192 x 128: both unpadded.
  EXPECT_EQ(sm80BwdSmemBytes(192, 128, 64, 64, 2, false),
            64 * (384 + 256) + 2 * 64 * (384 + 256) + 2 * 64 * (64 * 2 + 16));
  EXPECT_EQ(sm80BwdSmemBytes(72, 72, 64, 64, 1, false), sm80BwdSmemBytes(80, 80, 64, 64, 1, false));
}

TEST(Plan, BackwardWarpsFitTheHeadDim) {
  // Padded head dim 80 does not split over 8 warps: the default drops to 4 warps and 64 keys.
  std::vector<KernelPlan> p =
      planOf("variants: [{name: v, dtype: bf16, head_dim: 72, passes: [bwd]}]", {"sm_90"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].warps, 4);
  EXPECT_EQ(p[0].blockN, 64);
  KernelConfig c = configOf(p[0]);
  c.warps = 8;
  llvm::Expected<KernelPlan> refused = applyConfig(p[0], c);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("split over 8 warps"),
            std::string::npos);
}

TEST(Plan, IdenticalKernelsArePlannedOnce) {
  std::vector<KernelPlan> p = planOf("variants:\n"
                                     "  - {name: a, dtype: fp16, head_dim: 64}\n"
                                     "  - {name: b, dtype: fp16, head_dim: 64}\n",
                                     {"sm_90"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].variant, "a,b");
}

TEST(Plan, CommandLineArchsReplaceSpecTargets) {
  std::vector<KernelPlan> p =
      planOf("targets: [sm_80]\nvariants: [{name: a, dtype: fp16, head_dim: 64}]", {"sm_100a"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].arch, "sm_100a");
}

TEST(Plan, TileOverrideErrorsNameTheSpecLine) {
  EXPECT_EQ(planError("variants:\n  - name: v\n    dtype: bf16\n    head_dim: 128\n"
                      "    tile: {block_n: 128}\n",
                      {"sm_90"}),
            "t.yaml:5:11: error: tile 128x128 with 4 warps needs 256 fp32 accumulator registers "
            "per thread (at most 192 fit without spills): use more warps or a smaller block_n");
  EXPECT_NE(planError("variants: [{name: v, dtype: bf16, head_dim: 256, tile: {stages: 4}}]",
                      {"sm_90"})
                .find("bytes of shared memory; sm_90 allows 232448"),
            std::string::npos);
}

TEST(Plan, TunedRangesBecomeKernelsWithTheDefaultForTheRest) {
  llvm::Expected<AttentionSpec> spec =
      parseSpec("variants: [{name: v, dtype: bf16, head_dim: 128, mask: causal}]", "t.yaml");
  ASSERT_TRUE(bool(spec));
  TuningTable table;
  auto config = [](int64_t lo, int64_t hi, int blockN, int tau) {
    TunedConfig c;
    c.seqlenMin = lo;
    c.seqlenMax = hi;
    c.config.blockM = 128;
    c.config.blockN = blockN;
    c.config.warps = 4;
    c.config.stages = 2;
    c.config.rescaleTau = tau;
    c.provenance = "test";
    return c;
  };
  // 1..1024 and 1025..4096 share a config (merged); nothing tuned above 4096.
  table["fwd bf16 hd128x128 causal sm_90"] = {config(1, 1024, 32, -1), config(1025, 4096, 32, -1)};
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, {"sm_90"}, &table);
  ASSERT_TRUE(bool(plans)) << llvm::toString(plans.takeError());
  ASSERT_EQ(plans->size(), 2u);
  const KernelPlan &def = (*plans)[1], &tuned = (*plans)[0];
  EXPECT_EQ(tuned.name, "fagen_fwd_bf16_hd128_causal_sm80_m128n32w4s2_ra");
  EXPECT_EQ(tuned.seqlenMin, 1);
  EXPECT_EQ(tuned.seqlenMax, 4096);
  EXPECT_EQ(tuned.tuning, "test; test"); // both buckets' provenance
  EXPECT_EQ(def.name, "fagen_fwd_bf16_hd128_causal_sm80_m128n64w4s2_r8");
  EXPECT_EQ(def.seqlenMin, 0);
  EXPECT_EQ(def.tuning, "default");
  EXPECT_EQ(workloadKey(def), "fwd bf16 hd128x128 causal sm_90");

  // A full cover needs no default kernel; an unbuildable config is refused with the reason.
  table["fwd bf16 hd128x128 causal sm_90"].push_back(config(4097, int64_t(1) << 40, 64, 8));
  plans = planKernels(*spec, {"sm_90"}, &table);
  ASSERT_TRUE(bool(plans));
  EXPECT_EQ(plans->size(), 2u);
  table["fwd bf16 hd128x128 causal sm_90"] = {config(1, 100, 128, 0)};
  plans = planKernels(*spec, {"sm_90"}, &table);
  ASSERT_FALSE(bool(plans));
  EXPECT_NE(llvm::toString(plans.takeError()).find("fp32 accumulator registers"), std::string::npos);
}

TEST(Emit, SourceIsDeterministicAndSpellsThePlan) {
  std::vector<KernelPlan> p =
      planOf("variants: [{name: v, dtype: fp16, head_dim: 96, mask: none}]", {"sm_90"});
  ASSERT_EQ(p.size(), 1u);
  std::string a = emitKernelSource(p[0]), b = emitKernelSource(p[0]);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("struct KernelOptions : fagen::sm80::FwdOptions {\n  using Element = "
                   "fagen::half_t;\n  using Variant = KernelVariant;\n  static constexpr int "
                   "kHeadDimQK = 96, kHeadDimV = 96;\n"),
            std::string::npos);
  EXPECT_NE(a.find("using KernelVariant = fagen::Variant<fagen::NoMask, fagen::NoScoreMod, "
                   "fagen::NoDropout,\n    fagen::DenseBlocks, /*kVarlen=*/false>;"),
            std::string::npos);
  EXPECT_NE(a.find("  static constexpr int kRescaleTau = 8, kExp2EmuPercent = 0, kExp2PolyDegree = "
                   "3;\n};\nusing Config = fagen::sm80::FwdConfig<KernelOptions>;\n"),
            std::string::npos);
  EXPECT_NE(a.find(p[0].name + "(const __grid_constant__ fagen_fwd_params params)"),
            std::string::npos);
}

TEST(Build, PtxasReportOfOneKernel) {
  std::string out = "ptxas info    : 0 bytes gmem\n"
                    "ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
                    "ptxas info    : Function properties for other\n"
                    "    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
                    "ptxas info    : Used 40 registers, used 1 barriers\n"
                    "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
                    "ptxas info    : Function properties for k\n"
                    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                    "ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]\n";
  PtxasReport r = parsePtxasReport(out, "k");
  EXPECT_EQ(r.registers, 168);
  EXPECT_EQ(r.spillBytes(), 0);
  EXPECT_EQ(r.stackFrameBytes, 0);
  PtxasReport o = parsePtxasReport(out, "other");
  EXPECT_EQ(o.registers, 40);
  EXPECT_EQ(o.spillBytes(), 12);
  EXPECT_EQ(parsePtxasReport(out, "missing").registers, -1);
}

TEST(Build, PtxasReportOfABackwardCubin) {
  // Three entry points; the main kernel's values, the maxima over all three, and every line.
  std::string out = "ptxas info    : Compiling entry function 'k_post' for 'sm_90'\n"
                    "ptxas info    : Function properties for k_post\n"
                    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                    "ptxas info    : Used 24 registers\n"
                    "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
                    "ptxas info    : Function properties for k\n"
                    "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
                    "ptxas info    : Used 255 registers\n"
                    "ptxas info    : Compiling entry function 'k_pre' for 'sm_90'\n"
                    "ptxas info    : Function properties for k_pre\n"
                    "    0 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads\n"
                    "ptxas info    : Used 32 registers\n";
  KernelPlan plan;
  plan.name = "k";
  plan.pass = Pass::Backward;
  EXPECT_EQ(entryPointNames(plan), (std::vector<std::string>{"k", "k_pre", "k_post"}));
  PtxasReport r = parsePlanReport(out, plan);
  EXPECT_EQ(r.registers, 255);
  EXPECT_EQ(r.spillBytes(), 8);
  EXPECT_EQ(r.maxRegisters, 255);
  EXPECT_EQ(r.maxSpillBytes, 32);
  EXPECT_NE(r.text.find("'k_pre'"), std::string::npos);
  EXPECT_NE(r.text.find("'k_post'"), std::string::npos);
  // Re-parsing the stored text (the cache) gives the same report.
  PtxasReport again = parsePlanReport(r.text, plan);
  EXPECT_EQ(again.registers, 255);
  EXPECT_EQ(again.maxSpillBytes, 32);
  // A missing entry point makes the report incomplete.
  EXPECT_EQ(parsePlanReport(out.substr(0, out.find("ptxas info    : Compiling entry function 'k_pre'")),
                            plan)
                .registers,
            -1);
  // A forward plan has one entry point: maxima are its own.
  plan.pass = Pass::Forward;
  PtxasReport f = parsePlanReport(out, plan);
  EXPECT_EQ(f.maxRegisters, 255);
  EXPECT_EQ(f.maxSpillBytes, 8);
}

TEST(Build, NvccFlagsPerArch) {
  // Host-only functions called from __host__ __device__ code are errors, not warnings.
  EXPECT_EQ(nvccFlags("sm_90a"), (std::vector<std::string>{"-gencode", "arch=compute_90a,code=sm_90a",
                                                           "--diag-error", "20011,20013"}));
  EXPECT_EQ(nvccFlags("sm_80"), (std::vector<std::string>{"-gencode", "arch=compute_80,code=sm_80",
                                                          "--diag-error", "20011,20013"}));
}

TEST(Build, TemplatesHashIsStable) {
  EXPECT_EQ(templatesHash().size(), 64u);
  EXPECT_EQ(templatesHash(), templatesHash());
}

} // namespace

namespace {

TEST(Check, ShapesFollowTheKernelsTunedRange) {
  auto maxSeqlen = [](const CheckShape &s) { return std::max(s.seqlenQ, s.seqlenK); };
  // An untuned kernel runs the whole grid.
  std::vector<CheckShape> all = checkShapesFor(0, int64_t(1) << 40, false);
  EXPECT_EQ(all.size(), 9u);
  // A short-sequence bucket keeps the grid's shapes inside it.
  for (const CheckShape &s : checkShapesFor(1, 128, false))
    EXPECT_LE(maxSeqlen(s), 128);
  // A long-sequence bucket the grid does not reach gets three odd shapes in range, one with
  // Sq < Sk, one with Sq > Sk and one of several query tiles with GQA (two in the quick grid).
  std::vector<CheckShape> lng = checkShapesFor(4097, int64_t(1) << 40, false);
  ASSERT_EQ(lng.size(), 3u);
  for (const CheckShape &s : lng) {
    EXPECT_GE(maxSeqlen(s), 4097);
    EXPECT_LE(maxSeqlen(s), 4100);
  }
  EXPECT_LT(lng[0].seqlenQ, lng[0].seqlenK);
  EXPECT_GT(lng[1].seqlenQ, lng[1].seqlenK);
  EXPECT_GT(lng[2].seqlenQ, 256);
  EXPECT_GT(lng[2].headsQ, lng[2].headsKV);
  EXPECT_EQ(checkShapesFor(4097, int64_t(1) << 40, true).size(), 2u);
}


TEST(Plan, Sm90WsPersistentForEvenTilesAndHd64) {
  // One CTA per SM where every work tile costs the same (no mask, varlen or sparsity; score
  // mods and dropout do not change a tile's cost), or at hd 64; uneven tiles (causal, window,
  // varlen, sparse) get one CTA per tile and the hardware's dynamic dispatch.
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: d128, dtype: bf16, head_dim: 128}
  - {name: f128, dtype: fp16, head_dim: 128}
  - {name: cap128, dtype: bf16, head_dim: 128, score_mod: softcap}
  - {name: alibi128, dtype: bf16, head_dim: 128, score_mod: alibi}
  - {name: c128, dtype: bf16, head_dim: 128, mask: causal}
  - {name: w128, dtype: bf16, head_dim: 128, mask: window}
  - {name: v128, dtype: bf16, head_dim: 128, varlen: true}
  - {name: s128, dtype: bf16, head_dim: 128, block_sparse: {block: 128, layout: runtime}}
  - {name: drop256, dtype: bf16, head_dim: 256, dropout: true}
  - {name: c256, dtype: bf16, head_dim: 256, mask: causal}
  - {name: c64, dtype: bf16, head_dim: 64, mask: causal}
)",
                                     {"sm_90a"});
  std::set<std::string> persistent;
  for (const KernelPlan &k : p) {
    ASSERT_EQ(k.templ, "sm90ws") << k.name;
    if (k.persistent)
      persistent.insert(k.variant);
  }
  EXPECT_EQ(persistent, (std::set<std::string>{"d128", "f128", "cap128", "alibi128", "drop256",
                                               "c64"}));
  // Uneven work tiles (a mask, varlen) can take them from a counter; even ones and block-sparse
  // ones not.
  std::set<std::string> counter;
  for (const KernelPlan &k : p)
    if (k.tileCounter)
      counter.insert(k.variant);
  EXPECT_EQ(counter, (std::set<std::string>{"c128", "w128", "v128", "c256", "c64"}));
  // O through TMA stores: head dims 64 and 128 without varlen, whatever the mask or score mod;
  // not hd 256 (no room for the O tile).
  std::set<std::string> tmaO;
  for (const KernelPlan &k : p)
    if (k.tmaStoreO) {
      tmaO.insert(k.variant);
      EXPECT_EQ(k.smemBytes, sm90WsFwdSmemBytes(k.headDimQK, k.headDimV, k.blockM, k.blockN,
                                                k.stages, k.tileCounter, true))
          << k.name;
    }
  EXPECT_EQ(tmaO, (std::set<std::string>{"d128", "f128", "cap128", "alibi128", "c128", "w128",
                                         "s128", "c64"}));
}

TEST(Plan, Sm90WsTmaStoreOWhereTheOTileFits) {
  // The staged epilogue writes O through the Q tile instead; a config whose O tile does not
  // fit beside three K/V stages keeps the register stores.
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: so, dtype: bf16, head_dim: 128, tile: {template: sm90ws, staged_epilogue: true}}
  - {name: s3, dtype: bf16, head_dim: 128, mask: causal,
     tile: {template: sm90ws, block_m: 128, block_n: 128, warps: 8, stages: 3}}
  - {name: s2, dtype: bf16, head_dim: 128, mask: causal,
     tile: {template: sm90ws, block_m: 128, block_n: 128, warps: 8, stages: 2}}
)",
                                     {"sm_90a"});
  ASSERT_EQ(p.size(), 3u);
  for (const KernelPlan &k : p) {
    EXPECT_EQ(k.tmaStoreO, k.variant == "s2") << k.name;
    EXPECT_LE(k.smemBytes, archSmemLimit("sm_90a")) << k.name;
  }
}

} // namespace

TEST(Plan, Sm90WsBackwardServes) {
  std::vector<KernelPlan> p = planOf(R"(variants:
  - {name: d64, dtype: bf16, head_dim: 64, passes: [bwd]}
  - {name: c128, dtype: fp16, head_dim: 128, mask: causal, passes: [bwd]}
  - {name: win, dtype: bf16, head_dim: 128, mask: window, score_mod: alibi, passes: [bwd]}
  - {name: bs, dtype: bf16, head_dim: 64, block_sparse: {block: 128, layout: runtime}, passes: [bwd]}
  - {name: bs64, dtype: bf16, head_dim: 64, block_sparse: {block: 64, layout: runtime}, passes: [bwd]}
  - {name: drop, dtype: bf16, head_dim: 64, dropout: true, passes: [bwd]}
  - {name: vl, dtype: bf16, head_dim: 128, varlen: true, passes: [bwd]}
  - {name: det, dtype: bf16, head_dim: 128, deterministic: true, passes: [bwd]}
  - {name: hd96, dtype: bf16, head_dim: 96, passes: [bwd]}
  - {name: mla, dtype: bf16, head_dim_qk: 192, head_dim_v: 128, passes: [bwd]}
  - {name: alibi64, dtype: bf16, head_dim: 64, score_mod: alibi, passes: [bwd]}
  - {name: dropcap, dtype: bf16, head_dim: 128, mask: causal, score_mod: softcap, dropout: true,
     passes: [bwd]}
  - {name: dropwin, dtype: bf16, head_dim: 128, mask: window, score_mod: softcap, dropout: true,
     varlen: true, passes: [bwd]}
  - {name: c256, dtype: bf16, head_dim: 256, mask: causal, score_mod: softcap, passes: [bwd]}
  - {name: drop256, dtype: bf16, head_dim: 256, dropout: true, passes: [bwd]}
  - {name: vl256, dtype: fp16, head_dim: 256, varlen: true, passes: [bwd]}
  - {name: detvl, dtype: fp16, head_dim: 64, mask: causal, varlen: true, deterministic: true,
     passes: [bwd]}
  - {name: droptl, dtype: bf16, head_dim: 128, mask: causal, mask_align: top_left,
     dropout: true, passes: [bwd]}
  - {name: capdet, dtype: bf16, head_dim: 128, mask: causal, score_mod: softcap,
     deterministic: true, passes: [bwd]}
  - {name: cap64, dtype: fp16, head_dim: 64, mask: causal, score_mod: softcap, passes: [bwd]}
  - {name: cap64w, dtype: bf16, head_dim: 64, mask: window, score_mod: softcap, passes: [bwd]}
)",
                                     {"sm_90a"});
  // cap64: softcap under a causal mask at hd 64 spilled in sm90ws (the portable kernel takes
  // it); under a window mask it did not.
  ASSERT_EQ(p.size(), 21u);
  for (const KernelPlan &k : p) {
    const bool ws = k.variant == "d64" || k.variant == "c128" || k.variant == "win" ||
                    k.variant == "bs" || k.variant == "vl" || k.variant == "drop" ||
                    k.variant == "dropwin" || k.variant == "det" || k.variant == "detvl" ||
                    k.variant == "c256" || k.variant == "drop256" || k.variant == "vl256" ||
                    k.variant == "hd96" || k.variant == "cap64w" || k.variant == "mla";
    EXPECT_EQ(k.templ, ws ? "sm90ws" : "sm80") << k.name;
    EXPECT_FALSE(bool(checkKernelPlan(k))) << k.name;
    EXPECT_FALSE(k.persistent) << k.name;
    if (!ws)
      continue;
    EXPECT_EQ(k.threads, 384) << k.name;
    EXPECT_EQ(k.smemBytes, sm90WsBwdSmemBytes(k.headDimQK, k.blockM, k.blockN, k.stages));
    EXPECT_LE(k.smemBytes, archSmemLimit("sm_90a")) << k.name;
    // The dQ writer where ws_bwd_dq_writer puts it: no score mod, varlen or block sparsity,
    // no mask or a causal one, hd 96 and up; always in the deterministic mode.
    EXPECT_EQ(k.dqWriter,
              k.deterministic ||
                  (k.headDimQK >= 96 && k.scoreMod == ScoreMod::None && !k.varlen &&
                   k.sparsity == Sparsity::None &&
                   (k.mask == Mask::None || k.mask == Mask::Causal)))
        << k.name;
    if (ws_bwd_split_s(ws_bwd_dim(k.headDimQK))) {
      // Two consumer warpgroups over 64 keys that split S^T by query columns, two Q stages
      // beside one dO stage (hd 256; 192/128 in its tiles).
      EXPECT_EQ(ws_bwd_dim(k.headDimQK), 256) << k.name;
      EXPECT_EQ(configOf(k).text(), k.dqWriter ? "m64n64w8s2 dqw" : "m64n64w8s2") << k.name;
      continue;
    }
    // One 64 x 64 dQ block per consumer warpgroup, two warpgroups of 64 keys (hd 96 in the
    // 128 columns of ws_bwd_dim).
    EXPECT_EQ(k.blockN, 128) << k.name;
    EXPECT_EQ(k.blockM * ws_bwd_dim(k.headDimQK), 2 * 64 * 64) << k.name;
  }
  // Combinations whose sm90ws kernels spilled say so when pinned to it.
  KernelPlan droptl = planNamed(p, "droptl");
  droptl.templ = "sm90ws";
  llvm::Error droptlError = checkKernelPlan(droptl);
  ASSERT_TRUE(bool(droptlError));
  EXPECT_NE(llvm::toString(std::move(droptlError))
                .find("does not serve dropout under a top-left causal mask (use template sm80)"),
            std::string::npos);
  // What it cannot build is refused with the reason.
  KernelConfig c = configOf(planNamed(p, "c128"));
  c.blockM = 128;
  llvm::Expected<KernelPlan> refused = applyConfig(planNamed(p, "c128"), c);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("block_m must be 64 at head dim 128"),
            std::string::npos);
  c = configOf(planNamed(p, "c256"));
  c.stages = 3; // 3 Q slots (and one dO slot) of 64 x 256 do not fit beside the rest
  refused = applyConfig(planNamed(p, "c256"), c);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("bytes of shared memory"), std::string::npos);
}
