// fagen: the backward kernels' parameter block (FlashAttention-2 order).
//
// Like fwd_params.h: plain C, shared by templates/ and runtime/, versioned. A backward plan is
// three kernels built into one cubin, all taking `const __grid_constant__ fagen_bwd_params`:
//   <name>_pre   grid (ceil(seqlen_q / kBlockM), heads_q, batch): D = rowsum(dO * O) in fp32
//                and dq_accum zeroed (rows of this call only; not where the first key tile
//                stores, below).
//   <name>       grid fagen_bwd_main_grid (ceil(seqlen_k / kBlockN), heads_kv, batch; sm90ws
//                kernels that group kv heads, fagen_bwd_ws_groups_kv_heads, interleave the key
//                tiles of 2^tile_group_log2 heads): per key tile, dK and dV of
//                that tile (summed over the group's query heads inside the CTA, so no atomics
//                for them), dQ accumulated in fp32 into dq_accum (atomicAdd, or in a fixed order
//                with dq_semaphore when the kernel is deterministic; deterministic kernels
//                without a mask or block sparsity use fagen_bwd_dq_slots() copies of both,
//                each copy's first key tile storing).
//   <name>_post  grid like _pre: dQ = dq_accum (the sum of its copies, in order) in the input
//                dtype.
// Launch geometry: block = Config::kThreads for the main kernel, Config::kPrePostThreads for
// _pre/_post; dynamic shared memory Config::kSmemBytes for the main kernel, 0 for the others.
#ifndef FAGEN_TEMPLATES_COMMON_BWD_PARAMS_H
#define FAGEN_TEMPLATES_COMMON_BWD_PARAMS_H

#include "fwd_params.h" // same folder: found whatever the include path

// Version 2: the dropout rule draws Philox4x32-7 (common/philox.h; version 1: 10 rounds).
// Version 3: dq_accum holds whole query tiles (m_blocks * kBlockM rows a head) unless varlen.
// Version 5: deterministic kernels without a mask or block sparsity add dQ into
// fagen_bwd_dq_slots() copies of dq_accum (and of the semaphores), the first key tile of each
// copy storing instead of adding (so _pre zeroes none of them), and _post sums the copies in
// order. Version 6: the embedded fagen_fwd_params grew (tile_counter, forward version 5).
// Version 7: it grew again (total_q / total_k, forward version 6), and a deterministic
// kernel's semaphore waits are bounded (a trap after kSemaphoreSpinLimit polls). Version 8:
// varlen kernels that add whole query tiles (sm90ws) take fagen_bwd_dq_tiled_rows rows of
// dq_accum a head, sequence b's tiles from fagen_bwd_dq_tile_row0. (The backward's numbers skip
// the forward's current one, so that a kernel of one pass filed as the other is always
// refused.) Version 9: tile_group_log2 (was padding), the kv heads that a causal
// non-deterministic sm90ws kernel's grid interleaves.
#define FAGEN_BWD_PARAMS_VERSION 9

// Deterministic kernels without a mask or block sparsity: key tile n adds its dQ into copy
// (slot) n % FAGEN_BWD_DET_DQ_SLOTS of dq_accum after the slot's later key tiles only, so a
// head's CTAs form that many semaphore chains instead of one, each as much shorter. Part of the
// parameter layout (the runtime sizes the workspace with it): change it only with
// FAGEN_BWD_PARAMS_VERSION. Measured: docs/perf/sm80-bwd.md items 29-30.
#define FAGEN_BWD_DET_DQ_SLOTS 2

#ifdef __cplusplus
extern "C" {
#endif

/// The forward's problem (fwd: q, k, v, o read; lse read, as the forward wrote it; every
/// variant field as in the forward call, which the backward must repeat exactly) plus the
/// gradients. dO like O, dQ like Q, dK like K, dV like V (own strides, same layouts rules).
/// Workspace (caller-allocated, size from the plan; see fagen_bwd_workspace_layout):
///   dq_accum  float32, head_dim_qk floats a row (sm90ws: the head dim padded to 64,
///             ws_bwd_dim): dq_accum + b * dq_accum_batch_stride +
///             h * dq_accum_head_stride + row * head_dim_qk. Rows per head: m_blocks * kBlockM,
///             i.e. whole query tiles, the last one padded (varlen: total_q, row =
///             cu_seqlens_q[b] + i; varlen kernels that add whole tiles, sm90ws:
///             fagen_bwd_dq_tiled_rows, row = fagen_bwd_dq_tile_row0(cu_seqlens_q[b], b,
///             block_m) + i); the order inside one query tile's block is the kernel's own
///             (sm80: the order of its dQ reductions, see BwdConfig::kDqAccumFragmentOrder),
///             read back by _post. fagen_bwd_dq_rows gives the row count.
///   d         float32, addressed like the LSE with d_batch_stride / d_head_stride
///   dq_semaphore  int32, one per (b, h, m_block), zeroed by _pre; deterministic kernels only.
/// Both come in fagen_bwd_dq_slots() copies one after the other: slot s of dq_accum at
/// dq_accum + s * dq_rows * heads_q * head_dim_qk floats (s * batch * dq_accum_batch_stride;
/// varlen s * heads_q * dq_accum_head_stride), of dq_semaphore at s * batch *
/// semaphore_batch_stride.
typedef struct fagen_bwd_params {
  fagen_fwd_params fwd;

  const void *dout;
  void *dq;
  void *dk;
  void *dv;
  int64_t do_batch_stride, do_head_stride, do_row_stride;
  int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
  int64_t dk_batch_stride, dk_head_stride, dk_row_stride;
  int64_t dv_batch_stride, dv_head_stride, dv_row_stride;

  float *dq_accum;
  float *d;
  int32_t *dq_semaphore;
  int64_t dq_accum_batch_stride, dq_accum_head_stride;
  int64_t d_batch_stride, d_head_stride;
  int64_t semaphore_batch_stride, semaphore_head_stride; // in int32s; one per m_block
  int32_t m_blocks;    // ceil(seqlen_q / kBlockM) of the main kernel
  /// Kernels that group kv heads (fagen_bwd_ws_groups_kv_heads): g, the grid's key tiles of 2^g
  /// kv heads interleaved (fagen_bwd_tile_group_log2, fagen_bwd_main_grid); every other kernel
  /// ignores it (0).
  int32_t tile_group_log2;
} fagen_bwd_params;

/// Rows of dq_accum per head: whole query tiles of block_m rows (varlen: total_q, packed).
static inline int64_t fagen_bwd_dq_rows(int32_t varlen, int64_t seqlen_q, int64_t total_q,
                                        int32_t block_m) {
  return varlen ? total_q : (seqlen_q + block_m - 1) / block_m * block_m;
}

#if defined(__CUDACC__)
#define FAGEN_BWD_HD __host__ __device__
#else
#define FAGEN_BWD_HD
#endif

/// Varlen kernels whose query tiles each own a whole block_m-row block of dq_accum (sm90ws:
/// its bulk reductions add whole blocks, padding rows included): the first dq_accum row of
/// sequence b, whose first packed row is row0 (cu_seqlens_q[b], clamped to [0, total_q]):
/// row0 + b * block_m rounded down to a whole tile. Sequence b's tiles then end at or before
/// sequence b + 1's first (row0 + length <= the next row0), and every tile ends within
/// fagen_bwd_dq_tiled_rows (row0 + length <= total_q, b < batch), whatever the array holds.
static FAGEN_BWD_HD inline int64_t fagen_bwd_dq_tile_row0(int64_t row0, int32_t b,
                                                          int32_t block_m) {
  return (row0 + (int64_t)b * block_m) / block_m * block_m;
}

/// Rows of dq_accum per head of such a varlen kernel: total_q + batch * block_m.
static inline int64_t fagen_bwd_dq_tiled_rows(int64_t total_q, int32_t batch, int32_t block_m) {
  return total_q + (int64_t)batch * block_m;
}

/// Where each workspace buffer starts and how big the whole is. `rows_q`: batch * seqlen_q
/// (varlen: total_q), the rows of D; `dq_rows`: batch * fagen_bwd_dq_rows (varlen: total_q, or
/// fagen_bwd_dq_tiled_rows).
/// Every offset is 256-byte aligned.
typedef struct fagen_bwd_workspace {
  uint64_t dq_accum_offset, d_offset, semaphore_offset, total_bytes;
} fagen_bwd_workspace;

static inline uint64_t fagen_align256_(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

#ifdef __cplusplus
#define FAGEN_BWD_CONSTEXPR constexpr
#else
#define FAGEN_BWD_CONSTEXPR
#endif

/// Copies of dq_accum and of the semaphores that a backward kernel uses: deterministic ones
/// with no mask (every query tile sees every key tile) and no block sparsity,
/// FAGEN_BWD_DET_DQ_SLOTS; every other kernel 1. The one statement of the rule: the template
/// (BwdConfig::kDqSlots) evaluates it at compile time, the runtime to size the workspace.
static FAGEN_BWD_CONSTEXPR inline int32_t fagen_bwd_dq_slots(int32_t deterministic,
                                                              int32_t unmasked_dense) {
  return deterministic && unmasked_dense ? FAGEN_BWD_DET_DQ_SLOTS : 1;
}

/// Whether an sm90ws backward kernel's grid groups kv heads: those with a causal mask (either
/// alignment) that are not deterministic (the portable backward's grid is always in block
/// order). Under a causal mask key tile n walks m_blocks - n query tiles or so, so a grid in
/// block order (each head's key tiles, longest first, one head after another) runs the last
/// heads' longest tiles last, on a GPU whose other SMs have run dry; interleaving the key tiles
/// of 2^g heads (each group's longest tiles of every head first) leaves only the shortest tiles
/// for the end. Deterministic kernels keep block order: their dQ order is the order of dispatch
/// (WsBwdConfig::kDeterministic). The one statement of the rule: the template
/// (WsBwdConfig::kGroupedGrid) and the runtime.
static FAGEN_BWD_CONSTEXPR inline int32_t fagen_bwd_ws_groups_kv_heads(int32_t causal,
                                                                        int32_t deterministic) {
  return causal && !deterministic;
}

/// Bytes of L2 that one group's queries may fill: Q, dO and dq_accum rows of every query head
/// of the group's kv heads, 16 MiB, a third of the H100's and H200's 50 MB. (FlashAttention-3's
/// causal backward interleaves the key tiles of (head, batch) pairs likewise, within 40 MB.)
#define FAGEN_BWD_TILE_GROUP_BYTES (16u << 20)

/// g of a grouped kernel's grid: the largest with 2^g <= heads_kv whose 2^g kv heads' query
/// rows (seqlen_q rows of group_size query heads each: Q and dO in 2-byte elements of hd_qk and
/// hd_v columns, dq_accum of dq_accum_cols floats) fit FAGEN_BWD_TILE_GROUP_BYTES and whose grid
/// (key_tiles << g CTAs along x) stays under 2^31; 0 when one head's rows do not fit. Any g is
/// correct (CTAs past heads_kv exit): the rule only orders the work.
static inline int32_t fagen_bwd_tile_group_log2(int64_t seqlen_q, int32_t group_size,
                                                int32_t hd_qk, int32_t hd_v,
                                                int32_t dq_accum_cols, int32_t heads_kv,
                                                int64_t key_tiles) {
  const uint64_t head_bytes = (uint64_t)(seqlen_q > 0 ? seqlen_q : 1) *
                              (uint64_t)(group_size > 0 ? group_size : 1) *
                              (2u * (uint64_t)hd_qk + 2u * (uint64_t)hd_v +
                               4u * (uint64_t)dq_accum_cols);
  int32_t g = 0;
  while (g < 30 && (2LL << g) <= (int64_t)heads_kv &&
         head_bytes <= ((uint64_t)FAGEN_BWD_TILE_GROUP_BYTES >> (g + 1)) &&
         key_tiles <= ((int64_t)0x7fffffff >> (g + 1)))
    ++g;
  return g;
}

/// The main kernel's grid: (key_tiles, heads_kv, batch) in block order (g = 0); grouped
/// (g = tile_group_log2 > 0), (key_tiles << g, ceil(heads_kv / 2^g), batch), whose CTA (x, y)
/// fagen_bwd_grid_cta places.
typedef struct fagen_bwd_grid {
  int64_t x;
  int32_t y, z;
} fagen_bwd_grid;

static FAGEN_BWD_HD inline fagen_bwd_grid fagen_bwd_main_grid(int64_t key_tiles,
                                                              int32_t heads_kv, int32_t batch,
                                                              int32_t g) {
  fagen_bwd_grid grid;
  grid.x = key_tiles << g;
  grid.y = (heads_kv + (1 << g) - 1) >> g;
  grid.z = batch;
  return grid;
}

/// CTA (x, y) of a grid of fagen_bwd_main_grid(.., g): key tile x >> g of kv head
/// (y << g) | (x & (2^g - 1)), key tile n of the group's every head before key tile n + 1; a kv
/// head past heads_kv (the last group's) has no work.
static FAGEN_BWD_HD inline void fagen_bwd_grid_cta(int32_t x, int32_t y, int32_t g,
                                                   int32_t *key_tile, int32_t *kv_head) {
  *key_tile = x >> g;
  *kv_head = (y << g) | (x & ((1 << g) - 1));
}

/// `dq_slots`: fagen_bwd_dq_slots of the kernel.
static inline fagen_bwd_workspace fagen_bwd_workspace_layout(int64_t rows_q, int64_t dq_rows,
                                                             int32_t heads_q,
                                                             int32_t head_dim_qk,
                                                             int32_t batch, int32_t m_blocks,
                                                             int32_t deterministic,
                                                             int32_t dq_slots) {
  fagen_bwd_workspace w;
  w.dq_accum_offset = 0;
  w.d_offset = fagen_align256_((uint64_t)dq_slots * dq_rows * heads_q * head_dim_qk * 4u);
  w.semaphore_offset = w.d_offset + fagen_align256_((uint64_t)rows_q * heads_q * 4u);
  w.total_bytes =
      w.semaphore_offset +
      (deterministic ? fagen_align256_((uint64_t)dq_slots * batch * heads_q * m_blocks * 4u) : 0);
  return w;
}

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_COMMON_BWD_PARAMS_H
