// fagen sm90: what one CTA of the warp-specialized backward (bwd_ws_kernel.cuh) holds and
// visits: its shared memory (WsBwdSmem, WsBwdConfig's layout) and its key tile's walk over the
// (query head, query tile) pairs that see it (WsQueryWalk).
#ifndef FAGEN_TEMPLATES_SM90_BWD_WS_TILES_CUH
#define FAGEN_TEMPLATES_SM90_BWD_WS_TILES_CUH

#include "common/ptx.cuh"
#include "sm90/bwd_ws_config.cuh"

namespace fagen {
namespace sm90 {

/// The CTA's shared memory (WsBwdConfig's layout): addresses in the shared window, and the same
/// bytes through a generic pointer for the threads' own loads and stores.
template <class Config> struct WsBwdSmem {
  u32 base;
  unsigned char *ptr; // = base
  __device__ explicit WsBwdSmem(unsigned char *smem) {
    const u32 raw = smem_addr(smem);
    base = (raw + 1023) & ~1023u;
    ptr = smem + (base - raw);
  }
  __device__ u32 k() const { return base; }
  __device__ u32 v() const { return base + Config::kVOffset; }
  __device__ u32 q(int s) const { return base + Config::kQOffset + s * Config::kSmemQBytes; }
  __device__ u32 dout(int s) const { return base + Config::kDoOffset + s * Config::kSmemQBytes; }
  __device__ u32 ds(int i) const { return base + Config::kDsOffset + (i & 1) * Config::kSmemDsBytes; }
  /// Tiles of 256 columns (Config::kSplitS): the P^T tiles, double-buffered like dS^T.
  __device__ u32 pt(int i) const { return base + Config::kPtOffset + (i & 1) * Config::kSmemDsBytes; }
  __device__ u32 dq(int c) const { return base + Config::kDqOffset + c * Config::kSmemDqBytes; }
  /// LSE (log2 units) and D of slot s's query rows.
  __device__ float *lse(int s) const {
    return reinterpret_cast<float *>(ptr + Config::kStatsOffset + s * Config::kSmemStatsBytes);
  }
  __device__ float *d(int s) const { return lse(s) + Config::kBlockM; }
  __device__ u32 kv_full() const { return base + Config::kBarrierOffset; }
  __device__ u32 q_full(int s) const { return kv_full() + 8 * (1 + s); }
  __device__ u32 q_empty(int s) const { return kv_full() + 8 * (1 + Config::kStages + s); }
  /// Config::kSeparateDo: dO slot s's barriers (else dO is slot s of Q's ring, its barriers).
  __device__ u32 do_full(int s) const { return q_empty(Config::kStages + s); }
  __device__ u32 do_empty(int s) const { return do_full(Config::kDoStages + s); }
  template <class T> __device__ T *at(u32 addr) const {
    return reinterpret_cast<T *>(ptr + (addr - base));
  }
};

/// The (query head, query tile) pairs one key tile visits: the heads of its GQA group, each over
/// the query tiles the mask lets see the key tile (sm80::QueryTileCursor's range), less those
/// the sparsity layout hides. With Config::kRotateQueryWalk each key tile starts its walk at a
/// different query tile (key tile n at the n-th of the range, wrapping around), so that the
/// CTAs of a head, which run in step, add into different dq_accum blocks at a time instead of
/// all into the same one.
template <class Config> struct WsQueryWalk {
  using Mask = typename Config::Mask;
  using Sparsity = typename Config::Sparsity;
  static constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  const fagen_fwd_params &params;
  int batch, n_block, head_end, m_begin, count, offset, step;
  int head, m_block; // the current pair; head == head_end: done

  __device__ __forceinline__ WsQueryWalk(const fagen_fwd_params &p, int batch_, int kv_head,
                                         int n_block_, AttentionShape shape)
      : params(p), batch(batch_), n_block(n_block_), head_end((kv_head + 1) * p.group_size),
        m_begin(Mask::template m_block_begin<kBlockM, kBlockN>(n_block_, shape)),
        count(max(0, Mask::template m_block_end<kBlockM, kBlockN>(n_block_, shape) - m_begin)),
        offset(count > 0 && Config::kRotateQueryWalk ? n_block_ % count : 0), step(-1),
        head(kv_head * p.group_size) {
    if (count == 0)
      head = head_end;
    advance();
  }
  __device__ __forceinline__ bool valid() const { return head < head_end; }
  /// Moves to the next visible pair.
  __device__ __forceinline__ void advance() {
    while (head < head_end) {
      if (++step == count) {
        step = -1;
        ++head;
        continue;
      }
      const int i = step + offset;
      m_block = m_begin + (i >= count ? i - count : i);
      if (Sparsity(params, batch, head).template visible<kBlockM, kBlockN>(m_block, n_block))
        return;
    }
  }
};

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_TILES_CUH
