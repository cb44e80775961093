/* fagen runtime: load a bundle, plan an attention call, run it on a CUDA stream.
 *
 * C ABI. Depends on nothing but the CUDA driver (libcuda.so.1), which is opened at run time:
 * without a driver, loading and inspecting a bundle works and every call that needs the GPU
 * returns FAGEN_ERROR_NO_DRIVER. Every function returns a status; on failure a thread-local
 * message that names the input and the fix is available from fagen_last_error().
 *
 * Threading: a loaded bundle is immutable and may be shared by any number of threads; plans
 * are plain values. fagen_run_forward never allocates and never synchronizes, so it is safe
 * inside CUDA graph capture.
 */
#ifndef FAGEN_RUNTIME_FAGEN_H
#define FAGEN_RUNTIME_FAGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAGEN_RUNTIME_ABI_VERSION 1

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
  FAGEN_ERROR_CUDA = 7              /* a CUDA driver call failed; the message has its name */
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
/** Frees a bundle and the modules loaded from it. Plans made from it become invalid. */
FAGEN_API void fagen_bundle_destroy(fagen_bundle *bundle);

/** Number of kernels in the bundle, and a one-line description of kernel i (for tools). */
FAGEN_API int fagen_bundle_kernel_count(const fagen_bundle *bundle);
FAGEN_API const char *fagen_bundle_kernel_name(const fagen_bundle *bundle, int index);

/** A forward attention call. Strides are in elements; the head dim must be contiguous.
 *  Shapes: Q [batch, seqlen_q, heads_q, head_dim_qk], K [batch, seqlen_k, heads_kv,
 *  head_dim_qk], V [batch, seqlen_k, heads_kv, head_dim_v], O like Q with head_dim_v,
 *  addressed through the strides (so BSHD and BHSD both work); LSE float32 [batch, heads_q,
 *  seqlen_q] contiguous. Causal masks are bottom-right aligned (as FlashAttention >= 2.1):
 *  query i sees key j iff j <= i + seqlen_k - seqlen_q; a query row that sees no key gets
 *  O = 0 and LSE = -inf. */
typedef struct fagen_fwd_problem {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
  fagen_dtype dtype;
  int32_t causal;        /* 0 or 1 */
  float softmax_scale;   /* 0 means 1/sqrt(head_dim_qk) */
  int64_t q_strides[3];  /* batch, head, row */
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t o_strides[3];
} fagen_fwd_problem;

/** Fills the strides of a contiguous BSHD ([batch, seq, heads, dim]) layout. */
FAGEN_API void fagen_fwd_problem_set_bshd_strides(fagen_fwd_problem *problem);
/** Fills the strides of a contiguous BHSD ([batch, heads, seq, dim]) layout. */
FAGEN_API void fagen_fwd_problem_set_bhsd_strides(fagen_fwd_problem *problem);

/** A planned call: which kernel, its launch geometry and parameters. Plain value; valid while
 *  its bundle lives. Fields are private to the runtime. */
typedef struct fagen_plan {
  const fagen_bundle *bundle;
  int32_t kernel_index;
  int32_t grid[3];
  int32_t block[3];
  int32_t smem_bytes;
  void *function;        /* CUfunction for the current context's device */
  uint8_t params[256];   /* the kernel's parameter block, pointers filled at run time */
  size_t workspace_bytes;/* caller-allocated scratch the call needs (0 for the forward) */
} fagen_plan;

/** Picks the kernel for this call on the current CUDA context's device, loads its module if
 *  needed and fills *plan. Returns FAGEN_ERROR_NOT_SUPPORTED with the reason when no kernel in
 *  the bundle serves the call. Needs the driver and a current context (the primary context of
 *  device 0 is made current if none is). */
FAGEN_API fagen_status fagen_plan_forward(const fagen_bundle *bundle,
                                          const fagen_fwd_problem *problem, fagen_plan *plan);

/** Like fagen_plan_forward, but plans kernel `kernel_index` of the bundle instead of choosing
 *  one (for tools that test every kernel, such as `fagen check`). Fails with
 *  FAGEN_ERROR_NOT_SUPPORTED if that kernel does not serve the problem, and with
 *  FAGEN_ERROR_NO_KERNEL_FOR_GPU if it cannot run on the current device. */
FAGEN_API fagen_status fagen_plan_forward_kernel(const fagen_bundle *bundle,
                                                 const fagen_fwd_problem *problem,
                                                 int kernel_index, fagen_plan *plan);

/** Launches the planned forward on `stream` (a CUstream / cudaStream_t; 0 = default stream).
 *  q, k, v, o: device pointers, 16-byte aligned; lse: float32 device pointer. No allocation,
 *  no synchronization. */
FAGEN_API fagen_status fagen_run_forward(const fagen_plan *plan, const void *q,
                                         const void *k, const void *v, void *o, float *lse,
                                         void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FAGEN_RUNTIME_FAGEN_H */
