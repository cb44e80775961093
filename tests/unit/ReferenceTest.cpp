//===- ReferenceTest.cpp - the CPU reference checked against itself and by hand ===//
//
// The reference is what every kernel is judged by, so it is tested on its own: the backward's
// gradients against central finite differences of the float64 forward for every variant (on
// float64 inputs, tiny shapes), the dropout keep rate against its statistical bound, and
// softcap, ALiBi, window and top-left values computed by hand.
//
//===----------------------------------------------------------------------===//

#include "check/Reference.h"

#include "gtest/gtest.h"

#include <random>

using namespace fagen;
using namespace fagen::reference;

namespace {

/// A problem on host float64 tensors: dense BHSD (or packed [total, heads, d] for varlen).
struct TestProblem {
  int Batch = 2, HeadsQ = 2, HeadsKV = 1, Sq = 5, Sk = 7, Dqk = 6, Dv = 4;
  int WindowLeft = -1, WindowRight = -1;
  std::vector<int32_t> CuQ, CuK; ///< varlen offsets (empty: dense)
  std::vector<double> Q, K, V, DOut;
  std::vector<float> Slopes;
  std::vector<uint8_t> Mask, Table;
  FwdProblem Pb{};

  int64_t rowsQ() const { return CuQ.empty() ? int64_t(Batch) * Sq : CuQ.back(); }
  int64_t rowsK() const { return CuK.empty() ? int64_t(Batch) * Sk : CuK.back(); }

  /// Fills the tensors with random values and points the params at them. Layout: rows of
  /// [heads, d] per token, tokens of a batch entry contiguous (BSHD; varlen packs them).
  void build(unsigned Seed = 1) {
    std::mt19937_64 Rng(Seed);
    std::normal_distribution<double> Dist(0.0, 1.0);
    auto fill = [&](std::vector<double> &X, size_t N) {
      X.resize(N);
      for (double &E : X)
        E = Dist(Rng);
    };
    fill(Q, size_t(rowsQ()) * HeadsQ * Dqk);
    fill(K, size_t(rowsK()) * HeadsKV * Dqk);
    fill(V, size_t(rowsK()) * HeadsKV * Dv);
    fill(DOut, size_t(rowsQ()) * HeadsQ * Dv);
    fagen_fwd_params &P = Pb.Params;
    P.batch = Batch;
    P.heads_q = HeadsQ;
    P.heads_kv = HeadsKV;
    P.group_size = HeadsQ / HeadsKV;
    P.seqlen_q = Sq;
    P.seqlen_k = Sk;
    P.q = Q.data(), P.k = K.data(), P.v = V.data();
    P.q_row_stride = int64_t(HeadsQ) * Dqk, P.q_head_stride = Dqk, P.q_batch_stride = Sq * P.q_row_stride;
    P.k_row_stride = int64_t(HeadsKV) * Dqk, P.k_head_stride = Dqk, P.k_batch_stride = Sk * P.k_row_stride;
    P.v_row_stride = int64_t(HeadsKV) * Dv, P.v_head_stride = Dv, P.v_batch_stride = Sk * P.v_row_stride;
    P.softmax_scale = float(1 / std::sqrt(double(Dqk)));
    P.window_left = WindowLeft;
    P.window_right = WindowRight;
    if (!CuQ.empty()) {
      P.cu_seqlens_q = CuQ.data();
      P.cu_seqlens_k = CuK.data();
      Pb.Varlen = true;
    }
    if (Pb.ScoreMod == fagen::ScoreMod::Alibi) {
      Slopes.resize(size_t(Batch) * HeadsQ);
      for (size_t I = 0; I < Slopes.size(); ++I)
        Slopes[I] = 0.25f + 0.125f * float(I);
      P.alibi_slopes = Slopes.data();
      P.alibi_batch_stride = HeadsQ;
    }
    Pb.HeadDim = Dqk;
    Pb.HeadDimV = Dv;
    Pb.Type = ElementType::F64;
  }

  StridedTensor dout() const {
    return {DOut.data(), Sq * int64_t(HeadsQ) * Dv, Dv, int64_t(HeadsQ) * Dv};
  }

  /// sum(O o dO): its gradient with respect to Q, K, V is the backward of dO.
  double loss() const {
    FwdResult R = forwardFloat64(Pb);
    double L = 0;
    for (int B = 0; B < Batch; ++B) {
      const Span S = spanOf(Pb, B);
      for (int H = 0; H < HeadsQ; ++H)
        for (int I = 0; I < S.Sq; ++I)
          for (int X = 0; X < Dv; ++X)
            L += R.O[resultRowQ(Pb, B, H, I) * Dv + X] *
                 loadElement(Pb, dout(), B, H, S.Q0, I, X);
    }
    return L;
  }
};

/// The element of a result that tensor element `Index` of Q (K, V) lands in: tensors are
/// [token, head, d], results [head, token, d] (varlen) or [batch, head, seq, d].
size_t resultIndexQ(const TestProblem &T, size_t Index, int D) {
  const int64_t Token = Index / (T.HeadsQ * D), H = (Index / D) % T.HeadsQ, X = Index % D;
  if (T.CuQ.empty())
    return ((size_t(Token / T.Sq) * T.HeadsQ + H) * T.Sq + Token % T.Sq) * D + X;
  return (size_t(H) * T.rowsQ() + Token) * D + X;
}
size_t resultIndexK(const TestProblem &T, size_t Index, int D) {
  const int64_t Token = Index / (T.HeadsKV * D), H = (Index / D) % T.HeadsKV, X = Index % D;
  if (T.CuK.empty())
    return ((size_t(Token / T.Sk) * T.HeadsKV + H) * T.Sk + Token % T.Sk) * D + X;
  return (size_t(H) * T.rowsK() + Token) * D + X;
}

/// Central differences of loss() in every element of `Tensor`, against `Grad`.
void expectGradient(TestProblem &T, std::vector<double> &Tensor, const std::vector<double> &Grad,
                    bool IsQuery, int D, const char *Name) {
  const double Step = 1e-6;
  double MaxError = 0;
  for (size_t I = 0; I < Tensor.size(); ++I) {
    const double Saved = Tensor[I];
    Tensor[I] = Saved + Step;
    const double Up = T.loss();
    Tensor[I] = Saved - Step;
    const double Down = T.loss();
    Tensor[I] = Saved;
    const double Numeric = (Up - Down) / (2 * Step);
    const size_t At = IsQuery ? resultIndexQ(T, I, D) : resultIndexK(T, I, D);
    MaxError = std::max(MaxError, std::fabs(Numeric - Grad[At]));
  }
  EXPECT_LT(MaxError, 1e-6) << Name;
}

/// Checks dQ, dK, dV of the float64 backward against finite differences, and that the
/// same-precision backward (on F64 inputs: fp32 throughout) agrees with it.
void expectGradientsMatch(TestProblem &T) {
  T.build();
  BwdProblem Bp{T.Pb, T.dout()};
  BwdResult G = backwardFloat64(Bp);
  ASSERT_EQ(G.DQ.size(), size_t(T.rowsQ()) * T.HeadsQ * T.Dqk);
  ASSERT_EQ(G.DK.size(), size_t(T.rowsK()) * T.HeadsKV * T.Dqk);
  ASSERT_EQ(G.DV.size(), size_t(T.rowsK()) * T.HeadsKV * T.Dv);
  expectGradient(T, T.Q, G.DQ, true, T.Dqk, "dQ");
  expectGradient(T, T.K, G.DK, false, T.Dqk, "dK");
  expectGradient(T, T.V, G.DV, false, T.Dv, "dV");
  BwdError E = measureError(G, backwardSamePrecision(Bp));
  EXPECT_LT(E.MaxDQ, 1e-4);
  EXPECT_LT(E.MaxDK, 1e-4);
  EXPECT_LT(E.MaxDV, 1e-4);
  // The gradients are not trivially zero.
  double Norm = 0;
  for (double X : G.DQ)
    Norm += std::fabs(X);
  EXPECT_GT(Norm, 1e-3);
}

TEST(ReferenceGradients, SamePrecisionReadsTheGivenO) {
  // The same-precision backward takes D = rowsum(dO o O) from GivenO (the O a kernel under
  // test reads); the float64 backward ignores it.
  TestProblem T;
  T.Pb.Mask = fagen::Mask::Causal;
  T.build();
  BwdProblem Bp{T.Pb, T.dout()};
  const BwdResult Own = backwardSamePrecision(Bp), Exact = backwardFloat64(Bp);
  FwdResult F = forwardFloat64(T.Pb);
  Bp.GivenO = &F.O;
  BwdError Same = measureError(Own, backwardSamePrecision(Bp));
  EXPECT_LT(Same.MaxDQ, 1e-5); // its own O, in fp32: nearly the float64 one
  EXPECT_LT(Same.MaxDK, 1e-5);
  EXPECT_EQ(measureError(Exact, backwardFloat64(Bp)).MaxDQ, 0.0);
  for (double &X : F.O) // a different O moves D, hence dS, dQ and dK; dV = P^T dO does not
    X *= 1.01;
  BwdError Moved = measureError(Own, backwardSamePrecision(Bp));
  EXPECT_GT(Moved.MaxDQ, 1e-4);
  EXPECT_GT(Moved.MaxDK, 1e-4);
  EXPECT_LT(Moved.MaxDV, 1e-5);
  EXPECT_EQ(measureError(Exact, backwardFloat64(Bp)).MaxDQ, 0.0);
}

TEST(ReferenceErrors, DescribeWorstNamesTheElementAndTheDtypeStep) {
  const std::vector<double> Exact = {1.0, 2.0, 3.0, -0.5}, Same = {1.0, 2.0, 3.0078125, -0.5},
                            Kernel = {1.0, 2.015625, 3.0, -0.5};
  const std::string Line = describeWorst("dQ", Exact, Same, Kernel, 2, ElementType::BF16);
  EXPECT_NE(Line.find("dQ: largest error at element 1 (result row 0, column 1)"),
            std::string::npos)
      << Line;
  EXPECT_NE(Line.find("kernel 2.015625, float64 2, same-precision 2;"), std::string::npos) << Line;
  EXPECT_NE(Line.find("step there 0.0156"), std::string::npos) << Line; // bf16 at [2, 4): 2^-6
  EXPECT_NE(describeWorst("O", Exact, Same, Kernel, 2, ElementType::F16).find("step there 0.00195"),
            std::string::npos); // fp16 at [2, 4): 2^-9
  EXPECT_NE(describeWorst("dV", Exact, {}, Kernel, 2, ElementType::BF16).find("sizes differ"),
            std::string::npos);
}

TEST(ReferenceGradients, Dense) {
  TestProblem T;
  T.Pb.Mask = fagen::Mask::None;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, CausalBottomRightWithEmptyRows) {
  // Sq > Sk: the first Sq - Sk rows see no key; their dQ is 0.
  TestProblem T;
  T.Sq = 7, T.Sk = 4;
  T.Pb.Mask = fagen::Mask::Causal;
  expectGradientsMatch(T);
  BwdResult G = backwardFloat64(BwdProblem{T.Pb, T.dout()});
  for (int X = 0; X < T.Dqk; ++X)
    EXPECT_EQ(G.DQ[resultRowQ(T.Pb, 0, 0, 0) * T.Dqk + X], 0.0);
}

TEST(ReferenceGradients, CausalTopLeft) {
  TestProblem T;
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.Align = MaskAlign::TopLeft;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, Window) {
  for (MaskAlign Align : {MaskAlign::BottomRight, MaskAlign::TopLeft}) {
    TestProblem T;
    T.Pb.Mask = fagen::Mask::Window;
    T.Pb.Align = Align;
    T.WindowLeft = 2;
    T.WindowRight = 1;
    expectGradientsMatch(T);
  }
}

TEST(ReferenceGradients, Softcap) {
  TestProblem T;
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.ScoreMod = fagen::ScoreMod::Softcap;
  T.Pb.Params.softcap = 0.7f; // small: tanh far from linear
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, Alibi) {
  TestProblem T;
  T.Pb.ScoreMod = fagen::ScoreMod::Alibi;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, Dropout) {
  TestProblem T;
  T.Sq = 9, T.Sk = 11; // rows 8.. exercise the second half of a 16-row Philox patch
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.Dropout = true;
  T.Pb.Params.dropout_p = 0.3f;
  T.Pb.Params.dropout_threshold = dropout_threshold(0.3f);
  T.Pb.Params.dropout_seed = 0x1234567890abcdefull;
  T.Pb.Params.dropout_offset = 42;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, GroupedQueryHeads) {
  // dK, dV of a kv head sum over its group's query heads (3 per kv head here).
  TestProblem T;
  T.HeadsQ = 6, T.HeadsKV = 2;
  T.Pb.Mask = fagen::Mask::Causal;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, Varlen) {
  TestProblem T;
  T.CuQ = {0, 3, 8};
  T.CuK = {0, 6, 8};
  T.Sq = 5, T.Sk = 6; // the maxima
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.ScoreMod = fagen::ScoreMod::Alibi;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, RuntimeBlockMask) {
  TestProblem T;
  T.Sq = 6, T.Sk = 8;
  T.Pb.Sparsity = fagen::Sparsity::Runtime;
  T.Pb.SparseBlock = 2;
  // [batch][head][3 rows][4 cols]: a different pattern per batch entry and head.
  T.Mask.resize(size_t(T.Batch) * T.HeadsQ * 3 * 4);
  for (size_t I = 0; I < T.Mask.size(); ++I)
    T.Mask[I] = (I * 7) % 3 != 0;
  T.build();
  fagen_fwd_params &P = T.Pb.Params;
  P.block_mask = T.Mask.data();
  P.block_mask_row_stride = 4;
  P.block_mask_head_stride = 12;
  P.block_mask_batch_stride = 12 * T.HeadsQ;
  BwdProblem Bp{T.Pb, T.dout()};
  BwdResult G = backwardFloat64(Bp);
  expectGradient(T, T.Q, G.DQ, true, T.Dqk, "dQ");
  expectGradient(T, T.K, G.DK, false, T.Dqk, "dK");
  expectGradient(T, T.V, G.DV, false, T.Dv, "dV");
}

TEST(ReferenceGradients, StaticBlockLayout) {
  TestProblem T;
  T.Sq = 6, T.Sk = 8;
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.Sparsity = fagen::Sparsity::Static;
  T.Pb.SparseBlock = 2;
  T.Table = {1, 0, 0, 1, //
             1, 1, 0, 0, //
             0, 1, 1, 1};
  T.Pb.BlockTable = T.Table.data();
  T.Pb.BlockRows = 3;
  T.Pb.BlockCols = 4;
  expectGradientsMatch(T);
}

TEST(ReferenceGradients, EveryFeatureAtOnce) {
  TestProblem T;
  T.HeadsQ = 4, T.HeadsKV = 2;
  T.CuQ = {0, 4, 9};
  T.CuK = {0, 7, 10};
  T.Sq = 5, T.Sk = 7;
  T.Pb.Mask = fagen::Mask::Window;
  T.Pb.Align = MaskAlign::TopLeft;
  T.Pb.ScoreMod = fagen::ScoreMod::Softcap;
  T.Pb.Params.softcap = 2.0f;
  T.Pb.Dropout = true;
  T.Pb.Params.dropout_p = 0.2f;
  T.Pb.Params.dropout_threshold = dropout_threshold(0.2f);
  T.Pb.Params.dropout_seed = 7;
  T.Pb.Sparsity = fagen::Sparsity::Static;
  T.Pb.SparseBlock = 2;
  T.Table = {1, 1, 1, 0, 1, 1, 1, 1, 1};
  T.Pb.BlockTable = T.Table.data();
  T.Pb.BlockRows = T.Pb.BlockCols = 3;
  T.WindowLeft = 3;
  T.WindowRight = 1;
  T.build();
  BwdProblem Bp{T.Pb, T.dout()};
  BwdResult G = backwardFloat64(Bp);
  expectGradient(T, T.Q, G.DQ, true, T.Dqk, "dQ");
  expectGradient(T, T.K, G.DK, false, T.Dqk, "dK");
  expectGradient(T, T.V, G.DV, false, T.Dv, "dV");
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

// Known answers from Random123's kat_vectors (philox4x32, 7 and 10 rounds): the round function
// and key schedule are Philox's, whatever rounds the dropout rule uses.
TEST(ReferenceDropout, PhiloxMatchesRandom123KnownAnswers) {
  struct Kat {
    Philox4 Ctr;
    uint32_t K0, K1;
    Philox4 Out7, Out10;
  };
  const Kat Kats[] = {
      {{0, 0, 0, 0}, 0, 0,
       {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48},
       {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff,
       {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0,
       {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  auto Same = [](Philox4 A, Philox4 B) {
    return A.x == B.x && A.y == B.y && A.z == B.z && A.w == B.w;
  };
  for (const Kat &K : Kats) {
    EXPECT_TRUE(Same(philox4x32<7>(K.Ctr, K.K0, K.K1), K.Out7)) << std::hex << K.Ctr.x;
    EXPECT_TRUE(Same(philox4x32<10>(K.Ctr, K.K0, K.K1), K.Out10)) << std::hex << K.Ctr.x;
  }
  // The dropout rule draws 7 rounds on the counter and key its comment documents.
  static_assert(kDropoutPhiloxRounds == 7, "docs/spec.md and the params versions say 7");
  const uint64_t Seed = 0x0123456789abcdefull, Offset = 0x1122334455667788ull;
  const int I = 37, J = 77;
  const Philox4 Ctr{(uint32_t(J) >> 5) * 4u + ((uint32_t(J) >> 1) & 3u),
                    (uint32_t(I) >> 4) * 8u + (uint32_t(I) & 7u), 9u, uint32_t(Offset)};
  EXPECT_TRUE(Same(dropout_patch(Seed, Offset, 9, I, J),
                   philox4x32<7>(Ctr, uint32_t(Seed),
                                 uint32_t(Seed >> 32) ^ uint32_t(Offset >> 32))));
}

TEST(ReferenceDropout, KeepRateWithinItsStatisticalBound) {
  for (float P : {0.1f, 0.25f, 0.5f}) {
    const uint32_t Threshold = dropout_threshold(P);
    const int Rows = 256, Cols = 256;
    int64_t Kept = 0;
    for (int I = 0; I < Rows; ++I)
      for (int J = 0; J < Cols; ++J)
        Kept += dropout_keep(0xdeadbeefull, 3, Threshold, /*bh=*/5, I, J);
    const double N = double(Rows) * Cols, Rate = double(Kept) / N;
    const double Sigma = std::sqrt(P * (1 - P) / N);
    EXPECT_NEAR(Rate, 1 - P, 5 * Sigma) << "p = " << P;
  }
  // p = 0 keeps everything; another seed, offset or head gives another mask.
  EXPECT_TRUE(dropout_keep(1, 0, dropout_threshold(0.0f), 0, 3, 4));
  int Differ = 0;
  for (int J = 0; J < 64; ++J)
    Differ += dropout_keep(1, 0, dropout_threshold(0.5f), 0, 0, J) !=
              dropout_keep(2, 0, dropout_threshold(0.5f), 0, 0, J);
  EXPECT_GT(Differ, 10);
}

TEST(ReferenceDropout, ForwardUsesThePhiloxMaskAndTheUndroppedLse) {
  // One query row over 16 keys with q = 0: P is uniform, so O = mean over keys of keep/(1-p) V.
  TestProblem T;
  T.Batch = 1, T.HeadsQ = T.HeadsKV = 1, T.Sq = 1, T.Sk = 16, T.Dqk = 4, T.Dv = 2;
  T.Pb.Mask = fagen::Mask::None;
  T.Pb.Dropout = true;
  const float P = 0.5f;
  T.Pb.Params.dropout_p = P;
  T.Pb.Params.dropout_threshold = dropout_threshold(P);
  T.Pb.Params.dropout_seed = 99;
  T.Pb.Params.dropout_offset = 7;
  T.build();
  std::fill(T.Q.begin(), T.Q.end(), 0.0);
  FwdResult R = forwardFloat64(T.Pb);
  double Want[2] = {0, 0};
  for (int J = 0; J < 16; ++J)
    if (dropout_keep(99, 7, T.Pb.Params.dropout_threshold, 0, 0, J))
      for (int X = 0; X < 2; ++X)
        Want[X] += T.V[J * 2 + X] / 16 / (1 - double(P));
  EXPECT_NEAR(R.O[0], Want[0], 1e-12);
  EXPECT_NEAR(R.O[1], Want[1], 1e-12);
  EXPECT_NEAR(R.Lse[0], std::log(16.0), 1e-12); // the LSE of the undropped P
}

//===----------------------------------------------------------------------===//
// Values by hand: q = 0 makes every raw score 0, so P is uniform over the visible keys (or
// set by the score mod alone) and O, LSE follow by hand.
//===----------------------------------------------------------------------===//

/// A one-head problem with q = 0 and V = key index in every column.
TestProblem zeroQueries(int Sq, int Sk) {
  TestProblem T;
  T.Batch = 1, T.HeadsQ = T.HeadsKV = 1, T.Sq = Sq, T.Sk = Sk, T.Dqk = 4, T.Dv = 2;
  return T;
}
void setZeroQueries(TestProblem &T) {
  std::fill(T.Q.begin(), T.Q.end(), 0.0);
  for (int J = 0; J < T.Sk; ++J)
    T.V[J * 2] = T.V[J * 2 + 1] = J;
}

TEST(ReferenceValues, WindowCountsVisibleKeys) {
  // Sq = Sk = 4, window (left 1, right 0), bottom-right: row i sees keys i - 1 and i.
  TestProblem T = zeroQueries(4, 4);
  T.Pb.Mask = fagen::Mask::Window;
  T.build();
  setZeroQueries(T);
  T.Pb.Params.window_left = 1;
  T.Pb.Params.window_right = 0;
  FwdResult R = forwardFloat64(T.Pb);
  EXPECT_NEAR(R.Lse[0], 0.0, 1e-12);
  EXPECT_NEAR(R.O[0], 0.0, 1e-12);
  for (int I = 1; I < 4; ++I) {
    EXPECT_NEAR(R.Lse[I], std::log(2.0), 1e-12) << I;
    EXPECT_NEAR(R.O[I * 2], I - 0.5, 1e-12) << I; // mean of keys i - 1 and i
  }
  // A window right of the diagonal only: left 0, right 2 sees keys i..i+2 (clipped).
  T.Pb.Params.window_left = 0;
  T.Pb.Params.window_right = 2;
  R = forwardFloat64(T.Pb);
  EXPECT_NEAR(R.Lse[0], std::log(3.0), 1e-12);
  EXPECT_NEAR(R.Lse[3], 0.0, 1e-12);
  EXPECT_NEAR(R.O[3 * 2], 3.0, 1e-12);
}

TEST(ReferenceValues, CausalAlignments) {
  // Sq = 3, Sk = 5. Top-left: row i sees keys 0..i; bottom-right: keys 0..i + 2.
  TestProblem T = zeroQueries(3, 5);
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.Align = MaskAlign::TopLeft;
  T.build();
  setZeroQueries(T);
  FwdResult TopLeft = forwardFloat64(T.Pb);
  T.Pb.Align = MaskAlign::BottomRight;
  FwdResult BottomRight = forwardFloat64(T.Pb);
  for (int I = 0; I < 3; ++I) {
    EXPECT_NEAR(TopLeft.Lse[I], std::log(I + 1.0), 1e-12) << I;
    EXPECT_NEAR(TopLeft.O[I * 2], I / 2.0, 1e-12) << I;
    EXPECT_NEAR(BottomRight.Lse[I], std::log(I + 3.0), 1e-12) << I;
    EXPECT_NEAR(BottomRight.O[I * 2], (I + 2) / 2.0, 1e-12) << I;
  }
  // Sq = 4 > Sk = 2, bottom-right: rows 0 and 1 see no key (O = 0, LSE = -inf).
  TestProblem E = zeroQueries(4, 2);
  E.Pb.Mask = fagen::Mask::Causal;
  E.build();
  setZeroQueries(E);
  FwdResult R = forwardFloat64(E.Pb);
  EXPECT_EQ(R.Lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(R.Lse[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(R.O[0], 0.0);
  EXPECT_NEAR(R.Lse[2], 0.0, 1e-12);
  EXPECT_NEAR(R.Lse[3], std::log(2.0), 1e-12);
}

TEST(ReferenceValues, Softcap) {
  // One key: P = 1, O = V, LSE = the logit = cap * tanh(scale * s / cap).
  TestProblem T = zeroQueries(1, 1);
  T.Pb.Mask = fagen::Mask::None;
  T.Pb.ScoreMod = fagen::ScoreMod::Softcap;
  T.Pb.Params.softcap = 5.0f;
  T.build();
  T.Pb.Params.softmax_scale = 0.5f;
  for (int X = 0; X < 4; ++X)
    T.Q[X] = 3.0, T.K[X] = 2.0; // s = 24, scale * s = 12
  FwdResult R = forwardFloat64(T.Pb);
  EXPECT_NEAR(R.Lse[0], 5.0 * std::tanh(12.0 / 5.0), 1e-12);
  EXPECT_NEAR(R.Lse[0], 4.9183743, 1e-6); // 5 tanh(2.4), by hand
  EXPECT_NEAR(R.O[0], T.V[0], 1e-12);
  // Without the cap the logit would be 12.
  T.Pb.ScoreMod = fagen::ScoreMod::None;
  EXPECT_NEAR(forwardFloat64(T.Pb).Lse[0], 12.0, 1e-12);
}

TEST(ReferenceValues, Alibi) {
  // Sq = 1, Sk = 3, q = 0: logits are the biases -slope * |0 + 2 - j| = -2m, -m, 0.
  TestProblem T = zeroQueries(1, 3);
  T.Pb.Mask = fagen::Mask::None;
  T.Pb.ScoreMod = fagen::ScoreMod::Alibi;
  T.build();
  setZeroQueries(T);
  const double M = T.Slopes[0]; // 0.25
  EXPECT_EQ(M, 0.25);
  FwdResult R = forwardFloat64(T.Pb);
  const double Z = std::exp(-2 * M) + std::exp(-M) + 1;
  EXPECT_NEAR(R.Lse[0], std::log(Z), 1e-12);
  EXPECT_NEAR(R.O[0], (0 * std::exp(-2 * M) + 1 * std::exp(-M) + 2 * 1) / Z, 1e-12);
}

//===----------------------------------------------------------------------===//
// The fp16 / bf16 path
//===----------------------------------------------------------------------===//

TEST(ReferencePrecision, SamePrecisionIsCloseToFloat64OnBf16Inputs) {
  // A bf16 problem (every variant part at once): the same-precision reference's errors are
  // those of bf16 rounding, small but not zero.
  TestProblem T;
  T.Pb.Mask = fagen::Mask::Causal;
  T.Pb.ScoreMod = fagen::ScoreMod::Softcap;
  T.Pb.Params.softcap = 3.0f;
  T.build();
  std::vector<uint16_t> Q(T.Q.size()), K(T.K.size()), V(T.V.size()), DOut(T.DOut.size());
  auto convert = [](const std::vector<double> &From, std::vector<uint16_t> &To) {
    for (size_t I = 0; I < From.size(); ++I)
      To[I] = floatToBfloat16(float(From[I]));
  };
  convert(T.Q, Q), convert(T.K, K), convert(T.V, V), convert(T.DOut, DOut);
  T.Pb.Params.q = Q.data(), T.Pb.Params.k = K.data(), T.Pb.Params.v = V.data();
  T.Pb.Type = ElementType::BF16;
  FwdError F = measureError(forwardFloat64(T.Pb), forwardSamePrecision(T.Pb));
  EXPECT_GT(F.MaxO, 0.0);
  EXPECT_LT(F.MaxO, 0.05);
  EXPECT_LT(F.MaxLse, 1e-4);
  StridedTensor D = T.dout();
  D.Ptr = DOut.data();
  BwdProblem Bp{T.Pb, D};
  BwdError B = measureError(backwardFloat64(Bp), backwardSamePrecision(Bp));
  EXPECT_GT(B.MaxDQ, 0.0);
  EXPECT_LT(B.MaxDQ, 0.05);
  EXPECT_LT(B.MaxDK, 0.05);
  EXPECT_LT(B.MaxDV, 0.05);
  // The tolerance rule accepts the same-precision reference itself and refuses 3x its error.
  EXPECT_TRUE(withinTolerance(B, B));
  BwdError Worse = B;
  Worse.MaxDK = 3 * B.MaxDK + 1e-3;
  EXPECT_FALSE(withinTolerance(Worse, B));
}

TEST(ReferencePrecision, GradientEpsilonScalesWithTheLargestGradient) {
  // A dK that cancels to ~0 beside a dV of 4: its epsilon is 4 x kEpsGrad, so an fp32
  // rounding error of 2.1e-5 there passes (it failed with the unscaled epsilon), and an error
  // twice the scaled bound does not. Non-finite reference values do not count for the scale.
  BwdResult Exact{{0.5, -0.25}, {1e-7, 0.0}, {4.0, -1.0}};
  BwdResult Same{{0.5, -0.25}, {1e-7 + 4.1e-6, 0.0}, {4.0, -1.0}};
  BwdResult Kernel{{0.5, -0.25}, {1e-7 + 2.1e-5, 0.0}, {4.0, -1.0}};
  const BwdError S = measureError(Exact, Same);
  EXPECT_DOUBLE_EQ(S.Scale, 4.0);
  EXPECT_NEAR(gradientBound(S.MaxDK, S), 2 * 4.1e-6 + 4 * kEpsGrad, 1e-12);
  EXPECT_TRUE(withinTolerance(measureError(Exact, Kernel), S));
  EXPECT_GT(measureError(Exact, Kernel).MaxDK, toleranceBound(S.MaxDK, kEpsGrad));
  Kernel.DK[0] = 1e-7 + 2 * gradientBound(S.MaxDK, S);
  EXPECT_FALSE(withinTolerance(measureError(Exact, Kernel), S));
  // Small gradients keep the plain epsilon (the scale is at least 1).
  BwdResult Tiny{{1e-3}, {2e-3}, {-3e-3}};
  EXPECT_DOUBLE_EQ(measureError(Tiny, Tiny).Scale, 1.0);
  BwdResult WithInf{{1e-3}, {2e-3}, {std::numeric_limits<double>::infinity()}};
  EXPECT_DOUBLE_EQ(measureError(WithInf, WithInf).Scale, 1.0);
}

TEST(ReferencePrecision, ReadsKernelGradientsThroughStrides) {
  // A "kernel" that wrote the float64 gradients in bf16 through BHSD strides reads back within
  // bf16 rounding.
  TestProblem T;
  T.Pb.Mask = fagen::Mask::None;
  T.build();
  BwdProblem Bp{T.Pb, T.dout()};
  BwdResult G = backwardFloat64(Bp);
  Bp.Fwd.Type = ElementType::F64;
  // Write dQ as BHSD doubles (the F64 path reads doubles).
  std::vector<double> DQ(G.DQ.size());
  for (int B = 0; B < T.Batch; ++B)
    for (int H = 0; H < T.HeadsQ; ++H)
      for (int I = 0; I < T.Sq; ++I)
        for (int X = 0; X < T.Dqk; ++X)
          DQ[((size_t(B) * T.HeadsQ + H) * T.Sq + I) * T.Dqk + X] =
              G.DQ[resultRowQ(T.Pb, B, H, I) * T.Dqk + X];
  StridedTensor DQT{DQ.data(), int64_t(T.HeadsQ) * T.Sq * T.Dqk, int64_t(T.Sq) * T.Dqk, T.Dqk};
  StridedTensor DKT{G.DK.data(), int64_t(T.HeadsKV) * T.Sk * T.Dqk, int64_t(T.Sk) * T.Dqk, T.Dqk};
  StridedTensor DVT{G.DV.data(), int64_t(T.HeadsKV) * T.Sk * T.Dv, int64_t(T.Sk) * T.Dv, T.Dv};
  BwdError E = measureError(G, readKernelGradients(Bp, DQT, DKT, DVT));
  EXPECT_EQ(E.MaxDQ, 0.0);
  EXPECT_EQ(E.MaxDK, 0.0);
  EXPECT_EQ(E.MaxDV, 0.0);
}

} // namespace

namespace {

TEST(ReferencePrecision, PreprocessRowSumIsTheKernelsOrder) {
  // 8 lanes over 8-column chunks, each pair of columns by two fused multiply-adds (odd column
  // first), then the lanes pairwise: written out for 16 columns (lanes 0 and 1 hold a chunk each).
  float DOut[16], O[16];
  for (int X = 0; X < 16; ++X) {
    DOut[X] = 1.f + 0.37f * float(X);
    O[X] = 1.f / float(3 + X);
  }
  float Chunk[2] = {0.f, 0.f};
  for (int C = 0; C < 2; ++C)
    for (int X = 8 * C; X < 8 * C + 8; X += 2)
      Chunk[C] = std::fmaf(DOut[X], O[X], std::fmaf(DOut[X + 1], O[X + 1], Chunk[C]));
  EXPECT_EQ(detail::preprocessRowSum(DOut, O, 16), Chunk[0] + Chunk[1]);
  // 256 columns: lane l holds chunks l, l + 8, l + 16, l + 24; the sum is ((0+1)+(2+3))+((4+5)+(6+7)).
  std::vector<float> A(256), B(256);
  for (int X = 0; X < 256; ++X) {
    A[X] = std::sin(0.1f * float(X));
    B[X] = std::cos(0.07f * float(X));
  }
  float Lane[8] = {};
  for (int L = 0; L < 8; ++L)
    for (int C = L; C < 32; C += 8)
      for (int X = 8 * C; X < 8 * C + 8; X += 2)
        Lane[L] = std::fmaf(A[X], B[X], std::fmaf(A[X + 1], B[X + 1], Lane[L]));
  const float Expect =
      ((Lane[0] + Lane[1]) + (Lane[2] + Lane[3])) + ((Lane[4] + Lane[5]) + (Lane[6] + Lane[7]));
  EXPECT_EQ(detail::preprocessRowSum(A.data(), B.data(), 256), Expect);
}

} // namespace
