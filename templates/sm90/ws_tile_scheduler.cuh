// fagen sm90: which work tiles (m_block, head, batch) a CTA of the persistent warp-specialized
// forward takes, and in which order: the static deal (WsTileScheduler) and the tile counter's
// deal, handed from the producer to the consumers through a ring (WsTileRing).
#ifndef FAGEN_TEMPLATES_SM90_WS_TILE_SCHEDULER_CUH
#define FAGEN_TEMPLATES_SM90_WS_TILE_SCHEDULER_CUH

#include "abi/fwd_params.h"
#include "common/tile_order.h"
#include "common/types.cuh"
#include "sm90/tma.cuh"

namespace fagen {
namespace sm90 {

/// How many bytes of K/V a causal group of (batch, head) pairs may hold: 16 MB, not the
/// portable backward's 32 (kTileGroupL2Bytes). With 32 MB groups the causal kernels read
/// 1.2-1.5x the minimum (Q, K and V once) from DRAM, K/V again for many tiles (ncu, FA3 shapes;
/// cuDNN reads the minimum); with 16 MB groups (the last one sized as WsTileScheduler says)
/// 1.01-1.15x, and under the H200's power limit, where DRAM traffic costs clock, they take
/// 1.3-2.2 % less time at hd 64 / 128 2k-4k, 0.8-1.6 % at hd 256 2k-4k, 0-0.9 % at 16k
/// (H200, docs/perf/sm90-fwd.md).
/// (Bytes per query head: with GQA a group's distinct K/V is group_size times smaller.)
constexpr int64_t kWsCausalGroupBytes = int64_t(16) << 20;
/// How many bytes of K/V the last causal group may hold where it takes more pairs than a group
/// (WsTileScheduler): 32 MB, the old groups' size. hd 256's last groups of two tiles a CTA are
/// 48 MB: they read up to 2.9x the old kernel's bytes from DRAM and ran 1-3 % slower (H200).
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
/// with a 4-pair last group 1.4 %; measured on the H200, 16 MB groups without it: +0.8 %).
/// Every other mask (varlen and sparse kernels too): pair by pair, a pair's tiles on
/// consecutive t (in an order rotated per pair, below), so that the CTAs reading one pair's
/// K/V at once are neighbours, whose reads the L2 merges more often (ncu's read sectors; the
/// request coalescer, as we read it).
/// Groups of pairs whose K/V fit 8 MB, tried before, put a pair's tiles on every 4th CTA at
/// hd 256, seqlen 2k: the L2 served 54 M read sectors to cuDNN's 34 M (35 M pair by pair),
/// the SM clock, held down by the power limit, ran at 1485 MHz instead of 1575, and the hd 256
/// kernel 2-5 % slower at 2k-4k (H200, docs/perf/sm90-fwd.md).
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
  /// tile costs less than a full one, H200; where one exists the spare is not known.)
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
      // than the others had only full ones (H200: +2 % at hd 128 2k, docs/perf/sm90-fwd.md).
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

/// The consumers' walk over a CTA's work tiles, one interface for both deals (as
/// FlashAttention-3's tile schedulers): `fetch()` finds the next round's tile (false: no more
/// work), `work()` is that tile, `consumed(n)` follows a tile that took n K/V tiles, and
/// `advance()` moves on to the next round. The static deal: every consumer walks
/// WsTileScheduler itself and counts the CTA's K/V and work tiles. (The members' order sets
/// the PTX's register numbering, which ptxas's allocation follows: this one gives the SASS of
/// the kernels from before this interface, nvcc 13.0.)
template <class Config, bool kTileCounter = Config::kTileCounter> struct WsConsumerTiles {
  const WsTileScheduler<Config> sched;
  int kv = 0, r = 0, ordinal = 0, t;
  __device__ WsConsumerTiles(const fagen_fwd_params &params, u32 /*tile_ring*/) : sched(params) {}
  __device__ bool fetch() { return (t = sched.nth(r)) < sched.total; }
  __device__ void advance() { ++r; }
  __device__ WsWork work() const {
    WsWork w;
    sched.tile(t, w.m_block, w.head, w.batch);
    w.kv = kv;
    w.work = ordinal;
    return w;
  }
  __device__ void consumed(int kv_tiles) {
    kv += kv_tiles;
    ++ordinal;
  }
};
/// The tile counter's deal: the producer's entries of the tile ring, which carry the K/V and
/// work counts.
template <class Config> struct WsConsumerTiles<Config, true> {
  const WsTileRing<Config> ring;
  int r = 0;
  WsWork w;
  __device__ WsConsumerTiles(const fagen_fwd_params &, u32 tile_ring) : ring(tile_ring) {}
  __device__ void advance() { ++r; }
  __device__ bool fetch() {
    w = ring.take(r);
    return w.m_block >= 0;
  }
  __device__ WsWork work() const { return w; }
  __device__ void consumed(int) {}
};

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_TILE_SCHEDULER_CUH
