// fagen sm90: the PTX atoms of warp specialization (sm_90a): mbarriers, TMA tensor loads,
// register reallocation between warpgroups and named barriers. With wgmma.cuh, the only files
// of templates/sm90 with inline PTX. Shared-memory addresses are 32-bit shared-window
// addresses; destination first.
#ifndef FAGEN_TEMPLATES_SM90_TMA_CUH
#define FAGEN_TEMPLATES_SM90_TMA_CUH

#include <stdint.h>

#include "abi/tma_params.h"
#include "sm90/wgmma.cuh"

namespace fagen {
namespace sm90 {

// --- mbarriers (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier") --
// A phase completes when `count` arrivals happened and every expected transaction byte landed;
// waits name the phase by its parity. A fresh barrier is in phase 0, so a wait for parity 1
// returns at once: producers start their "slot is free" waits at parity 1.
__device__ __forceinline__ void mbarrier_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// After the inits of a CTA and before the barrier that publishes them: makes them visible to
/// the async proxy (TMA completions).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival that also announces `bytes` of transactions (the TMA loads that complete on it).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/// Announces `bytes` of transactions without an arrival.
__device__ __forceinline__ void mbarrier_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// One arrival, made once every cp.async copy the thread issued before it has landed (.noinc:
/// it is one of the arrivals the barrier's count expects). The copies are the generic proxy's
/// writes: a reader through the async proxy (wgmma) fences after its wait (fence_proxy_async_smem).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// 16 bytes of shared memory handed over through an mbarrier (the arrive releases the store,
/// the wait acquires it; the clobbers keep the compiler from moving either across).
__device__ __forceinline__ void st_shared_v4_u32(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}
__device__ __forceinline__ void ld_shared_v4_u32(u32 (&v)[4], u32 addr) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
}
/// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}

/// Returns after at least `cycles` SM clock cycles (clock64), sleeping between reads.
__device__ __forceinline__ void wait_cycles(long long cycles) {
  const long long until = clock64() + cycles;
  while (clock64() < until)
    __nanosleep(256);
}

// --- TMA ---------------------------------------------------------------------------------------
/// Fetches the tensor map (a __grid_constant__ kernel argument) into the descriptor cache.
__device__ __forceinline__ void prefetch_tensor_map(const fagen_tensor_map &map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}
/// Copies the box at coordinates {c0, c1, c2, c3} (innermost first) of `map` into shared
/// memory at `dst` (1024-byte aligned for the 128-byte swizzle); completes `bytes` of the box's
/// size on mbarrier `bar`. Out-of-bounds elements land as zeros.
__device__ __forceinline__ void tma_load_4d(u32 dst, const fagen_tensor_map &map, u32 bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}

/// Asks L2 to fetch the box at coordinates {c0, c1, c2, c3} of `map` from global memory (no
/// shared memory, no completion to wait for: a hint, which a later tma_load_4d of the same box
/// then finds in L2). Out-of-bounds parts of the box fetch nothing.
__device__ __forceinline__ void tma_prefetch_l2_4d(const fagen_tensor_map &map, int c0, int c1,
                                                   int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

/// Copies the box at coordinates {c0, c1, c2, c3} of `map` from shared memory at `src`
/// (1024-byte aligned, the swizzled layout tma_load_4d writes) to global memory, as one bulk
/// group of the issuing thread (bulk_commit_group); elements out of the map's bounds are not
/// written. The writes to `src` must be fenced for the async proxy (fence_proxy_async_smem)
/// by every thread that made them, before this.
__device__ __forceinline__ void tma_store_4d(const fagen_tensor_map &map, u32 src, int c0, int c1,
                                             int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
               " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(&map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/// Waits until the issuing thread's bulk groups but the newest kPending have read their shared
/// memory (the buffer may be written again).
template <int kPending> __device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

/// Adds `bytes` (a multiple of 16) of fp32 from shared memory at `src` into global memory at
/// `dst` (both 16-byte aligned), element by element, as one bulk group of the issuing thread
/// (cp.reduce.async.bulk .add.f32: the additions are atomic per element, in no fixed order
/// against other CTAs'). The writes to `src` must be fenced for the async proxy first.
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   dst),
               "r"(src), "r"(bytes)
               : "memory");
}
/// Copies `bytes` (a multiple of 16) from shared memory at `src` to global memory at `dst`
/// (both 16-byte aligned), as one bulk group of the issuing thread (cp.async.bulk). The writes
/// to `src` must be fenced for the async proxy first.
__device__ __forceinline__ void bulk_store(void *dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
/// Orders the calling thread's generic-proxy accesses of global memory against its
/// async-proxy ones (bulk copies and reductions) on either side.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/// Waits until the issuing thread's bulk groups but the newest kPending have completed (their
/// global writes done).
template <int kPending> __device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// --- warpgroups --------------------------------------------------------------------------------
/// Lowers (kDec) or raises the register limit of every thread of the executing warpgroup to
/// kRegs (a multiple of 8 in [24, 256]); all warps of the warpgroup execute it.
template <int kRegs> __device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
/// Named barrier `id` (1..15; 0 is __syncthreads) over kThreads threads: sync waits, arrive
/// counts without waiting.
template <int kThreads> __device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kThreads> __device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_TMA_CUH
