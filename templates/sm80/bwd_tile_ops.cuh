// fagen sm80: tile-level steps of the backward kernels, built on the atoms of mma.cuh (plus the
// few atoms only the backward needs: fp32 reductions to global memory, 16-bit unpacking and the
// dQ semaphore).
//
// Shared-memory tiles are row-major: rows padded by 16 bytes, or unpadded with their 16-byte
// chunks XOR-swizzled (BwdConfig::kSwizzleQK / kSwizzleV say which). Register tiles
// use the C-fragment layout of common/softmax.cuh: acc[t][j][e] holds row 16 t + lane / 4 +
// 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2 of the warp's tile.
#ifndef FAGEN_TEMPLATES_SM80_BWD_TILE_OPS_CUH
#define FAGEN_TEMPLATES_SM80_BWD_TILE_OPS_CUH

#include <stdint.h>
#include <stdio.h> // printf: the semaphore wait's message

#include "sm80/mma.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

// --- atoms ---------------------------------------------------------------------------------
/// *ptr += (a, b) in fp32, at L2, no value returned; ptr 8-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float *ptr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(ptr), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(ptr, a);
  atomicAdd(ptr + 1, b);
#endif
}

/// *ptr += (a, b, c, d) in fp32, at L2, no value returned; ptr 16-byte aligned.
__device__ __forceinline__ void red_add_f32x4(float *ptr, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "f"(a), "f"(b),
               "f"(c), "f"(d)
               : "memory");
#else
  red_add_f32x2(ptr, a, b);
  red_add_f32x2(ptr + 2, c, d);
#endif
}

/// red_add_f32x2, or a plain store of (a, b) when `store`.
__device__ __forceinline__ void add_or_store_f32x2(bool store, float *ptr, float a, float b) {
  if (store)
    *reinterpret_cast<float2 *>(ptr) = make_float2(a, b);
  else
    red_add_f32x2(ptr, a, b);
}

/// red_add_f32x4, or a plain store of (a, b, c, d) when `store`.
__device__ __forceinline__ void add_or_store_f32x4(bool store, float *ptr, float a, float b,
                                                   float c, float d) {
  if (store)
    *reinterpret_cast<float4 *>(ptr) = make_float4(a, b, c, d);
  else
    red_add_f32x4(ptr, a, b, c, d);
}

/// The two 16-bit elements of `packed` (low first) as floats.
template <class Element> __device__ __forceinline__ float2 unpack2(u32 packed);

template <> __device__ __forceinline__ float2 unpack2<bfloat16_t>(u32 packed) {
  return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xffff0000u));
}

template <> __device__ __forceinline__ float2 unpack2<half_t>(u32 packed) {
  float lo, hi;
  asm("{.reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(packed));
  return make_float2(lo, hi);
}

__device__ __forceinline__ int ld_acquire_gpu(const int32_t *ptr) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

/// How long a dQ semaphore wait may take before the kernel gives up: far beyond any legitimate
/// wait (the longest is one chain of a head's key tiles, milliseconds), so reached only when
/// the semaphore can never get its value, e.g. a workspace shared by two calls in flight.
constexpr uint64_t kSemaphoreWaitLimitNs = 60ull * 1000 * 1000 * 1000;
/// Polls between two reads of the clock (a read costs about as much as a poll).
constexpr uint32_t kSemaphorePollsPerClockRead = 1u << 16;

/// The end of a wait that cannot finish: a message on the device's printf, then a trap (the
/// launch fails with CUDA_ERROR_LAUNCH_FAILED instead of hanging). Out of line: the polling
/// loop keeps no registers for it.
[[noreturn]] __device__ __noinline__ void semaphore_wait_timed_out(const int32_t *sem, int value, int seen) {
  printf("fagen backward: dQ semaphore %p stuck at %d waiting for %d for over %llu s "
         "(block %d,%d,%d): a workspace is used by two calls in flight; trapping\n",
         static_cast<const void *>(sem), seen, value,
         static_cast<unsigned long long>(kSemaphoreWaitLimitNs / 1000000000ull),
         int(blockIdx.x), int(blockIdx.y), int(blockIdx.z));
  __trap();
}

/// Polls *sem until it equals value (acquire), from the calling thread alone; traps after
/// kSemaphoreWaitLimitNs, with the message of semaphore_wait_timed_out when kMessage. Without
/// it the kernel makes no call: a kernel with wgmma and a call anywhere in it has every wgmma
/// serialized by ptxas (nvcc 13.0, C7510: "wgmma pipeline crossing function boundary").
template <bool kMessage = true>
__device__ __forceinline__ void semaphore_poll(const int32_t *sem, int value) {
  uint32_t polls = 0;
  uint64_t start = 0;
  for (int seen; (seen = ld_acquire_gpu(sem)) != value;) {
    if (++polls % kSemaphorePollsPerClockRead != 0)
      continue;
    const uint64_t now = global_timer_ns();
    if (start == 0)
      start = now;
    else if (now - start > kSemaphoreWaitLimitNs) {
      if constexpr (kMessage)
        semaphore_wait_timed_out(sem, value, seen);
      else
        __trap();
    }
  }
}

/// Adds 1 to *sem from the calling thread, releasing the global writes it has seen (one
/// gpu-scope fence, cumulative: CUTLASS's semaphore).
__device__ __forceinline__ void semaphore_release(int32_t *sem) {
  asm volatile("fence.acq_rel.gpu;\n red.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem)
               : "memory");
}

/// Blocks the CTA until *sem == value (thread 0 polls; acquire ordering for the CTA after it);
/// traps after kSemaphoreWaitLimitNs.
__device__ __forceinline__ void semaphore_wait(const int32_t *sem, int value) {
  if (threadIdx.x == 0)
    semaphore_poll(sem, value);
  __syncthreads();
}

/// Adds 1 to *sem once every thread of the CTA is here, releasing the CTA's earlier global
/// writes with it.
__device__ __forceinline__ void semaphore_signal(int32_t *sem) {
  __syncthreads();
  if (threadIdx.x == 0)
    semaphore_release(sem);
}

// --- global <-> shared -----------------------------------------------------------------------
/// Issues the cp.async copies of a (kRows, kCols) tile by all kThreads threads into shared
/// memory rows kRowBytes apart, kColsPad columns wide: rows >= rows_valid and the columns in
/// [kCols, kColsPad) are zero-filled, so MMAs over them add zeros, never stale NaNs.
/// kSwizzled: chunk c of row r lands at chunk c ^ (r % 8) (rows of whole 128-byte lines; the
/// layout of tile_ops.cuh's SmemRow).
template <int kRows, int kCols, int kColsPad, int kRowBytes, int kThreads, bool kSwizzled = false,
          class Element>
__device__ __forceinline__ void load_rows_async(u32 smem, const Element *gmem, int64_t row_stride,
                                                int rows_valid) {
  static_assert(kCols % 8 == 0 && kColsPad % 8 == 0 && kCols <= kColsPad,
                "columns come in 16-byte chunks");
  load_chunks_async<kRows, kColsPad / 8, kCols / 8, kRowBytes, kThreads, kSwizzled>(
      smem, gmem, row_stride, rows_valid);
}

/// Copies a (kRows, kCols) tile from shared memory (rows kRowBytes apart) to global memory with
/// 16-byte stores by all kThreads threads; rows >= rows_valid are not written.
template <int kRows, int kCols, int kRowBytes, int kThreads, bool kSwizzled = false, class Element>
__device__ __forceinline__ void store_rows(Element *gmem, int64_t row_stride, int rows_valid,
                                           u32 smem) {
  constexpr int kChunksPerRow = kCols / 8;
  for (int c = threadIdx.x; c < kRows * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    if (row < rows_valid) {
      u32 v[4];
      ld_shared_v4(v, smem + row * kRowBytes + (kSwizzled ? chunk ^ (row & 7) : chunk) * 16);
      st_global_v4(gmem + row * row_stride + chunk * 8, v);
    }
  }
}

// --- registers <-> shared --------------------------------------------------------------------
/// Rounds a warp's (16 kRowTiles, 8 kColTiles) fragment tile (times `scale`) to Element and
/// writes it at `smem` + the warp tile's first 16-byte chunk `chunk0` (`smem`: the warp tile's
/// first row, a multiple of 8 rows into the tile; rows kRowBytes apart; kSwizzled: SmemRow's
/// swizzled rows).
template <class Element, int kRowBytes, bool kSwizzled = false, int kRowTiles, int kColTiles>
__device__ __forceinline__ void store_fragments(u32 smem,
                                                const float (&x)[kRowTiles][kColTiles][4],
                                                int chunk0, float scale = 1.f) {
  const int lane = threadIdx.x % 32;
  if constexpr (!kSwizzled) // padded rows: the chunk is a plain byte offset
    smem += chunk0 * 16, chunk0 = 0;
  const u32 base = smem + (lane / 4) * kRowBytes + (lane % 4) * 4;
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
      // Rows lane / 4 and 8 below it: the same row % 8.
      const u32 addr = kSwizzled
                           ? (base + chunk0 * 16 + 16 * t * kRowBytes + j * 16) ^ ((lane / 4) * 16)
                           : base + 16 * t * kRowBytes + j * 16;
      st_shared_b32(addr, pack2<Element>(x[t][j][0] * scale, x[t][j][1] * scale));
      st_shared_b32(addr + 8 * kRowBytes, pack2<Element>(x[t][j][2] * scale, x[t][j][3] * scale));
    }
}

// --- warp GEMM from shared memory ------------------------------------------------------------
/// acc (16 kRowTiles, 8 kColTiles) += A (16 kRowTiles, 16 kKTiles) * B (16 kKTiles, 8 kColTiles),
/// both operands in shared memory, rows kARowBytes / kBRowBytes apart.
///   kATrans false: `a` is A's origin, A row-major (k contiguous: Q, dO, dS).
///   kATrans true:  `a` is the origin of A^T stored row-major (m contiguous: P^T, dS^T read
///                  from the (query, key) tiles P and dS) and ldmatrix transposes.
///   kBTrans false: `b` is the origin of B^T stored row-major (k contiguous: K, V as in Q K^T).
///   kBTrans true:  `b` is B's origin, B row-major (n contiguous: dO, Q, K as in P^T dO).
/// An operand starts at chunk a_chunk0 / b_chunk0 (16 bytes each) of the rows at `a` / `b` (a
/// multiple of 8 rows into the tile); kASwizzled / kBSwizzled: that operand's rows are swizzled
/// 128-byte lines (SmemRow's layout; A^T cannot be: P and dS rows are padded).
template <class Element, int kRowTiles, int kColTiles, int kKTiles, bool kATrans, bool kBTrans,
          int kARowBytes, int kBRowBytes, bool kASwizzled = false, bool kBSwizzled = false>
__device__ __forceinline__ void gemm_smem(float (&acc)[kRowTiles][kColTiles][4], u32 a, u32 b,
                                          int a_chunk0 = 0, int b_chunk0 = 0) {
  static_assert(kColTiles % 2 == 0, "B fragments come in pairs of 8 columns");
  static_assert(!(kATrans && kASwizzled), "A^T comes from padded rows");
  const int lane = threadIdx.x % 32;
  if constexpr (!kASwizzled) // padded rows: the chunk is a plain byte offset
    a += a_chunk0 * 16, a_chunk0 = 0;
  if constexpr (!kBSwizzled)
    b += b_chunk0 * 16, b_chunk0 = 0;
  // A: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in fragment order a0..a3.
  const u32 a_addr = kATrans ? a + (lane % 8 + (lane / 16) * 8) * kARowBytes + (lane / 8 % 2) * 16
                             : a + (lane % 16) * kARowBytes + (a_chunk0 + lane / 16) * 16;
  // B: b0, b1 of column tile j, then b0, b1 of tile j + 1.
  const u32 b_addr = kBTrans ? b + (lane % 16) * kBRowBytes + (b_chunk0 + lane / 16) * 16
                             : b + (lane % 8 + (lane / 16) * 8) * kBRowBytes +
                                   (b_chunk0 + lane / 8 % 2) * 16;
  // Swizzled rows: every row a lane addresses is lane % 8 past a multiple of 8 and starts a
  // 128-byte line, so its logical chunk c sits at chunk c ^ (lane % 8): the unswizzled address
  // with bits 4-6 flipped by (lane % 8) * 16 (one LOP3 an ldmatrix, no per-chunk registers).
  const u32 a_flip = kASwizzled ? (lane % 8) * 16 : 0u;
  const u32 b_flip = kBSwizzled ? (lane % 8) * 16 : 0u;
#pragma unroll
  for (int k = 0; k < kKTiles; ++k) {
    u32 af[kRowTiles][4];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      if constexpr (kATrans)
        ldmatrix_x4_trans(af[t], a_addr + k * 16 * kARowBytes + t * 32);
      else
        ldmatrix_x4(af[t], (a_addr + t * 16 * kARowBytes + k * 32) ^ a_flip);
    }
#pragma unroll
    for (int j = 0; j < kColTiles; j += 2) {
      u32 bf[4];
      if constexpr (kBTrans)
        ldmatrix_x4_trans(bf, (b_addr + k * 16 * kBRowBytes + j * 16) ^ b_flip);
      else
        ldmatrix_x4(bf, (b_addr + j * 8 * kBRowBytes + k * 32) ^ b_flip);
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t) {
        mma<Element>(acc[t][j], af[t], bf[0], bf[1]);
        mma<Element>(acc[t][j + 1], af[t], bf[2], bf[3]);
      }
    }
  }
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_BWD_TILE_OPS_CUH
