// fagen sm80: the PTX atoms of the portable template that need sm_80 (mma.sync, ldmatrix,
// cp.async, the bf16 / f16 packs; valid on sm_80, sm_90, sm_100). Those of every arch are in
// common/ptx.cuh.
//
// The only file of templates/sm80 with inline PTX. Destination first; shared-memory addresses
// are 32-bit shared-window addresses (smem_addr()).
#ifndef FAGEN_TEMPLATES_SM80_MMA_CUH
#define FAGEN_TEMPLATES_SM80_MMA_CUH

#include <stdint.h>

#include "common/ptx.cuh"
#include "common/types.cuh"

namespace fagen {
namespace sm80 {

// --- tensor cores: D(16x8, f32) += A(16x16, row) * B(16x8, col) ----------------------------
// Fragments (g = lane / 4, q = lane % 4): A a0 (g, 2q..2q+1) a1 (g+8, 2q..) a2 (g, 2q+8..)
// a3 (g+8, 2q+8..); B b0 (k 2q..2q+1, n g) b1 (k 2q+8.., n g); C/D c0,c1 (g, 2q..2q+1)
// c2,c3 (g+8, 2q..2q+1).
template <class Element> struct mma_m16n8k16;

template <> struct mma_m16n8k16<bfloat16_t> {
  static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <> struct mma_m16n8k16<half_t> {
  static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

/// d += a * b for one 16x8x16 tile.
template <class Element>
__device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  mma_m16n8k16<Element>::run(d, a, b0, b1);
}

// --- shared memory -> registers ------------------------------------------------------------
/// Four 8x8 b16 matrices; lane i gives the row address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(u32 (&d)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

/// As ldmatrix_x4, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&d)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

// --- global -> shared, asynchronous ----------------------------------------------------------
/// Copies 16 bytes, or writes 16 zero bytes and reads nothing when !valid (src-size 0).
/// kL2Prefetch: L2 fetches the whole 128-byte line around the 16 bytes (.L2::128B), for loads
/// that stream whole rows once (the decode kernel's K/V: 1-2 % more bandwidth on an H100).
template <bool kL2Prefetch = false>
__device__ __forceinline__ void cp_async_16(u32 dst, const void *src, bool valid) {
  int src_bytes = valid ? 16 : 0;
  if constexpr (kL2Prefetch)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst),
                 "l"(src), "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// --- conversions ---------------------------------------------------------------------------
/// Rounds (lo, hi) to nearest even and packs them, lo in the low half.
template <class Element> __device__ __forceinline__ u32 pack2(float lo, float hi);

template <> __device__ __forceinline__ u32 pack2<bfloat16_t>(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

template <> __device__ __forceinline__ u32 pack2<half_t>(float lo, float hi) {
  u32 d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

/// The two 16-bit elements of `packed` (lo in the low half) as floats; exact.
template <class Element> __device__ __forceinline__ void unpack2(float &lo, float &hi, u32 packed);

template <> __device__ __forceinline__ void unpack2<bfloat16_t>(float &lo, float &hi, u32 packed) {
  lo = __uint_as_float(packed << 16);
  hi = __uint_as_float(packed & 0xffff0000u);
}

template <> __device__ __forceinline__ void unpack2<half_t>(float &lo, float &hi, u32 packed) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(packed));
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_MMA_CUH
