// fagen sm90: warp-specialized attention forward (sm_90a), FlashAttention-3's structure: a
// producer warpgroup loads Q, K and V with TMA into a ring of slots handed over by mbarriers;
// kBlockM / 64 consumer warpgroups each own 64 query rows and run the wgmma / online-softmax
// loop of fwd_kernel.cuh (the next S = Q K^T and the current O += P V in flight while the
// softmax of S runs), taking turns at the tensor cores (ping-pong). Persistent: each CTA walks
// the work tiles of WsTileScheduler, and the producer loads the next tile while the consumers
// finish the current one. Variants (common/variants.cuh) as the sm80 template: masks and score
// mods on S, dropout on P, skipped sparse blocks (no loads, no MMA), varlen sequences of packed
// tensors (TMA rows from cu_seqlens).
#ifndef FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH
#define FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH

#include "abi/fwd_params.h"
#include "common/softmax.cuh"
#include "common/tile_order.h"
#include "abi/tma_params.h"
#include "sm80/tile_ops.cuh"
#include "sm90/fwd_config.cuh"
#include "sm90/tile_ops.cuh"
#include "sm90/tma.cuh"

namespace fagen {
namespace sm90 {

#ifdef FAGEN_WS_TRACE
/// Dev instrumentation, compiled only with -DFAGEN_WS_TRACE (tests/gpu/ws_trace.cu): thread 0 of
/// each warpgroup (0: the producer, 1..3: consumers) writes clock64() at a work tile's events
/// into ws_trace_buf[((blockIdx.x * 4 + warpgroup) * kWsTraceTiles + work) * 8 + event], for
/// the CTA's first kWsTraceTiles tiles (kernels without a tile counter: `work` is then the
/// tile's ordinal). Never in a bundle's kernels.
__device__ unsigned long long *ws_trace_buf;
constexpr int kWsTraceTiles = 32;
__device__ __forceinline__ void ws_trace(int work, int event, unsigned long long value) {
  if (threadIdx.x % 128 == 0 && work < kWsTraceTiles && ws_trace_buf != nullptr)
    ws_trace_buf[((blockIdx.x * 4 + threadIdx.x / 128) * kWsTraceTiles + work) * 8 + event] =
        value;
}
#define FAGEN_WS_TRACE_AT(work, event) ::fagen::sm90::ws_trace(work, event, clock64())
#define FAGEN_WS_TRACE_VALUE(work, event, value) ::fagen::sm90::ws_trace(work, event, value)
#else
#define FAGEN_WS_TRACE_AT(work, event) ((void)0)
#define FAGEN_WS_TRACE_VALUE(work, event, value) ((void)0)
#endif

/// The CTA's shared memory: tiles (sm90/tile_ops.cuh layout) and mbarriers. K/V tiles are
/// numbered across the CTA's work tiles (i), so slots and phases continue from one to the next.
template <class Config> struct WsSmem {
  u32 q, k, v, o, bars; // Q (kBlockM, d); K, V (kStages, kBlockN, d); O (kTmaStoreO); mbarriers
  __device__ explicit WsSmem(u32 base) {
    q = (base + 1023) & ~1023u;
    k = q + Config::kSmemQBytes;
    v = k + Config::kStages * Config::kSmemKTileBytes;
    o = q + Config::kOOffset;
    bars = q + Config::kBarrierOffset;
  }
  // K/V tile numbers are never negative: unsigned % and / are a mask and a shift (kStages 2, 4).
  __device__ static u32 stage(int i) { return u32(i) % Config::kStages; }
  __device__ static int round(int i) { return int(u32(i) / Config::kStages); }
  __device__ u32 k_slot(int i) const { return k + stage(i) * Config::kSmemKTileBytes; }
  __device__ u32 v_slot(int i) const { return v + stage(i) * Config::kSmemVTileBytes; }
  __device__ u32 q_full() const { return bars; }
  __device__ u32 q_empty() const { return bars + 8; }
  __device__ u32 k_full(int i) const { return bars + 8 * (2 + stage(i)); }
  __device__ u32 v_full(int i) const { return k_full(i) + 8 * Config::kStages; }
  __device__ u32 k_empty(int i) const { return v_full(i) + 8 * Config::kStages; }
  __device__ u32 v_empty(int i) const { return k_empty(i) + 8 * Config::kStages; }
  __device__ u32 tile_ring() const { return q + Config::kTileRingOffset; }
  /// Parity of the phase in which the slot of round r fills (the consumers' wait) and of the
  /// phase that frees it (the producer's; 1 on round 0, which returns at once on a fresh
  /// barrier). Round of K/V tile i: i / kStages; of the Q buffer: the work tile's ordinal.
  __device__ static u32 full_parity(int round) { return round & 1; }
  __device__ static u32 empty_parity(int round) { return (round & 1) ^ 1; }
};

/// How many bytes of K/V a causal group of (batch, head) pairs may hold: 16 MB, not the
/// portable backward's 32 (kTileGroupL2Bytes). With 32 MB groups the causal kernels read
/// 1.2-1.5x the minimum (Q, K and V once) from DRAM, K/V again for many tiles (ncu, FA3 shapes;
/// cuDNN reads the minimum); with 16 MB groups (the last one sized as WsTileScheduler says)
/// 1.01-1.15x, and under the H200's power limit, where DRAM traffic costs clock, they take
/// 1.3-2.2 % less time at hd 64 / 128 2k-4k, 0.8-1.6 % at hd 256 2k-4k, 0-0.9 % at 16k
/// (docs/perf/sm90-fwd.md run 73).
/// (Bytes per query head: with GQA a group's distinct K/V is group_size times smaller.)
constexpr int64_t kWsCausalGroupBytes = int64_t(16) << 20;
/// How many bytes of K/V the last causal group may hold where it takes more pairs than a group
/// (WsTileScheduler): 32 MB, the old groups' size. hd 256's last groups of two tiles a CTA are
/// 48 MB: they read up to 2.9x the old kernel's bytes from DRAM and ran 1-3 % slower (run 73).
constexpr int64_t kWsCausalTailGroupBytes = int64_t(32) << 20;

/// Work tiles: (m_block, head, batch) for tile t of ceil(seqlen_q / kBlockM) * heads_q * batch,
/// batch outermost. Causal: in groups of (batch, head) pairs whose K and V fit in
/// kWsCausalGroupBytes, so that the CTAs running at once share K/V in L2; within a group the
/// heaviest tiles first (m_block from the last; longest-processing-time first,
/// FlashAttention-4 section 3.3). The last group holds at least two tiles for each CTA running
/// at once, up to kWsCausalTailGroupBytes of K/V (causal_tail_groups, tail_grouped_tile_order):
/// in a small group the heaviest tile is longer than a CTA's share of the group's work, and
/// after the last group nothing comes to fill the other SMs (bench/diag/causal_deal_sim.py, the
/// counter's deal simulated: hd 128 16k, 192-row tiles, 2-pair groups end 3.6 % after the mean,
/// with a 4-pair last group 1.4 %; measured, 16 MB groups without it: +0.8 %, run 73).
/// Every other mask (varlen and sparse kernels too): pair by pair, a pair's tiles on
/// consecutive t (in an order rotated per pair, below), so that the CTAs reading one pair's
/// K/V at once are neighbours, whose reads the L2 merges more often (ncu's read sectors; the
/// request coalescer, as we read it).
/// Run 18's groups of pairs whose K/V fit 8 MB put a pair's tiles on every 4th CTA at hd 256,
/// seqlen 2k: the L2 served 54 M read sectors to cuDNN's 34 M (35 M pair by pair), the SM
/// clock, held down by the power limit, ran at 1485 MHz instead of 1575, and the hd 256 kernel
/// 2-5 % slower at 2k-4k (H200, docs/perf/sm90-fwd.md run 52).
/// CTA b takes tile b of each round of gridDim.x tiles; for causal, every other round runs
/// backwards (b takes gridDim.x - 1 - b), so that the CTA with the heaviest tile of one round
/// gets the lightest of the next and no CTA accumulates the heaviest of every round.
template <class Config> struct WsTileScheduler {
  int num_m, heads, total;
  int group, tail_first; // causal: pairs a group, the last group's first pair
  __device__ explicit WsTileScheduler(const fagen_fwd_params &p) {
    num_m = (p.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
    heads = p.heads_q;
    total = num_m * heads * p.batch;
    group = 1, tail_first = 0;
    if constexpr (Config::Mask::kWorkGrowsWithRow) {
      const int64_t kv_bytes = int64_t(p.seqlen_k) * (Config::kDimQK + Config::kDimV) * 2;
      // CTAs running at once: the grid, or where it has one CTA a tile (no workspace) at most
      // one a SM (these shared-memory sizes), bounded by %nsmid (the SM identifiers: at least
      // the SMs, more where their numbering has gaps).
      u32 sm_ids;
      asm("mov.u32 %0, %%nsmid;" : "=r"(sm_ids));
      causal_tail_groups(heads * p.batch, num_m, kv_bytes, min(gridDim.x, sm_ids),
                         kWsCausalGroupBytes, kWsCausalTailGroupBytes, &group, &tail_first);
    }
  }
  /// The tile of this CTA's round r (>= total: no more work).
  __device__ int nth(int r) const {
    const bool backwards = Config::Mask::kWorkGrowsWithRow && (r & 1);
    return r * int(gridDim.x) + (backwards ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x));
  }
  /// Whether this CTA has a whole tile to spare: where the tiles do not divide into rounds of
  /// gridDim.x, CTAs from total % gridDim.x on get one tile fewer than the others in nth's
  /// deal (forwards), and with every tile full (seqlen_q a multiple of kBlockM) all tiles cost
  /// the same, so such a CTA can start up to a tile late without ending last. (A last, short
  /// tile costs less than a full one, run 39; where one exists the spare is not known.)
  __device__ bool has_spare_tile(const fagen_fwd_params &p) const {
    const int rem = total % int(gridDim.x);
    return !Config::Mask::kWorkGrowsWithRow && rem != 0 && total > int(gridDim.x) &&
           int(blockIdx.x) >= rem && p.seqlen_q % Config::kBlockM == 0;
  }
  __device__ void tile(int t, int &m_block, int &head, int &batch) const {
    int bh;
    if constexpr (Config::Mask::kWorkGrowsWithRow) {
      int level;
      tail_grouped_tile_order(t, num_m, total / num_m, group, tail_first, &level, &bh);
      m_block = num_m - 1 - level;
    } else { // pair by pair
      bh = t / num_m;
      // Place j = t % num_m of pair bh holds m_block (j - 1 - bh % num_m) mod num_m: the
      // pair's last tile (short where kBlockM does not divide seqlen_q) sits at place
      // bh % num_m, so it falls on a different CTA of the static deal for each pair. In
      // m_block order every pair's last tile went to one of a few CTAs (hd 128 2k, 192-row
      // tiles: 11 tiles a pair, so 12 of 132), and 80 of the 88 CTAs that take one tile more
      // than the others had only full ones (H200: +2 % at hd 128 2k, docs/perf/sm90-fwd.md
      // run 58).
      const int m = t % num_m + (num_m - 1 - bh % num_m); // (t - bh * num_m spilled 4 bytes
      m_block = m >= num_m ? m - num_m : m;                // at hd 64 192 x 128, nvcc 13.0)
    }
    head = bh % heads;
    batch = bh / heads;
  }
};

/// A work tile as the producer hands it to the consumers (kTileCounter kernels): its
/// coordinates, and the CTA's K/V tiles before it (modulo 2 kStages: what the slots and their
/// parities read) and the parity of its ordinal (the Q buffer's), so that the consumers carry
/// no scheduling state across tiles.
struct WsWork {
  int m_block, head, batch; // m_block < 0: no more work
  int kv, work;
};

/// kTileCounter kernels: the work tiles come from the producer, through a two-entry ring in
/// shared memory (full: written; empty: every consumer thread read it), as WsWork. With
/// params.tile_counter set (zero at launch), CTA b's first tile is b and each later one is
/// gridDim.x + atomicAdd(tile_counter, 1): tiles go out in WsTileScheduler's order (heaviest
/// causal tiles first) to whichever CTA asks first, so a persistent grid balances uneven tiles
/// as the hardware's dispatch of one CTA per tile does, and still loads the next tile's Q while
/// the consumers finish the current one. The producer asks when it has issued the current
/// tile's last load. Without a counter the tiles are WsTileScheduler's static deal.
template <class Config> struct WsTileRing {
  u32 ring; // full[2], empty[2] mbarriers, then two 16-byte entries
  __device__ explicit WsTileRing(u32 ring_) : ring(ring_) {}
  __device__ u32 full(int r) const { return ring + 8 * (r & 1); }
  __device__ u32 empty(int r) const { return ring + 16 + 8 * (r & 1); }
  __device__ u32 entry(int r) const { return ring + 32 + 16 * (r & 1); }
  __device__ void init() const {
    for (int e = 0; e < 2; ++e) {
      mbarrier_init(full(e), 1);
      // One arrival per consumer thread, each after its own read (compute-sanitizer's
      // racecheck does not see a warp's reads ordered by __syncwarp before lane 0's arrive).
      mbarrier_init(empty(e), 128 * Config::kConsumers);
    }
  }
  /// The producer's entry r (kv < 2 kStages; the work ordinal's parity
  /// rides in its top bit).
  __device__ void publish(int r, const WsWork &w) const {
    mbarrier_wait(empty(r), (r >> 1 & 1) ^ 1);
    st_shared_v4_u32(entry(r), u32(w.m_block), u32(w.head), u32(w.batch),
                     u32(w.kv) | u32(w.work) << 31);
    mbarrier_arrive(full(r));
  }
  /// A consumer thread's entry r.
  __device__ WsWork take(int r) const {
    mbarrier_wait(full(r), r >> 1 & 1);
    u32 v[4];
    ld_shared_v4_u32(v, entry(r));
    mbarrier_arrive(empty(r));
    return {int(v[0]), int(v[1]), int(v[2]), int(v[3] & 0x7fffffffu), int(v[3] >> 31)};
  }
};

/// Batch entry `batch`'s rows (varlen: from cu_seqlens) and shape as the mask hooks read it: a
/// window mask reads its bounds from it (the other masks leave them unbounded, as the dense
/// kernels always did).
template <class Config>
__device__ __forceinline__ SequenceSpan ws_span(const fagen_fwd_params &p, int batch) {
  using Mask = typename Config::Mask;
  SequenceSpan s = sequence_span<Config::kVarlen>(p, batch);
  if constexpr (std::is_same<Mask, NoMask>::value || Mask::kCausal)
    s.shape.window_left = s.shape.window_right = -1;
  return s;
}

/// Whether work tile m_block of a sequence has rows: varlen tiles past the end of a shorter
/// sequence have none and are skipped by every warpgroup alike.
template <class Config>
__device__ __forceinline__ bool ws_has_rows(int m_block, const AttentionShape &shape) {
  return !Config::kVarlen || m_block * Config::kBlockM < shape.seqlen_q;
}

/// The key tiles a work tile visits: those of [n_begin, n_end) (the mask's range) that the
/// sparsity layout keeps. Dense: n_first = n_begin and every tile after it.
template <class Config> struct WsKeyTiles {
  using Sparsity = typename Config::Sparsity;
  static constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  int n_first, n_end, count;

  /// One thread's walk (the producer): reads the layout byte by byte.
  __device__ static int next_scalar(const Sparsity &sp, int m_block, int n, int n_end) {
    while (n < n_end && !sp.template visible<kBlockM, kBlockN>(m_block, n))
      ++n;
    return n;
  }
  /// Whole warps (the consumers): 32 tiles a step (sm80::next_visible_tile).
  template <bool kWarp>
  __device__ static int next(const Sparsity &sp, int m_block, int n, int n_end) {
    if constexpr (!Sparsity::kSparse)
      return n;
    else if constexpr (kWarp)
      return sm80::next_visible_tile<kBlockM, kBlockN>(sp, m_block, n, n_end);
    else
      return next_scalar(sp, m_block, n, n_end);
  }

  template <bool kWarp>
  __device__ static WsKeyTiles make(const fagen_fwd_params &params, int m_block, int head,
                                    int batch, const AttentionShape &shape) {
    using Mask = typename Config::Mask;
    WsKeyTiles t;
    const int n_begin = Mask::template n_block_begin<kBlockM, kBlockN>(m_block, shape);
    t.n_end = Mask::template n_block_end<kBlockM, kBlockN>(m_block, shape);
    if constexpr (!Sparsity::kSparse) {
      t.n_first = n_begin;
      t.count = max(0, t.n_end - n_begin);
    } else {
      const Sparsity sp(params, batch, head);
      t.n_first = next<kWarp>(sp, m_block, n_begin, t.n_end);
      t.count = 0;
      for (int n = t.n_first; n < t.n_end; n = next<kWarp>(sp, m_block, n + 1, t.n_end))
        ++t.count;
    }
    return t;
  }
  /// The visible key tile after n.
  template <bool kWarp>
  __device__ static int after(const fagen_fwd_params &params, int head, int batch, int m_block,
                              int n, int n_end) {
    if constexpr (!Sparsity::kSparse)
      return n + 1;
    else
      return next<kWarp>(Sparsity(params, batch, head), m_block, n + 1, n_end);
  }
};

/// Producer (one thread): per work tile K_0, then Q, then K_{i+1} before V_i, so that a step's
/// Q K^T never queues behind the previous step's V.
template <class Config>
__device__ __forceinline__ void ws_produce(const WsSmem<Config> &sm, const fagen_fwd_tma_maps &maps,
                                           const fagen_fwd_params &params) {
  using KeyTiles = WsKeyTiles<Config>;
  const WsTileScheduler<Config> sched(params);
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
  using DimQK = std::integral_constant<int, Config::kDimQK>;
  using DimV = std::integral_constant<int, Config::kDimV>;
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
#pragma unroll
    for (int b = 0; b < Config::kDimQK / 64; ++b)
      tma_prefetch_l2_4d(maps.q, 64 * b, q_row, head, Config::kVarlen ? 0 : batch);
    mbarrier_wait(sm.k_empty(kv), sm.empty_parity(sm.round(kv)));
    load_kv(maps.k, sm.k_slot(kv), sm.k_full(kv), span.k_row0, tiles.n_first, kv_head, batch,
            DimQK(), Config::kSmemKTileBytes);
    mbarrier_wait(sm.q_empty(), sm.empty_parity(work));
    FAGEN_WS_TRACE_AT(work, 1);
    mbarrier_arrive_expect_tx(sm.q_full(), Config::kSmemQBytes);
#pragma unroll
    for (int b = 0; b < Config::kDimQK / 64; ++b)
      tma_load_4d(sm.q + b * Config::kBlockM * 128, maps.q, sm.q_full(), 64 * b, q_row, head,
                  Config::kVarlen ? 0 : batch);
    for (int i = 0, n = tiles.n_first; i < tiles.count; ++i) {
      const int j = kv + i;
      const int n_next =
          KeyTiles::template after<false>(params, head, batch, m_block, n, tiles.n_end);
      if (i + 1 < tiles.count) {
        mbarrier_wait(sm.k_empty(j + 1), sm.empty_parity(sm.round(j + 1)));
        load_kv(maps.k, sm.k_slot(j + 1), sm.k_full(j + 1), span.k_row0, n_next, kv_head, batch,
                DimQK(), Config::kSmemKTileBytes);
      }
      mbarrier_wait(sm.v_empty(j), sm.empty_parity(sm.round(j)));
      load_kv(maps.v, sm.v_slot(j), sm.v_full(j), span.k_row0, n, kv_head, batch, DimV(),
              Config::kSmemVTileBytes);
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

/// Where a work tile's rows of O and LSE start: batch entry `batch` (varlen: its first row in
/// the packed tensors, from cu_seqlens, re-read here so that no offset stays live through the
/// main loop), head `head`, row `row0` of the sequence.
template <class Config>
__device__ __forceinline__ typename Config::Element *ws_o_rows(const fagen_fwd_params &params,
                                                               int batch, int head, int64_t row0) {
  const int64_t seq = Config::kVarlen ? ws_span<Config>(params, batch).q_row0 * params.o_row_stride
                                      : batch * params.o_batch_stride;
  return static_cast<typename Config::Element *>(params.o) + seq + head * params.o_head_stride +
         row0 * params.o_row_stride;
}
template <class Config>
__device__ __forceinline__ float *ws_lse_rows(const fagen_fwd_params &params, int batch, int head,
                                              int64_t row0) {
  const int64_t seq = Config::kVarlen ? ws_span<Config>(params, batch).q_row0
                                      : batch * params.lse_batch_stride;
  return params.lse + seq + head * params.lse_head_stride + row0;
}

/// Named barriers: 1 + c, consumer c's ping-pong turn; kWsEpilogueBarrier + c, the warpgroup
/// of consumer c around its kTmaStoreO epilogue.
constexpr int kWsEpilogueBarrier = 4;

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
  // Ping-pong: consumer c issues its wgmmas after barrier 1 + c, then passes the turn on.
  auto my_turn = [&] {
    if constexpr (Config::kPingPong)
      named_barrier_sync<256>(1 + consumer);
  };
  auto next_turn = [&] {
    if constexpr (Config::kPingPong)
      named_barrier_arrive<256>(1 + (consumer + 1) % kConsumers);
  };
  auto release = [&](u32 bar) {
    if (lane == 0)
      mbarrier_arrive(bar);
  };
  auto wait_k = [&](int i) { mbarrier_wait(sm.k_full(kv + i), sm.full_parity(sm.round(kv + i))); };
  auto wait_v = [&](int i) { mbarrier_wait(sm.v_full(kv + i), sm.full_parity(sm.round(kv + i))); };
  // A step without MMAs: K_k and V_v (each if >= 0) handed back once filled, so that the
  // arrival counts for that fill's round, then a ping-pong turn passed on, so that the other
  // warpgroups have the tensor cores. The ping-pong needs n_tiles + 1 turns of every
  // warpgroup a tile, and the K/V ring each slot's arrival once per fill.
  auto pass_step = [&](int k, int v) {
    if (k >= 0) {
      wait_k(k);
      release(sm.k_empty(kv + k));
    }
    if (v >= 0) {
      wait_v(v);
      release(sm.v_empty(kv + v));
    }
    my_turn();
    next_turn();
  };

  // (A vote: ptxas then sees a warp-uniform branch and keeps the slot addresses after it in
  // uniform registers; on the thread index alone it moved them with R2UR before each wgmma.)
  if (__all_sync(0xffffffffu, 64 * consumer >= shape.seqlen_q - m_block * kBlockM)) {
    // No row of this warpgroup is in the sequence (a last query tile whose rows end at or
    // before this warpgroup's first): it only hands Q back at once, then K and V in the order
    // of a live warpgroup's steps (K_i with V_{i-1}), and passes its turns on (the tile takes
    // about the other warpgroups' share of its time). It writes no FAGEN_WS_TRACE events.
    mbarrier_wait(sm.q_full(), sm.full_parity(work));
    release(sm.q_empty());
    for (int i = 0; i <= n_tiles; ++i)
      pass_step(i < n_tiles ? i : -1, i - 1);
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
      sm80::dropout_keep_bits<1, kColTiles>(keep_bits, Dropout(params, batch, head),
                                            m_block * kBlockM + first_row, n_block * kBlockN);
  };
  auto mask_s = [&](float(&acc_s)[kColTiles][4], int n_block) {
    float(&s3)[1][kColTiles][4] = reinterpret_cast<float(&)[1][kColTiles][4]>(acc_s);
    if constexpr (!ScoreMod::kIdentity)
      apply_score_mod(s3, score_mod, m_block * kBlockM + first_row, n_block * kBlockN);
    if ((n_block + 1) * kBlockN > shape.seqlen_k ||
        Mask::template needs_mask<kBlockM, kBlockN>(m_block, n_block, shape))
      apply_mask<Mask>(s3, m_block * kBlockM + first_row, n_block * kBlockN, shape);
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
      sm80::apply_dropout_packed(reinterpret_cast<u32(&)[1][kBlockN / 16][4]>(p), keep_bits);
  };
  // S_i landed: its K slot is free, and after the warpgroup's last one so is Q (unless the
  // epilogue stages O in it).
  auto s_done = [&](float(&acc_s)[kColTiles][4], int i) {
    fence_operands(acc_s);
    release(sm.k_empty(kv + i));
    if (!Config::kStagedEpilogue && i == n_live - 1)
      release(sm.q_empty());
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
    release(sm.v_empty(kv + i - 1));
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
    wait_k(0);
    my_turn();
    wgmma_fence();
    gemm_qk_issue<Element, kDimQK, kBlockM, kBlockN>(acc_s, q_warpgroup, sm.k_slot(kv));
    wgmma_commit();
    next_turn();
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
    wait_k(i);
    wait_v(i - 1);
    my_turn();
    wgmma_fence();
    gemm_qk_issue<Element, kDimQK, kBlockM, kBlockN>(acc_s, q_warpgroup, sm.k_slot(kv + i));
    wgmma_commit();
    gemm_pv_issue<Element, kDimV, kBlockN>(acc_o, p, sm.v_slot(kv + i - 1));
    wgmma_commit();
    next_turn();
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
  wait_v(n_live - 1);
  my_turn();
  wgmma_fence();
  gemm_pv_issue<Element, kDimV, kBlockN>(acc_o, p, sm.v_slot(kv + n_live - 1));
  wgmma_commit();
  next_turn();
  wgmma_wait<0>();
  pv_done(n_live);
  // Dead steps: K_i and V_i handed back, a turn passed for each. Every warpgroup takes
  // n_tiles + 1 turns a tile, as the ping-pong needs: 1 + (n_live - 1) + 1 live,
  // n_tiles - n_live dead.
  for (int i = n_live; i < n_tiles; ++i)
    pass_step(i, i);
  FAGEN_WS_TRACE_AT(work, 5);

  float row_lse[2];
  float(&o3)[1][kDimV / 8][4] = reinterpret_cast<float(&)[1][kDimV / 8][4]>(acc_o);
  softmax.finalize(o3, scale_log2, row_lse, Dropout::kEnabled ? params.dropout_rescale : 1.f);
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
    release(sm.q_empty());
  } else if constexpr (Config::kTmaStoreO) {
    // The warpgroup's 64 rows of the O tile, once its previous store has read them (the
    // storing thread waits; the barrier tells the others), then one TMA store per 64 columns
    // from its thread 0 (rows past seqlen_q are not written: the map's bounds).
    const int wg_thread = sm80::thread_index_rematerialized() % 128;
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
  FAGEN_WS_TRACE_AT(work, 6);
}

/// Launch: a 1-D grid of at most the work tiles, ceil(seqlen_q / kBlockM) * heads_q * batch
/// (varlen: seqlen_q is the longest sequence; tiles past a shorter one's end do nothing). Any
/// grid size is correct: WsTileScheduler deals the tiles out in rounds of gridDim.x; the
/// runtime launches one CTA per tile, or one per SM for a persistent plan. Block kThreads,
/// kSmemBytes of dynamic shared memory; `maps` as common/tma_params.h describes, from the same
/// tensors.
template <class Config>
__device__ __forceinline__ void fwd_ws_kernel(const fagen_fwd_params &params,
                                              const fagen_fwd_tma_maps &maps) {
  constexpr int kConsumers = Config::kConsumers;
  extern __shared__ __align__(1024) unsigned char smem[];
  const WsSmem<Config> sm(sm80::smem_addr(smem));
  FAGEN_WS_TRACE_AT(0, 7);
#ifdef FAGEN_WS_TRACE
  u32 smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  FAGEN_WS_TRACE_VALUE(1, 7, smid);
#endif
  if (threadIdx.x == 0) {
    prefetch_tensor_map(maps.q);
    prefetch_tensor_map(maps.k);
    prefetch_tensor_map(maps.v);
    if constexpr (Config::kTmaStoreO)
      prefetch_tensor_map(maps.o);
    mbarrier_init(sm.q_full(), 1);
    mbarrier_init(sm.q_empty(), 4 * kConsumers); // one arrival per consumer warp
    for (int s = 0; s < Config::kStages; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
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
  if (threadIdx.x < 128) {
    setmaxnreg_dec<Config::kProducerRegs>();
    if (threadIdx.x == 0)
      ws_produce<Config>(sm, maps, params);
    return;
  }
  setmaxnreg_inc<Config::kConsumerRegs>();
  const int consumer = threadIdx.x / 128 - 1;
  // The ping-pong's turn starts at consumer 0; it comes back to it after the last turn.
  if (Config::kPingPong && consumer == kConsumers - 1)
    named_barrier_arrive<256>(1);
  if constexpr (Config::kTileCounter) {
    const WsTileRing<Config> ring(sm.tile_ring());
    for (int r = 0;; ++r) {
      const WsWork w = ring.take(r);
      if (w.m_block < 0)
        break;
      const AttentionShape shape = ws_span<Config>(params, w.batch).shape;
      if (!ws_has_rows<Config>(w.m_block, shape))
        continue;
      const WsKeyTiles<Config> tiles =
          WsKeyTiles<Config>::template make<true>(params, w.m_block, w.head, w.batch, shape);
      if (tiles.count == 0) { // rows that see no key: O = 0, LSE = -inf
        const int64_t row0 = int64_t(w.m_block) * Config::kBlockM + 64 * consumer;
        sm80::store_empty_rows<64, Config::kHeadDimV, 128>(
            ws_o_rows<Config>(params, w.batch, w.head, row0), params.o_row_stride,
            ws_lse_rows<Config>(params, w.batch, w.head, row0),
            int(min(int64_t(64), shape.seqlen_q - row0)), threadIdx.x % 128);
        continue;
      }
      ws_consume_tile<Config>(sm, params, maps, w.m_block, w.head, w.batch, shape, tiles, w.kv,
                              w.work);
    }
  } else {
    const WsTileScheduler<Config> sched(params);
    int kv = 0;
    for (int r = 0, work = 0, t; (t = sched.nth(r)) < sched.total; ++r) {
      int m_block, head, batch;
      sched.tile(t, m_block, head, batch);
      const AttentionShape shape = ws_span<Config>(params, batch).shape;
      if (!ws_has_rows<Config>(m_block, shape))
        continue;
      const WsKeyTiles<Config> tiles =
          WsKeyTiles<Config>::template make<true>(params, m_block, head, batch, shape);
      if (tiles.count == 0) { // rows that see no key: O = 0, LSE = -inf
        const int64_t row0 = int64_t(m_block) * Config::kBlockM + 64 * consumer;
        sm80::store_empty_rows<64, Config::kHeadDimV, 128>(
            ws_o_rows<Config>(params, batch, head, row0), params.o_row_stride,
            ws_lse_rows<Config>(params, batch, head, row0),
            int(min(int64_t(64), shape.seqlen_q - row0)), threadIdx.x % 128);
        continue;
      }
      ws_consume_tile<Config>(sm, params, maps, m_block, head, batch, shape, tiles, kv, work);
      kv += tiles.count;
      ++work;
    }
  }
  if (Config::kPingPong && consumer == 0)
    named_barrier_sync<256>(1); // the last consumer's last turn
  if (Config::kTmaStoreO && threadIdx.x % 128 == 0)
    bulk_wait_group_read<0>(); // the O tile stays allocated until TMA has read it
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_FWD_WS_KERNEL_CUH
