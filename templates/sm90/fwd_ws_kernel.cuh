// fagen sm90: warp-specialized attention forward (sm_90a), FlashAttention-3's structure: a
// producer warpgroup loads Q, K and V with TMA into a ring of slots handed over by mbarriers;
// kBlockM / 64 consumer warpgroups each own 64 query rows and run the wgmma / online-softmax
// loop of fwd_kernel.cuh (the next S = Q K^T and the current O += P V in flight while the
// softmax of S runs), taking turns at the tensor cores (ping-pong). Persistent: each CTA walks
// the work tiles of WsTileScheduler, and the producer loads the next tile while the consumers
// finish the current one. Variants (common/variants.cuh) as the sm80 template: masks and score
// mods on S, dropout on P, skipped sparse blocks (no loads, no MMA), varlen sequences of packed
// tensors (TMA rows from cu_seqlens).
//
// This file only wires the pieces together (FlashAttention-3's hopper/ split):
//   sm90/ws_tile_scheduler.cuh  which work tiles a CTA takes (static deal, tile counter + ring)
//   sm90/ws_block_info.cuh      a work tile's rows, key tiles and output rows
//   sm90/ws_pipeline.cuh        shared memory: the Q tile, the K/V slot ring and its mbarriers
//   sm90/ws_producer.cuh        the producer's TMA loads
//   sm90/ws_paged_kv.cuh        a paged KV cache's gather (chunked prefill)
//   sm90/ws_consumer.cuh        a consumer warpgroup's main loop (wgmma + online softmax)
//   sm90/ws_epilogue.cuh        O and LSE out (direct, staged through Q, or a TMA store)
//   sm90/ws_trace.cuh           the dev trace (-DFAGEN_WS_TRACE)
// with the softmax of sm90/softmax.cuh and common/softmax.cuh, the variant hooks of
// common/variants.cuh (applied by common/softmax.cuh's apply_logit_hooks), common/dropout.cuh.
#ifndef FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH
#define FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH

#include "abi/fwd_params.h"
#include "abi/tma_params.h"
#include "sm90/fwd_config.cuh"
#include "sm90/ws_block_info.cuh"
#include "sm90/ws_consumer.cuh"
#include "sm90/ws_pipeline.cuh"
#include "sm90/ws_producer.cuh"
#include "sm90/ws_tile_scheduler.cuh"
#include "sm90/ws_trace.cuh"

namespace fagen {
namespace sm90 {

/// Launch: a 1-D grid of at most the work tiles, ceil(seqlen_q / kBlockM) * heads_q * batch
/// (varlen: seqlen_q is the longest sequence; tiles past a shorter one's end do nothing). Any
/// grid size is correct: WsTileScheduler deals the tiles out in rounds of gridDim.x; the
/// runtime launches one CTA per tile, or one per SM for a persistent plan. Block kThreads,
/// kSmemBytes of dynamic shared memory; `maps` as abi/tma_params.h describes, from the same
/// tensors.
template <class Config>
__device__ __forceinline__ void fwd_ws_kernel(const fagen_fwd_params &params,
                                              const fagen_fwd_tma_maps &maps) {
  constexpr int kConsumers = Config::kConsumers;
  extern __shared__ __align__(1024) unsigned char smem[];
  const WsSmem<Config> sm(smem_addr(smem));
  FAGEN_WS_TRACE_AT(0, 7);
  FAGEN_WS_TRACE_VALUE(1, 7, ws_smid());
  if (threadIdx.x == 0) {
    prefetch_tensor_map(maps.q);
    if constexpr (!Config::kPaged || Config::kTmaPages) {
      prefetch_tensor_map(maps.k);
      prefetch_tensor_map(maps.v);
    }
    if constexpr (Config::kTmaStoreO)
      prefetch_tensor_map(maps.o);
    // Full slots take the producer's arrival (and TMA's bytes), empty ones an arrival from
    // every consumer warp whose wgmmas read the slot. (Spelled here: as a WsSmem member the
    // init moved the PTX's register numbering, and the SASS, of some kernels; nvcc 13.0.)
    mbarrier_init(sm.q_full(), 1);
    mbarrier_init(sm.q_empty(), 4 * kConsumers); // one arrival per consumer warp
    for (int s = 0; s < Config::kStages; ++s) {
      mbarrier_init(sm.k_full(s), Config::kKvFullArrivals);
      mbarrier_init(sm.v_full(s), Config::kKvFullArrivals);
      mbarrier_init(sm.k_empty(s), 4 * kConsumers);
      mbarrier_init(sm.v_empty(s), 4 * kConsumers);
    }
    if constexpr (Config::kTileCounter)
      WsTileRing<Config>(sm.tile_ring()).init();
    fence_mbarrier_init();
  }
  __syncthreads();

  // kStaggerSlack: a CTA with a tile to spare starts half a tile late (the tile's key steps at
  // the tensor cores' rate), all of it held at a barrier while thread 0 waits.
  if constexpr (Config::kStaggerSlack) {
    if (WsTileScheduler<Config>(params).has_spare_tile(params)) {
      if (threadIdx.x == 0) {
        constexpr long long kStepCycles = (long long)Config::kBlockM * Config::kBlockN *
                                          (Config::kDimQK + Config::kDimV) / kWgmmaMacsPerCycle;
        wait_cycles(ceil_div(params.seqlen_k, Config::kBlockN) * kStepCycles / 2);
      }
      __syncthreads();
    }
  }
  // The producer warpgroup: one thread issues every load (paged: all of it gathers K and V).
  if (threadIdx.x < 128) {
    setmaxnreg_dec<Config::kProducerRegs>();
    if (Config::kPaged || threadIdx.x == 0)
      ws_produce<Config>(sm, maps, params);
    return;
  }
  // The consumer warpgroups: 64 rows of each work tile apiece.
  setmaxnreg_inc<Config::kConsumerRegs>();
  const int consumer = threadIdx.x / 128 - 1;
  // The ping-pong's turn starts at consumer 0; it comes back to it after the last turn.
  if (Config::kPingPong && consumer == kConsumers - 1)
    named_barrier_arrive<256>(1);
  WsConsumerTiles<Config> deal(params, sm.tile_ring());
  for (; deal.fetch(); deal.advance()) {
    const WsWork w = deal.work();
    const AttentionShape shape = ws_span<Config>(params, w.batch).shape;
    if (!ws_has_rows<Config>(w.m_block, shape))
      continue;
    const WsKeyTiles<Config> tiles =
        WsKeyTiles<Config>::template make<true>(params, w.m_block, w.head, w.batch, shape);
    if (tiles.count == 0) { // rows that see no key: O = 0, LSE = -inf
      ws_store_empty_rows<Config>(params, w.m_block, w.head, w.batch, shape, consumer);
      continue;
    }
    ws_consume_tile<Config>(sm, params, maps, w.m_block, w.head, w.batch, shape, tiles, w.kv,
                            w.work);
    deal.consumed(tiles.count);
  }
  if (Config::kPingPong && consumer == 0)
    named_barrier_sync<256>(1); // the last consumer's last turn
  if (Config::kTmaStoreO && threadIdx.x % 128 == 0)
    bulk_wait_group_read<0>(); // the O tile stays allocated until TMA has read it
}

/// Chunked prefill: varlen queries (cu_seqlens_q) over a paged KV cache, sequence b's keys its
/// seqused_k[b] cached tokens (abi/decode_params.h; num_splits 1, no partials). Launch as
/// fwd_ws_kernel; `maps` as abi/tma_params.h describes for a paged forward (Q's; K's and V's over
/// the pages where Config::kTmaPages, else not read).
template <class Config>
__device__ __forceinline__ void fwd_ws_paged_kernel(const fagen_decode_params &params,
                                                    const fagen_fwd_tma_maps &maps) {
  static_assert(Config::kPaged, "fwd_ws_paged_kernel reads a paged KV cache: set kPageSize");
  fwd_ws_kernel<Config>(params.fwd, maps);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH
