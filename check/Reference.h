//===- Reference.h - CPU reference for attention, forward and backward -*- C++ -*-===//
//
// Header-only, C++17, no dependencies beyond the standard library, fwd_params.h and philox.h,
// so that `fagen check` (g++) and the GPU harness (nvcc host code) share one definition of the
// semantics: the same strided layouts, GQA mapping, masks, score mods, dropout mask, block
// sparsity and varlen packing as the kernels (docs/design/variants-and-backward.md,
// "Semantics"; every rule there is implemented here and nowhere else on the host).
//
// Two references over the same fp16/bf16 inputs:
//  - float64: logits, softmax, P@V and every gradient in double;
//  - same precision: logits and softmax in fp32, P (and, backward, dS) rounded to the input
//    dtype before the matmuls that use it, fp32 accumulation, outputs rounded to the input
//    dtype (what a kernel can at best achieve).
// A kernel passes when its error against float64 is at most twice the same-precision
// reference's error plus a small epsilon (FlashAttention's test rule).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_REFERENCE_H
#define FAGEN_COMPILER_REFERENCE_H

#include "core/VariantKinds.h" // not Variant.h: the GPU harnesses include the templates too
#include "templates/abi/fwd_params.h"
#include "templates/common/philox.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace fagen {
namespace reference {

/// The inputs' element type. F64 reads the tensors as host doubles: the reference's own tests
/// (finite differences) perturb inputs by less than an fp16 ulp.
enum class ElementType { F16, BF16, F64 };

//===----------------------------------------------------------------------===//
// fp16 / bf16 <-> float, round to nearest even
//===----------------------------------------------------------------------===//

inline uint32_t floatBits(float F) {
  uint32_t U;
  std::memcpy(&U, &F, 4);
  return U;
}

inline float bitsFloat(uint32_t U) {
  float F;
  std::memcpy(&F, &U, 4);
  return F;
}

inline float bfloat16ToFloat(uint16_t H) { return bitsFloat(uint32_t(H) << 16); }

inline uint16_t floatToBfloat16(float F) {
  uint32_t U = floatBits(F);
  if ((U & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a (quiet) NaN
    return uint16_t((U >> 16) | 0x40);
  U += 0x7fffu + ((U >> 16) & 1u);
  return uint16_t(U >> 16);
}

inline float halfToFloat(uint16_t H) {
  uint32_t Sign = uint32_t(H & 0x8000u) << 16;
  uint32_t Exp = (H >> 10) & 0x1fu;
  uint32_t Man = H & 0x3ffu;
  if (Exp == 0x1f) // inf / NaN
    return bitsFloat(Sign | 0x7f800000u | (Man << 13));
  if (Exp != 0)
    return bitsFloat(Sign | ((Exp + 112) << 23) | (Man << 13));
  // Subnormal: Man * 2^-24, exact in float.
  float F = float(Man) * 5.9604644775390625e-8f;
  return Sign ? -F : F;
}

inline uint16_t floatToHalf(float F) {
  uint32_t U = floatBits(F);
  uint16_t Sign = uint16_t((U >> 16) & 0x8000u);
  uint32_t Abs = U & 0x7fffffffu;
  if (Abs > 0x7f800000u)
    return uint16_t(Sign | 0x7e00u);
  if (Abs >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return uint16_t(Sign | 0x7c00u);
  if (Abs < 0x38800000u) { // below 2^-14: subnormal half (or zero)
    // Let the FPU round Abs * 2^24 to an integer (nearest even).
    float Scaled = bitsFloat(Abs) * 16777216.0f;
    uint32_t Man = uint32_t(std::nearbyint(Scaled));
    return uint16_t(Sign | Man);
  }
  uint32_t Mant = Abs & 0x7fffffu;
  uint32_t Exp = (Abs >> 23) - 112;
  uint32_t Half = (Exp << 10) | (Mant >> 13);
  uint32_t Rest = Mant & 0x1fffu;
  if (Rest > 0x1000u || (Rest == 0x1000u && (Half & 1u)))
    ++Half; // may carry into the exponent, which is the right result
  return uint16_t(Sign | Half);
}

inline float toFloat(uint16_t H, ElementType T) {
  return T == ElementType::BF16 ? bfloat16ToFloat(H) : halfToFloat(H);
}
inline uint16_t fromFloat(float F, ElementType T) {
  return T == ElementType::BF16 ? floatToBfloat16(F) : floatToHalf(F);
}
/// F rounded to the element type (F64: unchanged).
inline float roundTo(float F, ElementType T) {
  return T == ElementType::F64 ? F : toFloat(fromFloat(F, T), T);
}


//===----------------------------------------------------------------------===//
// Problems and results
//===----------------------------------------------------------------------===//

/// One forward problem. Params' pointers are host memory: q, k, v in Type (o and lse are not
/// used), and the variant's run-time arguments exactly as a kernel reads them (window_left /
/// window_right, softcap, alibi_slopes + alibi_batch_stride, block_mask + its strides,
/// dropout_p / dropout_threshold / dropout_seed / dropout_offset, cu_seqlens_q / cu_seqlens_k).
/// The members after Mask say which variant the kernel is; their defaults are the dense
/// bottom-right kernel.
struct FwdProblem {
  fagen_fwd_params Params;
  int HeadDim;          ///< head_dim_qk
  ElementType Type;
  /// Causal is the window (unbounded, 0); Window reads window_left / window_right from Params.
  fagen::Mask Mask;
  int HeadDimV = 0;     ///< 0: equal to HeadDim
  MaskAlign Align = MaskAlign::BottomRight;
  fagen::ScoreMod ScoreMod = fagen::ScoreMod::None;
  bool Dropout = false;
  bool Varlen = false;
  fagen::Sparsity Sparsity = fagen::Sparsity::None;
  int SparseBlock = 0;                 ///< tokens per block (Runtime, Static)
  const uint8_t *BlockTable = nullptr; ///< Static: BlockRows x BlockCols, row-major, 1 = computed
  int BlockRows = 0, BlockCols = 0;

  int headDimV() const { return HeadDimV ? HeadDimV : HeadDim; }
};

/// O and LSE (natural-log units), one row per (batch, head, query): dense
/// [batch, heads_q, seqlen_q, head_dim_v] and [batch, heads_q, seqlen_q]; varlen
/// [heads_q, total_q, head_dim_v] and [heads_q, total_q] (total_q = cu_seqlens_q[batch]), as a
/// kernel writes a contiguous LSE. Rows that see no key: O = 0, LSE = -inf.
struct FwdResult {
  std::vector<double> O;
  std::vector<double> Lse;
};

/// A strided tensor in the problem's element type: element (b, h, row, d) at
/// Ptr + b * BatchStride + h * HeadStride + row * RowStride + d (varlen: no batch term, and the
/// row is the packed row cu_seqlens[b] + i).
struct StridedTensor {
  const void *Ptr = nullptr;
  int64_t BatchStride = 0, HeadStride = 0, RowStride = 0;
};

/// One backward problem: the forward's problem (its O and LSE are recomputed in the
/// reference's own precision) and dO, laid out like O.
struct BwdProblem {
  FwdProblem Fwd;
  StridedTensor DOut;
  /// The O that the kernel under test reads (FwdResult layout), or null. The same-precision
  /// reference then takes D = rowsum(dO o O) from it, as the kernel does, so that both see the
  /// same forward output; the float64 reference always recomputes its own.
  const std::vector<double> *GivenO = nullptr;
};

/// dQ like the forward's O rows with head_dim_qk; dK and dV one row per (batch, kv head, key):
/// dense [batch, heads_kv, seqlen_k, d], varlen [heads_kv, total_k, d]. dK and dV of a kv head
/// sum over the query heads of its group.
struct BwdResult {
  std::vector<double> DQ, DK, DV;
};

/// Whether query Row may see key Col under a bottom-right causal mask (or no mask).
inline bool isVisible(fagen::Mask Mask, int Row, int Col, int SeqlenQ, int SeqlenK) {
  if (Mask == fagen::Mask::Causal)
    return Col <= Row + SeqlenK - SeqlenQ;
  return true;
}

/// Runs Fn(B, H) for every (batch, head) on all hardware threads.
template <class Fn> void parallelForHeads(int Batch, int Heads, Fn &&F) {
  int Total = Batch * Heads;
  std::atomic<int> Next{0};
  auto Worker = [&] {
    for (int I = Next++; I < Total; I = Next++)
      F(I / Heads, I % Heads);
  };
  unsigned Threads = std::max(1u, std::min(std::thread::hardware_concurrency(), unsigned(Total)));
  std::vector<std::thread> Pool;
  for (unsigned T = 1; T < Threads; ++T)
    Pool.emplace_back(Worker);
  Worker();
  for (auto &T : Pool)
    T.join();
}

//===----------------------------------------------------------------------===//
// The semantics: one definition per rule
//===----------------------------------------------------------------------===//

/// Rows and lengths of one batch entry's sequence (dense: rows from 0, the call's lengths).
struct Span {
  int64_t Q0 = 0, K0 = 0; ///< first packed row (varlen), else 0
  int Sq = 0, Sk = 0;
};

inline Span spanOf(const FwdProblem &Pb, int B) {
  const fagen_fwd_params &P = Pb.Params;
  if (!Pb.Varlen)
    return Span{0, 0, P.seqlen_q, P.seqlen_k};
  return Span{P.cu_seqlens_q[B], P.cu_seqlens_k[B], P.cu_seqlens_q[B + 1] - P.cu_seqlens_q[B],
              P.cu_seqlens_k[B + 1] - P.cu_seqlens_k[B]};
}

/// Query rows per head of a result: batch * seqlen_q, or total_q (varlen).
inline int64_t rowsQ(const FwdProblem &Pb) {
  const fagen_fwd_params &P = Pb.Params;
  return Pb.Varlen ? P.cu_seqlens_q[P.batch] : int64_t(P.batch) * P.seqlen_q;
}
inline int64_t rowsK(const FwdProblem &Pb) {
  const fagen_fwd_params &P = Pb.Params;
  return Pb.Varlen ? P.cu_seqlens_k[P.batch] : int64_t(P.batch) * P.seqlen_k;
}

/// Index of query row I of (B, H) in a result (FwdResult, BwdResult::DQ), in rows.
inline size_t resultRowQ(const FwdProblem &Pb, int B, int H, int I) {
  const fagen_fwd_params &P = Pb.Params;
  if (Pb.Varlen)
    return size_t(H) * rowsQ(Pb) + P.cu_seqlens_q[B] + I;
  return (size_t(B) * P.heads_q + H) * P.seqlen_q + I;
}
/// Index of key row J of (B, kv head Hk) in BwdResult::DK / DV, in rows.
inline size_t resultRowK(const FwdProblem &Pb, int B, int Hk, int J) {
  const fagen_fwd_params &P = Pb.Params;
  if (Pb.Varlen)
    return size_t(Hk) * rowsK(Pb) + P.cu_seqlens_k[B] + J;
  return (size_t(B) * P.heads_kv + Hk) * P.seqlen_k + J;
}

/// Element X of row I (within the sequence starting at packed row Row0) of head H of batch
/// entry B of tensor T.
inline double loadElement(const FwdProblem &Pb, const StridedTensor &T, int B, int H, int64_t Row0,
                          int I, int X) {
  const int64_t Index = (Pb.Varlen ? 0 : B * T.BatchStride) + H * T.HeadStride +
                        (Row0 + I) * T.RowStride + X;
  if (Pb.Type == ElementType::F64)
    return static_cast<const double *>(T.Ptr)[Index];
  return toFloat(static_cast<const uint16_t *>(T.Ptr)[Index], Pb.Type);
}

inline StridedTensor tensorQ(const fagen_fwd_params &P) {
  return {P.q, P.q_batch_stride, P.q_head_stride, P.q_row_stride};
}
inline StridedTensor tensorK(const fagen_fwd_params &P) {
  return {P.k, P.k_batch_stride, P.k_head_stride, P.k_row_stride};
}
inline StridedTensor tensorV(const fagen_fwd_params &P) {
  return {P.v, P.v_batch_stride, P.v_head_stride, P.v_row_stride};
}

/// The mask: whether query I sees key J (indices within the sequence).
inline bool maskVisible(const FwdProblem &Pb, int I, int J, int Sq, int Sk) {
  if (Pb.Mask == fagen::Mask::None)
    return true;
  const int Off = Pb.Align == MaskAlign::TopLeft ? 0 : Sk - Sq;
  const int Left = Pb.Mask == fagen::Mask::Causal ? -1 : Pb.Params.window_left;
  const int Right = Pb.Mask == fagen::Mask::Causal ? 0 : Pb.Params.window_right;
  return (Right < 0 || J <= I + Off + Right) && (Left < 0 || J >= I + Off - Left);
}

/// The block sparsity: whether block (I / block, J / block) of (B, H) is computed.
inline bool blockVisible(const FwdProblem &Pb, int B, int H, int I, int J) {
  if (Pb.Sparsity == fagen::Sparsity::None)
    return true;
  const int R = I / Pb.SparseBlock, C = J / Pb.SparseBlock;
  if (Pb.Sparsity == fagen::Sparsity::Static)
    return R < Pb.BlockRows && C < Pb.BlockCols && Pb.BlockTable[R * Pb.BlockCols + C] != 0;
  const fagen_fwd_params &P = Pb.Params;
  return P.block_mask[B * P.block_mask_batch_stride + H * P.block_mask_head_stride +
                      R * P.block_mask_row_stride + C] != 0;
}

/// visible(i, j) = mask(i, j) and block(i / B, j / B).
inline bool isVisible(const FwdProblem &Pb, int B, int H, int I, int J, int Sq, int Sk) {
  return maskVisible(Pb, I, J, Sq, Sk) && blockVisible(Pb, B, H, I, J);
}

/// The score mod of (B, H) in Acc: logit(s, i, j) and dlogit/ds.
template <class Acc> struct ScoreMod {
  fagen::ScoreMod Kind;
  Acc Scale, Cap = 1, Slope = 0;
  int Off = 0; ///< seqlen_k - seqlen_q of the sequence (ALiBi's diagonal)

  ScoreMod(const FwdProblem &Pb, int B, int H, const Span &S)
      : Kind(Pb.ScoreMod), Scale(Acc(Pb.Params.softmax_scale)), Off(S.Sk - S.Sq) {
    const fagen_fwd_params &P = Pb.Params;
    if (Kind == fagen::ScoreMod::Softcap)
      Cap = Acc(P.softcap);
    if (Kind == fagen::ScoreMod::Alibi)
      Slope = Acc(P.alibi_slopes[B * P.alibi_batch_stride + H]);
  }
  Acc logit(Acc S, int I, int J) const {
    if (Kind == fagen::ScoreMod::Softcap)
      return Cap * std::tanh(Scale * S / Cap);
    if (Kind == fagen::ScoreMod::Alibi)
      return Scale * S - Slope * Acc(std::abs(I + Off - J));
    return Scale * S;
  }
  Acc dlogit(Acc S, int, int) const {
    if (Kind != fagen::ScoreMod::Softcap)
      return Scale;
    const Acc T = std::tanh(Scale * S / Cap);
    return Scale * (Acc(1) - T * T);
  }
};

/// The dropout factor of element (B, H, I, J): 0 (dropped) or 1 / (1 - p) (kept) with p the
/// drop probability the keep rule implements (quantized to 1/256: threshold / 256); 1 without
/// dropout. The keep rule is common/philox.h's, as the kernels'.
template <class Acc> Acc dropoutFactor(const FwdProblem &Pb, int B, int H, int I, int J) {
  if (!Pb.Dropout)
    return Acc(1);
  const fagen_fwd_params &P = Pb.Params;
  const uint32_t Bh = uint32_t(B * P.heads_q + H);
  if (!dropout_keep(P.dropout_seed, P.dropout_offset, P.dropout_threshold, Bh, I, J))
    return Acc(0);
  return Acc(256) / (Acc(256) - Acc(P.dropout_threshold));
}

/// dQ, dK, dV of `Pb`'s shapes, all zero (dense [batch, rows, heads, dim]; varlen packed).
inline BwdResult zeroGradients(const FwdProblem &Pb) {
  const fagen_fwd_params &P = Pb.Params;
  BwdResult R;
  R.DQ.assign(size_t(rowsQ(Pb)) * P.heads_q * Pb.HeadDim, 0.0);
  R.DK.assign(size_t(rowsK(Pb)) * P.heads_kv * Pb.HeadDim, 0.0);
  R.DV.assign(size_t(rowsK(Pb)) * P.heads_kv * Pb.headDimV(), 0.0);
  return R;
}

namespace detail {

/// One (batch, head)'s Q, K, V (and dO) rows, loaded in Acc.
template <class Acc> struct HeadTensors {
  int Dqk, Dv;
  std::vector<Acc> Q, K, V;
  void load(const FwdProblem &Pb, int B, int H, int Hk, const Span &S) {
    Dqk = Pb.HeadDim, Dv = Pb.headDimV();
    const fagen_fwd_params &P = Pb.Params;
    Q.resize(size_t(S.Sq) * Dqk);
    K.resize(size_t(S.Sk) * Dqk);
    V.resize(size_t(S.Sk) * Dv);
    for (int I = 0; I < S.Sq; ++I)
      for (int X = 0; X < Dqk; ++X)
        Q[size_t(I) * Dqk + X] = Acc(loadElement(Pb, tensorQ(P), B, H, S.Q0, I, X));
    for (int J = 0; J < S.Sk; ++J) {
      for (int X = 0; X < Dqk; ++X)
        K[size_t(J) * Dqk + X] = Acc(loadElement(Pb, tensorK(P), B, Hk, S.K0, J, X));
      for (int X = 0; X < Dv; ++X)
        V[size_t(J) * Dv + X] = Acc(loadElement(Pb, tensorV(P), B, Hk, S.K0, J, X));
    }
  }
};

/// One query row's attention: raw scores, probabilities (normalized, undropped), dropout
/// factors, O and LSE. SamePrecision rounds P o Z and O to the element type, as a kernel does.
template <class Acc, bool SamePrecision> struct RowAttention {
  std::vector<Acc> Raw, Prob, Drop;
  std::vector<char> Visible;
  std::vector<Acc> O;
  double Lse = 0;
  bool Empty = true;

  void compute(const FwdProblem &Pb, const HeadTensors<Acc> &T, const ScoreMod<Acc> &Mod, int B,
               int H, int I, const Span &S) {
    const Acc Inf = std::numeric_limits<Acc>::infinity();
    Raw.assign(S.Sk, 0), Prob.assign(S.Sk, 0), Drop.assign(S.Sk, 0), Visible.assign(S.Sk, 0);
    O.assign(T.Dv, Acc(0));
    std::vector<Acc> Logit(S.Sk, -Inf);
    Acc Max = -Inf;
    for (int J = 0; J < S.Sk; ++J) {
      if (!isVisible(Pb, B, H, I, J, S.Sq, S.Sk))
        continue;
      Acc Dot = 0;
      for (int X = 0; X < T.Dqk; ++X)
        Dot += T.Q[size_t(I) * T.Dqk + X] * T.K[size_t(J) * T.Dqk + X];
      Visible[J] = 1;
      Raw[J] = Dot;
      Logit[J] = Mod.logit(Dot, I, J);
      Max = std::max(Max, Logit[J]);
    }
    Empty = Max == -Inf;
    if (Empty) {
      Lse = -std::numeric_limits<double>::infinity();
      return;
    }
    Acc Sum = 0;
    for (int J = 0; J < S.Sk; ++J)
      if (Visible[J])
        Sum += std::exp(Logit[J] - Max);
    Lse = double(Max) + std::log(double(Sum));
    for (int J = 0; J < S.Sk; ++J) {
      if (!Visible[J])
        continue;
      Prob[J] = std::exp(Logit[J] - Max) / Sum;
      Drop[J] = dropoutFactor<Acc>(Pb, B, H, I, J);
      Acc Pj = Prob[J] * Drop[J];
      if (SamePrecision)
        Pj = Acc(roundTo(float(Pj), Pb.Type));
      if (Pj == 0)
        continue;
      for (int X = 0; X < T.Dv; ++X)
        O[X] += Pj * T.V[size_t(J) * T.Dv + X];
    }
    if (SamePrecision)
      for (Acc &X : O)
        X = Acc(roundTo(float(X), Pb.Type));
  }
};

/// Shared driver: Acc is double for the float64 reference, float for the same-precision one.
template <class Acc, bool SamePrecision> FwdResult forward(const FwdProblem &Pb) {
  const fagen_fwd_params &P = Pb.Params;
  const int Dv = Pb.headDimV();
  FwdResult R;
  R.O.assign(size_t(rowsQ(Pb)) * P.heads_q * Dv, 0.0);
  R.Lse.assign(size_t(rowsQ(Pb)) * P.heads_q, 0.0);
  parallelForHeads(P.batch, P.heads_q, [&](int B, int H) {
    const Span S = spanOf(Pb, B);
    HeadTensors<Acc> T;
    T.load(Pb, B, H, H / P.group_size, S);
    const ScoreMod<Acc> Mod(Pb, B, H, S);
    RowAttention<Acc, SamePrecision> Row;
    for (int I = 0; I < S.Sq; ++I) {
      Row.compute(Pb, T, Mod, B, H, I, S);
      const size_t Index = resultRowQ(Pb, B, H, I);
      R.Lse[Index] = Row.Lse;
      for (int X = 0; X < Dv; ++X)
        R.O[Index * Dv + X] = double(Row.O[X]);
    }
  });
  return R;
}

/// D = dO . O in fp32 in the order of the backward templates' _pre (templates/sm80/
/// bwd_kernel.cuh, bwd_preprocess, which the sm90ws backward runs too): 8 lanes a row, lane l
/// summing the 8-column chunks l, l + 8, ... by fused multiply-adds (of each column pair the
/// odd column first), then the lanes' sums pairwise (xor 1, 2, 4). With the kernel's O this is
/// the kernel's D bit for bit, so that where D cancels against dP (a row that sees one key: dS
/// is 0 but for the rounding of the two sums) the same-precision reference keeps a rounding of
/// the kernel's kind instead of cancelling exactly.
inline float preprocessRowSum(const float *DOut, const float *O, int Dv) {
  float Lane[8] = {};
  for (int L = 0; L < 8; ++L)
    for (int C = L; C < Dv / 8; C += 8)
      for (int X = 8 * C; X < 8 * C + 8; X += 2)
        Lane[L] = std::fmaf(DOut[X], O[X], std::fmaf(DOut[X + 1], O[X + 1], Lane[L]));
  for (int M = 1; M < 8; M *= 2)
    for (int L = 0; L < 8; ++L)
      if ((L & M) == 0) {
        const float Sum = Lane[L] + Lane[L | M];
        Lane[L] = Lane[L | M] = Sum;
      }
  return Lane[0];
}

/// Backward over one (batch, kv head): its query heads' dQ and the group's summed dK, dV.
/// D_i = dO_i . O_i; dP = dO V^T; dS = P o (dP o Z - D); ds_raw = dS * dlogit/ds;
/// dQ = ds_raw K, dK = ds_raw^T Q, dV = (P o Z)^T dO. SamePrecision rounds P o Z and ds_raw
/// to the element type before the matmuls that use them, and the outputs.
template <class Acc, bool SamePrecision> BwdResult backward(const BwdProblem &Bp) {
  const FwdProblem &Pb = Bp.Fwd;
  const fagen_fwd_params &P = Pb.Params;
  const int Dqk = Pb.HeadDim, Dv = Pb.headDimV();
  BwdResult R = zeroGradients(Pb);
  auto Round = [&](Acc X) { return SamePrecision ? Acc(roundTo(float(X), Pb.Type)) : X; };
  parallelForHeads(P.batch, P.heads_kv, [&](int B, int Hk) {
    const Span S = spanOf(Pb, B);
    std::vector<Acc> DK(size_t(S.Sk) * Dqk, 0), DV(size_t(S.Sk) * Dv, 0), DOut(Dv), DQ(Dqk);
    std::vector<float> GivenOF(SamePrecision ? Dv : 0); // the given O row in fp32
    for (int H = Hk * P.group_size; H < (Hk + 1) * P.group_size; ++H) {
      HeadTensors<Acc> T;
      T.load(Pb, B, H, Hk, S);
      const ScoreMod<Acc> Mod(Pb, B, H, S);
      RowAttention<Acc, SamePrecision> Row;
      for (int I = 0; I < S.Sq; ++I) {
        Row.compute(Pb, T, Mod, B, H, I, S);
        if (Row.Empty)
          continue; // no visible key: dQ = 0 and nothing flows to dK, dV
        const size_t Index = resultRowQ(Pb, B, H, I);
        const double *GivenO =
            SamePrecision && Bp.GivenO ? Bp.GivenO->data() + Index * Dv : nullptr;
        Acc D = 0;
        for (int X = 0; X < Dv; ++X) {
          DOut[X] = Acc(loadElement(Pb, Bp.DOut, B, H, S.Q0, I, X));
          D += DOut[X] * (GivenO ? Acc(GivenO[X]) : Row.O[X]);
        }
        if constexpr (SamePrecision) { // Acc is float
          if (GivenO && Dv % 8 == 0) {
            std::copy(GivenO, GivenO + Dv, GivenOF.begin());
            D = preprocessRowSum(DOut.data(), GivenOF.data(), Dv);
          }
        }
        std::fill(DQ.begin(), DQ.end(), Acc(0));
        for (int J = 0; J < S.Sk; ++J) {
          if (!Row.Visible[J])
            continue;
          Acc DP = 0;
          for (int X = 0; X < Dv; ++X)
            DP += DOut[X] * T.V[size_t(J) * Dv + X];
          const Acc PZ = Round(Row.Prob[J] * Row.Drop[J]);
          const Acc DS = Row.Prob[J] * (DP * Row.Drop[J] - D);
          const Acc DSRaw = Round(DS * Mod.dlogit(Row.Raw[J], I, J));
          for (int X = 0; X < Dqk; ++X) {
            DQ[X] += DSRaw * T.K[size_t(J) * Dqk + X];
            DK[size_t(J) * Dqk + X] += DSRaw * T.Q[size_t(I) * Dqk + X];
          }
          for (int X = 0; X < Dv; ++X)
            DV[size_t(J) * Dv + X] += PZ * DOut[X];
        }
        for (int X = 0; X < Dqk; ++X)
          R.DQ[Index * Dqk + X] = double(Round(DQ[X]));
      }
    }
    for (int J = 0; J < S.Sk; ++J) {
      const size_t Index = resultRowK(Pb, B, Hk, J);
      for (int X = 0; X < Dqk; ++X)
        R.DK[Index * Dqk + X] = double(Round(DK[size_t(J) * Dqk + X]));
      for (int X = 0; X < Dv; ++X)
        R.DV[Index * Dv + X] = double(Round(DV[size_t(J) * Dv + X]));
    }
  });
  return R;
}

} // namespace detail

//===----------------------------------------------------------------------===//
// The references
//===----------------------------------------------------------------------===//

/// Float64 reference of the forward pass.
inline FwdResult forwardFloat64(const FwdProblem &Pb) { return detail::forward<double, false>(Pb); }

/// Same-precision reference: fp32 logits and softmax, P o Z and O rounded to the input dtype.
inline FwdResult forwardSamePrecision(const FwdProblem &Pb) {
  return detail::forward<float, true>(Pb);
}

/// Float64 reference of the backward pass (O and LSE recomputed in float64).
inline BwdResult backwardFloat64(const BwdProblem &Bp) {
  return detail::backward<double, false>(Bp);
}

/// Same-precision reference of the backward pass: fp32 throughout, P o Z and ds_raw rounded to
/// the input dtype before their matmuls, dQ, dK, dV rounded to it.
inline BwdResult backwardSamePrecision(const BwdProblem &Bp) {
  return detail::backward<float, true>(Bp);
}

/// Reads a kernel's output (O in the dtype through params' o strides, LSE fp32 contiguous in
/// the FwdResult layout) into the FwdResult layout.
inline FwdResult readKernelOutput(const FwdProblem &Pb, const void *O, const float *Lse) {
  const fagen_fwd_params &P = Pb.Params;
  const int Dv = Pb.headDimV();
  const StridedTensor Out{O, P.o_batch_stride, P.o_head_stride, P.o_row_stride};
  FwdResult R;
  R.O.assign(size_t(rowsQ(Pb)) * P.heads_q * Dv, 0.0);
  R.Lse.assign(size_t(rowsQ(Pb)) * P.heads_q, 0.0);
  for (int B = 0; B < P.batch; ++B) {
    const Span S = spanOf(Pb, B);
    for (int H = 0; H < P.heads_q; ++H)
      for (int I = 0; I < S.Sq; ++I) {
        const size_t Index = resultRowQ(Pb, B, H, I);
        R.Lse[Index] = Lse[Index];
        for (int X = 0; X < Dv; ++X)
          R.O[Index * Dv + X] = loadElement(Pb, Out, B, H, S.Q0, I, X);
      }
  }
  return R;
}

/// Reads a kernel's dQ, dK, dV (in the dtype, through their strides) into the BwdResult layout.
inline BwdResult readKernelGradients(const BwdProblem &Bp, const StridedTensor &DQ,
                                     const StridedTensor &DK, const StridedTensor &DV) {
  const FwdProblem &Pb = Bp.Fwd;
  const fagen_fwd_params &P = Pb.Params;
  const int Dqk = Pb.HeadDim, Dv = Pb.headDimV();
  BwdResult R = zeroGradients(Pb);
  for (int B = 0; B < P.batch; ++B) {
    const Span S = spanOf(Pb, B);
    for (int H = 0; H < P.heads_q; ++H)
      for (int I = 0; I < S.Sq; ++I)
        for (int X = 0; X < Dqk; ++X)
          R.DQ[resultRowQ(Pb, B, H, I) * Dqk + X] = loadElement(Pb, DQ, B, H, S.Q0, I, X);
    for (int Hk = 0; Hk < P.heads_kv; ++Hk)
      for (int J = 0; J < S.Sk; ++J) {
        const size_t Index = resultRowK(Pb, B, Hk, J);
        for (int X = 0; X < Dqk; ++X)
          R.DK[Index * Dqk + X] = loadElement(Pb, DK, B, Hk, S.K0, J, X);
        for (int X = 0; X < Dv; ++X)
          R.DV[Index * Dv + X] = loadElement(Pb, DV, B, Hk, S.K0, J, X);
      }
  }
  return R;
}

//===----------------------------------------------------------------------===//
// Errors and the tolerance rule
//===----------------------------------------------------------------------===//

/// Largest absolute differences of O and LSE (equal infinities count as 0; NaN or a finite
/// value against an infinity counts as +inf).
struct FwdError {
  double MaxO = 0;
  double MaxLse = 0;
};

inline double absDiff(double A, double B) {
  if (std::isnan(A) || std::isnan(B))
    return std::numeric_limits<double>::infinity();
  if (std::isinf(A) || std::isinf(B))
    return A == B ? 0.0 : std::numeric_limits<double>::infinity();
  return std::fabs(A - B);
}

/// Where the largest absolute difference of A and B is (the first such; 0 when either is
/// empty).
inline size_t worstIndex(const std::vector<double> &A, const std::vector<double> &B) {
  size_t Worst = 0;
  double Max = -1;
  for (size_t I = 0; I < std::min(A.size(), B.size()); ++I)
    if (const double D = absDiff(A[I], B[I]); D > Max)
      Max = D, Worst = I;
  return Worst;
}

inline double maxAbsDiff(const std::vector<double> &A, const std::vector<double> &B) {
  if (A.size() != B.size())
    return std::numeric_limits<double>::infinity();
  if (A.empty())
    return 0.0;
  const size_t I = worstIndex(A, B);
  return absDiff(A[I], B[I]);
}

/// One line on tensor `Name`'s largest kernel error (its flat element, row and column in the
/// result layout, the three values, and the spacing of the dtype there), for a MISMATCH.
inline std::string describeWorst(const char *Name, const std::vector<double> &Exact,
                                 const std::vector<double> &Same,
                                 const std::vector<double> &Kernel, int Columns, ElementType T) {
  if (Exact.empty() || Exact.size() != Same.size() || Exact.size() != Kernel.size() ||
      Columns <= 0)
    return std::string(Name) + ": sizes differ, no element to show";
  const size_t I = worstIndex(Exact, Kernel);
  // The dtype's spacing at |float64| (normal numbers): 2^(e - p) for |x| = m 2^e, m in [0.5, 1),
  // p significand bits (fp16 11, bf16 8, float64 53).
  const int Bits = T == ElementType::F16 ? 11 : T == ElementType::BF16 ? 8 : 53;
  int Exponent = 0;
  std::frexp(Exact[I], &Exponent);
  const double Step = Exact[I] == 0 ? 0.0 : std::ldexp(1.0, Exponent - Bits);
  char Line[320];
  std::snprintf(Line, sizeof Line,
                "%s: largest error at element %zu (result row %zu, column %zu): kernel %.7g, "
                "float64 %.7g, same-precision %.7g; the dtype's step there %.3g",
                Name, I, I / size_t(Columns), I % size_t(Columns), Kernel[I], Exact[I], Same[I],
                Step);
  return Line;
}

inline FwdError measureError(const FwdResult &Ref, const FwdResult &Out) {
  return FwdError{maxAbsDiff(Ref.O, Out.O), maxAbsDiff(Ref.Lse, Out.Lse)};
}

/// FlashAttention's rule: a kernel's error against float64 at most twice the same-precision
/// reference's, plus epsilons (LSE gets more: the kernel's exp2/log2 are approximate).
constexpr double kEpsO = 1e-5;
constexpr double kEpsLse = 1e-4;
/// The largest error the rule allows one output, given the same-precision reference's.
inline double toleranceBound(double SamePrecisionError, double Eps) {
  return 2 * SamePrecisionError + Eps;
}
inline bool withinTolerance(const FwdError &Kernel, const FwdError &SamePrecision) {
  return Kernel.MaxO <= toleranceBound(SamePrecision.MaxO, kEpsO) &&
         Kernel.MaxLse <= toleranceBound(SamePrecision.MaxLse, kEpsLse);
}

/// Largest absolute differences of dQ, dK and dV, and the scale of their epsilon:
/// max(1, max |reference| over the finite values of dQ, dK and dV).
struct BwdError {
  double MaxDQ = 0, MaxDK = 0, MaxDV = 0;
  double Scale = 1;
};

inline double maxAbsFinite(const std::vector<double> &A) {
  double M = 0;
  for (double X : A)
    if (std::isfinite(X))
      M = std::max(M, std::fabs(X));
  return M;
}

inline BwdError measureError(const BwdResult &Ref, const BwdResult &Out) {
  return BwdError{maxAbsDiff(Ref.DQ, Out.DQ), maxAbsDiff(Ref.DK, Out.DK),
                  maxAbsDiff(Ref.DV, Out.DV),
                  std::max({1.0, maxAbsFinite(Ref.DQ), maxAbsFinite(Ref.DK),
                            maxAbsFinite(Ref.DV)})};
}

/// The same rule for the gradients (FlashAttention's backward tests: each of dQ, dK, dV within
/// twice the same-precision reference's error), with the forward's epsilon times the largest
/// gradient (at least 1): a gradient that is near 0 because its terms cancel (one query row,
/// dS = P (dP - D)) carries the fp32 rounding of terms the size of the others, which the
/// same-precision reference, summing in another order, may happen to avoid. Seen: hd 256
/// top-left window + softcap, 1 x 1000, dK error 2.1e-5 against 2 x 4.1e-6 + 1e-5, with |dV|
/// up to 4 (H100, 2026-12-07; the GPU harness's rule since 2026-11-30).
constexpr double kEpsGrad = 1e-5;
/// The largest error the rule allows one gradient (`Same`: the same-precision reference's
/// errors, whose Scale is the reference's).
inline double gradientBound(double SamePrecisionError, const BwdError &Same) {
  return toleranceBound(SamePrecisionError, kEpsGrad * Same.Scale);
}
inline bool withinTolerance(const BwdError &Kernel, const BwdError &SamePrecision) {
  return Kernel.MaxDQ <= gradientBound(SamePrecision.MaxDQ, SamePrecision) &&
         Kernel.MaxDK <= gradientBound(SamePrecision.MaxDK, SamePrecision) &&
         Kernel.MaxDV <= gradientBound(SamePrecision.MaxDV, SamePrecision);
}

} // namespace reference
} // namespace fagen

#endif // FAGEN_COMPILER_REFERENCE_H
