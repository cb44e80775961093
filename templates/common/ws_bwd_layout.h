// fagen: the shared-memory layout of the sm90 warp-specialized backward (sm90/bwd_ws_config.cuh),
// in one place for the template and the planner's budget (compiler/plan/PlanSm90.cpp), with the
// other facts both read (its warpgroups, its default query walk). Plain C++, host and device.
#ifndef FAGEN_TEMPLATES_COMMON_WS_BWD_LAYOUT_H
#define FAGEN_TEMPLATES_COMMON_WS_BWD_LAYOUT_H

#if defined(__CUDACC__)
#define FAGEN_WS_BWD_LAYOUT_HD __host__ __device__
#else
#define FAGEN_WS_BWD_LAYOUT_HD
#endif

namespace fagen {

/// The head dim the tiles hold: the real one padded to whole 64-column swizzle blocks (96 ->
/// 128; TMA fills the padding columns with zeros), and above 128 to 256, the tiles of
/// ws_bwd_split_s, whose consumer warpgroups take 128 columns each (192 -> 256: the fourth
/// block holds zeros, never loaded). S^T, dP^T, dK, dV and dQ are exact. dq_accum rows are
/// this wide too (hd 192's last 64 columns never added to: WsBwdConfig::kDqPadBlock).
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_dim(int head_dim) {
  return head_dim > 128 ? 256 : (head_dim + 63) / 64 * 64;
}

/// The 64-column blocks of a tile that hold real columns of a head dim (the rest, of
/// ws_bwd_dim's padding, hold zeros): the blocks TMA loads and the GEMMs over the head dim
/// read.
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_real_blocks(int head_dim) {
  return (head_dim + 63) / 64;
}

/// Head dims above 128 split S^T between the consumer warpgroups by query columns (both hold
/// every key of the tile, each half of the dK and dV columns: 64 x 256 of each would not fit
/// one warpgroup's registers), and exchange P^T and dS^T through shared memory.
FAGEN_WS_BWD_LAYOUT_HD constexpr bool ws_bwd_split_s(int dim) { return dim > 128; }

/// Consumer warpgroups of a CTA: 64 keys each, or two that split S^T (ws_bwd_split_s).
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_consumers(int dim, int block_n) {
  return ws_bwd_split_s(dim) ? 2 : block_n / 64;
}

/// dO slots of a ring of `stages` Q slots: as many, except where S^T is split
/// (ws_bwd_split_s), whose shared memory holds two Q slots only beside one dO slot (hd 256:
/// 231,480 of 232,448 bytes): there Q and dO have rings of their own, so that the next query
/// tile's Q lands while the current tile's dO is still being read (FlashAttention-3's separate
/// dO stages).
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_do_stages(int dim, int stages) {
  return ws_bwd_split_s(dim) ? 1 : stages;
}

/// Whether a key tile's walk over its query tiles starts at a different tile for each key tile
/// (bwd_ws_kernel.cuh's WsQueryWalk), by default: at head dim 64 only, and never in the
/// deterministic mode, whose dQ order the walk sets. With kOverlapP (P^T while dP^T is still in
/// the tensor cores), measured together (H100, bf16, 2k-16k, one process, two rounds each;
/// docs/perf/sm90-bwd.md): hd 64 +1-4 % at every length, causal or not; hd 128 -1-6 %. The
/// planner's default (a plan's rotateQueryWalk, which `fagen tune` searches) and the harness's.
FAGEN_WS_BWD_LAYOUT_HD constexpr bool ws_bwd_rotates_query_walk(int dim, bool deterministic) {
  return dim == 64 && !deterministic;
}

/// Whether a warp of the producer warpgroup (the dQ writer) adds the consumers' staged dQ
/// blocks to dq_accum, by default: always in the deterministic mode (which orders the
/// additions; the writer is its order), else at hd 96 / 128 / 256 with no mask or a causal one
/// and no score mod, varlen or block sparsity. H100, bf16, 2k-16k, harness A/B of three rounds
/// in one call, time against the consumers adding their own blocks: hd 128 0.88-0.94x, causal
/// 0.94-1.00x, causal dropout 0.91-0.96x; hd 256 0.94-0.98x, causal 0.99-1.01x; hd 64
/// 0.95-1.00x, causal 0.99-1.01x (within the rounds' spread; not kept: its dropout kernel
/// spilled 36 bytes). With softcap 16 bytes spilled; varlen causal, window and static
/// block-sparse causal kernels had their wgmma serialized by ptxas for want of registers
/// (C7512, nvcc 13.0). The planner's default (a plan's dqWriter, which `fagen tune` searches)
/// and the harness's. `none_or_causal`: no mask or a causal one (either alignment).
FAGEN_WS_BWD_LAYOUT_HD constexpr bool ws_bwd_dq_writer(int head_dim, bool deterministic,
                                                       bool identity_score_mod, bool varlen,
                                                       bool none_or_causal, bool sparse) {
  return deterministic || (ws_bwd_dim(head_dim) >= 128 && identity_score_mod && !varlen &&
                           none_or_causal && !sparse);
}

/// Byte offsets from the 1024-byte-aligned base, tiles in 128-byte-swizzled 64-column blocks:
/// K, V (block_n rows), stages x Q, do_stages x dO (block_m rows; ws_bwd_do_stages), two dS^T
/// tiles (block_n rows of block_m 16-bit columns), with ws_bwd_split_s two P^T tiles of the
/// same shape, a 64 x 64 fp32 dQ staging sub-block per consumer warpgroup, stages x (LSE, D)
/// rows (they go with Q), then the mbarriers: K/V full, Q full per stage, Q empty per stage,
/// and where dO has a ring of its own, dO full and dO empty per dO stage; `bytes` adds the 1024
/// bytes that align the base. `dim`: the head dim padded to 64.
struct WsBwdLayout {
  int do_stages, k_bytes, q_bytes, ds_bytes, dq_bytes, stats_bytes;
  int v, q, dout, ds, pt, dq, stats, barriers, bytes;
  constexpr WsBwdLayout(int dim, int block_m, int block_n, int stages)
      : do_stages(ws_bwd_do_stages(dim, stages)), k_bytes(block_n * dim * 2),
        q_bytes(block_m * dim * 2), ds_bytes(block_n * block_m * 2), dq_bytes(64 * 64 * 4),
        stats_bytes(block_m * 4 * 2), v(k_bytes), q(v + k_bytes), dout(q + stages * q_bytes),
        ds(dout + do_stages * q_bytes), pt(ds + 2 * ds_bytes),
        dq(pt + (ws_bwd_split_s(dim) ? 2 * ds_bytes : 0)),
        stats(dq + ws_bwd_consumers(dim, block_n) * dq_bytes),
        barriers(stats + stages * stats_bytes),
        bytes(barriers + 8 * (1 + 2 * stages + (do_stages != stages ? 2 * do_stages : 0)) +
              1024) {}
};

/// Where dQ element (row, col) of a query tile lies in its block_m x head dim block of
/// dq_accum: 64 x 64 sub-blocks one after the other (columns 64 c .. of rows 64 r .. at
/// sub-block c * block_m / 64 + r, the one consumer warpgroup c * block_m / 64 + r adds), each
/// in the order of the wgmma accumulator (templates/sm90/wgmma.cuh): column tile j = col / 8,
/// then the warpgroup's thread (warp (row % 64) / 16, lane 4 (row % 8) + (col % 8) / 2), then its
/// four floats, so that a warpgroup stages its sub-block with conflict-free 16-byte stores and
/// adds it with one contiguous bulk reduction.
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_dq_accum_offset(int row, int col, int block_m) {
  return ((col / 64) * (block_m / 64) + row / 64) * 64 * 64 +
         ((col % 64 / 8) * 128 + (row % 64 / 16) * 32 + 4 * (row % 8) + (col % 8) / 2) * 4 +
         (col % 2) + 2 * (row % 16 / 8);
}

/// The inverse of ws_bwd_dq_accum_offset for whole float4: float4 q of a query tile's block
/// (floats 4 q .. 4 q + 3) holds columns (col, col + 1) of rows row and row + 8, with
/// (row, col) as these two give them (_post reads the block with contiguous 16-byte loads).
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_dq_accum_row(int q, int block_m) {
  return (q / 1024) % (block_m / 64) * 64 + (q / 32 % 4) * 16 + (q % 32) / 4;
}
FAGEN_WS_BWD_LAYOUT_HD constexpr int ws_bwd_dq_accum_col(int q, int block_m) {
  return (q / 1024) / (block_m / 64) * 64 + (q % 1024 / 128) * 8 + 2 * (q % 4);
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_WS_BWD_LAYOUT_H
