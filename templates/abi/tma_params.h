// fagen: the tensor maps of the TMA kernels (sm90 warp-specialized forward).
//
// Shared verbatim by device code (templates/) and host code (runtime/), plain C layout, no CUDA
// headers. A TMA kernel takes two arguments: `const __grid_constant__ fagen_fwd_params` and
// `const __grid_constant__ fagen_fwd_tma_maps`; the runtime encodes the maps for each call
// (cuTensorMapEncodeTiled) from the call's pointers and strides, as described below.
#ifndef FAGEN_TEMPLATES_COMMON_TMA_PARAMS_H
#define FAGEN_TEMPLATES_COMMON_TMA_PARAMS_H

#include <stdint.h>

#define FAGEN_FWD_TMA_MAPS_VERSION 2

/// Rows of a paged forward's K/V box: pages of 64 tokens or more where its key tiles (block_n
/// rows) lie in one page or span whole pages, each run of min(page_size, block_n) rows one box;
/// else 0 (the kernel gathers K and V with cp.async). H200, bf16 hd 128 causal, 128-key tiles
/// (docs/perf/sm90-fwd.md): 128-token pages by TMA 0.99-1.11x the contiguous kernel's time
/// (gathered: 1.41-1.55x); 16-token pages by TMA 1.56-1.82x (gathered: 1.41-1.61x).
#define FAGEN_PAGED_TMA_BOX_ROWS(page_size, block_n)                                           \
  ((page_size) >= 64 && ((page_size) % (block_n) == 0 || (block_n) % (page_size) == 0)        \
       ? ((page_size) < (block_n) ? (page_size) : (block_n))                                    \
       : 0)

#ifdef __cplusplus
extern "C" {
#endif

/// An encoded CUtensorMap (cuda.h): 128 opaque bytes, 64-byte aligned.
typedef struct __attribute__((aligned(64))) fagen_tensor_map {
  uint64_t opaque[16];
} fagen_tensor_map;

/// Q, K and V of a forward call, each a rank-4 tiled map of 16-bit elements
/// (CU_TENSOR_MAP_DATA_TYPE_UINT16), innermost dimension first:
///   dims    {head_dim, seqlen, heads, batch}            (seqlen_q / heads_q for Q, _k / _kv else)
///   strides {row_stride, head_stride, batch_stride} * 2 bytes (fagen_fwd_params' strides)
///   box     {64, rows, 1, 1}: rows = the kernel's block_m for Q, block_n for K and V
/// with 128-byte swizzle, no interleave, L2 promotion 256 B and out-of-bounds elements read as
/// zero (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE). A kernel loads a (rows, head_dim) tile as
/// head_dim / 64 boxes, into its 64-column blocks (templates/sm90/tile_ops.cuh).
/// O (version 2): the same for the output, {head_dim_v, seqlen_q, heads_q, batch} with O's
/// strides and box {64, 64, 1, 1} (one consumer warpgroup's rows), which kernels built with
/// kTmaStoreO store through; for the others (varlen kernels among them) the runtime leaves it
/// zero and they never read it.
/// A paged forward (fwd_ws_paged_kernel, chunked prefill): Q's map as above; K's and V's over
/// the caches, {head_dim, page_size, heads_kv, num_pages} with strides {row, head, page} and
/// box {64, FAGEN_PAGED_TMA_BOX_ROWS, 1, 1}, where that is not 0; else the producer warpgroup
/// gathers K and V with cp.async and the runtime leaves k and v zero (o always).
typedef struct fagen_fwd_tma_maps {
  fagen_tensor_map q;
  fagen_tensor_map k;
  fagen_tensor_map v;
  fagen_tensor_map o;
} fagen_fwd_tma_maps;

/// The backward's (sm90 warp-specialized backward, kernels taking `const __grid_constant__
/// fagen_bwd_params` and this): Q, K, V and dO, encoded as the forward's maps (rank 4, 16-bit,
/// 128-byte swizzle, zero fill) from fagen_bwd_params' pointers and strides; boxes {64, rows,
/// 1, 1} with rows = the kernel's block_m for Q and dO, block_n for K and V.
typedef struct fagen_bwd_tma_maps {
  fagen_tensor_map q;
  fagen_tensor_map k;
  fagen_tensor_map v;
  fagen_tensor_map dout;
} fagen_bwd_tma_maps;

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_COMMON_TMA_PARAMS_H
