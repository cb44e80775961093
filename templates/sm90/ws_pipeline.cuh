// fagen sm90: the warp-specialized forward's shared memory: the Q tile and the ring of K and V
// slots, and the mbarriers that hand each slot between the producer and the consumers.
#ifndef FAGEN_TEMPLATES_SM90_WS_PIPELINE_CUH
#define FAGEN_TEMPLATES_SM90_WS_PIPELINE_CUH

#include "common/types.cuh"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"
#include "sm90/ws_paged_kv.cuh"

namespace fagen {
namespace sm90 {

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

/// A consumer warpgroup's side of the ring during one work tile: it waits for K_i and V_i (i:
/// the tile's key step; kv: the CTA's K/V tiles before the tile), hands slots back (one arrival
/// per warp, from lane 0), and takes its ping-pong turns: consumer c issues its wgmmas after
/// named barrier 1 + c, then passes the turn on.
template <class Config> struct WsConsumerRing {
  const WsSmem<Config> &sm;
  int kv, consumer, lane;
  __device__ void my_turn() const {
    if constexpr (Config::kPingPong)
      named_barrier_sync<256>(1 + consumer);
  }
  __device__ void next_turn() const {
    if constexpr (Config::kPingPong)
      named_barrier_arrive<256>(1 + (consumer + 1) % Config::kConsumers);
  }
  __device__ void release(u32 bar) const {
    if (lane == 0)
      mbarrier_arrive(bar);
  }
  /// K_i / V_i landed; where a paged gather wrote any of it (cp.async, the generic proxy: every
  /// tile without TMA pages, V's last run with them) then fenced for the wgmmas that read it
  /// (the async proxy).
  __device__ void wait_k(int i) const {
    mbarrier_wait(sm.k_full(kv + i), sm.full_parity(sm.round(kv + i)));
    if constexpr (Config::kPaged && !Config::kTmaPages)
      fence_proxy_async_smem();
  }
  __device__ void wait_v(int i) const {
    mbarrier_wait(sm.v_full(kv + i), sm.full_parity(sm.round(kv + i)));
    if constexpr (Config::kPaged)
      fence_proxy_async_smem();
  }
  /// A step without MMAs: K_k and V_v (each if >= 0) handed back once filled, so that the
  /// arrival counts for that fill's round, then a ping-pong turn passed on, so that the other
  /// warpgroups have the tensor cores. The ping-pong needs n_tiles + 1 turns of every
  /// warpgroup a tile, and the K/V ring each slot's arrival once per fill.
  __device__ void pass_step(int k, int v) const {
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
  }
};

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_PIPELINE_CUH
