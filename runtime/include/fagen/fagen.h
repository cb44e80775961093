/* fagen runtime: load a bundle, plan an attention call, run it on a CUDA stream.
 *
 * C ABI. Depends on nothing but the CUDA driver (libcuda.so.1), which is opened at run time:
 * without a driver, loading and inspecting a bundle works and every call that needs the GPU
 * returns FAGEN_ERROR_NO_DRIVER. Every function returns a status; on failure a thread-local
 * message that names the input and the fix is available from fagen_last_error().
 *
 * Threading: a loaded bundle is immutable and may be shared by any number of threads; plans
 * are plain values. fagen_run_forward and fagen_run_backward never allocate and never
 * synchronize, so they are safe inside CUDA graph capture.
 *
 * ABI 3 (FAGEN_RUNTIME_ABI_VERSION, also the SONAME's major: libfagen_rt.so.3): the structs a
 * caller passes (fagen_fwd_problem, fagen_run_args) and fagen_plan start with struct_size and
 * abi_tag, which the library checks before it reads anything else, so that a caller built
 * against another fagen.h gets FAGEN_ERROR_ABI_MISMATCH instead of a crash; initialize them
 * with FAGEN_FWD_PROBLEM_INIT / FAGEN_RUN_ARGS_INIT (or fagen_fwd_problem_init,
 * fagen_run_args_init). Workspaces are passed with their size. ABI 2 callers recompile.
 * The paged KV cache (fagen_paged_kv, fagen_plan_forward_paged, fagen_run_forward_paged,
 * fagen_paged_kv_status), the decode split count (fagen_plan_set_decode_splits,
 * fagen_plan_decode_splits) and the append (fagen_kv_append, fagen_run_forward_paged_append)
 * came within ABI 3: new functions and new structs, none changed.
 * ABI 2: every attention variant (masks, score mods, dropout, varlen, block sparsity) and the
 * backward pass.
 */
#ifndef FAGEN_RUNTIME_FAGEN_H
#define FAGEN_RUNTIME_FAGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAGEN_RUNTIME_ABI_VERSION 3

/** The abi_tag of every versioned struct: "FG" and the ABI version. No field of an older ABI's
 *  structs that can land here (ABI 2's heads_q, ABI 1's too) takes a value this large. */
#define FAGEN_ABI_TAG (0x46470000u | (unsigned)FAGEN_RUNTIME_ABI_VERSION)

/* The runtime is built with hidden visibility; only these functions are exported. */
#if defined(__GNUC__)
#define FAGEN_API __attribute__((visibility("default")))
#else
#define FAGEN_API
#endif

typedef enum fagen_status {
  FAGEN_OK = 0,
  FAGEN_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, a bad stride, a misaligned tensor */
  FAGEN_ERROR_IO = 2,               /* the bundle file could not be read */
  FAGEN_ERROR_BUNDLE_INVALID = 3,   /* corrupt, truncated or wrong-version bundle */
  FAGEN_ERROR_NOT_SUPPORTED = 4,    /* no kernel in the bundle serves this call; see the reason */
  FAGEN_ERROR_NO_DRIVER = 5,        /* no CUDA driver or no GPU on this machine */
  FAGEN_ERROR_NO_KERNEL_FOR_GPU = 6,/* the bundle has no cubin for this GPU's architecture */
  FAGEN_ERROR_CUDA = 7,             /* a CUDA driver call failed; the message has its name */
  FAGEN_ERROR_ABI_MISMATCH = 8      /* a struct from a caller built against another fagen.h
                                       (struct_size / abi_tag): rebuild the caller */
} fagen_status;

typedef enum fagen_dtype { FAGEN_DTYPE_FP16 = 0, FAGEN_DTYPE_BF16 = 1 } fagen_dtype;

/** Opaque, immutable once loaded. */
typedef struct fagen_bundle fagen_bundle;

/** The message of the last failed call on this thread ("" if none). Valid until the next call. */
FAGEN_API const char *fagen_last_error(void);
/** A short name for a status code ("FAGEN_ERROR_NOT_SUPPORTED"). */
FAGEN_API const char *fagen_status_name(fagen_status status);
/** The runtime's version string, e.g. "0.1.0". */
FAGEN_API const char *fagen_version(void);

/** Reads and validates a bundle file. Does not need a GPU. */
FAGEN_API fagen_status fagen_bundle_load_file(const char *path, fagen_bundle **out);
/** Validates a bundle held in memory; the bytes are copied. Does not need a GPU. */
FAGEN_API fagen_status fagen_bundle_load_memory(const void *data, size_t size,
                                                fagen_bundle **out);
/** Frees a bundle and the modules loaded from it. Plans made from it become invalid: running
 *  one afterwards returns FAGEN_ERROR_INVALID_ARGUMENT (the runtime keeps a registry of live
 *  bundles and each plan the id of its bundle, so it never reads the freed memory). Other
 *  functions given a destroyed bundle pointer are undefined behaviour. */
FAGEN_API void fagen_bundle_destroy(fagen_bundle *bundle);

/** Number of kernels in the bundle, and a one-line description of kernel i (for tools). */
FAGEN_API int fagen_bundle_kernel_count(const fagen_bundle *bundle);
FAGEN_API const char *fagen_bundle_kernel_name(const fagen_bundle *bundle, int index);

/** Which keys a query sees. Causal and window masks are bottom-right aligned by default (as
 *  FlashAttention >= 2.1: the last query sees the last key), top-left on request (query i sees
 *  keys up to i, as PyTorch's is_causal=True); the two differ only when seqlen_q != seqlen_k. */
typedef enum fagen_mask {
  FAGEN_MASK_NONE = 0,
  FAGEN_MASK_CAUSAL = 1, /* query i sees key j iff j <= i + off */
  FAGEN_MASK_WINDOW = 2  /* i + off - window_left <= j <= i + off + window_right */
} fagen_mask;           /* off = seqlen_k - seqlen_q (bottom-right) or 0 (top-left) */

typedef enum fagen_mask_align {
  FAGEN_MASK_ALIGN_BOTTOM_RIGHT = 0,
  FAGEN_MASK_ALIGN_TOP_LEFT = 1
} fagen_mask_align;

/** What happens to a logit before the softmax (scale * q.k for FAGEN_SCORE_MOD_NONE). */
typedef enum fagen_score_mod {
  FAGEN_SCORE_MOD_NONE = 0,
  FAGEN_SCORE_MOD_SOFTCAP = 1, /* softcap * tanh(scale * s / softcap) */
  FAGEN_SCORE_MOD_ALIBI = 2    /* scale * s - slope[b, h] * |i + seqlen_k - seqlen_q - j| */
} fagen_score_mod;

/** Block sparsity: which (sparse_block x sparse_block) blocks of the attention matrix are
 *  computed. RUNTIME: a byte per block passed at run time (fagen_run_args::block_mask);
 *  STATIC: a layout compiled into the kernel from the spec. */
typedef enum fagen_sparsity {
  FAGEN_SPARSITY_NONE = 0,
  FAGEN_SPARSITY_RUNTIME = 1,
  FAGEN_SPARSITY_STATIC = 2
} fagen_sparsity;

/** An attention call: the forward's shapes, layouts and variant; the backward repeats the
 *  forward's problem and adds the gradients' strides. Strides are in elements; the head dim
 *  must be contiguous. Shapes: Q [batch, seqlen_q, heads_q, head_dim_qk], K [batch, seqlen_k,
 *  heads_kv, head_dim_qk], V [batch, seqlen_k, heads_kv, head_dim_v], O like Q with
 *  head_dim_v, addressed through the strides (so BSHD and BHSD both work); dO like O, dQ like
 *  Q, dK like K, dV like V, each with its own strides. LSE float32 [batch, heads_q, seqlen_q]
 *  contiguous. A query row that sees no key gets O = 0 and LSE = -inf (and dQ = 0).
 *
 *  A zero-initialized struct plus the fields of ABI 1 (shapes, dtype, causal, softmax_scale,
 *  q/k/v/o strides) means what it meant in ABI 1: dense attention, causal bottom-right when
 *  causal = 1. The other fields select the variant; the kernel chosen must have been built for
 *  exactly that variant (the spec keys of docs/spec.md).
 *
 *  Variable length (varlen = 1): the batch's sequences are packed, Q [total_q, heads_q, d],
 *  K/V [total_k, heads_kv, d], O/dO/dQ like Q, dK/dV like K; sequence b is rows
 *  [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (fagen_run_args); seqlen_q / seqlen_k are the
 *  largest sequence lengths; batch strides are ignored. LSE is then float32 [heads_q,
 *  total_q]. Causal and window masks align per sequence. */
typedef struct fagen_fwd_problem {
  uint32_t struct_size;  /* sizeof(fagen_fwd_problem): FAGEN_FWD_PROBLEM_INIT sets both */
  uint32_t abi_tag;      /* FAGEN_ABI_TAG */
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
  fagen_dtype dtype;
  int32_t causal;        /* 0 or 1: FAGEN_MASK_CAUSAL where mask is FAGEN_MASK_NONE */
  float softmax_scale;   /* 0 means 1/sqrt(head_dim_qk) */
  int64_t q_strides[3];  /* batch, head, row */
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t o_strides[3];

  /* ABI 2: the variant. */
  fagen_mask mask;
  fagen_mask_align mask_align;  /* causal and window masks; ignored without a mask */
  int32_t window_left;          /* FAGEN_MASK_WINDOW: keys before the diagonal, -1 unbounded;
                                   a bound >= max(seqlen_q, seqlen_k) excludes no key and is
                                   unbounded too (up to INT32_MAX) */
  int32_t window_right;         /* FAGEN_MASK_WINDOW: keys after the diagonal, as window_left */
  fagen_score_mod score_mod;
  float softcap;                /* FAGEN_SCORE_MOD_SOFTCAP: > 0 (e.g. 50); else 0 */
  float dropout_p;              /* dropout on P, in [0, 1), applied in steps of 1/256 (the
                                   keep rule draws 8 bits per element); > 0 needs a dropout
                                   kernel; 0 plans a kernel without dropout (docs/spec.md) */
  int32_t varlen;               /* 0 or 1: packed sequences, cu_seqlens in fagen_run_args */
  int64_t total_q, total_k;     /* varlen: rows of the packed Q and K (cu_seqlens[batch]);
                                   the kernels never touch a row at or past these, whatever
                                   the device's cu_seqlens hold */
  fagen_sparsity sparsity;
  int32_t sparse_block;         /* tokens per block: RUNTIME needs the kernel's; STATIC 0 = any */
  uint32_t sparse_hash;         /* STATIC: the layout's 8-hex-digit hash (fagen inspect), 0 = the
                                   only static layout of the variant */
  int32_t reserved0;            /* must be 0 */

  /* ABI 2: the backward's gradients (batch, head, row), filled by the stride helpers too. */
  int64_t do_strides[3];
  int64_t dq_strides[3];
  int64_t dk_strides[3];
  int64_t dv_strides[3];
} fagen_fwd_problem;

/** A zero-initialized problem with its struct_size and abi_tag: `fagen_fwd_problem p =
 *  FAGEN_FWD_PROBLEM_INIT;` (C and C++). */
#define FAGEN_FWD_PROBLEM_INIT {(uint32_t)sizeof(fagen_fwd_problem), FAGEN_ABI_TAG}
/** Zeroes *problem and sets its struct_size and abi_tag (for bindings without the macro). */
FAGEN_API void fagen_fwd_problem_init(fagen_fwd_problem *problem);

/** Fills the strides of contiguous BSHD ([batch, seq, heads, dim]) tensors: Q, K, V, O and the
 *  gradients dO, dQ, dK, dV (varlen: packed [total, heads, dim], the batch stride unused). */
FAGEN_API void fagen_fwd_problem_set_bshd_strides(fagen_fwd_problem *problem);
/** Fills the strides of contiguous BHSD ([batch, heads, seq, dim]) tensors, as above. */
FAGEN_API void fagen_fwd_problem_set_bhsd_strides(fagen_fwd_problem *problem);

/** Run-time arguments of a variant: device pointers and the dropout seed. A zero-initialized
 *  struct serves a dense call; each field is read only by the variants that need it. */
typedef struct fagen_run_args {
  uint32_t struct_size; /* sizeof(fagen_run_args): FAGEN_RUN_ARGS_INIT sets both */
  uint32_t abi_tag;     /* FAGEN_ABI_TAG */
  /* FAGEN_SCORE_MOD_ALIBI: float32 slopes, slope of (b, h) at alibi_slopes[b *
   * alibi_batch_stride + h]; alibi_batch_stride 0 = one slope per head for every batch entry. */
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  /* FAGEN_SPARSITY_RUNTIME: one byte per (sparse_block x sparse_block) block, nonzero =
   * computed, at block_mask[b * batch_stride + h * head_stride + row_block * row_stride +
   * col_block] (h: the query head); strides may be 0 to broadcast. Rows: ceil(seqlen_q /
   * sparse_block), columns: ceil(seqlen_k / sparse_block). */
  const uint8_t *block_mask;
  int64_t block_mask_batch_stride, block_mask_head_stride, block_mask_row_stride;
  /* varlen: batch + 1 ascending int32 row offsets into the packed tensors, [0] = 0,
   * [batch] = total_q / total_k. Device memory, which the runtime does not read (unless
   * FAGEN_VALIDATE=1, docs/runtime-api.md); the kernels clamp every sequence to rows [0,
   * total) and to seqlen_q / seqlen_k, so a bad array gives wrong values inside O, LSE (and dQ,
   * dK, dV), never an access outside the tensors. */
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  /* dropout_p > 0: Philox seed and offset; the backward must repeat the forward's. */
  uint64_t dropout_seed;
  uint64_t dropout_offset;
} fagen_run_args;

/** A zero-initialized fagen_run_args with its struct_size and abi_tag. */
#define FAGEN_RUN_ARGS_INIT {(uint32_t)sizeof(fagen_run_args), FAGEN_ABI_TAG}
/** Zeroes *args and sets its struct_size and abi_tag. */
FAGEN_API void fagen_run_args_init(fagen_run_args *args);

/* Bits of fagen_plan::run_args: the run-time arguments the planned variant reads. */
#define FAGEN_RUN_ARG_ALIBI_SLOPES 1u
#define FAGEN_RUN_ARG_BLOCK_MASK 2u
#define FAGEN_RUN_ARG_CU_SEQLENS 4u
#define FAGEN_RUN_ARG_DROPOUT_SEED 8u

/** What a plan runs: a forward (fagen_run_forward*, a decode kernel's too), a backward
 *  (fagen_run_backward) or a merge of attention states (fagen_run_merge_states). */
typedef enum fagen_pass {
  FAGEN_PASS_FORWARD = 0,
  FAGEN_PASS_BACKWARD = 1,
  FAGEN_PASS_MERGE = 2
} fagen_pass;

/** Size of fagen_plan's parameter block: holds the forward's and the backward's. */
#define FAGEN_PLAN_PARAMS_BYTES 1024

/** A planned call: which kernel(s), their launch geometry and parameters. Plain value; valid
 *  while its bundle lives. Fields are private to the runtime; tools may read them. */
typedef struct fagen_plan {
  uint32_t struct_size;     /* written by the planner, checked by every run */
  uint32_t abi_tag;
  const fagen_bundle *bundle;
  uint64_t bundle_id;       /* the bundle's id in the registry of live bundles */
  void *context;            /* the CUcontext whose modules hold the functions below */
  uint64_t context_id;      /* its cuCtxGetId (0 from a driver without it) */
  int32_t device;           /* its device ordinal: a run with another device's context
                               current is refused, naming both */
  int32_t kernel_index;
  fagen_pass pass;
  int32_t grid[3];          /* the forward kernel (a kernel with a tile counter: its launch
                               with a workspace), or the backward's main kernel */
  int32_t block[3];
  int32_t smem_bytes;
  int32_t pre_post_grid[3]; /* backward: the _pre and _post kernels (no dynamic smem);
                               decode: the _combine kernel */
  int32_t pre_post_block[3];
  uint32_t run_args;        /* FAGEN_RUN_ARG_* bits: what fagen_run_args must carry */
  void *function;           /* CUfunction for the current context's device */
  void *pre_function;       /* backward: NAME_pre and NAME_post (decode: post_function is
                               NAME_combine, and a paged one's pre_function NAME_append); null
                               for the forward */
  void *post_function;
  size_t workspace_bytes;   /* caller-allocated scratch: the backward needs it; a forward with
                               it > 0 runs faster with it (fagen_run_forward_with_workspace) */
  uint64_t workspace_offsets[3]; /* backward: dq_accum, D, dq semaphore (fagen_bwd_workspace);
                                    decode: the partial O and LSE */
  uint8_t params[FAGEN_PLAN_PARAMS_BYTES]; /* the parameter block, pointers filled at run time */
} fagen_plan;

/** FAGEN_RUNTIME_ABI_VERSION of the library (for bindings that cannot see this header). */
FAGEN_API int fagen_abi_version(void);

/** Picks the forward kernel for this call on the current CUDA context's device, loads its
 *  module if needed and fills *plan. Returns FAGEN_ERROR_NOT_SUPPORTED with the reason when no
 *  kernel in the bundle serves the call (naming what the bundle has and the spec keys to
 *  add). Needs the driver and a current context (the primary context of device 0 is made
 *  current if none is).
 *
 *  Decode: where the bundle has a split-KV decode kernel of the call's variant (spec `passes:
 *  [decode]`) whose q_tokens is at least seqlen_q, that kernel serves the call (the query
 *  heads of a kv head packed into one tile, the keys split across CTAs). The plan then
 *  chooses the split count from batch, heads_kv, seqlen_k and the GPU's SM count, and
 *  plan->workspace_bytes is the split partials' scratch (0 when one split suffices): give it to
 *  fagen_run_forward_with_workspace; a call without it runs one split (correct, slower). */
FAGEN_API fagen_status fagen_plan_forward(const fagen_bundle *bundle,
                                          const fagen_fwd_problem *problem, fagen_plan *plan);

/** Sets the split count of a decode plan (fagen_plan_forward or fagen_plan_forward_paged of a
 *  split-KV decode kernel) instead of the planned one: num_splits in 1..128; the key tiles are
 *  divided as evenly as before (a split past the last tile holds no key and the combine skips
 *  it). Updates the grid, the combine and plan->workspace_bytes (allocate the new size). For
 *  tuning the split rule and for callers that know their GPU's share (e.g. other work running
 *  beside the decode); FAGEN_ERROR_INVALID_ARGUMENT for a plan of another kernel. */
FAGEN_API fagen_status fagen_plan_set_decode_splits(fagen_plan *plan, int32_t num_splits);
/** The split count of a decode plan (planned or set); 0 for a plan of another kernel or null. */
FAGEN_API int32_t fagen_plan_decode_splits(const fagen_plan *plan);

/** Like fagen_plan_forward, but plans kernel `kernel_index` of the bundle instead of choosing
 *  one (for tools that test every kernel, such as `fagen check`). Fails with
 *  FAGEN_ERROR_NOT_SUPPORTED if that kernel does not serve the problem, and with
 *  FAGEN_ERROR_NO_KERNEL_FOR_GPU if it cannot run on the current device. */
FAGEN_API fagen_status fagen_plan_forward_kernel(const fagen_bundle *bundle,
                                                 const fagen_fwd_problem *problem,
                                                 int kernel_index, fagen_plan *plan);

/** Launches the planned forward on `stream` (a CUstream / cudaStream_t; 0 = default stream).
 *  q, k, v, o: device pointers, 16-byte aligned; lse: float32 device pointer. No allocation,
 *  no synchronization. For a dense variant only: a variant that reads run-time arguments
 *  (ALiBi, runtime block mask, varlen, dropout) needs fagen_run_forward_with_args. */
FAGEN_API fagen_status fagen_run_forward(const fagen_plan *plan, const void *q,
                                         const void *k, const void *v, void *o, float *lse,
                                         void *stream);

/** fagen_run_forward with the variant's run-time arguments (`args` may be null for a variant
 *  that reads none). */
FAGEN_API fagen_status fagen_run_forward_with_args(const fagen_plan *plan, const void *q,
                                                   const void *k, const void *v, void *o,
                                                   float *lse, const fagen_run_args *args,
                                                   void *stream);

/** fagen_run_forward_with_args with a workspace: `workspace_bytes` (at least
 *  plan->workspace_bytes, else FAGEN_ERROR_INVALID_ARGUMENT) of device memory, 4-byte aligned,
 *  owned by one stream at a time: no other call in flight may use it (the runtime zeroes what
 *  it uses on `stream` before the launch, so two streams sharing one would race on it). No
 *  initialization needed. Kernels whose work tiles cost different amounts (sm90ws with a causal
 *  or window mask, or varlen; not block-sparse ones) report a workspace of 4 bytes: a counter
 *  from which one thread block per SM (plan->grid) takes the next tile, heaviest first, as it
 *  frees up. Without one (workspace null, or the calls above) they run one thread block per
 *  tile, or, where the kernel is persistent (hd 64), one per SM dealing the tiles statically;
 *  the results are bitwise the same. With plan->workspace_bytes 0 the workspace is not read and
 *  may be null. */
FAGEN_API fagen_status fagen_run_forward_with_workspace(const fagen_plan *plan, const void *q,
                                                        const void *k, const void *v, void *o,
                                                        float *lse, void *workspace,
                                                        size_t workspace_bytes,
                                                        const fagen_run_args *args,
                                                        void *stream);

/** Picks the backward kernel for the forward call `problem` (the same variant; its do/dq/dk/dv
 *  strides set) and fills *plan, with plan->workspace_bytes: the scratch the caller allocates
 *  and passes to fagen_run_backward. deterministic = 1 asks for a kernel whose dQ, dK, dV are
 *  bitwise identical across runs (spec key deterministic: true); with 0 a nondeterministic
 *  kernel is preferred and a deterministic one serves when the bundle has no other. */
FAGEN_API fagen_status fagen_plan_backward(const fagen_bundle *bundle,
                                           const fagen_fwd_problem *problem,
                                           int32_t deterministic, fagen_plan *plan);

/** Like fagen_plan_backward, but plans kernel `kernel_index` of the bundle (for tools). */
FAGEN_API fagen_status fagen_plan_backward_kernel(const fagen_bundle *bundle,
                                                  const fagen_fwd_problem *problem,
                                                  int32_t deterministic, int kernel_index,
                                                  fagen_plan *plan);

/** Launches the planned backward on `stream`: three kernels in stream order (D = rowsum(dO o
 *  O) and zeroing of the dQ accumulator; dK, dV and the dQ accumulation; dQ in the input
 *  dtype). q, k, v, o, lse: the forward's inputs and outputs (lse as the forward wrote it);
 *  dout: dO; dq, dk, dv: the gradients, written; all 16-byte aligned except lse (4).
 *  workspace: `workspace_bytes` of device memory, at least plan->workspace_bytes (else
 *  FAGEN_ERROR_INVALID_ARGUMENT, nothing launched), 256-byte aligned (cuMemAlloc's), no
 *  initialization needed. A workspace belongs to one stream at a time: two calls in flight
 *  on one workspace corrupt each other's dQ, and a deterministic kernel's ordered dQ waits
 *  could never be satisfied (they give up after about 2^31 polls with a message on the
 *  device's printf and a trap: the context reports CUDA_ERROR_LAUNCH_FAILED). `args`: as the
 *  forward's (the same dropout seed and offset). No allocation, no synchronization. */
FAGEN_API fagen_status fagen_run_backward(const fagen_plan *plan, const void *q, const void *k,
                                          const void *v, const void *o, const float *lse,
                                          const void *dout, void *dq, void *dk, void *dv,
                                          void *workspace, size_t workspace_bytes,
                                          const fagen_run_args *args, void *stream);

/** A merge of num_states attention states (O_s, LSE_s) of the same query rows by their LSE:
 *    O = sum_s exp(LSE_s - M) O_s / sum_s exp(LSE_s - M),  LSE = M + log sum_s exp(LSE_s - M),
 *  M = max_s LSE_s: the attention over the union of the states' keys (split-KV, cascade or
 *  shared-prefix attention, context parallelism). A row's states all -inf: O = 0, LSE = -inf;
 *  a state of LSE -inf adds nothing (its O, NaN or not, is ignored); a NaN LSE makes the row NaN.
 *  Strides in elements, the head dim contiguous: O states [num_states, batch, heads, seqlen,
 *  head_dim] in `dtype` (strides state, batch, head, row: multiples of 8), LSE states float32
 *  (strides state, batch, head, row), O out in `dtype` (batch, head, row), LSE out float32
 *  (batch, head, row). The outputs must not overlap the states. */
typedef struct fagen_merge_problem {
  uint32_t struct_size; /* sizeof(fagen_merge_problem): FAGEN_MERGE_PROBLEM_INIT sets both */
  uint32_t abi_tag;     /* FAGEN_ABI_TAG */
  int32_t num_states, batch, heads, seqlen, head_dim;
  fagen_dtype dtype;
  int64_t o_states_strides[4];
  int64_t lse_states_strides[4];
  int64_t o_strides[3];
  int64_t lse_strides[3];
} fagen_merge_problem;

/** A zero-initialized merge problem with its struct_size and abi_tag. */
#define FAGEN_MERGE_PROBLEM_INIT {(uint32_t)sizeof(fagen_merge_problem), FAGEN_ABI_TAG}
/** Zeroes *problem and sets its struct_size and abi_tag. */
FAGEN_API void fagen_merge_problem_init(fagen_merge_problem *problem);
/** Fills the strides of contiguous tensors laid out as the forward's outputs: O states
 *  [num_states, batch, seqlen, heads, head_dim], LSE states [num_states, batch, heads, seqlen],
 *  O [batch, seqlen, heads, head_dim], LSE [batch, heads, seqlen]. */
FAGEN_API void fagen_merge_problem_set_bshd_strides(fagen_merge_problem *problem);

/** Plans a merge of attention states: the merge kernel (NAME_merge) of a decode kernel of the
 *  bundle with this dtype and head dim (spec `passes: [decode]`; the merge does not depend on
 *  the decode kernel's mask or score mod), for the current context's device. plan->pass is
 *  FAGEN_PASS_MERGE. FAGEN_ERROR_NOT_SUPPORTED names the spec keys when the bundle has none. */
FAGEN_API fagen_status fagen_plan_merge_states(const fagen_bundle *bundle,
                                               const fagen_merge_problem *problem,
                                               fagen_plan *plan);

/** Launches the planned merge on `stream`: o_states, o 16-byte aligned; lse_states, lse 4-byte
 *  aligned; lse may be null (not written). No allocation, no synchronization. */
FAGEN_API fagen_status fagen_run_merge_states(const fagen_plan *plan, const void *o_states,
                                              const float *lse_states, void *o, float *lse,
                                              void *stream);

/** A paged KV cache (spec `kv_cache: paged` with `page_size`, served by decode kernels and
 *  varlen forward kernels, chunked prefill): the layout of vLLM and of FlashAttention's
 *  flash_attn_with_kvcache. K and V are caches of
 *  [num_pages, page_size, heads_kv, head_dim] (any strides, the head dim contiguous); the
 *  problem's k_strides / v_strides are then their (page, head, row) strides
 *  (fagen_fwd_problem_set_paged_strides fills contiguous ones). Key j of sequence b is row
 *  j % page_size of page block_table[b * block_table_stride + j / page_size] (int32 page ids,
 *  [batch, max_pages_per_seq]; pages may come in any order and be shared between sequences);
 *  sequence b holds seqused_k[b] keys (int32 [batch]; 0: an empty sequence, whose rows get
 *  O = 0 and LSE = -inf). Both arrays are device memory that the host does not read. The
 *  problem's seqlen_k is the call's longest cache length: at least every seqused_k[b] and at
 *  most max_pages_per_seq * page_size; the split count is planned for it.
 *
 *  Bad entries: the kernel checks each page id against [0, num_pages) before it loads through
 *  it and each seqused_k[b] against [0, seqlen_k]; it never loads through a bad entry (a bad
 *  page's keys read as zeros, a bad length is clamped), and records the first one it meets in
 *  the workspace, which fagen_paged_kv_status reads back. The cost: one int32 load and compare
 *  per page a thread block walks (a page of 16 keys: 1/16 of a key tile's copies), none on the
 *  host. Entries past a sequence's length are not checked (a split may read the entries of its
 *  first tiles up to seqlen_k before its sequence's length arrives, and not use them).
 *  FAGEN_VALIDATE=1 also checks them on the host before the launch (synchronizing the stream:
 *  for debugging). */
typedef struct fagen_paged_kv {
  uint32_t struct_size;       /* sizeof(fagen_paged_kv): FAGEN_PAGED_KV_INIT sets both */
  uint32_t abi_tag;           /* FAGEN_ABI_TAG */
  int32_t page_size;          /* tokens per page: the kernel's (16, 32, 64, 128 or 256) */
  int32_t num_pages;          /* pages of each cache (>= 1) */
  int32_t max_pages_per_seq;  /* columns of the block table (>= 1) */
  int32_t reserved0;          /* must be 0 */
  int64_t block_table_stride; /* elements between two sequences' rows, >= max_pages_per_seq */
} fagen_paged_kv;

/** A zero-initialized fagen_paged_kv with its struct_size and abi_tag. */
#define FAGEN_PAGED_KV_INIT {(uint32_t)sizeof(fagen_paged_kv), FAGEN_ABI_TAG}
/** Zeroes *paged and sets its struct_size and abi_tag. */
FAGEN_API void fagen_paged_kv_init(fagen_paged_kv *paged);
/** Fills the strides of BSHD Q and O and of contiguous [num_pages, page_size, heads_kv,
 *  head_dim] K and V caches (page, head, row). */
FAGEN_API void fagen_fwd_problem_set_paged_strides(fagen_fwd_problem *problem,
                                                   const fagen_paged_kv *paged);

/** Plans a decode call over a paged KV cache: as fagen_plan_forward, among the bundle's paged
 *  decode kernels of the call's variant and page size. plan->workspace_bytes is at least 256
 *  (the status records, 16 bytes a thread block; the splits' partials too when there is more
 *  than one split): a paged run needs its workspace. A varlen call (chunked prefill: packed
 *  queries, cu_seqlens_q in the run's args, total_k = seqlen_k, cu_seqlens_k not read) plans
 *  among the paged varlen forward kernels instead (docs/runtime-api.md; run on an H100,
 *  2026-12-06). */
FAGEN_API fagen_status fagen_plan_forward_paged(const fagen_bundle *bundle,
                                                const fagen_fwd_problem *problem,
                                                const fagen_paged_kv *paged, fagen_plan *plan);
/** Like fagen_plan_forward_paged, for kernel `kernel_index` of the bundle (for tools). */
FAGEN_API fagen_status fagen_plan_forward_paged_kernel(const fagen_bundle *bundle,
                                                       const fagen_fwd_problem *problem,
                                                       const fagen_paged_kv *paged,
                                                       int kernel_index, fagen_plan *plan);

/** Launches a paged plan: q, o as fagen_run_forward's; k_cache, v_cache the caches (16-byte
 *  aligned); block_table, seqused_k int32 device arrays; workspace: at least
 *  plan->workspace_bytes of device memory, 16-byte aligned, owned by one stream at a time (a
 *  decode kernel's thread blocks each write their status record; for a chunked prefill the
 *  runtime zeroes its one record on `stream` first). No allocation, no synchronization. */
FAGEN_API fagen_status fagen_run_forward_paged(const fagen_plan *plan, const void *q,
                                               const void *k_cache, const void *v_cache, void *o,
                                               float *lse, const int32_t *block_table,
                                               const int32_t *seqused_k, void *workspace,
                                               size_t workspace_bytes,
                                               const fagen_run_args *args, void *stream);

/** New keys and values for fagen_run_forward_paged_append: k_new [batch, seqlen_q, heads_kv,
 *  head_dim_qk] and v_new [batch, seqlen_q, heads_kv, head_dim_v] in the problem's dtype,
 *  strides in elements (batch, token, head; multiples of 8), the head dim contiguous. */
typedef struct fagen_kv_append {
  uint32_t struct_size; /* sizeof(fagen_kv_append): FAGEN_KV_APPEND_INIT sets both */
  uint32_t abi_tag;     /* FAGEN_ABI_TAG */
  int64_t k_strides[3]; /* k_new: batch, token, head */
  int64_t v_strides[3]; /* v_new: batch, token, head */
} fagen_kv_append;

/** A zero-initialized fagen_kv_append with its struct_size and abi_tag. */
#define FAGEN_KV_APPEND_INIT {(uint32_t)sizeof(fagen_kv_append), FAGEN_ABI_TAG}
/** Zeroes *append and sets its struct_size and abi_tag. */
FAGEN_API void fagen_kv_append_init(fagen_kv_append *append);
/** Fills the strides of contiguous [batch, seqlen_q, heads_kv, head_dim] k_new and v_new of
 *  `problem`. */
FAGEN_API void fagen_kv_append_set_bshd_strides(fagen_kv_append *append,
                                                const fagen_fwd_problem *problem);

/** fagen_run_forward_paged with the call's new keys and values written into the cache first,
 *  as FlashAttention's flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
 *  cache_seqlens=seqused_k, block_table=block_table): new token t of sequence b (one per query
 *  token, t < seqlen_q) becomes key seqused_k[b] + t, row (seqused_k[b] + t) % page_size of
 *  page block_table[b][(seqused_k[b] + t) / page_size], and the decode attends over
 *  seqused_k[b] + seqlen_q keys (under a causal mask, bottom-right, token t sees the keys up to
 *  its own). seqused_k is not changed (add seqlen_q to it for the next step); the problem's
 *  seqlen_k must be at least every seqused_k[b] + seqlen_q. Paged decode plans only (1-16
 *  query tokens; not chunked prefill). Two launches in stream order: the append
 *  (NAME_append), then the decode. A length without room for the new tokens, or a bad page id
 *  where they go, is recorded as the decode's bad entries are (fagen_paged_kv_status) and nothing is written
 *  through it. The new rows' pages must not be shared with another sequence of the call, and
 *  k_new / v_new must not overlap the caches. k_new, v_new 16-byte aligned; the rest as
 *  fagen_run_forward_paged. */
FAGEN_API fagen_status fagen_run_forward_paged_append(
    const fagen_plan *plan, const fagen_kv_append *append, const void *q, void *k_cache,
    void *v_cache, const void *k_new, const void *v_new, void *o, float *lse,
    const int32_t *block_table, const int32_t *seqused_k, void *workspace,
    size_t workspace_bytes, const fagen_run_args *args, void *stream);

/** Reads back what the last paged run on `workspace` met: FAGEN_OK when every block-table
 *  entry and length it read was valid, else FAGEN_ERROR_INVALID_ARGUMENT with the first bad
 *  entry in fagen_last_error() ("block_table[3][7] = 9000 is not a page id in [0, 512)").
 *  Synchronizes `stream` (call it where a sync is affordable: after a step, in tests, in a
 *  debug build). */
FAGEN_API fagen_status fagen_paged_kv_status(const fagen_plan *plan, const void *workspace,
                                             void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FAGEN_RUNTIME_FAGEN_H */
