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
//   NAME_append   paged kernels only: `const __grid_constant__ fagen_kv_append_params`; the
//                 call's new keys and values written into the cache before NAME runs
//                 (fagen_run_forward_paged_append); grid fagen_append_blocks(), block
//                 FAGEN_APPEND_THREADS, no shared memory.
// Both merges: grid fagen_merge_blocks() (FAGEN_COMBINE_STATE_LANES, FAGEN_MERGE_STATE_LANES),
// block Config::kMergeThreads, no shared memory.
//
// Paged KV cache (kernels built with a page size, spec `kv_cache: paged`, `page_size: P`): K
// and V are [num_pages, P, heads_kv, head_dim] caches (vLLM's and FlashAttention's
// flash_attn_with_kvcache layout, any strides with the head dim contiguous): the forward block's
// k_batch_stride / v_batch_stride are then the page strides. Key j of sequence b is row j % P
// of page block_table[b][j / P]; sequence b has seqused_k[b] keys (at most seqlen_k, the
// call's longest). The kernel checks each page id against [0, num_pages) before it loads
// through it and each length against [0, seqlen_k]: a bad page's rows are zero-filled instead
// (no load), a bad length is clamped, and bad entries are recorded in kv_status (below), which
// fagen_paged_kv_status reads back.
//
// Packed rows: the query heads of one kv head (group_size of them) and the call's seqlen_q
// query tokens (at most the kernel's q_tokens) are the rows of one tile, row r = token *
// group_size + (head % group_size), so that a kv head's K and V are read once for all of them.
#ifndef FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H
#define FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H

#include "fwd_params.h" // same folder: found whatever the include path

// Numbered from 1001, apart from the forward's and the backward's versions, so that a decode
// cubin filed as another kernel (or the reverse) is always refused. Version 1001: the first.
// Version 1002: the paged KV cache's fields at the end (contiguous kernels ignore them).
// Version 1003: NAME_combine waits for its grid dependencies (griddepcontrol.wait on sm_90+),
// so the runtime may launch it as NAME's programmatic dependent; the fields are 1002's.
// Version 1004: a paged kernel's cubin has NAME_append (fagen_kv_append_params); the decode
// fields are 1003's.
// Version 1005: a paged decode kernel's CTAs (NAME's and NAME_append's) each write a status
// record of their own, so that nothing zeroes it before the launch; kv_status_stale added.
#define FAGEN_DECODE_PARAMS_VERSION 1005

/// The most query tokens per sequence a decode kernel serves (spec decode.q_tokens): the
/// kernel's mask reads the tokens of a row block as rows of one query tile of at least 16 rows.
#define FAGEN_DECODE_MAX_Q_TOKENS 16

/// Page sizes of a paged KV cache (spec page_size): powers of two in [16, 256] tokens. A page
/// of 16 rows or more starts every cp.async run of a key tile at a multiple of 8 rows, where
/// the tiles' shared-memory swizzle restarts (sm80/tile_ops.cuh SmemRow).
#define FAGEN_PAGE_SIZE_MIN 16
#define FAGEN_PAGE_SIZE_MAX 256
/// Whether `tokens` is a page size a paged decode kernel takes (a constant expression).
#define FAGEN_PAGE_SIZE_VALID(tokens)                                                           \
  ((tokens) >= FAGEN_PAGE_SIZE_MIN && (tokens) <= FAGEN_PAGE_SIZE_MAX &&                        \
   ((tokens) & ((tokens) - 1)) == 0)

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
  int32_t num_splits; // >= 1; split s takes fagen::decode_split_tiles(..., s) of the key tiles
  int32_t m_blocks;   // row blocks per kv head: ceil(group_size * seqlen_q / kBlockM)

  // Paged KV cache (DecodeConfig::kPageSize > 0), else null / 0. Device memory.
  const int32_t *block_table; // page ids: sequence b's page i at block_table[b * stride + i]
  const int32_t *seqused_k;   // [batch]: each sequence's cache length, in [0, seqlen_k]
  int32_t *kv_status;         // status records (below)
  int64_t block_table_batch_stride; // >= max_pages_per_seq
  int32_t num_pages;          // pages of the K and V caches: page ids are in [0, num_pages)
  int32_t max_pages_per_seq;  // columns of the block table; seqlen_k <= it x the page size
  int32_t kv_status_stale;    // NAME: records past its grid's that it marks OK (kv_status)
  int32_t reserved;
} fagen_decode_params;

/// A status record: {code, batch, index, value} of the first bad entry a kernel met, code
/// FAGEN_KV_STATUS_OK (0) when it met none. Entries are checked as they are read: a page past a
/// sequence's length, or a split's keys a mask hides, are never read nor checked.
/// - A paged decode kernel (NAME, NAME_append): one record per CTA, CTA (x, y, z)'s at record
///   x + gridDim.x * (y + gridDim.y * z) of kv_status, which the CTA marks OK as it starts and
///   fills with its first bad entry: every launch writes all of its grid's records, so nothing
///   zeroes them before it. The runtime puts NAME_append's records right after NAME's; a call
///   without an append passes their count as kv_status_stale, and NAME's CTAs mark them OK too
///   (records a previous call's append left), else 0.
/// - A paged forward (prefill): one record for the launch, which the runtime zeroes first.
#define FAGEN_KV_STATUS_WORDS 4
#define FAGEN_KV_STATUS_OK 0
/// block_table[batch][index] = value is not a page id in [0, num_pages).
#define FAGEN_KV_STATUS_PAGE_ID 1
/// seqused_k[batch] = value is not in [0, seqlen_k] (index 0); the kernel clamped it.
#define FAGEN_KV_STATUS_SEQUSED_K 2
/// NAME_append: seqused_k[batch] = value leaves no room for the index new tokens (it is not in
/// [0, seqlen_k - index]); nothing was appended to the sequence and its length was clamped.
#define FAGEN_KV_STATUS_APPEND_LENGTH 3

/// NAME_append: a decode call's new keys and values (its `tokens` query tokens' own, as
/// FlashAttention's flash_attn_with_kvcache(k=, v=)) written into a paged cache. New token t
/// of sequence b is key seqused_k[b] + t: row (seqused_k[b] + t) % page_size of page
/// block_table[b][(seqused_k[b] + t) / page_size]. Each page id is checked before a row is
/// written through it (a bad one is reported and its rows skipped), and each length against
/// [0, seqlen_k - tokens] (a bad one is reported, nothing of the sequence is written). The
/// kernel writes each sequence's new length, seqused_k[b] + tokens (a bad one clamped to [0,
/// seqlen_k]), to seqused_out, which NAME then reads as its seqused_k; seqused_k itself is not
/// changed. Strides in elements, the head dim contiguous.
///   k_new, v_new      [batch, tokens, heads_kv, head_dim(_v)]; strides batch, token, head
///   k_cache, v_cache  the caches; strides page, head, row (the forward block's)
typedef struct fagen_kv_append_params {
  const void *k_new;
  const void *v_new;
  void *k_cache;
  void *v_cache;
  const int32_t *block_table;
  const int32_t *seqused_k;
  int32_t *seqused_out; // [batch], device memory (the workspace's lengths)
  int32_t *kv_status;   // the launch's status records (one per CTA, as NAME's)
  int64_t k_new_strides[3];
  int64_t v_new_strides[3];
  int64_t k_cache_strides[3];
  int64_t v_cache_strides[3];
  int64_t block_table_batch_stride;
  int32_t batch, tokens, heads_kv, num_pages, seqlen_k, reserved;
} fagen_kv_append_params;

/// Threads of an append launch's blocks.
#define FAGEN_APPEND_THREADS 128
/// Blocks of an append launch along x (y: the batch): one thread per 8 columns of a new
/// token's K row and V row (the wider head dim's chunks) of each kv head.
static inline int64_t fagen_append_blocks(int32_t tokens, int32_t heads_kv, int32_t head_dim,
                                          int32_t head_dim_v) {
  const int64_t chunks = (head_dim > head_dim_v ? head_dim : head_dim_v) / 8;
  return ((int64_t)tokens * heads_kv * chunks + FAGEN_APPEND_THREADS - 1) / FAGEN_APPEND_THREADS;
}

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
/// nothing (its O is ignored, NaN or not); a NaN LSE makes the row's O and LSE NaN.
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

/// Threads that share one 8-column chunk of an output row, each merging every k-th state, their
/// sums then added by shuffles. The decode's combine (NAME_combine): 8, since a call has up to
/// tens of splits, whose loads one thread would wait for one after another (a few microseconds
/// at batch 1: longer than the split kernel itself). fagen_merge_states (NAME_merge): 1, for a
/// few states over many rows.
#define FAGEN_COMBINE_STATE_LANES 8
#define FAGEN_MERGE_STATE_LANES 1

/// Blocks of a merge launch: state_lanes threads per 8 columns of an output row.
static inline int64_t fagen_merge_blocks(int64_t rows, int32_t head_dim, int32_t state_lanes) {
  const int64_t items = rows * (head_dim / 8) * state_lanes;
  return (items + FAGEN_MERGE_THREADS - 1) / FAGEN_MERGE_THREADS;
}

/// Where the partial O and LSE of a decode call start in its workspace (when it has more than
/// one split), a paged call's status records (kv_status) and the lengths NAME_append writes
/// (int32 [batch]), and its size; all 256-byte aligned. status_records: 0 for a contiguous
/// cache; a paged decode's NAME grid's CTAs + NAME_append's; a paged forward's 1.
typedef struct fagen_decode_workspace {
  uint64_t o_offset, lse_offset, status_offset, lengths_offset, total_bytes;
} fagen_decode_workspace;

static inline uint64_t fagen_decode_align256_(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

static inline fagen_decode_workspace fagen_decode_workspace_layout(int32_t num_splits,
                                                                   int32_t batch,
                                                                   int32_t heads_q,
                                                                   int32_t seqlen_q,
                                                                   int32_t head_dim_v,
                                                                   int64_t status_records) {
  const uint64_t rows =
      num_splits > 1 ? (uint64_t)num_splits * batch * heads_q * seqlen_q : 0u;
  const int paged = status_records > 0;
  fagen_decode_workspace w;
  w.o_offset = 0;
  w.lse_offset = fagen_decode_align256_(rows * head_dim_v * 4u);
  w.status_offset = w.lse_offset + fagen_decode_align256_(rows * 4u);
  w.lengths_offset =
      w.status_offset +
      (paged ? fagen_decode_align256_((uint64_t)status_records * FAGEN_KV_STATUS_WORDS * 4u) : 0u);
  w.total_bytes = w.lengths_offset + (paged ? fagen_decode_align256_((uint64_t)batch * 4u) : 0u);
  return w;
}

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_ABI_DECODE_PARAMS_H
