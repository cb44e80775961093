// fagen sm90: the warp-specialized forward's epilogues: a consumer warpgroup's 64 rows of O
// (and LSE) written out, directly, staged through its dead rows of the Q tile, or through an O
// tile of its own in shared memory and a TMA store.
#ifndef FAGEN_TEMPLATES_SM90_WS_EPILOGUE_CUH
#define FAGEN_TEMPLATES_SM90_WS_EPILOGUE_CUH

#include "abi/fwd_params.h"
#include "abi/tma_params.h"
#include "sm80/tile_ops.cuh"
#include "sm90/tile_ops.cuh"
#include "sm90/tma.cuh"
#include "sm90/ws_block_info.cuh"
#include "sm90/ws_pipeline.cuh"

namespace fagen {
namespace sm90 {

/// A work tile whose rows see no key: consumer `consumer`'s 64 rows get O = 0, LSE = -inf.
template <class Config>
__device__ __forceinline__ void ws_store_empty_rows(const fagen_fwd_params &params, int m_block,
                                                    int head, int batch,
                                                    const AttentionShape &shape, int consumer) {
  const int64_t row0 = int64_t(m_block) * Config::kBlockM + 64 * consumer;
  store_empty_rows<64, Config::kHeadDimV, 128>(
      ws_o_rows<Config>(params, batch, head, row0), params.o_row_stride,
      ws_lse_rows<Config>(params, batch, head, row0),
      int(min(int64_t(64), shape.seqlen_q - row0)), threadIdx.x % 128);
}

/// Named barriers: 1 + c, consumer c's ping-pong turn; kWsEpilogueBarrier + c, the warpgroup
/// of consumer c around its kTmaStoreO epilogue.
constexpr int kWsEpilogueBarrier = 4;

/// Consumer `consumer`'s rows of work tile (m_block, head, batch): LSE (row_lse, from the
/// softmax's finalize) and O (acc_o: (64, kDimV) per warpgroup, normalized). first_row: the
/// warp's first row in the tile; rows_left: the sequence's rows from there. kStagedEpilogue
/// hands the Q tile back to the producer after its rows are out; kTmaStoreO leaves its TMA
/// store in flight (the warpgroup's next epilogue, or the kernel's end, waits for it).
template <class Config>
__device__ __forceinline__ void ws_epilogue(const WsSmem<Config> &sm,
                                            const fagen_fwd_params &params,
                                            const fagen_fwd_tma_maps &maps,
                                            const float (&acc_o)[Config::kDimV / 8][4],
                                            const float (&row_lse)[2], int m_block, int head,
                                            int batch, int consumer, int first_row,
                                            int rows_left, int lane) {
  using Element = typename Config::Element;
  constexpr int kDimV = Config::kDimV, kBlockM = Config::kBlockM;
  const int64_t row0 = int64_t(m_block) * kBlockM + first_row;
  if (lane % 4 == 0) {
    float *lse = ws_lse_rows<Config>(params, batch, head, row0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 8 * h + lane / 4;
      if (row < rows_left)
        lse[row] = row_lse[h];
    }
  }
  if constexpr (Config::kStagedEpilogue) {
    store_o_rows_staged<Element, kDimV, Config::kHeadDimV, kBlockM>(
        ws_o_rows<Config>(params, batch, head, row0), params.o_row_stride, rows_left, sm.q,
        first_row, acc_o);
    fence_proxy_async_smem(); // TMA writes the next Q over these rows
    __syncwarp();
    if (lane == 0)
      mbarrier_arrive(sm.q_empty());
  } else if constexpr (Config::kTmaStoreO) {
    // The warpgroup's 64 rows of the O tile, once its previous store has read them (the
    // storing thread waits; the barrier tells the others), then one TMA store per 64 columns
    // from its thread 0 (rows past seqlen_q are not written: the map's bounds).
    const int wg_thread = thread_index_rematerialized() % 128;
    if (wg_thread == 0)
      bulk_wait_group_read<0>();
    named_barrier_sync<128>(kWsEpilogueBarrier + consumer);
    stage_o_rows<Element, kDimV, kDimV, kBlockM>(sm.o, first_row, wg_thread % 32, acc_o);
    fence_proxy_async_smem();
    named_barrier_sync<128>(kWsEpilogueBarrier + consumer);
    if (wg_thread == 0) {
#pragma unroll
      for (int b = 0; b < kDimV / 64; ++b)
        tma_store_4d(maps.o, sm.o + b * kBlockM * 128 + consumer * 64 * 128, 64 * b,
                     m_block * kBlockM + 64 * consumer, head, batch);
      bulk_commit_group();
    }
  } else {
    store_o_rows<Element, kDimV, Config::kHeadDimV>(ws_o_rows<Config>(params, batch, head, row0),
                                                    params.o_row_stride, rows_left, acc_o);
  }
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_EPILOGUE_CUH
