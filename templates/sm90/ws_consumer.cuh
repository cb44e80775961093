// fagen sm90: a consumer warpgroup of the warp-specialized forward: its 64 rows of a work tile,
// S = Q K^T and O += P V with wgmma, the online softmax between them, and the epilogue.
#ifndef FAGEN_TEMPLATES_SM90_WS_CONSUMER_CUH
#define FAGEN_TEMPLATES_SM90_WS_CONSUMER_CUH

#include "common/softmax.cuh"
#include "abi/tma_params.h"
#include "sm80/tile_ops.cuh"
#include "sm90/softmax.cuh"
#include "sm90/tile_ops.cuh"
#include "sm90/tma.cuh"
#include "sm90/ws_block_info.cuh"
#include "sm90/ws_epilogue.cuh"
#include "sm90/ws_pipeline.cuh"
#include "sm90/ws_trace.cuh"

namespace fagen {
namespace sm90 {

/// One consumer warpgroup's 64 rows of a work tile: O and LSE (fwd_kernel.cuh's step order).
/// kv: the CTA's K/V tiles before this work tile; work: its ordinal (the Q buffer's round).
template <class Config>
__device__ __forceinline__ void ws_consume_tile(const WsSmem<Config> &sm,
                                                const fagen_fwd_params &params,
                                                const fagen_fwd_tma_maps &maps, int m_block,
                                                int head, int batch, const AttentionShape &shape,
                                                const WsKeyTiles<Config> &tiles, int kv,
                                                int work) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  using ScoreMod = typename Config::ScoreMod;
  using Dropout = typename Config::Dropout;
  using KeyTiles = WsKeyTiles<Config>;
  constexpr int kDimQK = Config::kDimQK, kDimV = Config::kDimV, kBlockM = Config::kBlockM;
  constexpr int kBlockN = Config::kBlockN, kConsumers = Config::kConsumers;
  constexpr int kColTiles = kBlockN / 8;
  const int n_tiles = tiles.count;
  const ScoreMod score_mod(params, batch, head, shape);
  // Score mods give natural-log logits: the softmax's exp2 then needs log2(e), not the scale.
  const float scale_log2 = ScoreMod::kIdentity ? params.scale_log2 : 1.4426950408889634f;
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int first_row = 64 * consumer + 16 * warp; // the warp's first row in the tile
  const int rows_left = shape.seqlen_q - m_block * kBlockM - first_row;
  // Its 64 rows in each column block; read from lane 0 so that ptxas sees a warp-uniform value
  // and keeps the wgmma descriptors built from it in uniform registers (from threadIdx, it
  // moved each one from a vector register with R2UR before every wgmma).
  const u32 q_warpgroup = __shfl_sync(0xffffffffu, sm.q + consumer * 64 * 128, 0);
  const WsConsumerRing<Config> ring{sm, kv, consumer, lane};

  // (A vote: ptxas then sees a warp-uniform branch and keeps the slot addresses after it in
  // uniform registers; on the thread index alone it moved them with R2UR before each wgmma.)
  if (__all_sync(0xffffffffu, 64 * consumer >= shape.seqlen_q - m_block * kBlockM)) {
    // No row of this warpgroup is in the sequence (a last query tile whose rows end at or
    // before this warpgroup's first): it only hands Q back at once, then K and V in the order
    // of a live warpgroup's steps (K_i with V_{i-1}), and passes its turns on (the tile takes
    // about the other warpgroups' share of its time). It writes no FAGEN_WS_TRACE events.
    mbarrier_wait(sm.q_full(), sm.full_parity(work));
    ring.release(sm.q_empty());
    for (int i = 0; i <= n_tiles; ++i)
      ring.pass_step(i < n_tiles ? i : -1, i - 1);
    return;
  }

  // The key tiles this warpgroup's rows see, of the tile's n_tiles: where the mask ends them
  // earlier (causal: the tile's last key tiles lie wholly past the diagonal for its first
  // warpgroups), the warpgroup stops after n_live steps and only hands the rest back (dead
  // steps: S would be all -inf there, P zero, O and the row sums unchanged). At least one, so
  // that rows which see no key at all take the mask's path as before. Dense tiles only (a
  // sparse tile's list is not consecutive). The same for every thread of the warpgroup by
  // construction (wgmma needs that); read from lane 0 so that ptxas sees a uniform loop bound.
  // (A mask's n_block_end takes any block height: every mask here derives it from the rows.)
  int n_live = n_tiles;
  if constexpr (!std::is_same<Mask, NoMask>::value && !Config::Sparsity::kSparse) {
    const int end = Mask::template n_block_end<64, kBlockN>(m_block * kConsumers + consumer, shape);
    n_live = __shfl_sync(0xffffffffu, max(1, min(n_tiles, end - tiles.n_first)), 0);
  }

  float acc_o[kDimV / 8][4]; // (64, kDimV) per warpgroup
  zero_fill(acc_o);
  u32 p[kBlockN / 16][4]; // P_{i-1} (64, kBlockN) as A fragments
  OnlineSoftmax<1> softmax;
  softmax.init();
  // Dropout's keep flags of the key tile whose S is in flight: drawn while its wgmmas run.
  u32 keep_bits[ceil_div(kColTiles, 8)];
  auto draw_keep_bits = [&](int n_block) {
    if constexpr (Dropout::kEnabled)
      dropout_keep_bits<1, kColTiles>(keep_bits, Dropout(params, batch, head),
                                      m_block * kBlockM + first_row, n_block * kBlockN);
  };
  auto mask_s = [&](float(&acc_s)[kColTiles][4], int n_block) {
    float(&s3)[1][kColTiles][4] = reinterpret_cast<float(&)[1][kColTiles][4]>(acc_s);
    apply_logit_hooks<Mask, kBlockM, kBlockN>(s3, score_mod, m_block, first_row, n_block, shape);
  };
  auto mask_and_exp = [&](float(&rescale)[2], float(&acc_s)[kColTiles][4], int n_block) {
    mask_s(acc_s, n_block);
    return softmax_exp<Config::kExp2EmuColumns, Config::kExp2PolyDegree, Config::kRescaleTau>(
        rescale, softmax, acc_s, scale_log2);
  };
  // P in the input type; dropout zeroes the dropped elements (the row sums keep them: the
  // softmax is of the logits, dropout acts on its probabilities).
  auto make_p = [&](const float(&acc_s)[kColTiles][4]) {
    convert_p<Element>(p, acc_s);
    if constexpr (Dropout::kEnabled)
      apply_dropout_packed(reinterpret_cast<u32(&)[1][kBlockN / 16][4]>(p), keep_bits);
  };
  // S_i landed: its K slot is free, and after the warpgroup's last one so is Q (unless the
  // epilogue stages O in it).
  auto s_done = [&](float(&acc_s)[kColTiles][4], int i) {
    fence_operands(acc_s);
    ring.release(sm.k_empty(kv + i));
    if (!Config::kStagedEpilogue && i == n_live - 1)
      ring.release(sm.q_empty());
  };
  // Steps after the first (kKeptMax): the exponentials from the kept running max
  // (softmax_exp_kept_max). A warp where a row's max moves instead computes its rows of S_i
  // again from Q and K_i, still in shared memory (their slots are released after this), with
  // mma.sync (the warps of a warpgroup decide apart), and takes softmax_exp as every step did
  // before. The same results but for the last bits of such a recomputed S.
  auto step_exp = [&](float(&rescale)[2], float(&acc_s)[kColTiles][4], int n_block, int i) {
    bool grew = false, done = false;
    fence_operands(acc_s);
    const float kNegInf = -__int_as_float(0x7f800000);
    if (__all_sync(0xffffffffu, softmax.row_max[0] != kNegInf && softmax.row_max[1] != kNegInf)) {
      mask_s(acc_s, n_block);
      done = softmax_exp_kept_max<Config::kExp2EmuColumns, Config::kExp2PolyDegree,
                                  Config::kRescaleTau>(softmax, acc_s, scale_log2);
      if (!done)
        gemm_qk_warp<Element, kDimQK, kBlockM, kBlockN>(acc_s, q_warpgroup, sm.k_slot(kv + i));
    }
    if (done)
      rescale[0] = rescale[1] = 1.f;
    else
      grew = mask_and_exp(rescale, acc_s, n_block);
    s_done(acc_s, i);
    return grew;
  };
  auto pv_done = [&](int i) {
    fence_operands(acc_o);
    fence_operands(p);
    ring.release(sm.v_empty(kv + i - 1));
  };
  // Step i (0 <= i <= n_live): S_i = Q K_i^T (i < n_live) and O += P_{i-1} V_{i-1} (i > 0),
  // K_i being key tile n_block. The first and last steps are peeled: with commits under a
  // condition, ptxas serializes every wgmma (warning C7514).
  int n_block = tiles.n_first;
  FAGEN_WS_TRACE_AT(work, 0);
  mbarrier_wait(sm.q_full(), sm.full_parity(work));
  FAGEN_WS_TRACE_AT(work, 1);
  {
    float acc_s[kColTiles][4]; // (64, kBlockN) per warpgroup
    ring.wait_k(0);
    ring.my_turn();
    wgmma_fence();
    gemm_qk_issue<Element, kDimQK, kBlockM, kBlockN>(acc_s, q_warpgroup, sm.k_slot(kv));
    wgmma_commit();
    ring.next_turn();
    draw_keep_bits(n_block);
    wgmma_wait<0>();
    FAGEN_WS_TRACE_AT(work, 2);
    s_done(acc_s, 0);
    float rescale[2];
    mask_and_exp(rescale, acc_s, n_block);
    make_p(acc_s);
  }
  FAGEN_WS_TRACE_AT(work, 3);
  for (int i = 1; i < n_live; ++i) {
    float acc_s[kColTiles][4];
    ring.wait_k(i);
    ring.wait_v(i - 1);
    ring.my_turn();
    wgmma_fence();
    gemm_qk_issue<Element, kDimQK, kBlockM, kBlockN>(acc_s, q_warpgroup, sm.k_slot(kv + i));
    wgmma_commit();
    gemm_pv_issue<Element, kDimV, kBlockN>(acc_o, p, sm.v_slot(kv + i - 1));
    wgmma_commit();
    ring.next_turn();
    n_block = KeyTiles::template after<true>(params, head, batch, m_block, n_block, tiles.n_end);
    draw_keep_bits(n_block);
    // S_i is the older group: its softmax runs while P_{i-1} V_{i-1} is still in flight.
    wgmma_wait<1>();
    float rescale[2];
    bool grew;
    if constexpr (Config::kKeptMax) {
      grew = step_exp(rescale, acc_s, n_block, i);
    } else {
      s_done(acc_s, i);
      grew = mask_and_exp(rescale, acc_s, n_block);
    }
    end_block_after(softmax.row_sum); // keeps the wait below the softmax
    wgmma_wait<0>();
    pv_done(i);
    if (grew)
      rescale_o(acc_o, rescale);
    make_p(acc_s);
  }
  FAGEN_WS_TRACE_AT(work, 4);
  ring.wait_v(n_live - 1);
  ring.my_turn();
  wgmma_fence();
  gemm_pv_issue<Element, kDimV, kBlockN>(acc_o, p, sm.v_slot(kv + n_live - 1));
  wgmma_commit();
  ring.next_turn();
  wgmma_wait<0>();
  pv_done(n_live);
  // Dead steps: K_i and V_i handed back, a turn passed for each. Every warpgroup takes
  // n_tiles + 1 turns a tile, as the ping-pong needs: 1 + (n_live - 1) + 1 live,
  // n_tiles - n_live dead.
  for (int i = n_live; i < n_tiles; ++i)
    ring.pass_step(i, i);
  FAGEN_WS_TRACE_AT(work, 5);

  float row_lse[2];
  float(&o3)[1][kDimV / 8][4] = reinterpret_cast<float(&)[1][kDimV / 8][4]>(acc_o);
  softmax.finalize(o3, scale_log2, row_lse, Dropout::kEnabled ? params.dropout_rescale : 1.f);
  ws_epilogue<Config>(sm, params, maps, acc_o, row_lse, m_block, head, batch, consumer, first_row,
                      rows_left, lane);
  FAGEN_WS_TRACE_AT(work, 6);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_CONSUMER_CUH
