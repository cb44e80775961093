// fagen: the parameter blocks of the split-KV decode kernels (template sm80decode) and of the
// merge of partial attention states (their combine step, and fagen_merge_states).
//
// Shared verbatim by device code (templates/) and host code (runtime/), plain C. A decode
// kernel's cubin holds three entry points:
//   NAME          `const __grid_constant__ fagen_decode_params`; grid (m_blocks * num_splits,
//                 heads_kv, batch), block Config::kThreads, Config::kSmemBytes of dynamic
//                 shared memory. CTA (x, kv head, batch) computes row block x % m_blocks of the
//                 kv head's packed query rows over split x / m_blocks of the visible key tiles.
//   NAME_combine  `const __grid_constant__ fagen_merge_params` over float32 states: the splits'
//                 partial (O, LSE) in the workspace merged into O and LSE.
//   NAME_merge    the same over states in the kernel's dtype (fagen_merge_states).
// Both merges: grid fagen_merge_blocks(), block Config::kMergeThreads, no shared memory.
//
// Packed rows: the query heads of one kv head (group_size of them) and the call's seqlen_q
// query tokens (at most the kernel's q_tokens) are the rows of one tile, row r = token *
// group_size + (head % group_size), so that a kv head's K and V are read once for all of them.
#ifndef FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H
#define FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H

#include "fwd_params.h" // same folder: found whatever the include path

// Numbered from 1001, apart from the forward's and the backward's versions, so that a decode
// cubin filed as another kernel (or the reverse) is always refused. Version 1001: the first.
#define FAGEN_DECODE_PARAMS_VERSION 1001

/// The most query tokens per sequence a decode kernel serves (spec decode.q_tokens): the
/// kernel's mask reads the tokens of a row block as rows of one query tile of at least 16 rows.
#define FAGEN_DECODE_MAX_Q_TOKENS 16

#ifdef __cplusplus
extern "C" {
#endif

/// A decode call: the forward's block (seqlen_q = query tokens per sequence, group_size =
/// heads_q / heads_kv) and where the splits' partial results go.
///   o_partial    float32 [num_splits, batch, heads_q, seqlen_q, head_dim_v], each split's O
///                normalized by its own softmax sum; null when num_splits is 1: the kernel
///                then writes O (input dtype) and LSE itself.
///   lse_partial  float32 [num_splits, batch, heads_q, seqlen_q]: each split's LSE (-inf
///                where a row sees no key of the split).
typedef struct fagen_decode_params {
  fagen_fwd_params fwd;
  float *o_partial;
  float *lse_partial;
  int32_t num_splits; // >= 1; split s takes fagen::decode_split_range(..., s) of the key tiles
  int32_t m_blocks;   // row blocks per kv head: ceil(group_size * seqlen_q / kBlockM)
} fagen_decode_params;

/// A merge of num_states attention states (O_s, LSE_s) of the same queries into
///   O = sum_s exp(LSE_s - M) O_s / sum_s exp(LSE_s - M),   LSE = M + log sum_s exp(LSE_s - M),
/// M = max_s LSE_s: the softmax over the union of the states' keys, for split-KV, cascade
/// (shared-prefix) attention and context parallelism. Rows are (batch, head, row) triples;
/// strides in elements, the head dim contiguous.
///   o_states    [num_states, batch, heads, seqlen, head_dim], ElementIn (float32 for a decode
///               kernel's combine, the kernel's dtype for NAME_merge); strides state, batch,
///               head, row
///   lse_states  float32, strides state, batch, head, row
///   o           the kernel's dtype; strides batch, head, row
///   lse         float32, strides batch, head, row; null: not written
/// A row whose states all have LSE -inf gets O = 0 and LSE -inf; a state with LSE -inf adds
/// nothing (its O is not read); a NaN LSE makes the row's O and LSE NaN.
typedef struct fagen_merge_params {
  const void *o_states;
  const float *lse_states;
  void *o;
  float *lse;
  int64_t o_states_strides[4];
  int64_t lse_states_strides[4];
  int64_t o_strides[3];
  int64_t lse_strides[3];
  int32_t num_states, batch, heads, seqlen;
} fagen_merge_params;

/// Threads of a merge launch's blocks (Config::kMergeThreads; the manifest's pre_post_threads).
#define FAGEN_MERGE_THREADS 128

/// Blocks of a merge launch: one thread per 8 columns of an output row.
static inline int64_t fagen_merge_blocks(int64_t rows, int32_t head_dim) {
  const int64_t items = rows * (head_dim / 8);
  return (items + FAGEN_MERGE_THREADS - 1) / FAGEN_MERGE_THREADS;
}

/// Where the partial O and LSE of a decode call start in its workspace, and its size; both
/// 256-byte aligned.
typedef struct fagen_decode_workspace {
  uint64_t o_offset, lse_offset, total_bytes;
} fagen_decode_workspace;

static inline uint64_t fagen_decode_align256_(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

static inline fagen_decode_workspace fagen_decode_workspace_layout(int32_t num_splits,
                                                                   int32_t batch,
                                                                   int32_t heads_q,
                                                                   int32_t seqlen_q,
                                                                   int32_t head_dim_v) {
  const uint64_t rows = (uint64_t)num_splits * batch * heads_q * seqlen_q;
  fagen_decode_workspace w;
  w.o_offset = 0;
  w.lse_offset = fagen_decode_align256_(rows * head_dim_v * 4u);
  w.total_bytes = w.lse_offset + fagen_decode_align256_(rows * 4u);
  return w;
}

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H
