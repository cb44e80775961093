// fagen: the PTX atoms every arch has (thread and block indices read so that they are
// recomputed where used, shared-window addresses, 16-byte shared and global accesses, byte
// permute, and the grid-dependency controls that are no-ops before sm_90). Arch-specific
// instructions live in sm80/mma.cuh, sm90/wgmma.cuh and sm90/tma.cuh.
// Destination first; shared-memory addresses are 32-bit shared-window addresses (smem_addr()).
#ifndef FAGEN_TEMPLATES_COMMON_PTX_CUH
#define FAGEN_TEMPLATES_COMMON_PTX_CUH

#include <stdint.h>

#include "common/types.cuh"

namespace fagen {

__device__ __forceinline__ u32 smem_addr(const void *ptr) {
  return static_cast<u32>(__cvta_generic_to_shared(ptr));
}

/// threadIdx.x, read so that the compiler cannot hoist it (or what is computed from it) out of
/// a loop: per-thread addressing is then recomputed where used (a few integer ops) instead of
/// being kept live through the main loop, where the accumulators need the registers.
__device__ __forceinline__ int thread_index_rematerialized() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

/// blockIdx, read likewise: the epilogue recomputes its output addresses instead of keeping
/// them (or the block coordinates) live through the main loop.
__device__ __forceinline__ uint3 block_index_rematerialized() {
  uint3 b;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(b.x));
  asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(b.y));
  asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(b.z));
  return b;
}

/// x, passed through an opaque move so that the compiler cannot hoist what is computed from it
/// out of a loop (dropout's Philox round keys, derived from the seed, would otherwise stay live
/// through the main loop).
__device__ __forceinline__ uint64_t value_rematerialized(uint64_t x) {
  asm volatile("mov.b64 %0, %0;\n" : "+l"(x));
  return x;
}

// --- shared and global memory -----------------------------------------------------------------
__device__ __forceinline__ void st_shared_b32(u32 addr, u32 value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(value));
}

__device__ __forceinline__ void ld_shared_v4(u32 (&d)[4], u32 addr) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

/// 16 bytes of memory this kernel does not write (not volatile: loads may be scheduled freely).
__device__ __forceinline__ void ld_global_v4(u32 (&d)[4], const void *ptr) {
  asm("ld.global.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "l"(ptr));
}

__device__ __forceinline__ void st_global_v4(void *ptr, const u32 (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(ptr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

// --- integer ------------------------------------------------------------------------------
/// Byte permute (prmt.b32, default mode): byte i of the result is byte (kSel >> 4 i) & 7 of
/// {b, a} (a: bytes 0-3), or, when bit 3 of that nibble is set, that byte's bit 7 replicated.
template <u32 kSel> __device__ __forceinline__ u32 prmt(u32 a, u32 b) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "n"(kSel));
  return d;
}

// --- programmatic dependent launch (sm_90+; nothing on earlier archs) -----------------------
/// Lets the grid launched after this one as its programmatic dependent (the runtime's launch
/// attribute) start before this grid ends: once every CTA of this grid has passed here or exited.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Waits until the grids this one depends on have completed and their memory is visible: the
/// first thing a kernel launched as a programmatic dependent does before reading their output.
/// Without such a launch it returns at once.
__device__ __forceinline__ void wait_grid_dependencies() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_PTX_CUH
