// fagen sm90: warp-specialized attention backward (sm_90a), FlashAttention-3's structure: one CTA
// per key tile; a producer warp loads K and V once, then each visible query tile's Q, dO (TMA)
// and LSE, D rows into a ring of slots handed over by mbarriers; the consumer warpgroups
// (bwd_ws_config.cuh: 64 keys each) run, per query tile,
//   S^T = K Q^T, dP^T = V dO^T            wgmma from shared memory
//   P^T = exp2(S^T scale - LSE), dS^T = P^T (dP^T - D)    in registers (masks, score mods;
//                                         dropout: the forward's keep flags, transposed;
//                                         bwd_ws_elementwise.cuh)
//   dV += P^T dO, dK += dS^T Q            wgmma, A from registers
//   dQ_sub = dS K                         wgmma from dS^T in shared memory, bulk-added to dq_accum
// and store dK, dV at the end. Three kernels per plan, as abi/bwd_params.h describes:
// bwd_ws_preprocess (D, dq_accum zeroed), bwd_ws_kernel, bwd_ws_postprocess (dQ out;
// bwd_ws_prepost.cuh).
// Semantics as the portable backward (docs/design/variants-and-backward.md): with the identity
// score mod dS is kept unscaled, the softmax scale applied to dK here and to dQ in _post.
// Varlen: the grid covers the longest sequence's key tiles (a CTA past its sequence's keys
// exits); Q, dO, K and V come by TMA from the packed tensors at each sequence's first row, so a
// sequence's last tiles read the next sequence's rows, which the masks (keys) and LSE = +inf
// (query rows: P = dS = 0) keep out; each sequence's query tiles own whole blocks of dq_accum
// (WsBwdConfig::kDqWholeTiles). Deterministic: the consumers hand their dQ blocks to a warp of
// the producer warpgroup, which adds them in a fixed key-tile order (bwd_ws_write_dq).
#ifndef FAGEN_TEMPLATES_SM90_BWD_WS_KERNEL_CUH
#define FAGEN_TEMPLATES_SM90_BWD_WS_KERNEL_CUH

#include "abi/bwd_params.h"
#include "abi/tma_params.h"
#include "common/dropout.cuh"
#include "common/ptx.cuh"
#include "sm80/bwd_kernel.cuh"
#include "sm90/bwd_ws_config.cuh"
#include "sm90/bwd_ws_elementwise.cuh"
#include "sm90/bwd_ws_prepost.cuh"
#include "sm90/bwd_ws_tiles.cuh"
#include "sm90/tile_ops.cuh"
#include "sm90/tma.cuh"
#include "sm90/ws_trace.cuh"

namespace fagen {
namespace sm90 {

/// The producer warp: K and V once, then per visible (query head, query tile) its LSE and D
/// rows (every lane, then an arrival each) and Q and dO (lane 0, TMA) into the next slot.
template <class Config>
__device__ __forceinline__ void bwd_ws_produce(const WsBwdSmem<Config> &sm,
                                               const fagen_bwd_params &params,
                                               const fagen_bwd_tma_maps &maps, int n_block,
                                               int kv_head, int batch, const SequenceSpan &span) {
  constexpr bool kVarlen = Config::kVarlen;
  constexpr int kBlockM = Config::kBlockM;
  // The real columns' blocks (the padding blocks past them hold zeros: bwd_ws_zero_padding).
  constexpr int kQk = Config::kQkBlocks, kV = Config::kVBlocks;
  constexpr int kQBytes = kBlockM * 128 * kQk, kDoBytes = kBlockM * 128 * kV;
  const AttentionShape shape = span.shape;
  // Varlen: rows of the packed tensors, batch 0 (rows past a sequence's end are the next
  // sequence's: keys there are masked, query rows get LSE +inf below, hence P = dS = 0).
  const int map_batch = kVarlen ? 0 : batch;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    mbarrier_arrive_expect_tx(sm.kv_full(), Config::kBlockN * 128 * (kQk + kV));
    const int key_row = int(span.k_row0) + n_block * Config::kBlockN;
    for (int b = 0; b < kQk || b < kV; ++b) {
      if (b < kQk)
        tma_load_4d(sm.k() + b * Config::kBlockN * 128, maps.k, sm.kv_full(), 64 * b, key_row,
                    kv_head, map_batch);
      if (b < kV)
        tma_load_4d(sm.v() + b * Config::kBlockN * 128, maps.v, sm.kv_full(), 64 * b, key_row,
                    kv_head, map_batch);
    }
  }
  const float kInf = __int_as_float(0x7f800000);
  const fagen_fwd_params &f = params.fwd;
  WsQueryWalk<Config> tile(f, batch, kv_head, n_block, shape);
  for (int it = 0; tile.valid(); tile.advance(), ++it) {
    const int s = it % Config::kStages, round = it / Config::kStages;
    mbarrier_wait(sm.q_empty(s), (round & 1) ^ 1);
    // Rows past seqlen_q, and rows that saw no key (LSE -inf), get LSE +inf: P = 0 there.
    const float *lse = f.lse + sm80::batch_offset<kVarlen>(batch, f.lse_batch_stride) +
                       tile.head * f.lse_head_stride + span.q_row0;
    const float *d = params.d + sm80::batch_offset<kVarlen>(batch, params.d_batch_stride) +
                     tile.head * params.d_head_stride + span.q_row0;
    for (int r = lane; r < kBlockM; r += 32) {
      const int row = tile.m_block * kBlockM + r;
      float l = kInf, dr = 0.f;
      if (row < shape.seqlen_q) {
        l = lse[row];
        l = l == -kInf ? kInf : l * sm80::kLog2e;
        dr = d[row];
      }
      sm.lse(s)[r] = l;
      sm.d(s)[r] = dr;
    }
    const int q_row = int(span.q_row0) + tile.m_block * kBlockM;
    if (lane == 0) {
      mbarrier_arrive_expect_tx(sm.q_full(s), kQBytes + (Config::kSeparateDo ? 0 : kDoBytes));
      for (int b = 0; b < kQk || b < kV; ++b) {
        if (b < kQk)
          tma_load_4d(sm.q(s) + b * kBlockM * 128, maps.q, sm.q_full(s), 64 * b, q_row,
                      tile.head, map_batch);
        if (!Config::kSeparateDo && b < kV)
          tma_load_4d(sm.dout(s) + b * kBlockM * 128, maps.dout, sm.q_full(s), 64 * b, q_row,
                      tile.head, map_batch);
      }
    } else {
      mbarrier_arrive(sm.q_full(s));
    }
    // dO in its own ring: loaded once its slot is free, after Q, whose slot frees first.
    if constexpr (Config::kSeparateDo) {
      const int sd = it % Config::kDoStages, round_d = it / Config::kDoStages;
      if (lane == 0) {
        mbarrier_wait(sm.do_empty(sd), (round_d & 1) ^ 1);
        mbarrier_arrive_expect_tx(sm.do_full(sd), kDoBytes);
        for (int b = 0; b < kV; ++b)
          tma_load_4d(sm.dout(sd) + b * kBlockM * 128, maps.dout, sm.do_full(sd), 64 * b, q_row,
                      tile.head, map_batch);
      }
    }
  }
}

/// dq (64, 64) = ds (64 query rows, kBlockN keys) * k (kBlockN keys, 64 columns), issued by one
/// warpgroup: ds_smem is the rows' 64-column block of the dS^T tile, k_smem the columns' block
/// of K (both key-major: MN-major operands).
template <class Element, int kBlockN>
__device__ __forceinline__ void gemm_dq_issue(float (&dq)[8][4], u32 ds_smem, u32 k_smem) {
  const SmemDescSw128<kBlockN * 128, 1024> a(ds_smem), b(k_smem);
#pragma unroll
  for (int k = 0; k < kBlockN / 16; ++k)
    WgmmaTransposed<Element>::ss(dq, a.at(k * 16 * 128), b.at(k * 16 * 128), k > 0);
}

/// acc (kBlockN keys, 128 columns) += a (kBlockN keys, kBlockM query rows) * b (kBlockM query
/// rows, 128 columns), issued by one warpgroup, both from shared memory: a is a P^T or dS^T tile
/// (key-major: K-major), b_smem the first of two 64-column blocks of the Q or dO tile (MN-major).
/// kBlocks (2, 1 or 0) of the two 64-column blocks: the second consumer's columns past the head
/// dim (hd 192: one block of dK and dV; 192/128: one of dK, none of dV) are padding, which it
/// neither multiplies nor stores (acc's columns from 64 * kBlocks stay 0).
template <class Element, int kBlockN, int kBlockM, int kBlocks = 2>
__device__ __forceinline__ void gemm_kv_split_issue(float (&acc)[16][4], u32 a_smem, u32 b_smem) {
  static_assert(kBlocks >= 0 && kBlocks <= 2, "one warpgroup's 128 columns");
  const SmemDescSw128<16, 1024> a(a_smem);
  const SmemDescSw128<kBlockM * 128, 1024> b(b_smem);
#pragma unroll
  for (int k = 0; k < kBlockM / 16; ++k) {
    const uint64_t da = a.at((k / 4) * kBlockN * 128 + (k % 4) * 32), db = b.at(k * 16 * 128);
    if constexpr (kBlocks == 2)
      Wgmma<128, Element>::ss_tb(acc, da, db, 1);
    else if constexpr (kBlocks == 1) // the first 8 fragments: columns 0 .. 63
      Wgmma<64, Element>::ss_tb(reinterpret_cast<float(&)[8][4]>(acc), da, db, 1);
  }
}

/// P^T (in st, from S^T) and dS^T (in dpt, from dP^T) of one query tile's columns col0 ..
/// col0 + kSCols, once S^T and dP^T are issued (masked: the tile needs the mask or lies past
/// seqlen_k): with Config::kOverlapP (identity score mod) P^T while dP^T is still in the
/// tensor cores, else both after.
template <class Config>
__device__ __forceinline__ void bwd_ws_wait_p_ds(float (&st)[Config::kSCols / 8][4],
                                                 float (&dpt)[Config::kSCols / 8][4],
                                                 const WsBwdSmem<Config> &sm,
                                                 const fagen_bwd_params &params,
                                                 const WsKeepBits<Config> &keep, int s, int key0,
                                                 int head, int m_block, int batch, bool masked,
                                                 AttentionShape shape, int col0 = 0) {
  const int q0 = m_block * Config::kBlockM + col0;
  const float *lse2 = sm.lse(s) + col0, *d = sm.d(s) + col0;
  if constexpr (Config::ScoreMod::kIdentity && Config::kOverlapP) {
    wgmma_wait<1>();
    fence_operands(st);
    bwd_ws_p<Config>(st, params, lse2, key0, q0, masked, shape);
    wgmma_wait<0>();
    fence_operands(dpt);
    bwd_ws_ds<Config>(dpt, st, d, keep, params.fwd.dropout_rescale);
  } else {
    wgmma_wait<0>();
    fence_operands(st);
    fence_operands(dpt);
    bwd_ws_p_ds<Config>(st, dpt, params, lse2, d, keep, key0, q0, head, batch, masked, shape);
  }
}

/// Writes a consumer warpgroup's dS^T (or P^T) fragments, rows row0 .. row0 + 63 and columns
/// col0 .. col0 + kSCols, into the tile at `ds` (rows: the kBlockN keys; 64-column blocks of
/// query rows, 128-byte swizzled).
template <class Config>
__device__ __forceinline__ void bwd_ws_store_ds(const WsBwdSmem<Config> &sm, u32 ds,
                                                const u32 (&dst)[Config::kSCols / 16][4],
                                                int row0, int col0, int warp, int lane) {
#pragma unroll
  for (int j = 0; j < Config::kSCols / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * warp + lane / 4 + 8 * h, col = col0 + 8 * j + 2 * (lane % 4);
      *sm.template at<u32>(ds + swizzled_offset<Config::kBlockN>(row, col / 8) + (col % 8) * 2) =
          dst[j / 2][2 * (j % 2) + h];
    }
}

/// Adds a consumer warpgroup's 64 x 64 dQ block (sub-block `sub` of the query tile's) to
/// dq_accum: staged in the warpgroup's shared memory (once its previous block's reduction has
/// read it) and added by one bulk reduction.
template <class Config>
__device__ __forceinline__ void bwd_ws_add_dq(const WsBwdSmem<Config> &sm,
                                              const fagen_bwd_params &params,
                                              const float (&dq)[8][4], int64_t dq_seq, int head,
                                              int m_block, int sub, int consumer, int tid) {
  if constexpr (Config::kDqWriter) {
    // The dQ writer warp adds it (as sub-block `consumer`) in its turn (bwd_ws_write_dq):
    // staged once it has read the previous block, then handed over.
    named_barrier_sync<160>(Config::kDqEmptyBarrier + consumer);
    float4 *staged = sm.template at<float4>(sm.dq(consumer));
#pragma unroll
    for (int j = 0; j < 8; ++j)
      staged[j * 128 + tid] = make_float4(dq[j][0], dq[j][1], dq[j][2], dq[j][3]);
    fence_proxy_async_smem();
    named_barrier_arrive<160>(Config::kDqFullBarrier + consumer);
    return;
  }
  if (tid == 0)
    bulk_wait_group_read<0>();
  named_barrier_sync<128>(2 + consumer);
  float4 *staged = sm.template at<float4>(sm.dq(consumer));
#pragma unroll
  for (int j = 0; j < 8; ++j)
    staged[j * 128 + tid] = make_float4(dq[j][0], dq[j][1], dq[j][2], dq[j][3]);
  fence_proxy_async_smem();
  named_barrier_sync<128>(2 + consumer);
  if (tid == 0)
    bulk_reduce_add_f32(params.dq_accum + dq_seq + head * params.dq_accum_head_stride +
                            int64_t(m_block) * Config::kBlockM * Config::kDim +
                            sub * Config::kSubBlockFloats,
                        sm.dq(consumer), Config::kSmemDqBytes);
  if (tid == 0)
    bulk_commit_group();
}

/// Stores the real columns of a warp's rows of a (64, kCols) accumulator that holds columns col0
/// .. col0 + kCols of a tile of kDim columns whose first kHeadDim are real (store_o_rows at
/// `gmem`, column col0): all kCols, the rest of the head dim, or none (ws_bwd_dim's padding:
/// hd 96 in 128 columns; hd 192, and dV of 192/128, in two halves of 128).
template <class Element, int kCols, int kHeadDim, int kDim>
__device__ __forceinline__ void bwd_ws_store_real_cols(Element *gmem, int64_t row_stride,
                                                       int rows, const float (&acc)[kCols / 8][4],
                                                       int col0) {
  if constexpr (kHeadDim == kDim) {
    store_o_rows<Element, kCols>(gmem, row_stride, rows, acc);
  } else {
    constexpr int kRest = kHeadDim % kCols;
    if (col0 + kCols <= kHeadDim)
      store_o_rows<Element, kCols>(gmem, row_stride, rows, acc);
    else if (kRest != 0 && col0 < kHeadDim)
      store_o_rows<Element, kCols, kRest == 0 ? kCols : kRest>(gmem, row_stride, rows, acc);
  }
}

/// A consumer warpgroup's dK (times the softmax scale for the identity score mod) and dV (with
/// dropout times 1 / (1 - p)): a warp's 16 key rows from `row` (in the sequence), columns
/// col0 .. col0 + kKvCols.
template <class Config>
__device__ __forceinline__ void bwd_ws_store_dkv(const fagen_bwd_params &params,
                                                 float (&dk)[Config::kKvCols / 8][4],
                                                 float (&dv)[Config::kKvCols / 8][4],
                                                 int batch, int kv_head, const SequenceSpan &span,
                                                 int row, int col0) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::kVarlen;
  if constexpr (Config::ScoreMod::kIdentity) {
#pragma unroll
    for (int j = 0; j < Config::kKvCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dk[j][e] *= params.fwd.softmax_scale;
  }
  if constexpr (Config::Dropout::kEnabled) { // dV summed P^T o keep: the kept ones' 1 / (1 - p)
#pragma unroll
    for (int j = 0; j < Config::kKvCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dv[j][e] *= params.fwd.dropout_rescale;
  }
  const int64_t key_row = span.k_row0 + row; // in the packed tensors (dense: the sequence)
  const int rows = span.shape.seqlen_k - row;
  bwd_ws_store_real_cols<Element, Config::kKvCols, Config::kHeadDimQK, Config::kDim>(
      static_cast<Element *>(params.dk) + sm80::batch_offset<kVarlen>(batch, params.dk_batch_stride) +
          kv_head * params.dk_head_stride + key_row * params.dk_row_stride + col0,
      params.dk_row_stride, rows, dk, col0);
  bwd_ws_store_real_cols<Element, Config::kKvCols, Config::kHeadDimV, Config::kDim>(
      static_cast<Element *>(params.dv) + sm80::batch_offset<kVarlen>(batch, params.dv_batch_stride) +
          kv_head * params.dv_head_stride + key_row * params.dv_row_stride + col0,
      params.dv_row_stride, rows, dv, col0);
}

/// Hands slot `s` (its Q, dO, LSE and D; Config::kSeparateDo: its Q, LSE and D, and dO slot
/// `sd`) back to the producer once dV += P^T dO and dK += dS^T Q have read it: waits until at
/// most kPending wgmma groups, all issued after theirs, are in flight, pins dV and dK, and
/// arrives with every thread (each read the slot's LSE and D itself; racecheck does not see a
/// warp's reads ordered before lane 0's arrive).
template <int kPending, class Config, int kN>
__device__ __forceinline__ void bwd_ws_release_slot(const WsBwdSmem<Config> &sm, int s, int sd,
                                                    float (&dv)[kN][4], float (&dk)[kN][4]) {
  wgmma_wait<kPending>();
  fence_operands(dv);
  fence_operands(dk);
  mbarrier_arrive(sm.q_empty(s));
  if constexpr (Config::kSeparateDo)
    mbarrier_arrive(sm.do_empty(sd));
}

/// The dQ writer warp (Config::kDqWriter): per visible (query head, query tile) of the key
/// tile, in the consumers' order, it adds both consumers' staged blocks as they come and hands
/// the staging blocks back once read. In a deterministic kernel it first waits until the key
/// tiles before this one in the tile's order have added their dQ (dq_semaphore reaches this
/// key tile's rank, sm80::dq_rank; the first key tile of a dq_accum copy stores its blocks,
/// Config::kDqStoreFirst), and releases the next key tile once the additions are complete.
template <class Config>
__device__ __forceinline__ void bwd_ws_write_dq(const WsBwdSmem<Config> &sm,
                                                const fagen_bwd_params &params, int n_block,
                                                int kv_head, int batch, const SequenceSpan &span) {
  const int lane = threadIdx.x % 32;
  constexpr bool kDet = Config::kDeterministic;
  const int slot = n_block % Config::kDqSlots;
  float *accum = params.dq_accum + slot * sm80::dq_slot_stride<Config>(params) +
                 ws_dq_accum_seq<Config>(params, batch, span);
  int32_t *sems = kDet ? params.dq_semaphore + slot * sm80::semaphore_slot_stride(params) +
                             batch * params.semaphore_batch_stride
                       : nullptr;
  // The staging blocks are free for the consumers' next block b (of the tile, or of the next).
  const auto hand_back = [](int b) {
#pragma unroll
    for (int c = 0; c < Config::kConsumers; ++c)
      if (Config::dq_block_real(c, b))
        named_barrier_arrive<160>(Config::kDqEmptyBarrier + c);
  };
  WsQueryWalk<Config> tile(params.fwd, batch, kv_head, n_block, span.shape);
  if (tile.valid())
    hand_back(0);
  while (tile.valid()) {
    const int head = tile.head, m_block = tile.m_block;
    int32_t *sem = kDet ? sems + head * params.semaphore_head_stride + m_block : nullptr;
    const int rank = kDet ? sm80::dq_rank<Config>(
                                params, {batch, head, m_block, n_block, span.q_row0, span.shape})
                          : 0;
    if (kDet && lane == 0) {
      sm80::semaphore_poll</*kMessage=*/false>(sem, rank);
      fence_proxy_async_global(); // the additions after the acquire
    }
    __syncwarp();
    float *block = accum + head * params.dq_accum_head_stride +
                   int64_t(m_block) * Config::kBlockM * Config::kDim;
    // Each consumer stages its kDqBlocks sub-blocks one after the other (c kDqBlocks + b).
#pragma unroll
    for (int b = 0; b < Config::kDqBlocks; ++b) {
#pragma unroll
      for (int c = 0; c < Config::kConsumers; ++c) {
        if (!Config::dq_block_real(c, b))
          continue;
        named_barrier_sync<160>(Config::kDqFullBarrier + c);
        if (lane == 0) {
          float *sub = block + (c * Config::kDqBlocks + b) * Config::kSubBlockFloats;
          if (Config::kDqStoreFirst && rank == 0)
            bulk_store(sub, sm.dq(c), Config::kSmemDqBytes);
          else
            bulk_reduce_add_f32(sub, sm.dq(c), Config::kSmemDqBytes);
          bulk_commit_group();
        }
      }
      if (lane == 0)
        bulk_wait_group_read<0>();
      __syncwarp();
      if (b + 1 < Config::kDqBlocks)
        hand_back(b + 1);
    }
    tile.advance();
    if (tile.valid())
      hand_back(0);
    if (kDet && lane == 0) {
      bulk_wait_group<0>();
      fence_proxy_async_global(); // the completed additions before the release
      sm80::semaphore_release(sem);
    }
    __syncwarp();
  }
  if (!kDet && lane == 0)
    bulk_wait_group<0>();
}

/// One consumer warpgroup: its 64 keys' dK and dV over every visible query tile, and its dQ
/// sub-block of each tile added to dq_accum (Config::kDqWriter: handed to the dQ writer).
template <class Config>
__device__ __forceinline__ void bwd_ws_consume(const WsBwdSmem<Config> &sm,
                                               const fagen_bwd_params &params, int n_block,
                                               int kv_head, int batch, const SequenceSpan &span) {
  static_assert(!Config::kSeparateDo, "Q and dO share their slots in tiles below 256 columns");
  using Element = typename Config::Element;
  const AttentionShape shape = span.shape;
  using Mask = typename Config::Mask;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kDim = Config::kDim;
  const int consumer = threadIdx.x / 128 - 1, tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const int key0 = n_block * kBlockN + 64 * consumer;
  // The warpgroup's 64 rows of K and V (in every 64-column block), its dQ sub-block's rows
  // (a 64-column block of dS^T) and columns (a 64-column block of K).
  const u32 k_rows = sm.k() + consumer * 64 * 128, v_rows = sm.v() + consumer * 64 * 128;
  const int sub_row = consumer % Config::kRowBlocks, sub_col = consumer / Config::kRowBlocks;
  const u32 k_cols = sm.k() + sub_col * kBlockN * 128;
  float dk[kDim / 8][4], dv[kDim / 8][4];
  zero_fill(dk);
  zero_fill(dv);
  const fagen_fwd_params &f = params.fwd;
  FAGEN_WS_TRACE_AT(0, 0);
  mbarrier_wait(sm.kv_full(), 0);
  FAGEN_WS_TRACE_AT(0, 1);
  WsQueryWalk<Config> tile(f, batch, kv_head, n_block, shape);
  int it = 0;
  for (; tile.valid(); tile.advance(), ++it) {
    if (it == 1)
      FAGEN_WS_TRACE_AT(0, 3);
    // With Config::kMaskedTileCopy (which says why) the tile's work in two copies, with the
    // mask (copy 1) and without (copy 0), of which the tile runs one; else one copy that
    // tests the mask just before P^T (tested before the tile's GEMMs, its value stayed live
    // through them and changed the code).
    const bool tile_masked =
        Config::kMaskedTileCopy &&
        ((n_block + 1) * kBlockN > shape.seqlen_k ||
         Mask::template needs_mask<kBlockM, kBlockN>(tile.m_block, n_block, shape));
#pragma unroll
    for (int copy = 0; copy < (Config::kMaskedTileCopy ? 2 : 1); ++copy) {
      if (Config::kMaskedTileCopy && tile_masked != (copy == 1))
        continue;
      const int s = it % Config::kStages, round = it / Config::kStages;
      mbarrier_wait(sm.q_full(s), round & 1);
      if (it == 0)
        FAGEN_WS_TRACE_AT(0, 2);
      // S^T = K Q^T, dP^T = V dO^T; then P^T and dS^T.
      float st[kBlockM / 8][4], dpt[kBlockM / 8][4];
      wgmma_fence();
      gemm_qk_issue<Element, 64 * Config::kQkBlocks, kBlockN, kBlockM>(st, k_rows, sm.q(s));
      wgmma_commit();
      gemm_qk_issue<Element, 64 * Config::kVBlocks, kBlockN, kBlockM>(dpt, v_rows, sm.dout(s));
      wgmma_commit();
      // Dropout's keep flags of the tile, the forward's, drawn while S^T and dP^T are in flight.
      WsKeepBits<Config> keep;
      if constexpr (Config::Dropout::kEnabled)
        dropout_keep_bits_transposed<kBlockM / 8>(
            keep, typename Config::Dropout(f, batch, tile.head), key0 + 16 * warp,
            tile.m_block * kBlockM);
      const bool masked =
          Config::kMaskedTileCopy
              ? copy == 1
              : (n_block + 1) * kBlockN > shape.seqlen_k ||
                    Mask::template needs_mask<kBlockM, kBlockN>(tile.m_block, n_block, shape);
      bwd_ws_wait_p_ds<Config>(st, dpt, sm, params, keep, s, key0, tile.head, tile.m_block, batch,
                               masked, shape);
      // dV += P^T dO, dK += dS^T Q (with kDqBeforeDk dK after the dQ block, computed while the
      // block is staged and added).
      u32 pt[kBlockM / 16][4], dst[kBlockM / 16][4];
      convert_p<Element, kBlockM / 8>(pt, st);
      convert_p<Element, kBlockM / 8>(dst, dpt);
      wgmma_fence();
      gemm_pv_issue<Element, kDim, kBlockM>(dv, pt, sm.dout(s));
      if constexpr (!Config::kDqBeforeDk)
        gemm_pv_issue<Element, kDim, kBlockM>(dk, dst, sm.q(s));
      wgmma_commit();
      // dS^T to shared memory for dQ = dS K of every consumer warpgroup, then all of them past
      // the barrier; this warpgroup's dQ block.
      const u32 ds = sm.ds(it);
      bwd_ws_store_ds<Config>(sm, ds, dst, 64 * consumer, 0, warp, lane);
      fence_proxy_async_smem();
      named_barrier_sync<128 * Config::kConsumers>(1);
      float dq[8][4];
      wgmma_fence();
      gemm_dq_issue<Element, kBlockN>(dq, ds + sub_row * kBlockN * 128, k_cols);
      wgmma_commit();
      const int64_t dq_seq = ws_dq_accum_seq<Config>(params, batch, span);
      if constexpr (Config::kDqBeforeDk) {
        gemm_pv_issue<Element, kDim, kBlockM>(dk, dst, sm.q(s));
        wgmma_commit();
        wgmma_wait<1>(); // dV and the dQ block
        fence_operands(dv);
        fence_operands(dq);
        bwd_ws_add_dq<Config>(sm, params, dq, dq_seq, tile.head, tile.m_block, consumer, consumer,
                              tid);
        bwd_ws_release_slot<0>(sm, s, s, dv, dk);
      } else {
        bwd_ws_release_slot<1>(sm, s, s, dv, dk); // dV and dK, the dQ block in flight
        wgmma_wait<0>();
        fence_operands(dq);
        bwd_ws_add_dq<Config>(sm, params, dq, dq_seq, tile.head, tile.m_block, consumer, consumer,
                              tid);
      }
    }
  }
  FAGEN_WS_TRACE_AT(0, 4);
  FAGEN_WS_TRACE_VALUE(1, 0, it);
  bwd_ws_store_dkv<Config>(params, dk, dv, batch, kv_head, span, key0 + 16 * warp, 0);
  if (tid == 0)
    bulk_wait_group<0>();
  FAGEN_WS_TRACE_AT(0, 5);
  FAGEN_WS_TRACE_VALUE(1, 5, ws_globaltimer());
}

/// Tiles of 256 columns (head dims 192 and 256, Config::kSplitS): both consumer warpgroups hold
/// all kBlockN = 64 keys. Each computes S^T and dP^T of its half of the query tile's columns,
/// writes its halves of P^T and dS^T to shared memory, and, once both halves are there,
/// accumulates its half of the dK and dV columns (wgmma from shared memory) and the dQ
/// sub-blocks of those columns.
template <class Config>
__device__ __forceinline__ void bwd_ws_consume_split(const WsBwdSmem<Config> &sm,
                                                     const fagen_bwd_params &params, int n_block,
                                                     int kv_head, int batch,
                                                     const SequenceSpan &span) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kSCols = Config::kSCols;
  const AttentionShape shape = span.shape;
  // The warpgroup's index through a shuffle: a warp-uniform value, so that ptxas takes the
  // branches on it (the second consumer's padding blocks) for uniform ones and keeps their
  // wgmma asynchronous (a branch it must call divergent serializes every wgmma: C7518, C7520).
  const int consumer = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0) - 1;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  // The warpgroup's query columns of S^T and its 64-column blocks of dK, dV and dQ.
  const int key0 = n_block * kBlockN, col0 = consumer * kSCols;
  const int block0 = consumer * Config::kDqBlocks;
  float dk[Config::kKvCols / 8][4], dv[Config::kKvCols / 8][4];
  zero_fill(dk);
  zero_fill(dv);
  const fagen_fwd_params &f = params.fwd;
  const int64_t dq_seq = ws_dq_accum_seq<Config>(params, batch, span);
  FAGEN_WS_TRACE_AT(0, 0);
  mbarrier_wait(sm.kv_full(), 0);
  FAGEN_WS_TRACE_AT(0, 1);
  WsQueryWalk<Config> tile(f, batch, kv_head, n_block, shape);
  int it = 0;
  for (; tile.valid(); tile.advance(), ++it) {
    if (it == 1)
      FAGEN_WS_TRACE_AT(0, 3);
    const int s = it % Config::kStages, round = it / Config::kStages;
    const int sd = it % Config::kDoStages; // Config::kSeparateDo: dO's slot
    mbarrier_wait(sm.q_full(s), round & 1);
    if (it == 0)
      FAGEN_WS_TRACE_AT(0, 2);
    // S^T = K Q^T, dP^T = V dO^T of the warpgroup's query columns; then P^T and dS^T.
    float st[kSCols / 8][4], dpt[kSCols / 8][4];
    wgmma_fence();
    // Over the real columns' blocks (Config::kQkBlocks, kVBlocks): the padding ones hold zeros.
    gemm_qk_issue<Element, 64 * Config::kQkBlocks, kBlockN, kSCols, kBlockM>(st, sm.k(),
                                                                             sm.q(s) + col0 * 128);
    wgmma_commit();
    if constexpr (Config::kSeparateDo) { // dO's wait between the two groups
      mbarrier_wait(sm.do_full(sd), (it / Config::kDoStages) & 1);
      wgmma_fence();
    }
    gemm_qk_issue<Element, 64 * Config::kVBlocks, kBlockN, kSCols, kBlockM>(
        dpt, sm.v(), sm.dout(sd) + col0 * 128);
    wgmma_commit();
    // Dropout's keep flags of the warpgroup's columns, drawn while S^T and dP^T are in flight.
    WsKeepBits<Config> keep;
    if constexpr (Config::Dropout::kEnabled)
      dropout_keep_bits_transposed<kSCols / 8>(keep, typename Config::Dropout(f, batch, tile.head),
                                               key0 + 16 * warp, tile.m_block * kBlockM + col0);
    const bool masked = (n_block + 1) * kBlockN > shape.seqlen_k ||
                        Mask::template needs_mask<kBlockM, kBlockN>(tile.m_block, n_block, shape);
    // With Config::kMaskedTileCopy P^T and dS^T in two copies, with the mask and without.
    if (Config::kMaskedTileCopy && !masked)
      bwd_ws_wait_p_ds<Config>(st, dpt, sm, params, keep, s, key0, tile.head, tile.m_block, batch,
                               false, shape, col0);
    else
      bwd_ws_wait_p_ds<Config>(st, dpt, sm, params, keep, s, key0, tile.head, tile.m_block, batch,
                               Config::kMaskedTileCopy || masked, shape, col0);
    // Both warpgroups' halves of P^T and dS^T to shared memory, then all of them past the
    // barrier.
    u32 pt[kSCols / 16][4], dst[kSCols / 16][4];
    convert_p<Element, kSCols / 8>(pt, st);
    convert_p<Element, kSCols / 8>(dst, dpt);
    const u32 pts = sm.pt(it), ds = sm.ds(it);
    bwd_ws_store_ds<Config>(sm, pts, pt, 0, col0, warp, lane);
    bwd_ws_store_ds<Config>(sm, ds, dst, 0, col0, warp, lane);
    fence_proxy_async_smem();
    named_barrier_sync<128 * Config::kConsumers>(1);
    // dV += P^T dO, dK += dS^T Q (the warpgroup's columns); then its dQ blocks = dS K: with
    // kIssueDqAtOnce both issued with dV and dK, the second computed while the first is staged
    // and added; else each issued once the previous one is added.
    wgmma_fence();
    if (!Config::kPaddingBlocks || consumer == 0) {
      gemm_kv_split_issue<Element, kBlockN, kBlockM>(dv, pts, sm.dout(sd) + block0 * kBlockM * 128);
      gemm_kv_split_issue<Element, kBlockN, kBlockM>(dk, ds, sm.q(s) + block0 * kBlockM * 128);
    } else { // the second consumer's real blocks only (hd 192, 192/128)
      gemm_kv_split_issue<Element, kBlockN, kBlockM, Config::kVBlocks - 2>(
          dv, pts, sm.dout(sd) + block0 * kBlockM * 128);
      gemm_kv_split_issue<Element, kBlockN, kBlockM, Config::kQkBlocks - 2>(
          dk, ds, sm.q(s) + block0 * kBlockM * 128);
    }
    wgmma_commit();
    if constexpr (Config::kIssueDqAtOnce) {
      static_assert(Config::kDqBlocks == 2, "two dQ blocks a warpgroup");
      if (Config::kDqPadBlock && !Config::dq_block_real(consumer, 1)) { // its one real block
        float dq0[8][4];
        wgmma_fence();
        gemm_dq_issue<Element, kBlockN>(dq0, ds, sm.k() + block0 * kBlockN * 128);
        wgmma_commit();
        bwd_ws_release_slot<1>(sm, s, sd, dv, dk);
        wgmma_wait<0>();
        fence_operands(dq0);
        bwd_ws_add_dq<Config>(sm, params, dq0, dq_seq, tile.head, tile.m_block, block0, consumer,
                              tid);
        continue;
      }
      float dq0[8][4], dq1[8][4];
      wgmma_fence();
      gemm_dq_issue<Element, kBlockN>(dq0, ds, sm.k() + block0 * kBlockN * 128);
      wgmma_commit();
      gemm_dq_issue<Element, kBlockN>(dq1, ds, sm.k() + (block0 + 1) * kBlockN * 128);
      wgmma_commit();
      bwd_ws_release_slot<2>(sm, s, sd, dv, dk); // both dQ blocks in flight
      wgmma_wait<1>();
      fence_operands(dq0);
      bwd_ws_add_dq<Config>(sm, params, dq0, dq_seq, tile.head, tile.m_block, block0, consumer,
                            tid);
      wgmma_wait<0>();
      fence_operands(dq1);
      bwd_ws_add_dq<Config>(sm, params, dq1, dq_seq, tile.head, tile.m_block, block0 + 1,
                            consumer, tid);
      continue;
    }
#pragma unroll
    for (int b = 0; b < Config::kDqBlocks; ++b) {
      if (!Config::dq_block_real(consumer, b)) // past the head dim (Config::kDqPadBlock)
        break;
      float dq[8][4];
      wgmma_fence();
      gemm_dq_issue<Element, kBlockN>(dq, ds, sm.k() + (block0 + b) * kBlockN * 128);
      wgmma_commit();
      if (b == 0)
        bwd_ws_release_slot<1>(sm, s, sd, dv, dk); // the first dQ block in flight
      wgmma_wait<0>();
      fence_operands(dq);
      bwd_ws_add_dq<Config>(sm, params, dq, dq_seq, tile.head, tile.m_block, block0 + b,
                            consumer, tid);
    }
  }
  FAGEN_WS_TRACE_AT(0, 4);
  FAGEN_WS_TRACE_VALUE(1, 0, it);
  bwd_ws_store_dkv<Config>(params, dk, dv, batch, kv_head, span, key0 + 16 * warp,
                           consumer * Config::kKvCols);
  if (tid == 0)
    bulk_wait_group<0>();
  FAGEN_WS_TRACE_AT(0, 5);
  FAGEN_WS_TRACE_VALUE(1, 5, ws_globaltimer());
}

/// Zeroes the tiles' padding blocks (Config::kPaddingBlocks: the 64-column blocks past the real
/// columns, which TMA never loads) in every slot of K, V, Q and dO, by all the CTA's threads,
/// before the barrier that starts the pipeline. No GEMM reads them (S^T and dP^T run over the
/// real blocks; the second consumer's dK, dV and dQ skip them): a guard, so that a GEMM over a
/// whole tile would read zeros rather than what the previous kernel left in shared memory.
template <class Config>
__device__ __forceinline__ void bwd_ws_zero_padding(const WsBwdSmem<Config> &sm) {
  constexpr int kBlocks = Config::kDim / 64;
  const auto zero = [&](u32 tile, int rows, int first_block) {
    const int words = (kBlocks - first_block) * rows * 128 / 16;
    uint4 *at = sm.template at<uint4>(tile + first_block * rows * 128);
    for (int i = threadIdx.x; i < words; i += Config::kThreads)
      at[i] = make_uint4(0u, 0u, 0u, 0u);
  };
  zero(sm.k(), Config::kBlockN, Config::kQkBlocks);
  zero(sm.v(), Config::kBlockN, Config::kVBlocks);
  for (int s = 0; s < Config::kStages; ++s)
    zero(sm.q(s), Config::kBlockM, Config::kQkBlocks);
  for (int s = 0; s < Config::kDoStages; ++s)
    zero(sm.dout(s), Config::kBlockM, Config::kVBlocks);
  fence_proxy_async_smem(); // the zeros before the wgmma that read them
}

/// Launch: grid fagen_bwd_main_grid(ceil(seqlen_k / kBlockN), heads_kv, batch, g) with g =
/// params.tile_group_log2 where Config::kGroupedGrid, else 0; block kThreads, kSmemBytes of
/// dynamic shared memory, after bwd_ws_preprocess on the same stream; `maps` as
/// abi/tma_params.h describes (fagen_bwd_tma_maps), from the same tensors.
template <class Config>
__device__ __forceinline__ void bwd_ws_kernel(const fagen_bwd_params &params,
                                              const fagen_bwd_tma_maps &maps) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const WsBwdSmem<Config> sm(smem);
  // Deterministic kernels dispatch the key tiles last first, the order in which they add to
  // dQ (WsBwdConfig::kDeterministic): a CTA waits only for CTAs dispatched before it. Grouped
  // grids (kGroupedGrid) dispatch key tile n of each of 2^g kv heads before key tile n + 1.
  int n_block = Config::kDeterministic ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  if constexpr (Config::kGroupedGrid) {
    fagen_bwd_grid_cta(blockIdx.x, blockIdx.y, params.tile_group_log2, &n_block, &kv_head);
    if (kv_head >= params.fwd.heads_kv)
      return; // the last group's heads past heads_kv
  }
  FAGEN_WS_TRACE_VALUE(1, 6, ws_globaltimer());
  FAGEN_WS_TRACE_VALUE(1, 7, ws_smid());
  const SequenceSpan span = sequence_span<Config::kVarlen>(params.fwd, batch);
  if (Config::kVarlen && n_block * Config::kBlockN >= span.shape.seqlen_k)
    return; // past this sequence's keys
  if constexpr (Config::kPaddingBlocks)
    bwd_ws_zero_padding<Config>(sm);
  if (threadIdx.x == 0) {
    prefetch_tensor_map(maps.q);
    prefetch_tensor_map(maps.k);
    prefetch_tensor_map(maps.v);
    prefetch_tensor_map(maps.dout);
    mbarrier_init(sm.kv_full(), 1);
    for (int s = 0; s < Config::kStages; ++s) {
      mbarrier_init(sm.q_full(s), 32);                       // the producer warp's lanes
      mbarrier_init(sm.q_empty(s), 128 * Config::kConsumers); // every consumer thread
    }
    if constexpr (Config::kSeparateDo)
      for (int s = 0; s < Config::kDoStages; ++s) {
        mbarrier_init(sm.do_full(s), 1);                         // the producer's lane 0
        mbarrier_init(sm.do_empty(s), 128 * Config::kConsumers); // every consumer thread
      }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    setmaxnreg_dec<Config::kProducerRegs>();
    if (threadIdx.x < 32)
      bwd_ws_produce<Config>(sm, params, maps, n_block, kv_head, batch, span);
    else if (Config::kDqWriter && threadIdx.x < 64)
      bwd_ws_write_dq<Config>(sm, params, n_block, kv_head, batch, span);
    return;
  }
  setmaxnreg_inc<Config::kConsumerRegs>();
  if constexpr (Config::kSplitS)
    bwd_ws_consume_split<Config>(sm, params, n_block, kv_head, batch, span);
  else
    bwd_ws_consume<Config>(sm, params, n_block, kv_head, batch, span);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_KERNEL_CUH
