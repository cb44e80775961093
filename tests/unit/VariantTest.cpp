// core/Variant.h: every spelling round-trips, the kernel-name tokens and keys read as the
// kernel names and the tuning database spell them, and the runtime's matching rule.

#include "core/Variant.h"

#include "gtest/gtest.h"

using namespace fagen;

namespace {

template <class E> void expectRoundTrip(std::vector<std::string> expected) {
  EXPECT_EQ(spellings<E>(), expected);
  for (size_t i = 0; i < expected.size(); ++i) {
    std::optional<E> v = fromText<E>(expected[i]);
    ASSERT_TRUE(v.has_value()) << expected[i];
    EXPECT_EQ(static_cast<size_t>(*v), i) << expected[i];
    EXPECT_EQ(toText(*v), expected[i]);
  }
  EXPECT_FALSE(fromText<E>("").has_value());
  EXPECT_FALSE(fromText<E>("Causal").has_value());
  EXPECT_FALSE(fromText<E>(expected[0] + " ").has_value());
}

TEST(Variant, EverySpellingRoundTrips) {
  expectRoundTrip<Pass>({"fwd", "bwd"});
  expectRoundTrip<DType>({"fp16", "bf16"});
  expectRoundTrip<Mask>({"none", "causal", "window"});
  expectRoundTrip<MaskAlign>({"bottom_right", "top_left"});
  expectRoundTrip<ScoreMod>({"none", "softcap", "alibi"});
  expectRoundTrip<Sparsity>({"none", "runtime", "static"});
}

Variant causalSoftcap() {
  Variant v;
  v.dtype = DType::BF16;
  v.headDimQK = 192;
  v.headDimV = 128;
  v.mask = Mask::Causal;
  v.maskAlign = MaskAlign::TopLeft;
  v.scoreMod = ScoreMod::Softcap;
  v.dropout = true;
  v.varlen = true;
  return v;
}

TEST(Variant, KernelNameTokens) {
  Variant dense;
  EXPECT_EQ(dense.maskToken(), "none");
  EXPECT_TRUE(dense.featureTokens().empty());
  dense.maskAlign = MaskAlign::TopLeft; // no mask: the alignment does not show
  EXPECT_EQ(dense.maskToken(), "none");

  Variant v = causalSoftcap();
  EXPECT_EQ(v.maskToken(), "causaltl");
  EXPECT_EQ(v.featureTokens(), (std::vector<std::string>{"softcap", "drop", "varlen"}));
  v.pass = Pass::Backward;
  v.deterministic = true;
  v.sparsity = Sparsity::Static;
  v.sparseBlock = 128;
  v.sparseHash = "1a2b3c4d";
  EXPECT_EQ(v.featureTokens(),
            (std::vector<std::string>{"softcap", "drop", "bs128_1a2b3c4d", "varlen", "det"}));
  v.sparsity = Sparsity::Runtime;
  v.sparseHash.clear();
  EXPECT_EQ(v.featureTokens()[2], "bsr128");
  EXPECT_EQ(v.key(), "bwd bf16 hd192x128 causaltl softcap drop bsr128 varlen det");
}

TEST(Variant, TextAndSpecKeys) {
  Variant v = causalSoftcap();
  EXPECT_EQ(v.text(), "bf16 head_dim 192/128 mask causal top_left softcap dropout varlen");
  EXPECT_EQ(v.specKeys(), "dtype bf16, head_dim 192 (head_dim_v 128), mask causal, mask_align "
                          "top_left, score_mod softcap, dropout true and varlen true");
  Variant dense;
  dense.headDimQK = dense.headDimV = 64;
  EXPECT_EQ(dense.text(), "fp16 head_dim 64/64 mask none");
  EXPECT_EQ(dense.specKeys(), "dtype fp16, head_dim 64 and mask none");
}

TEST(Variant, ServesCall) {
  Variant kernel = causalSoftcap(), call = causalSoftcap();
  EXPECT_TRUE(servesCall(kernel, call));
  call.scoreMod = ScoreMod::Alibi;
  EXPECT_FALSE(servesCall(kernel, call));

  // Without a mask the alignment does not matter.
  Variant dense, denseTopLeft;
  denseTopLeft.maskAlign = MaskAlign::TopLeft;
  EXPECT_TRUE(servesCall(dense, denseTopLeft));

  // A deterministic backward serves a call that does not ask for one, not the reverse.
  Variant bwd, bwdDet;
  bwd.pass = bwdDet.pass = Pass::Backward;
  bwdDet.deterministic = true;
  EXPECT_TRUE(servesCall(bwdDet, bwd));
  EXPECT_FALSE(servesCall(bwd, bwdDet));

  // Static layouts: block 0 and no hash in the call take any.
  Variant layout, anyLayout;
  layout.sparsity = anyLayout.sparsity = Sparsity::Static;
  layout.sparseBlock = 128;
  layout.sparseHash = "1a2b3c4d";
  EXPECT_TRUE(servesCall(layout, anyLayout));
  anyLayout.sparseHash = "00000000";
  EXPECT_FALSE(servesCall(layout, anyLayout));
}

} // namespace
