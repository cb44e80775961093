// fagen: attention variants as hooks, shared by every arch's templates (forward and backward).
//
// A kernel's variant is one type, Variant<Mask, ScoreMod, Dropout, Sparsity, kVarlen>; each
// part is a small policy that kernels call at fixed points. Parts read their run-time
// arguments (window sizes, softcap, slopes, block mask, seed) from fagen_fwd_params.
//
// Mask: which (query i, key j) pairs are visible, at three granularities so that kernels skip
// invisible tiles, mask only the tiles that need it and test single elements there:
//   n_block_begin / n_block_end  which key tiles a query tile visits (forward, dQ)
//   m_block_begin / m_block_end  which query tiles see a key tile (backward dK/dV)
//   needs_mask                   whether a visited tile holds an invisible element
//   is_visible                   the element rule
// Key columns >= seqlen_k and rows >= seqlen_q are the kernel's business (bounds), never a
// mask's. Causal and window masks come in two alignments when seqlen_q != seqlen_k:
// bottom-right (the default, as FlashAttention >= 2.1: the last query sees the last key) and
// top-left (query i sees keys up to i, as PyTorch's is_causal=True).
//
// ScoreMod: the logit of a raw score s = q . k, in natural-log units (softmax = exp(logit -
// lse)). NoScoreMod (kIdentity) is softmax_scale * s, which kernels fold into one FFMA; others
// give logit(s, i, j) and its derivative dlogit(s, i, j) = d logit / d s for the backward.
//
// Dropout: NoDropout, or PhiloxDropout (common/philox.h): keep rule per element, identical in
// the forward and the backward.
//
// Sparsity: DenseBlocks, RuntimeBlockMask<kBlock> (a byte per block at run time) or
// StaticBlockMask<Layout> (a table generated at build time from the spec). A block that is not
// visible is skipped whole: no loads, no MMA.
#ifndef FAGEN_TEMPLATES_COMMON_VARIANTS_CUH
#define FAGEN_TEMPLATES_COMMON_VARIANTS_CUH

#include "abi/fwd_params.h"
#include "common/philox.h"
#include "common/types.cuh"

namespace fagen {

/// Sequence lengths of one (batch, head) problem and the mask's run-time arguments.
struct AttentionShape {
  int seqlen_q;
  int seqlen_k;
  int window_left = -1;  // WindowMask only; < 0: unbounded
  int window_right = -1;
};

/// Every query sees every key.
struct NoMask {
  static constexpr bool kWorkGrowsWithRow = false; // later query tiles cost more
  static constexpr bool kCausal = false;

  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_begin(int m_block, AttentionShape shape) {
    return 0;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_end(int m_block, AttentionShape shape) {
    return ceil_div(shape.seqlen_k, kBlockN);
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int m_block_begin(int n_block, AttentionShape shape) {
    return 0;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int m_block_end(int n_block, AttentionShape shape) {
    return ceil_div(shape.seqlen_q, kBlockM);
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ bool needs_mask(int m_block, int n_block,
                                                    AttentionShape shape) {
    return false;
  }
  static __device__ __forceinline__ bool is_visible(int row, int col, AttentionShape shape) {
    return true;
  }
};

enum class Align { kBottomRight, kTopLeft };

template <Align kAlign>
__device__ __forceinline__ int diagonal_offset(AttentionShape shape) {
  return kAlign == Align::kBottomRight ? shape.seqlen_k - shape.seqlen_q : 0;
}

/// Sliding window around the diagonal: query i sees key j iff
/// i + off - left <= j <= i + off + right (off: diagonal_offset; a negative bound is unbounded).
/// The sums below are ints: the runtime keeps them below 2^31 by refusing sequences longer than
/// 2^30 - 1024 and capping a bound at max(seqlen_q, seqlen_k) + 256, where it excludes no key
/// (tests/unit/RuntimeTest.cpp MaskSumsFitIn32BitsAtTheLimits evaluates them at the limits).
/// Causal is the window (unbounded, 0) with compile-time bounds. Rows that see no key get
/// O = 0 and LSE = -inf.
template <Align kAlign, bool kCausal_>
struct WindowMaskT {
  static constexpr bool kWorkGrowsWithRow = kCausal_;
  static constexpr bool kCausal = kCausal_;

  static __device__ __forceinline__ int left(AttentionShape s) {
    return kCausal ? -1 : s.window_left;
  }
  static __device__ __forceinline__ int right(AttentionShape s) {
    return kCausal ? 0 : s.window_right;
  }

  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_begin(int m_block, AttentionShape shape) {
    if (left(shape) < 0)
      return 0;
    const int first_key = m_block * kBlockM + diagonal_offset<kAlign>(shape) - left(shape);
    return first_key <= 0 ? 0 : first_key / kBlockN;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_end(int m_block, AttentionShape shape) {
    const int n_all = ceil_div(shape.seqlen_k, kBlockN);
    if (right(shape) < 0)
      return n_all;
    const int last_row = min((m_block + 1) * kBlockM, shape.seqlen_q) - 1;
    const int key_end = last_row + diagonal_offset<kAlign>(shape) + right(shape) + 1;
    return key_end <= 0 ? 0 : min(n_all, ceil_div(key_end, kBlockN));
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int m_block_begin(int n_block, AttentionShape shape) {
    if (right(shape) < 0)
      return 0;
    // The first row that sees key n_block * kBlockN: i >= j - off - right.
    const int first_row = n_block * kBlockN - diagonal_offset<kAlign>(shape) - right(shape);
    return first_row <= 0 ? 0 : first_row / kBlockM;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int m_block_end(int n_block, AttentionShape shape) {
    const int m_all = ceil_div(shape.seqlen_q, kBlockM);
    if (left(shape) < 0)
      return m_all;
    // The last row that sees the tile's last key: i <= j - off + left.
    const int last_key = min((n_block + 1) * kBlockN, shape.seqlen_k) - 1;
    const int row_end = last_key - diagonal_offset<kAlign>(shape) + left(shape) + 1;
    return row_end <= 0 ? 0 : min(m_all, ceil_div(row_end, kBlockM));
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ bool needs_mask(int m_block, int n_block,
                                                    AttentionShape shape) {
    const int off = diagonal_offset<kAlign>(shape);
    const int first_row = m_block * kBlockM, last_row = first_row + kBlockM - 1;
    const int first_col = n_block * kBlockN, last_col = first_col + kBlockN - 1;
    const bool right_cut = right(shape) >= 0 && last_col > first_row + off + right(shape);
    const bool left_cut = left(shape) >= 0 && first_col < last_row + off - left(shape);
    return right_cut || left_cut;
  }
  static __device__ __forceinline__ bool is_visible(int row, int col, AttentionShape shape) {
    const int off = diagonal_offset<kAlign>(shape);
    return (right(shape) < 0 || col <= row + off + right(shape)) &&
           (left(shape) < 0 || col >= row + off - left(shape));
  }
};

/// Causal, bottom-right aligned: query i sees key j iff j <= i + seqlen_k - seqlen_q.
using CausalMask = WindowMaskT<Align::kBottomRight, true>;
/// Causal, top-left aligned: query i sees key j iff j <= i.
using CausalTopLeftMask = WindowMaskT<Align::kTopLeft, true>;
/// Sliding window (run-time bounds), bottom-right / top-left aligned.
using WindowMask = WindowMaskT<Align::kBottomRight, false>;
using WindowTopLeftMask = WindowMaskT<Align::kTopLeft, false>;

// ---------------------------------------------------------------------------------------------
// Score mods. Constructed once per CTA: Mod mod(params, batch, head, shape).

struct NoScoreMod {
  static constexpr bool kIdentity = true;
  __device__ __forceinline__ NoScoreMod(const fagen_fwd_params &, int, int, AttentionShape) {}
};

/// tanh x = 1 - 2 / (2^(2 x / ln 2) + 1) on the SFU: ex2.approx and rcp.approx (about 1e-7
/// absolute error; +-1 at +-inf, NaN stays NaN). libm's tanhf is ~20 instructions a logit
/// (softcap cost 1.4x at hd 128 to 1.9x at hd 64 over the dense kernel on the H200);
/// `tanh.approx.f32`, one SFU op, errs by up to 2^-11 relative, which moves a capped logit by
/// ~cap * 5e-4 and failed fagen check's LSE bound (1.3e-4 against 1.05e-4, softcap 20).
__device__ __forceinline__ float tanh_sfu(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * 2.88539008177792681f)); // 2 / ln 2
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.f));
  return fmaf(-2.f, r, 1.f);
}

/// Gemma-2 style capping: logit = cap * tanh(scale * s / cap). The forward and the backward's
/// recomputation use the same tanh, so P recomputed from the LSE matches the forward's.
struct Softcap {
  static constexpr bool kIdentity = false;
  float cap, scale_over_cap, scale;
  __device__ __forceinline__ Softcap(const fagen_fwd_params &p, int, int, AttentionShape)
      : cap(p.softcap), scale_over_cap(p.softmax_scale / p.softcap), scale(p.softmax_scale) {}
  __device__ __forceinline__ float logit(float s, int, int) const {
    return cap * tanh_sfu(s * scale_over_cap);
  }
  __device__ __forceinline__ float dlogit(float s, int, int) const {
    const float t = tanh_sfu(s * scale_over_cap);
    return scale * (1.f - t * t);
  }
};

/// ALiBi (Press et al.): logit = scale * s - slope * |i + off - j|, off = seqlen_k - seqlen_q
/// (the bias of the diagonal is 0, as FlashAttention).
struct Alibi {
  static constexpr bool kIdentity = false;
  float slope, scale;
  int off;
  __device__ __forceinline__ Alibi(const fagen_fwd_params &p, int batch, int head,
                                   AttentionShape shape)
      : slope(p.alibi_slopes[batch * p.alibi_batch_stride + head]), scale(p.softmax_scale),
        off(shape.seqlen_k - shape.seqlen_q) {}
  __device__ __forceinline__ float logit(float s, int row, int col) const {
    return fmaf(scale, s, -slope * float(abs(row + off - col)));
  }
  __device__ __forceinline__ float dlogit(float, int, int) const { return scale; }
};

// ---------------------------------------------------------------------------------------------
// Dropout. Constructed once per CTA: Drop drop(params, batch, head).

struct NoDropout {
  static constexpr bool kEnabled = false;
  __device__ __forceinline__ NoDropout(const fagen_fwd_params &, int, int) {}
};

struct PhiloxDropout {
  static constexpr bool kEnabled = true;
  uint64_t seed, offset;
  uint32_t threshold, bh;
  float rescale;
  __device__ __forceinline__ PhiloxDropout(const fagen_fwd_params &p, int batch, int head)
      : seed(p.dropout_seed), offset(p.dropout_offset), threshold(p.dropout_threshold),
        bh(uint32_t(batch * p.heads_q + head)), rescale(p.dropout_rescale) {}
  /// Keep bits of the 16 elements of (row, col)'s patch (common/philox.h): bit 4 t + e for
  /// 8-column tile t = 0..3 of the patch and accumulator element e = 2 (row half) + col % 2, as
  /// an m16n8 fragment numbers them. (row, col): the patch's first element.
  __device__ __forceinline__ unsigned keep16(int row, int col) const {
    const Philox4 r = dropout_patch(seed, offset, bh, row, col);
    // A byte per element: 0xff where kept (byte >= threshold), as 4 x 4 bytes.
    const unsigned t4 = threshold * 0x01010101u;
    const unsigned kx = __vcmpgeu4(r.x, t4), ky = __vcmpgeu4(r.y, t4);
    const unsigned kz = __vcmpgeu4(r.z, t4), kw = __vcmpgeu4(r.w, t4);
    unsigned bits = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const unsigned lo = t < 2 ? kx : ky, hi = t < 2 ? kz : kw; // row halves
      const int shift = 16 * (t % 2);
      bits |= ((lo >> shift) & 1u) << (4 * t) | ((lo >> (shift + 8)) & 1u) << (4 * t + 1) |
              ((hi >> shift) & 1u) << (4 * t + 2) | ((hi >> (shift + 8)) & 1u) << (4 * t + 3);
    }
    return bits;
  }
  /// Keep bits of the four elements of one 8-column tile: (row, col) with row % 16 < 8 and col
  /// even; bit e = 2 (row half) + col % 2. Draws the whole patch: prefer keep16.
  __device__ __forceinline__ unsigned keep4(int row, int col) const {
    return (keep16(row, col & ~31 | (col & 6)) >> (4 * ((col >> 3) & 3))) & 0xFu;
  }
};

// ---------------------------------------------------------------------------------------------
// Block sparsity. Constructed once per CTA: Sparsity sp(params, batch, head).

struct DenseBlocks {
  static constexpr bool kSparse = false;
  static constexpr int kBlock = 0;
  __device__ __forceinline__ DenseBlocks(const fagen_fwd_params &, int, int) {}
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool visible(int m_block, int n_block) const {
    return true;
  }
};

/// A byte per (kBlock x kBlock) block, passed at run time (fagen_fwd_params::block_mask).
/// Kernel tiles must divide kBlock.
template <int kBlock_> struct RuntimeBlockMask {
  static constexpr bool kSparse = true;
  static constexpr int kBlock = kBlock_;
  const uint8_t *rows;
  int64_t row_stride;
  __device__ __forceinline__ RuntimeBlockMask(const fagen_fwd_params &p, int batch, int head)
      : rows(p.block_mask + batch * p.block_mask_batch_stride + head * p.block_mask_head_stride),
        row_stride(p.block_mask_row_stride) {}
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool visible(int m_block, int n_block) const {
    static_assert(kBlock % kBlockM == 0 && kBlock % kBlockN == 0,
                  "the kernel's tiles must divide the block mask's block");
    return rows[(m_block * kBlockM / kBlock) * row_stride + n_block * kBlockN / kBlock] != 0;
  }
};

/// A layout fixed at build time. Layout (data generated from the spec) provides kBlock, kRows,
/// kCols and `static __device__ const uint8_t *table()` (kRows x kCols bytes, row-major,
/// nonzero = computed); blocks outside the table are skipped. The runtime refuses calls longer
/// than kRows * kBlock queries or kCols * kBlock keys.
template <class Layout> struct StaticBlockMask {
  static constexpr bool kSparse = true;
  static constexpr int kBlock = Layout::kBlock;
  __device__ __forceinline__ StaticBlockMask(const fagen_fwd_params &, int, int) {}
  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ bool visible(int m_block, int n_block) const {
    static_assert(kBlock % kBlockM == 0 && kBlock % kBlockN == 0,
                  "the kernel's tiles must divide the block layout's block");
    const int r = m_block * kBlockM / kBlock, c = n_block * kBlockN / kBlock;
    return r < Layout::kRows && c < Layout::kCols && Layout::table()[r * Layout::kCols + c] != 0;
  }
};

// ---------------------------------------------------------------------------------------------

/// A kernel's variant: every attention-semantics choice, as one type.
template <class Mask_, class ScoreMod_ = NoScoreMod, class Dropout_ = NoDropout,
          class Sparsity_ = DenseBlocks, bool kVarlen_ = false>
struct Variant {
  using Mask = Mask_;
  using ScoreMod = ScoreMod_;
  using Dropout = Dropout_;
  using Sparsity = Sparsity_;
  static constexpr bool kVarlen = kVarlen_;
};

/// The parts of a kernel's Variant by name: the base of every template's Config, so that kernels
/// read Config::Mask, Config::Dropout, ... alike.
template <class Variant_> struct VariantParts {
  using Variant = Variant_;
  using Mask = typename Variant::Mask;
  using ScoreMod = typename Variant::ScoreMod;
  using Dropout = typename Variant::Dropout;
  using Sparsity = typename Variant::Sparsity;
  static constexpr bool kVarlen = Variant::kVarlen;
};

/// A config's check that its tiles divide the block-sparse layout's block (dense: always);
/// referencing kOk instantiates it.
template <class Sparsity, int kBlockM, int kBlockN> struct SparseTilesCheck {
  static_assert(!Sparsity::kSparse ||
                    (Sparsity::kBlock % kBlockM == 0 && Sparsity::kBlock % kBlockN == 0),
                "kBlockM and kBlockN must divide the block-sparse layout's block (kBlock)");
  static constexpr bool kOk = true;
};

/// Row offsets and lengths of one batch entry: dense, or from cu_seqlens (varlen).
struct SequenceSpan {
  int64_t q_row0, k_row0; // first row of this sequence in the packed tensors (dense: 0)
  AttentionShape shape;
};

/// Varlen: sequence b's first row, cu[b] clamped to [0, total]. The host cannot read the
/// device's cu_seqlens, so every row a kernel touches comes through here or sequence_span:
/// whatever the arrays hold, no load or store leaves the packed tensors. A valid array (0 <=
/// cu[b] <= cu[b + 1] <= total) is unchanged.
__device__ __forceinline__ int sequence_row0(const int32_t *cu, int batch, int total) {
  return min(max(cu[batch], 0), total);
}

template <bool kVarlen>
__device__ __forceinline__ SequenceSpan sequence_span(const fagen_fwd_params &p, int batch) {
  SequenceSpan s;
  s.shape.window_left = p.window_left;
  s.shape.window_right = p.window_right;
  if constexpr (kVarlen) {
    // Rows [row0, end) with end clamped to [row0, total], and no longer than the longest
    // sequence the grid and the workspace are sized for (seqlen_q / seqlen_k).
    const int q0 = sequence_row0(p.cu_seqlens_q, batch, p.total_q);
    const int k0 = sequence_row0(p.cu_seqlens_k, batch, p.total_k);
    const int q1 = min(max(p.cu_seqlens_q[batch + 1], q0), p.total_q);
    const int k1 = min(max(p.cu_seqlens_k[batch + 1], k0), p.total_k);
    s.q_row0 = q0;
    s.k_row0 = k0;
    s.shape.seqlen_q = min(q1 - q0, p.seqlen_q);
    s.shape.seqlen_k = min(k1 - k0, p.seqlen_k);
  } else {
    s.q_row0 = 0;
    s.k_row0 = 0;
    s.shape.seqlen_q = p.seqlen_q;
    s.shape.seqlen_k = p.seqlen_k;
  }
  return s;
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_VARIANTS_CUH
