//===- Reference.h - CPU reference for attention forward --------*- C++ -*-===//
//
// Header-only, C++17, no dependencies beyond the standard library and fwd_params.h, so that
// `fagen check` (g++) and the GPU harness (nvcc host code) share one definition of the
// semantics: the same strided layouts, GQA mapping and masks as the kernels.
//
// Two references over the same fp16/bf16 inputs:
//  - float64: S, softmax and P@V in double;
//  - same precision: S in fp32, softmax in fp32, P rounded to the input dtype before P@V with
//    fp32 accumulation, O rounded to the input dtype (what a kernel can at best achieve).
// A kernel passes when its error against float64 is at most twice the same-precision
// reference's error plus a small epsilon (FlashAttention's test rule).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_REFERENCE_H
#define FAGEN_COMPILER_REFERENCE_H

#include "fwd_params.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace fagen {
namespace reference {

enum class ElementType { F16, BF16 };
enum class MaskKind { None, Causal };

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
inline float roundTo(float F, ElementType T) { return toFloat(fromFloat(F, T), T); }

//===----------------------------------------------------------------------===//
// The references
//===----------------------------------------------------------------------===//

/// One forward problem: params' pointers are host memory in the input dtype (lse and o are
/// not used). head_dim_qk == head_dim_v == HeadDim.
struct FwdProblem {
  fagen_fwd_params Params;
  int HeadDim;
  ElementType Type;
  MaskKind Mask;
};

/// O as dense [batch, heads_q, seqlen_q, head_dim] and LSE as [batch, heads_q, seqlen_q],
/// natural-log units; rows that see no key: O = 0, LSE = -inf.
struct FwdResult {
  std::vector<double> O;
  std::vector<double> Lse;
};

/// Whether query Row may see key Col.
inline bool isVisible(MaskKind Mask, int Row, int Col, int SeqlenQ, int SeqlenK) {
  if (Mask == MaskKind::Causal)
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

namespace detail {

/// Reads element (B, H, Row, D) of a strided tensor in dtype T.
inline float load(const void *Base, int64_t BatchStride, int64_t HeadStride, int64_t RowStride,
                  int B, int H, int Row, int D, ElementType T) {
  const uint16_t *P = static_cast<const uint16_t *>(Base);
  return toFloat(P[B * BatchStride + H * HeadStride + Row * RowStride + D], T);
}

/// Shared driver: Acc is double for the float64 reference, float for the same-precision one.
template <class Acc, bool SamePrecision> FwdResult forward(const FwdProblem &Pb) {
  const fagen_fwd_params &P = Pb.Params;
  const int Sq = P.seqlen_q, Sk = P.seqlen_k, D = Pb.HeadDim;
  FwdResult R;
  R.O.assign(size_t(P.batch) * P.heads_q * Sq * D, 0.0);
  R.Lse.assign(size_t(P.batch) * P.heads_q * Sq, 0.0);
  const Acc Scale = Acc(P.softmax_scale);
  parallelForHeads(P.batch, P.heads_q, [&](int B, int H) {
    const int Hk = H / P.group_size;
    std::vector<float> Q(size_t(Sq) * D), K(size_t(Sk) * D), V(size_t(Sk) * D);
    for (int I = 0; I < Sq; ++I)
      for (int X = 0; X < D; ++X)
        Q[size_t(I) * D + X] = load(P.q, P.q_batch_stride, P.q_head_stride, P.q_row_stride, B, H,
                                    I, X, Pb.Type);
    for (int J = 0; J < Sk; ++J)
      for (int X = 0; X < D; ++X) {
        K[size_t(J) * D + X] = load(P.k, P.k_batch_stride, P.k_head_stride, P.k_row_stride, B,
                                    Hk, J, X, Pb.Type);
        V[size_t(J) * D + X] = load(P.v, P.v_batch_stride, P.v_head_stride, P.v_row_stride, B,
                                    Hk, J, X, Pb.Type);
      }
    std::vector<Acc> S(Sk), OutRow(D);
    for (int I = 0; I < Sq; ++I) {
      const size_t RowIndex = (size_t(B) * P.heads_q + H) * Sq + I;
      Acc Max = -std::numeric_limits<Acc>::infinity();
      for (int J = 0; J < Sk; ++J) {
        if (!isVisible(Pb.Mask, I, J, Sq, Sk)) {
          S[J] = -std::numeric_limits<Acc>::infinity();
          continue;
        }
        Acc Dot = 0;
        for (int X = 0; X < D; ++X)
          Dot += Acc(Q[size_t(I) * D + X]) * Acc(K[size_t(J) * D + X]);
        S[J] = Dot * Scale;
        Max = std::max(Max, S[J]);
      }
      if (Max == -std::numeric_limits<Acc>::infinity()) { // no visible key
        R.Lse[RowIndex] = -std::numeric_limits<double>::infinity();
        continue;
      }
      Acc Sum = 0;
      for (int J = 0; J < Sk; ++J) {
        S[J] = std::exp(S[J] - Max);
        Sum += S[J];
      }
      R.Lse[RowIndex] = double(Max) + std::log(double(Sum));
      std::fill(OutRow.begin(), OutRow.end(), Acc(0));
      for (int J = 0; J < Sk; ++J) {
        Acc Pj = S[J] / Sum;
        if (SamePrecision)
          Pj = roundTo(float(Pj), Pb.Type);
        if (Pj == 0)
          continue;
        for (int X = 0; X < D; ++X)
          OutRow[X] += Pj * Acc(V[size_t(J) * D + X]);
      }
      for (int X = 0; X < D; ++X)
        R.O[RowIndex * D + X] =
            SamePrecision ? double(roundTo(float(OutRow[X]), Pb.Type)) : double(OutRow[X]);
    }
  });
  return R;
}

} // namespace detail

/// Float64 reference of the forward pass.
inline FwdResult forwardFloat64(const FwdProblem &Pb) { return detail::forward<double, false>(Pb); }

/// Same-precision reference: fp32 S and softmax, P and O rounded to the input dtype.
inline FwdResult forwardSamePrecision(const FwdProblem &Pb) {
  return detail::forward<float, true>(Pb);
}

/// Reads a kernel's output (O in the dtype through params' o strides, LSE fp32 contiguous) into
/// the dense FwdResult layout.
inline FwdResult readKernelOutput(const FwdProblem &Pb, const void *O, const float *Lse) {
  const fagen_fwd_params &P = Pb.Params;
  const int Sq = P.seqlen_q, D = Pb.HeadDim;
  FwdResult R;
  R.O.resize(size_t(P.batch) * P.heads_q * Sq * D);
  R.Lse.resize(size_t(P.batch) * P.heads_q * Sq);
  for (int B = 0; B < P.batch; ++B)
    for (int H = 0; H < P.heads_q; ++H)
      for (int I = 0; I < Sq; ++I) {
        const size_t RowIndex = (size_t(B) * P.heads_q + H) * Sq + I;
        R.Lse[RowIndex] = Lse[RowIndex];
        for (int X = 0; X < D; ++X)
          R.O[RowIndex * D + X] = detail::load(O, P.o_batch_stride, P.o_head_stride,
                                               P.o_row_stride, B, H, I, X, Pb.Type);
      }
  return R;
}

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

inline FwdError measureError(const FwdResult &Ref, const FwdResult &Out) {
  FwdError E;
  for (size_t I = 0; I < Ref.O.size(); ++I)
    E.MaxO = std::max(E.MaxO, absDiff(Ref.O[I], Out.O[I]));
  for (size_t I = 0; I < Ref.Lse.size(); ++I)
    E.MaxLse = std::max(E.MaxLse, absDiff(Ref.Lse[I], Out.Lse[I]));
  return E;
}

/// FlashAttention's rule: a kernel's error against float64 at most twice the same-precision
/// reference's, plus epsilons (LSE gets more: the kernel's exp2/log2 are approximate).
constexpr double kEpsO = 1e-5;
constexpr double kEpsLse = 1e-4;
inline bool withinTolerance(const FwdError &Kernel, const FwdError &SamePrecision) {
  return Kernel.MaxO <= 2 * SamePrecision.MaxO + kEpsO &&
         Kernel.MaxLse <= 2 * SamePrecision.MaxLse + kEpsLse;
}

} // namespace reference
} // namespace fagen

#endif // FAGEN_COMPILER_REFERENCE_H
