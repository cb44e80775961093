// fagen sm80decode: split-KV attention for few query tokens per sequence (decode, speculative
// verification), mma.sync + ldmatrix + cp.async.
//
// Portable (valid source for sm_80, sm_90 and sm_100). Decoding reads every key and value of
// the cache once per step and does little math on them, so the kernel is built around the
// memory system: the query heads of a kv head and the call's query tokens share one tile
// (GQA/MQA packing: K and V are read once for all of them), the keys are split across CTAs
// so that every SM streams its share of the cache through a deep cp.async ring, and the
// splits' partial (O, LSE) are merged by NAME_combine (merge_kernel.cuh) when there is more
// than one. The variant's hooks (common/variants.cuh) mask and cap the logits as in the
// forward; a row's query index for the mask is its query token.
#ifndef FAGEN_TEMPLATES_SM80_DECODE_KERNEL_CUH
#define FAGEN_TEMPLATES_SM80_DECODE_KERNEL_CUH

#include "abi/decode_params.h"
#include "common/decode_split.h"
#include "common/softmax.cuh"
#include "sm80/decode_config.cuh"
#include "sm80/decode_kv_cache.cuh"
#include "sm80/merge_kernel.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// The packed query rows of one (batch, kv head): row r is query token r / group of query
/// head kv_head * group + r % group (abi/decode_params.h).
struct PackedRows {
  int group, kv_head;
  __device__ __forceinline__ int token(int r) const { return r / group; }
  __device__ __forceinline__ int head(int r) const { return kv_head * group + r % group; }
};

/// The warps' (max, sum, O) of each row, each over its own keys, merged as NAME_combine merges
/// splits, and written: O and LSE when the call has one split (no o_partial), else this
/// split's normalized O and LSE rows of the workspace. `scratch`: the K/V ring, free now
/// ((kWarps, kBlockM, kReduceRowFloats) floats of O, then (kWarps, kBlockM) maxima and sums).
template <class Config, class Softmax>
__device__ __forceinline__ void store_decode_rows(
    const fagen_decode_params &params, float *scratch, const Softmax &softmax,
    float (&acc_o)[Config::kRowTiles][Config::kHeadDimVPad / 8][4], float scale_log2,
    PackedRows rows, int row_begin, int rows_valid, int split, int batch) {
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kWarps = Config::kWarps, kRowTiles = Config::kRowTiles;
  constexpr int kRowFloats = Config::kReduceRowFloats, kChunks = Config::kHeadDimV / 8;
  const float kNegInf = -__int_as_float(0x7f800000), kLn2 = 0.693147180559945309f;
  float *o_red = scratch;                                  // (kWarps, kBlockM, kRowFloats)
  float *max_red = o_red + kWarps * kBlockM * kRowFloats;  // (kWarps, kBlockM)
  float *sum_red = max_red + kWarps * kBlockM;             // (kWarps, kBlockM)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto fragment_row = [lane](int r) { return 16 * (r / 2) + 8 * (r % 2) + lane / 4; };

#pragma unroll
  for (int r = 0; r < 2 * kRowTiles; ++r) {
    const float sum = quad_sum(softmax.row_sum[r]);
    if (lane % 4 == 0) {
      max_red[warp * kBlockM + fragment_row(r)] = softmax.row_max[r];
      sum_red[warp * kBlockM + fragment_row(r)] = sum;
    }
  }
  __syncthreads();
  // Each warp's O rows relative to the rows' max over all warps (raw logit units).
  auto row_max = [&](int row) {
    float m = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      m = fmaxf(m, max_red[w * kBlockM + row]);
    return m;
  };
#pragma unroll
  for (int r = 0; r < 2 * kRowTiles; ++r) {
    const int row = fragment_row(r);
    const float m = softmax.row_max[r];
    const float factor = m == kNegInf ? 0.f : exp2_approx((m - row_max(row)) * scale_log2);
    float *o_row = o_red + (warp * kBlockM + row) * kRowFloats + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < Config::kHeadDimVPad / 8; ++d) {
      o_row[8 * d] = acc_o[r / 2][d][2 * (r % 2)] * factor;
      o_row[8 * d + 1] = acc_o[r / 2][d][2 * (r % 2) + 1] * factor;
    }
  }
  __syncthreads();

  // 8 columns of one row per thread and step: the warps' sum, normalized, out with 16-byte stores.
  for (int i = threadIdx.x; i < kBlockM * kChunks; i += Config::kThreads) {
    const int row = i / kChunks, chunk = i % kChunks;
    if (row >= rows_valid)
      break;
    const float m = row_max(row);
    float l = 0.f;
    bool nan = false; // a NaN sum of a warp whose max stayed -inf: every logit NaN (NaN in Q)
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = max_red[w * kBlockM + row], sw = sum_red[w * kBlockM + row];
      l += mw == kNegInf ? 0.f : exp2_approx((mw - m) * scale_log2) * sw;
      nan |= sw != sw;
    }
    const bool empty = m == kNegInf; // no key of this split is visible to the row
    const float inv = empty ? 0.f : 1.f / l;
    float o[8] = {};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      u32 a[4], b[4];
      const u32 src = smem_addr(o_red + (w * kBlockM + row) * kRowFloats + chunk * 8);
      ld_shared_v4(a, src);
      ld_shared_v4(b, src + 16);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        o[e] += __uint_as_float(a[e]);
        o[4 + e] += __uint_as_float(b[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
      o[e] *= inv;
    // NaN logits make the LSE NaN, so that the combine's merge makes the row NaN too.
    const float lse = nan ? __int_as_float(0x7fffffff)
                      : empty ? kNegInf
                              : (m * scale_log2 + __log2f(l)) * kLn2;
    const int head = rows.head(row_begin + row), token = rows.token(row_begin + row);
    const fagen_fwd_params &fwd = params.fwd;
    if (params.o_partial == nullptr) {
      store8(static_cast<Element *>(fwd.o) + batch * fwd.o_batch_stride +
                 head * fwd.o_head_stride + token * fwd.o_row_stride + chunk * 8,
             o);
      if (chunk == 0)
        fwd.lse[batch * fwd.lse_batch_stride + head * fwd.lse_head_stride + token] = lse;
      continue;
    }
    // Partial row (split, batch, head, token) of [num_splits, batch, heads_q, seqlen_q].
    const int64_t partial =
        ((int64_t(split) * fwd.batch + batch) * fwd.heads_q + head) * fwd.seqlen_q + token;
    store8(params.o_partial + partial * Config::kHeadDimV + chunk * 8, o);
    if (chunk == 0)
      params.lse_partial[partial] = lse;
  }
}

/// Launch: grid (m_blocks * num_splits, heads_kv, batch), block kThreads, kSmemBytes of dynamic
/// shared memory (abi/decode_params.h). Pointers 16-byte aligned, strides multiples of 8.
template <class Config>
__device__ __forceinline__ void decode_kernel(const fagen_decode_params &params) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  using ScoreMod = typename Config::ScoreMod;
  constexpr int kHeadDimQK = Config::kHeadDimQK;
  constexpr int kDimQK = Config::kHeadDimQKPad, kDimV = Config::kHeadDimVPad; // as the MMAs see
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  constexpr int kStages = Config::kStages, kThreads = Config::kThreads;
  constexpr int kRowTiles = Config::kRowTiles, kKeysPerWarp = Config::kKeysPerWarp;
  const fagen_fwd_params &fwd = params.fwd;

  // NAME_combine may start now (sm_90: it waits for this grid's partial rows before reading).
  launch_dependents();
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 q_smem = smem_addr(smem);                            // (kBlockM, kDimQK)
  const u32 k_smem = q_smem + Config::kSmemQBytes;               // (kStages, kBlockN, kDimQK)
  const u32 v_smem = k_smem + kStages * Config::kSmemKTileBytes; // (kStages, kBlockN, kDimV)

  const int m_block = blockIdx.x % params.m_blocks, split = blockIdx.x / params.m_blocks;
  const int kv_head = blockIdx.y, batch = blockIdx.z;
  const PackedRows rows{fwd.group_size, kv_head};
  const int row_begin = m_block * kBlockM;
  const int rows_valid = min(kBlockM, fwd.group_size * fwd.seqlen_q - row_begin);
  // The sequence's keys (a paged cache's own length), and to the mask the call's query tokens
  // are the rows of query tile 0 (kBlockM >= tokens): the key tiles any of them sees, divided
  // among the splits. A paged cache's pages of the split's first tiles are requested with its
  // length, from where the tiles start under the call's longest length (the same start but
  // under a window mask), and each tile's a refill ahead of its copies.
  DecodeKvCache<Config> cache(params, batch, kv_head);
  using TilePages = typename DecodeKvCache<Config>::TilePages;
  AttentionShape shape = sequence_span<false>(fwd, batch).shape;
  const int guess = Mask::template n_block_begin<kBlockM, kBlockN>(0, shape) + split;
  TilePages pages[kStages];
#pragma unroll
  for (int s = 0; s < kStages; ++s)
    pages[s] = cache.lookup((guess + s * params.num_splits) * kBlockN);
  shape.seqlen_k = cache.length();
  const DecodeSplitTiles tiles =
      decode_split_tiles(Mask::template n_block_begin<kBlockM, kBlockN>(0, shape),
                         Mask::template n_block_end<kBlockM, kBlockN>(0, shape),
                         params.num_splits, split);
  const int stride = tiles.stride;
  if (tiles.first != guess) {
#pragma unroll
    for (int s = 0; s < kStages; ++s)
      pages[s] = cache.lookup((tiles.first + s * stride) * kBlockN);
  }

  const Element *q = static_cast<const Element *>(fwd.q) + batch * fwd.q_batch_stride;
  load_rows_async<kBlockM, kHeadDimQK, kDimQK, kThreads>(
      q_smem,
      [&](int r) {
        const int row = row_begin + r;
        return q + rows.head(row) * fwd.q_head_stride + rows.token(row) * fwd.q_row_stride;
      },
      rows_valid);
  auto load_kv = [&](int n_block, int stage, const TilePages &tile_pages) {
    cache.load_tile(k_smem + stage * Config::kSmemKTileBytes,
                    v_smem + stage * Config::kSmemVTileBytes, n_block * kBlockN, tile_pages);
  };
  // Commit groups: Q with the first K/V tile, then one per K/V tile (empty past the split's
  // end), so that waiting for tile n leaves kStages - 2 younger groups in flight.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (tiles.first + s * stride < tiles.end)
      load_kv(tiles.first + s * stride, s, pages[s]);
    cp_async_commit();
  }
  TilePages next = pages[kStages - 1]; // the first refill's

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc_o[kRowTiles][kDimV / 8][4] = {};
  OnlineSoftmax<kRowTiles> softmax;
  softmax.init();
  const ScoreMod score_mod(fwd, batch, 0, shape); // none or softcap: no per-head argument
  // Score mods give natural-log logits: the softmax's exp2 then needs log2(e), not the scale.
  const float kLog2e = 1.4426950408889634f;
  const float scale_log2 = ScoreMod::kIdentity ? fwd.scale_log2 : kLog2e;
  int token[2 * kRowTiles]; // the query token of each of this thread's fragment rows
#pragma unroll
  for (int r = 0; r < 2 * kRowTiles; ++r)
    token[r] = rows.token(row_begin + 16 * (r / 2) + 8 * (r % 2) + lane / 4);

  for (int n_block = tiles.first, stage = 0; n_block < tiles.end; n_block += stride) {
    // Tile n_block has landed and every warp is done with the previous one: refill its stage.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int refill = stage == 0 ? kStages - 1 : stage - 1;
    const int refill_block = n_block + (kStages - 1) * stride;
    if (refill_block < tiles.end)
      load_kv(refill_block, refill, next);
    cp_async_commit();
    if (refill_block + stride < tiles.end)
      next = cache.lookup((refill_block + stride) * kBlockN);

    // This warp's keys of the tile: S = Q K^T, the variant's hooks, the online softmax, P V.
    const int key0 = n_block * kBlockN + warp * kKeysPerWarp;
    float acc_s[kRowTiles][kKeysPerWarp / 8][4];
    gemm_qk<Element, kDimQK>(acc_s, q_smem,
                             k_smem + stage * Config::kSmemKTileBytes +
                                 warp * kKeysPerWarp * SmemRow<kDimQK>::kBytes);
    if constexpr (!ScoreMod::kIdentity)
      apply_score_mod(acc_s, score_mod, 0, key0);
    if (key0 + kKeysPerWarp > shape.seqlen_k ||
        Mask::template needs_mask<kBlockM, kBlockN>(0, n_block, shape))
      apply_mask_to_queries<Mask>(acc_s, token, key0, shape);
    softmax.update(acc_s, acc_o, scale_log2);
    u32 p[kRowTiles][kKeysPerWarp / 16][4];
    convert_p<Element>(p, acc_s);
    gemm_pv<Element, kDimV>(acc_o, p,
                            v_smem + stage * Config::kSmemVTileBytes +
                                warp * kKeysPerWarp * SmemRow<kDimV>::kBytes);
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();
  __syncthreads(); // every warp is done with the ring: it becomes the warps' scratch
  store_decode_rows<Config>(params, reinterpret_cast<float *>(smem + Config::kSmemQBytes),
                            softmax, acc_o, scale_log2, rows, row_begin, rows_valid, split,
                            batch);
}

/// NAME_combine: the splits' float32 partial rows of the workspace merged into O and LSE. The
/// runtime launches it as NAME's programmatic dependent where the arch has them (sm_90+).
template <class Config>
__device__ __forceinline__ void decode_combine(const fagen_merge_params &params) {
  wait_grid_dependencies(); // launched as NAME's programmatic dependent on sm_90+
  merge_states<MergeConfig<float, typename Config::Element, Config::kHeadDimV,
                           FAGEN_COMBINE_STATE_LANES>>(params);
}

/// NAME_merge: fagen_merge_states, states in the kernel's dtype.
template <class Config>
__device__ __forceinline__ void decode_merge(const fagen_merge_params &params) {
  using Element = typename Config::Element;
  merge_states<MergeConfig<Element, Element, Config::kHeadDimV, FAGEN_MERGE_STATE_LANES>>(params);
}

/// NAME_append (paged kernels): the call's new keys and values into the cache
/// (abi/decode_params.h fagen_kv_append_params). Launch: grid (fagen_append_blocks(...),
/// batch), block FAGEN_APPEND_THREADS; thread i of sequence blockIdx.y copies 8 columns of one
/// new token's K and V rows of one kv head, item i = (token x heads_kv + head) x chunks + chunk.
template <class Config>
__device__ __forceinline__ void decode_append(const fagen_kv_append_params &p) {
  static_assert(Config::kPaged, "NAME_append is a paged decode kernel's");
  using Element = typename Config::Element;
  constexpr int kChunksK = Config::kHeadDimQK / 8, kChunksV = Config::kHeadDimV / 8;
  constexpr int kChunks = kChunksK > kChunksV ? kChunksK : kChunksV;
  const int batch = blockIdx.y;
  const int item = blockIdx.x * FAGEN_APPEND_THREADS + threadIdx.x;
  int32_t *status = cta_kv_status(p.kv_status);
  const int used = p.seqused_k[batch];
  const bool fits = used >= 0 && used <= p.seqlen_k - p.tokens;
  __syncthreads(); // the record is marked OK before any thread reports
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (!fits)
      report_kv_status(status, FAGEN_KV_STATUS_APPEND_LENGTH, batch, p.tokens, used);
    p.seqused_out[batch] = fits ? used + p.tokens : min(max(used, 0), p.seqlen_k);
  }
  if (!fits || item >= p.tokens * p.heads_kv * kChunks)
    return;
  const int chunk = item % kChunks, head = item / kChunks % p.heads_kv,
            token = item / kChunks / p.heads_kv, key = used + token;
  // key < seqlen_k <= the table's columns x kPageSize (checked when planned).
  const int page = checked_page(p.block_table + batch * p.block_table_batch_stride,
                                key / Config::kPageSize, p.num_pages, status, batch, true);
  if (page < 0)
    return; // reported; nothing written through a bad entry
  const int64_t row = key % Config::kPageSize;
  const auto copy = [&](void *cache, const int64_t(&cs)[3], const void *src,
                        const int64_t(&ss)[3]) {
    u32 x[4];
    ld_global_v4(x, static_cast<const Element *>(src) + batch * ss[0] + token * ss[1] +
                        head * ss[2] + chunk * 8);
    st_global_v4(static_cast<Element *>(cache) + page * cs[0] + head * cs[1] + row * cs[2] +
                     chunk * 8,
                 x);
  };
  if (chunk < kChunksK)
    copy(p.k_cache, p.k_cache_strides, p.k_new, p.k_new_strides);
  if (chunk < kChunksV)
    copy(p.v_cache, p.v_cache_strides, p.v_new, p.v_new_strides);
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_DECODE_KERNEL_CUH
