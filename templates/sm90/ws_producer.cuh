// fagen sm90: the warp-specialized forward's producer: one thread that loads every work tile's
// Q, K and V with TMA into the ring of sm90/ws_pipeline.cuh.
#ifndef FAGEN_TEMPLATES_SM90_WS_PRODUCER_CUH
#define FAGEN_TEMPLATES_SM90_WS_PRODUCER_CUH

#include "abi/tma_params.h"
#include "sm90/tma.cuh"
#include "sm90/ws_block_info.cuh"
#include "sm90/ws_paged_kv.cuh"
#include "sm90/ws_pipeline.cuh"
#include "sm90/ws_tile_scheduler.cuh"
#include "sm90/ws_trace.cuh"

namespace fagen {
namespace sm90 {

/// Producer: per work tile K_0, then Q, then K_{i+1} before V_i, so that a step's Q K^T never
/// queues behind the previous step's V. One thread issues every TMA load; a paged kernel's
/// whole warpgroup walks the tiles, each thread its share of every K and V tile's copies
/// (ws_gather_paged_tile), thread 0 alone Q's.
template <class Config>
__device__ __forceinline__ void ws_produce(const WsSmem<Config> &sm, const fagen_fwd_tma_maps &maps,
                                           const fagen_fwd_params &params) {
  using KeyTiles = WsKeyTiles<Config>;
  const WsTileScheduler<Config> sched(params);
  const bool q_loader = !Config::kPaged || threadIdx.x == 0;
  int kv = 0; // K/V tiles loaded so far
  // A (kBlockN, kDim) tile as kDim / 64 boxes; varlen: rows of the packed tensor, batch 0.
  auto load_kv = [&](const fagen_tensor_map &map, u32 slot, u32 full, int64_t row0, int n_block,
                     int kv_head, int batch, auto dim, u32 bytes) {
    mbarrier_arrive_expect_tx(full, bytes);
#pragma unroll
    for (int b = 0; b < decltype(dim)::value / 64; ++b)
      tma_load_4d(slot + b * Config::kBlockN * 128, map, full, 64 * b,
                  int(row0) + n_block * Config::kBlockN, kv_head, Config::kVarlen ? 0 : batch);
  };
  // K/V tile j (the CTA's count) of key tile n_block (V's where is_v), by TMA, as rows or a page
  // run at a time, or gathered from the pages.
  auto load_kv_tile = [&](auto is_v, int j, int n_block, int kv_head, int batch,
                          const SequenceSpan &span) {
    constexpr bool kV = decltype(is_v)::value;
    constexpr int kHeadDim = kV ? Config::kHeadDimV : Config::kHeadDimQK;
    constexpr int kDim = kV ? Config::kDimV : Config::kDimQK;
    const u32 slot = kV ? sm.v_slot(j) : sm.k_slot(j), full = kV ? sm.v_full(j) : sm.k_full(j);
    if constexpr (Config::kPaged && Config::kTmaPages)
      ws_load_paged_tile<Config, kHeadDim, kDim, kV>(
          slot, full, kV ? maps.v : maps.k, kV ? params.v : params.k,
          kV ? params.v_batch_stride : params.k_batch_stride,
          kV ? params.v_head_stride : params.k_head_stride,
          kV ? params.v_row_stride : params.k_row_stride, ws_paged_params(params), batch, kv_head,
          n_block, span.shape.seqlen_k);
    else if constexpr (Config::kPaged)
      ws_gather_paged_tile<Config, kHeadDim, kDim>(
          slot, full, kV ? params.v : params.k, kV ? params.v_batch_stride : params.k_batch_stride,
          kV ? params.v_head_stride : params.k_head_stride,
          kV ? params.v_row_stride : params.k_row_stride, ws_paged_params(params), batch, kv_head,
          n_block, span.shape.seqlen_k);
    else
      load_kv(kV ? maps.v : maps.k, slot, full, span.k_row0, n_block, kv_head, batch,
              std::integral_constant<int, kDim>(),
              kV ? Config::kSmemVTileBytes : Config::kSmemKTileBytes);
  };
  using IsK = std::false_type;
  using IsV = std::true_type;
  // K_0, then Q, then K_{i+1} before V_i, for work tile `work` of the CTA.
  auto load_tile = [&](int m_block, int head, int batch, const SequenceSpan &span,
                       const KeyTiles &tiles, int work) {
    const int kv_head = head / params.group_size;
    const int q_row = int(span.q_row0) + m_block * Config::kBlockM;
    FAGEN_WS_TRACE_AT(work, 0);
    // Q is read once, so it comes from DRAM: fetched into L2 now, while the consumers still
    // finish the previous tile (its last steps and epilogue), it lands from L2 once its slot is
    // free. K_0's slot frees before Q's (K_0 takes the slot of the K tile kStages before it, whose
    // S was the previous tile's kStages-th last or earlier; Q's slot frees after the previous
    // tile's last S, or after its epilogue with kStagedEpilogue), so K_0 goes first and only Q is
    // left to land when the consumers start the tile.
    if (q_loader) {
#pragma unroll
      for (int b = 0; b < Config::kDimQK / 64; ++b)
        tma_prefetch_l2_4d(maps.q, 64 * b, q_row, head, Config::kVarlen ? 0 : batch);
    }
    mbarrier_wait(sm.k_empty(kv), sm.empty_parity(sm.round(kv)));
    load_kv_tile(IsK(), kv, tiles.n_first, kv_head, batch, span);
    if (q_loader) {
      mbarrier_wait(sm.q_empty(), sm.empty_parity(work));
      FAGEN_WS_TRACE_AT(work, 1);
      mbarrier_arrive_expect_tx(sm.q_full(), Config::kSmemQBytes);
#pragma unroll
      for (int b = 0; b < Config::kDimQK / 64; ++b)
        tma_load_4d(sm.q + b * Config::kBlockM * 128, maps.q, sm.q_full(), 64 * b, q_row, head,
                    Config::kVarlen ? 0 : batch);
    }
    for (int i = 0, n = tiles.n_first; i < tiles.count; ++i) {
      const int j = kv + i;
      const int n_next =
          KeyTiles::template after<false>(params, head, batch, m_block, n, tiles.n_end);
      if (i + 1 < tiles.count) {
        mbarrier_wait(sm.k_empty(j + 1), sm.empty_parity(sm.round(j + 1)));
        load_kv_tile(IsK(), j + 1, n_next, kv_head, batch, span);
      }
      mbarrier_wait(sm.v_empty(j), sm.empty_parity(sm.round(j)));
      load_kv_tile(IsV(), j, n, kv_head, batch, span);
      n = n_next;
    }
    FAGEN_WS_TRACE_AT(work, 2);
    kv += tiles.count;
  };
  if constexpr (Config::kTileCounter) {
    const WsTileRing<Config> ring(sm.tile_ring());
    int t = int(blockIdx.x), work = 0, r = 0;
    for (; t < params.work_tiles; ++r) { // sched.total, from the runtime
      int m_block, head, batch;
      sched.tile(t, m_block, head, batch);
      ring.publish(r, {m_block, head, batch, kv, work});
      const SequenceSpan span = ws_span<Config>(params, batch);
      if (ws_has_rows<Config>(m_block, span.shape)) {
        const KeyTiles tiles =
            KeyTiles::template make<false>(params, m_block, head, batch, span.shape);
        if (tiles.count > 0) { // else the consumers write its empty rows
          load_tile(m_block, head, batch, span, tiles, work++);
          // Slots and parities read kv modulo 2 kStages: kept there, a CTA may take any
          // number of tiles without overflowing it.
          kv %= 2 * Config::kStages;
        }
      }
      t = params.tile_counter != nullptr ? int(gridDim.x) + atomicAdd(params.tile_counter, 1)
                                         : sched.nth(r + 1);
    }
    ring.publish(r, {-1, 0, 0, 0, 0});
  } else {
    for (int r = 0, work = 0, t; (t = sched.nth(r)) < sched.total; ++r) {
      int m_block, head, batch;
      sched.tile(t, m_block, head, batch);
      const SequenceSpan span = ws_span<Config>(params, batch);
      if constexpr (Config::kPaged) // clamped by ws_span
        if (const int used = ws_paged_params(params).seqused_k[batch];
            used != span.shape.seqlen_k)
          sm80::report_kv_status(ws_paged_params(params).kv_status, FAGEN_KV_STATUS_SEQUSED_K,
                                 batch, 0, used);
      if (!ws_has_rows<Config>(m_block, span.shape))
        continue;
      const KeyTiles tiles =
          KeyTiles::template make<false>(params, m_block, head, batch, span.shape);
      if (tiles.count == 0) // the consumers write its empty rows
        continue;
      load_tile(m_block, head, batch, span, tiles, work++);
    }
  }
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_PRODUCER_CUH
