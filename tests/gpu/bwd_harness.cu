// fagen GPU dev harness for the sm80 backward template: correctness of dQ, dK, dV against a
// float64 CPU reference (this file's own; the forward's O and LSE come from it too) at odd
// shapes and every variant of the contract, bitwise repeatability (deterministic kernels: also
// of two launches running at once on two streams, whose CTAs start in other orders), then
// timing of the backward at the FlashAttention-3 benchmark shapes. Kernels are instantiated as
// the emitter does (three entry points per config). Build and run: tests/gpu/run_bwd.sh. With
// -DFAGEN_HARNESS_SM90 (sm_90a; `run_bwd.sh build90`) also the sm90ws backward's kernels,
// launched with their TMA maps; -DFAGEN_HARNESS_SM90_ONLY keeps only the portable defaults at
// hd 64 and 128 beside them.
//
//   bwd_harness [--check] [--bench] [--csv FILE] [--filter SUBSTRING[,SUBSTRING...]]
//               [--cases N] [--seqlen N] [--trace]
//
// --trace (a build with NVCC_FLAGS=-DFAGEN_WS_TRACE; sm90ws kernels): after each timing, one
// more launch with templates/sm90/ws_trace.cuh's events, and a TRACE line: per CTA the first
// consumer warpgroup's cycles waiting for K/V and for the first Q, per query tile, and in the
// dK/dV epilogue, the cycles beyond its tiles' (in tiles), and the share of the SMs busy over
// the kernel's span (globaltimer).
//
// Tolerance rule (fagen check's, check/Reference.h gradientBound): per gradient, the kernel's
// max abs error against the float64 reference <= 2 x that of a same-precision reference (fp32
// math, P and dS rounded to the input dtype where the kernel rounds them, outputs rounded)
// + kEps x max(1, max |reference| over dQ, dK and dV). The eps scales with all three: a
// gradient that is exactly 0 in exact arithmetic (one visible key: dS = P (dP - D) = 0) comes
// out of fp32 sums as rounding noise of the size of the others (hd 256, Sk 1: dK 1.2e-5 with
// dV up to 4.2, H200, 2026-11-30).
#include "sm80/bwd_kernel.cuh"
#ifdef FAGEN_HARNESS_SM90
#include "sm90/bwd_ws_kernel.cuh"
#include "TmaMaps.h"
#endif
#include "config_options.cuh"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_util.cuh"


// --- the static block layout of the StaticBlockMask kernels (as a generated file spells it) ---
// Local (the diagonal block and the one before) + global (key block 0), 128-token blocks.
#define FAGEN_BLOCK_TABLE_DATA \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, \
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1
static const unsigned char kHostBlockTable[16 * 16] = {FAGEN_BLOCK_TABLE_DATA};
__device__ const unsigned char fagen_block_table[16 * 16] = {FAGEN_BLOCK_TABLE_DATA};
struct FagenBlockLayout {
  static constexpr int kBlock = 128, kRows = 16, kCols = 16;
  static __device__ __forceinline__ const uint8_t *table() { return fagen_block_table; }
};

// --- kernels ---------------------------------------------------------------------------------
enum class ElType { F16, BF16 };
enum class MaskK { None, Causal, CausalTL, Window, WindowTL };
enum class ModK { None, Softcap, Alibi };
enum class SparseK { None, Runtime, Static };

/// What the reference must know of a kernel's variant.
struct VariantDesc {
  MaskK mask;
  ModK mod;
  bool dropout;
  SparseK sparse;
  bool varlen;
};

struct BwdKernel {
  const char *name;
  const void *pre, *main, *post;
  ElType type;
  int hd_qk, hd_v;
  VariantDesc var;
  int block_m, block_n, threads, pre_threads, smem_bytes;
  bool deterministic;
  bool ws = false; // the sm90 warp-specialized template: the main kernel takes TMA maps too
  bool grouped = false; // WsBwdConfig::kGroupedGrid: key tiles of 2^tile_group_log2 kv heads
};
/// The main kernel's grid (fagen_bwd_main_grid): key tiles, kv heads, batch; a grouped
/// kernel's key tiles of 2^g kv heads interleaved.
static dim3 main_grid(const BwdKernel &k, const fagen_bwd_params &p) {
  const fagen_bwd_grid g = fagen_bwd_main_grid((p.fwd.seqlen_k + k.block_n - 1) / k.block_n,
                                               p.fwd.heads_kv, p.fwd.batch,
                                               k.grouped ? p.tile_group_log2 : 0);
  return dim3(unsigned(g.x), unsigned(g.y), unsigned(g.z));
}
/// A kernel's dq_accum copies (bwd_params.h) from its description, as the runtime computes
/// them from a bundle record; BWD_KERNEL asserts it against the template's kDqSlots.
static constexpr int desc_dq_slots(bool deterministic, VariantDesc v) {
  return fagen_bwd_dq_slots(deterministic, v.mask == MaskK::None && v.sparse == SparseK::None);
}
static int dq_slots(const BwdKernel &k) { return desc_dq_slots(k.deterministic, k.var); }
static std::vector<BwdKernel> &kernels() {
  static std::vector<BwdKernel> k;
  return k;
}
struct Register {
  Register(BwdKernel k) { kernels().push_back(k); }
};

#define BWD_KERNEL(...) BWD_KERNEL_(__VA_ARGS__)
#define BWD_KERNEL_(NAME, EL, TYPE, HQK, HV, BM, BN, W, S, VARIANT, DESC, DET)                      \
  using cfg_##NAME =                                                                               \
      fagen::sm80::BwdConfig<harness::Sm80Bwd<fagen::EL, HQK, HV, BM, BN, W, S, VARIANT, DET>>;    \
  static_assert(cfg_##NAME::kDqSlots == desc_dq_slots(DET, DESC), "description and template "      \
                "disagree on the dq_accum copies");                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kPrePostThreads)                        \
      NAME##_pre(const __grid_constant__ fagen_bwd_params params) {                                \
    fagen::sm80::bwd_preprocess<cfg_##NAME>(params);                                               \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kThreads, cfg_##NAME::kMinBlocksPerSm)  \
      NAME(const __grid_constant__ fagen_bwd_params params) {                                      \
    fagen::sm80::bwd_kernel<cfg_##NAME>(params);                                                   \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kPrePostThreads)                        \
      NAME##_post(const __grid_constant__ fagen_bwd_params params) {                               \
    fagen::sm80::bwd_postprocess<cfg_##NAME>(params);                                              \
  }                                                                                                \
  static Register reg_##NAME({#NAME, (const void *)NAME##_pre, (const void *)NAME,                 \
                              (const void *)NAME##_post, TYPE, HQK, HV, DESC, BM, BN,              \
                              cfg_##NAME::kThreads, cfg_##NAME::kPrePostThreads,                   \
                              cfg_##NAME::kSmemBytes, DET});

#ifdef FAGEN_HARNESS_SM90
#define WS_BWD_KERNEL(...) WS_BWD_KERNEL_(__VA_ARGS__)
#define WS_BWD_KERNEL_(NAME, EL, TYPE, HD, BM, BN, S, VARIANT, DESC, DET)                           \
  using cfg_##NAME =                                                                               \
      fagen::sm90::WsBwdConfig<harness::Sm90WsBwd<fagen::EL, HD, BM, BN, S, VARIANT, DET>>;        \
  static_assert(cfg_##NAME::kDqSlots == desc_dq_slots(DET, DESC), "description and template "      \
                "disagree on the dq_accum copies");                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kPrePostThreads)                        \
      NAME##_pre(const __grid_constant__ fagen_bwd_params params) {                                \
    fagen::sm90::bwd_ws_preprocess<cfg_##NAME>(params);                                            \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kThreads, cfg_##NAME::kMinBlocksPerSm)  \
      NAME(const __grid_constant__ fagen_bwd_params params,                                        \
           const __grid_constant__ fagen_bwd_tma_maps maps) {                                      \
    fagen::sm90::bwd_ws_kernel<cfg_##NAME>(params, maps);                                          \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(cfg_##NAME::kPrePostThreads)                        \
      NAME##_post(const __grid_constant__ fagen_bwd_params params) {                               \
    fagen::sm90::bwd_ws_postprocess<cfg_##NAME>(params);                                           \
  }                                                                                                \
  static Register reg_##NAME({#NAME, (const void *)NAME##_pre, (const void *)NAME,                 \
                              (const void *)NAME##_post, TYPE, HD, HD, DESC, BM, BN,               \
                              cfg_##NAME::kThreads, cfg_##NAME::kPrePostThreads,                   \
                              cfg_##NAME::kSmemBytes, DET, true, cfg_##NAME::kGroupedGrid});
#endif

using namespace fagen;
using V_none = Variant<NoMask>;
using V_causal = Variant<CausalMask>;
using V_causaltl = Variant<CausalTopLeftMask>;
using V_window = Variant<WindowMask>;
using V_windowtl = Variant<WindowTopLeftMask>;
using V_softcap = Variant<CausalMask, Softcap>;
using V_alibi = Variant<NoMask, Alibi>;
using V_drop = Variant<CausalMask, NoScoreMod, PhiloxDropout>;
using V_bsr = Variant<NoMask, NoScoreMod, NoDropout, RuntimeBlockMask<128>>;
using V_bs = Variant<CausalMask, NoScoreMod, NoDropout, StaticBlockMask<FagenBlockLayout>>;
using V_varlen = Variant<CausalMask, NoScoreMod, NoDropout, DenseBlocks, true>;
using V_all = Variant<WindowMask, Softcap, PhiloxDropout, RuntimeBlockMask<128>, true>;
using V_none_varlen = Variant<NoMask, NoScoreMod, NoDropout, DenseBlocks, true>;
using V_window_softcap = Variant<WindowMask, Softcap>;
constexpr VariantDesc D_none{MaskK::None, ModK::None, false, SparseK::None, false};
constexpr VariantDesc D_causal{MaskK::Causal, ModK::None, false, SparseK::None, false};
constexpr VariantDesc D_causaltl{MaskK::CausalTL, ModK::None, false, SparseK::None, false};
constexpr VariantDesc D_window{MaskK::Window, ModK::None, false, SparseK::None, false};
constexpr VariantDesc D_windowtl{MaskK::WindowTL, ModK::None, false, SparseK::None, false};
constexpr VariantDesc D_softcap{MaskK::Causal, ModK::Softcap, false, SparseK::None, false};
constexpr VariantDesc D_alibi{MaskK::None, ModK::Alibi, false, SparseK::None, false};
constexpr VariantDesc D_drop{MaskK::Causal, ModK::None, true, SparseK::None, false};
constexpr VariantDesc D_bsr{MaskK::None, ModK::None, false, SparseK::Runtime, false};
constexpr VariantDesc D_bs{MaskK::Causal, ModK::None, false, SparseK::Static, false};
constexpr VariantDesc D_varlen{MaskK::Causal, ModK::None, false, SparseK::None, true};
constexpr VariantDesc D_all{MaskK::Window, ModK::Softcap, true, SparseK::Runtime, true};
constexpr VariantDesc D_none_varlen{MaskK::None, ModK::None, false, SparseK::None, true};
constexpr VariantDesc D_window_softcap{MaskK::Window, ModK::Softcap, false, SparseK::None, false};

#define KBF16 bfloat16_t, ElType::BF16
#define KF16 half_t, ElType::F16
// Default candidates (timed), both masks, plus their deterministic versions.
#define DEFAULTS(HD, BM, BN, W, S)                                                                 \
  BWD_KERNEL(fagen_bwd_bf16_hd##HD##_none_sm80_m##BM##n##BN##w##W##s##S, KBF16, HD, HD, BM, BN, W, \
             S, V_none, D_none, false)                                                             \
  BWD_KERNEL(fagen_bwd_bf16_hd##HD##_causal_sm80_m##BM##n##BN##w##W##s##S, KBF16, HD, HD, BM, BN,  \
             W, S, V_causal, D_causal, false)
#define DETS(HD, BM, BN, W, S)                                                                     \
  BWD_KERNEL(fagen_bwd_bf16_hd##HD##_none_det_sm80_m##BM##n##BN##w##W##s##S, KBF16, HD, HD, BM,    \
             BN, W, S, V_none, D_none, true)                                                       \
  BWD_KERNEL(fagen_bwd_bf16_hd##HD##_causal_det_sm80_m##BM##n##BN##w##W##s##S, KBF16, HD, HD, BM,  \
             BN, W, S, V_causal, D_causal, true)
#ifdef FAGEN_HARNESS_SM90
// The sm90 warp-specialized backward: defaults, fp16, every variant it serves.
// Their deterministic versions and the dropout ones (timed beside them: what each costs).
#define WS_DEFAULTS(HD, BM, BN, S)                                                                 \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd##HD##_none_sm90ws_m##BM##n##BN##s##S, KBF16, HD, BM, BN, S,      \
                V_none, D_none, false)                                                             \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd##HD##_causal_sm90ws_m##BM##n##BN##s##S, KBF16, HD, BM, BN, S,    \
                V_causal, D_causal, false)                                                         \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd##HD##_none_det_sm90ws_m##BM##n##BN##s##S, KBF16, HD, BM, BN, S,  \
                V_none, D_none, true)                                                              \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd##HD##_causal_det_sm90ws_m##BM##n##BN##s##S, KBF16, HD, BM, BN,   \
                S, V_causal, D_causal, true)                                                       \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd##HD##_causal_drop_sm90ws_m##BM##n##BN##s##S, KBF16, HD, BM, BN,  \
                S, V_drop, D_drop, false)
WS_DEFAULTS(64, 128, 128, 2)
WS_DEFAULTS(128, 64, 128, 2)
WS_DEFAULTS(256, 64, 64, 2)
// hd 256 with one Q/dO stage (the form before the separate dO ring; `fagen tune` still tries
// it): checked, and timed beside the default (docs/perf/sm90-bwd.md's A/B).
WS_DEFAULTS(256, 64, 64, 1)
WS_BWD_KERNEL(fagen_bwd_f16_hd256_causaltl_sm90ws_m64n64s2, KF16, 256, 64, 64, 2, V_causaltl,
              D_causaltl, false)
WS_BWD_KERNEL(fagen_bwd_bf16_hd256_window_softcap_sm90ws_m64n64s2, KBF16, 256, 64, 64, 2,
              V_window_softcap, D_window_softcap, false)
WS_BWD_KERNEL(fagen_bwd_f16_hd128_causal_sm90ws_m64n128s2, KF16, 128, 64, 128, 2, V_causal, D_causal,
              false)
WS_BWD_KERNEL(fagen_bwd_f16_hd64_none_sm90ws_m128n128s2, KF16, 64, 128, 128, 2, V_none, D_none,
              false)
#define WS_VAR(NAME, V, D)                                                                         \
  WS_BWD_KERNEL(fagen_bwd_bf16_hd128_##NAME##_sm90ws_m64n128s2, KBF16, 128, 64, 128, 2, V, D, false)
WS_VAR(causaltl, V_causaltl, D_causaltl)
WS_VAR(window, V_window, D_window)
WS_VAR(windowtl, V_windowtl, D_windowtl)
WS_VAR(causal_softcap, V_softcap, D_softcap)
WS_VAR(none_alibi, V_alibi, D_alibi)
WS_VAR(none_bsr128, V_bsr, D_bsr)
WS_VAR(causal_bs128, V_bs, D_bs)
#endif
DEFAULTS(64, 128, 128, 8, 2)
DEFAULTS(128, 64, 128, 8, 2)
DEFAULTS(256, 64, 64, 8, 2)
#ifndef FAGEN_HARNESS_SM90_ONLY
DEFAULTS(256, 64, 64, 8, 1)
// Candidates: 4-warp CTAs (2 a SM by shared memory and registers), other tile shapes.
DEFAULTS(64, 64, 64, 4, 2)
DEFAULTS(64, 64, 128, 8, 2)
DEFAULTS(64, 128, 64, 8, 2)
DEFAULTS(128, 64, 64, 4, 1)
DEFAULTS(128, 128, 64, 8, 2)
DEFAULTS(256, 64, 32, 4, 1)
// Coverage: fp16, padded head dims (40 -> 48, 96), other warp grids, hd_qk != hd_v.
BWD_KERNEL(fagen_bwd_f16_hd128_causal_sm80_m64n128w8s2, KF16, 128, 128, 64, 128, 8, 2, V_causal,
           D_causal, false)
BWD_KERNEL(fagen_bwd_f16_hd64_none_sm80_m64n64w4s1, KF16, 64, 64, 64, 64, 4, 1, V_none, D_none,
           false)
BWD_KERNEL(fagen_bwd_bf16_hd40_causal_sm80_m64n64w4s2, KBF16, 40, 40, 64, 64, 4, 2, V_causal,
           D_causal, false)
BWD_KERNEL(fagen_bwd_bf16_hd96_none_sm80_m64n128w8s2, KBF16, 96, 96, 64, 128, 8, 2, V_none,
           D_none, false)
BWD_KERNEL(fagen_bwd_bf16_hd192x128_causal_sm80_m64n64w8s2, KBF16, 192, 128, 64, 64, 8, 2,
           V_causal, D_causal, false)
// Every variant of the contract, at hd 64 (tiles divide the block-sparse block 128).
#define VAR(NAME, V, D, DET)                                                                       \
  BWD_KERNEL(fagen_bwd_bf16_hd64_##NAME##_sm80_m64n128w8s2, KBF16, 64, 64, 64, 128, 8, 2, V, D, DET)
VAR(causaltl, V_causaltl, D_causaltl, false)
VAR(window, V_window, D_window, false)
VAR(windowtl, V_windowtl, D_windowtl, false)
VAR(causal_softcap, V_softcap, D_softcap, false)
VAR(none_alibi, V_alibi, D_alibi, false)
VAR(causal_drop, V_drop, D_drop, false)
VAR(none_bsr128, V_bsr, D_bsr, false)
VAR(none_bsr128_det, V_bsr, D_bsr, true)
VAR(causal_bs128, V_bs, D_bs, false)
VAR(causal_varlen, V_varlen, D_varlen, false)
VAR(window_softcap_drop_bsr128_varlen_det, V_all, D_all, true)
// Deterministic kernels with two dq_accum copies (no mask, no block sparsity; bwd_params.h):
// padded head dims, fp16, hd 256 (red.v4 order), ALiBi, varlen (sequences of no keys, one key
// tile).
BWD_KERNEL(fagen_bwd_bf16_hd40_none_det_sm80_m64n64w4s2, KBF16, 40, 40, 64, 64, 4, 2, V_none,
           D_none, true)
BWD_KERNEL(fagen_bwd_f16_hd96_none_det_sm80_m64n128w8s2, KF16, 96, 96, 64, 128, 8, 2, V_none,
           D_none, true)
BWD_KERNEL(fagen_bwd_bf16_hd256_none_det_sm80_m64n64w8s2, KBF16, 256, 256, 64, 64, 8, 2, V_none,
           D_none, true)
VAR(none_alibi_det, V_alibi, D_alibi, true)
VAR(none_varlen_det, V_none_varlen, D_none_varlen, true)
BWD_KERNEL(fagen_bwd_bf16_hd40_none_varlen_det_sm80_m64n64w4s2, KBF16, 40, 40, 64, 64, 4, 2,
           V_none_varlen, D_none_varlen, true)
// Deterministic dQ on the defaults (last: a deadlock would hang here, after the other checks).
DETS(64, 128, 128, 8, 2)
DETS(128, 64, 128, 8, 2)
#endif

// --- host numerics -------------------------------------------------------------------------
static float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0;
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
static float f16_to_float(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? std::ldexp(float(m), -24) : e == 31 ? (m ? NAN : INFINITY)
                                                          : std::ldexp(float(m | 1024), e - 25);
  return s ? -v : v;
}
static uint16_t float_to_f16(float f) {
  // Exact round-to-nearest-even through double arithmetic on the representable grid.
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(double(f));
  if (std::isnan(f))
    return 0x7e00;
  if (a >= 65520.0)
    return sign | 0x7c00;
  int e;
  std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 11, -24); // ulp exponent: 11 significant bits, subnormals at 2^-24
  double q = std::nearbyint(std::ldexp(a, -exp));
  double r = std::ldexp(q, exp);
  // Re-encode r.
  if (r == 0)
    return sign;
  int e2;
  std::frexp(r, &e2);
  if (e2 - 1 < -14) // subnormal
    return sign | uint16_t(std::ldexp(r, 24));
  const int biased = e2 - 1 + 15;
  const int mant = int(std::ldexp(r, -(e2 - 1) + 10)) - 1024;
  return sign | uint16_t(biased << 10) | uint16_t(mant);
}
static float to_float(uint16_t h, ElType t) {
  return t == ElType::BF16 ? bf16_to_float(h) : f16_to_float(h);
}
static uint16_t from_float(float f, ElType t) {
  return t == ElType::BF16 ? float_to_bf16(f) : float_to_f16(f);
}
static float round_to(float f, ElType t) { return to_float(from_float(f, t), t); }

// --- problems --------------------------------------------------------------------------------
struct Case {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool bshd; // else bhsd
  float amp;
};
// As harness_common.cuh: every Sq/Sk of {1, 17, 127, 577, 1000} on both sides; Sq > Sk makes
// causal rows with no visible key; GQA 4:1, 2:1 and MQA; both layouts.
static const Case kCases[] = {
    {1, 2, 2, 1, 1, false, 1.f},      {2, 4, 1, 17, 17, true, 1.f},
    {2, 4, 4, 127, 577, false, 1.f},  {1, 8, 2, 577, 127, true, 2.f},
    {2, 2, 2, 1000, 1000, false, 1.f}, {1, 4, 1, 1000, 17, true, 1.f},
    {1, 2, 2, 17, 1000, false, 3.f},  {2, 4, 1, 1, 577, true, 1.f},
    {1, 4, 2, 577, 577, false, 1.f},  {2, 2, 1, 127, 1, true, 1.f},
    {1, 6, 3, 300, 300, false, 1.f}, // 3 kv heads: a partly filled last group of 2
};
/// Varlen cases: per-sequence lengths (packed BSHD rows).
struct VarlenCase {
  int heads_q, heads_kv;
  std::vector<int> sq, sk;
};
static const VarlenCase kVarlenCases[] = {
    {4, 2, {17, 300, 1, 129}, {40, 300, 129, 1}},
    {2, 1, {577, 127}, {127, 577}},
    {2, 2, {1000}, {1000}},
    {4, 2, {65, 0, 130, 200, 7}, {0, 70, 200, 129, 300}}, // no keys, no queries
    {2, 1, {300, 64}, {64, 1}},                            // one key tile
};
constexpr int kNumCases = int(sizeof(kCases) / sizeof(kCases[0]));
constexpr int kNumVarlenCases = int(sizeof(kVarlenCases) / sizeof(kVarlenCases[0]));

/// One problem: inputs in the dtype (host), geometry, run-time variant arguments, references.
struct Problem {
  ElType type;
  int hd_qk, hd_v;
  VariantDesc var;
  std::string label;
  int batch, heads_q, heads_kv, max_sq, max_sk, total_q, total_k;
  std::vector<int> q0, k0, sq, sk; // per batch entry: first row (packed) and lengths
  fagen_bwd_params p;              // strides and variant arguments; pointers unset
  std::vector<uint16_t> q, k, v, dout, o; // o: the forward's O rounded to the dtype
  std::vector<float> lse;                 // the forward's LSE (fp32, from the fp64 reference)
  std::vector<float> slopes;
  std::vector<uint8_t> block_mask;
  std::vector<int32_t> cu_q, cu_k;
  // references (dense [b][h][i][d] over the packed rows: index (row, h, d) below)
  std::vector<double> dq64, dk64, dv64;
  std::vector<double> dq32, dk32, dv32; // same precision, rounded to the dtype
};

/// Element offset of (b, h, i, d) in a tensor with the given strides (varlen: packed rows).
static int64_t offset(const Problem &pb, int64_t bs, int64_t hs, int64_t rs, int b, int h, int row0,
                      int i) {
  return (pb.var.varlen ? 0 : b * bs) + h * hs + int64_t(row0 + i) * rs;
}

static void set_strides(Problem &pb, bool bshd) {
  fagen_bwd_params &p = pb.p;
  fagen_fwd_params &f = p.fwd;
  auto set = [&](int64_t &b, int64_t &h, int64_t &r, int heads, int seqlen, int hd) {
    if (bshd || pb.var.varlen)
      r = int64_t(heads) * hd, h = hd, b = int64_t(seqlen) * heads * hd;
    else
      r = hd, h = int64_t(seqlen) * hd, b = int64_t(heads) * seqlen * hd;
  };
  const int rows_q = pb.var.varlen ? pb.total_q : pb.max_sq;
  const int rows_k = pb.var.varlen ? pb.total_k : pb.max_sk;
  set(f.q_batch_stride, f.q_head_stride, f.q_row_stride, pb.heads_q, rows_q, pb.hd_qk);
  set(f.k_batch_stride, f.k_head_stride, f.k_row_stride, pb.heads_kv, rows_k, pb.hd_qk);
  set(f.v_batch_stride, f.v_head_stride, f.v_row_stride, pb.heads_kv, rows_k, pb.hd_v);
  set(f.o_batch_stride, f.o_head_stride, f.o_row_stride, pb.heads_q, rows_q, pb.hd_v);
  set(p.do_batch_stride, p.do_head_stride, p.do_row_stride, pb.heads_q, rows_q, pb.hd_v);
  set(p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride, pb.heads_q, rows_q, pb.hd_qk);
  set(p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride, pb.heads_kv, rows_k, pb.hd_qk);
  set(p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride, pb.heads_kv, rows_k, pb.hd_v);
  // LSE, D, dq_accum: [batch][heads][rows] as the runtime lays them out.
  f.lse_head_stride = rows_q, f.lse_batch_stride = int64_t(pb.heads_q) * rows_q;
  p.d_head_stride = rows_q, p.d_batch_stride = int64_t(pb.heads_q) * rows_q;
  p.dq_accum_head_stride = int64_t(rows_q) * pb.hd_qk;
  p.dq_accum_batch_stride = int64_t(pb.heads_q) * rows_q * pb.hd_qk;
}

// --- the reference -----------------------------------------------------------------------------
static bool host_visible(const Problem &pb, int b, int h, int i, int j) {
  const int sq = pb.sq[b], sk = pb.sk[b];
  const fagen_fwd_params &f = pb.p.fwd;
  const bool tl = pb.var.mask == MaskK::CausalTL || pb.var.mask == MaskK::WindowTL;
  const int off = tl ? 0 : sk - sq;
  int left = -1, right = -1;
  if (pb.var.mask == MaskK::Causal || pb.var.mask == MaskK::CausalTL)
    right = 0;
  if (pb.var.mask == MaskK::Window || pb.var.mask == MaskK::WindowTL)
    left = f.window_left, right = f.window_right;
  if (right >= 0 && j > i + off + right)
    return false;
  if (left >= 0 && j < i + off - left)
    return false;
  if (pb.var.sparse == SparseK::Runtime)
    return pb.block_mask[b * f.block_mask_batch_stride + h * f.block_mask_head_stride +
                         (i / 128) * f.block_mask_row_stride + j / 128] != 0;
  if (pb.var.sparse == SparseK::Static)
    return i / 128 < 16 && j / 128 < 16 && kHostBlockTable[(i / 128) * 16 + j / 128] != 0;
  return true;
}

/// Rows [i0, i1) of query head h of batch entry b: forward (fp64 pass: writes O and LSE for
/// the kernel) and gradients in Acc precision (kSame: rounded where the kernel rounds). dQ goes
/// to the reference's dense dQ; dK and dV of the kv head are added to dk_part / dv_part
/// ((sk, hd) each), reduced over the units of the group afterwards.
template <class Acc, bool kSame>
static void reference_rows(Problem &pb, int b, int h, int i0, int i1, std::vector<double> &dk_part,
                           std::vector<double> &dv_part) {
  const fagen_bwd_params &p = pb.p;
  const fagen_fwd_params &f = p.fwd;
  const int sq = pb.sq[b], sk = pb.sk[b], dqk = pb.hd_qk, dv = pb.hd_v;
  const int g = h / (pb.heads_q / pb.heads_kv);
  const ElType t = pb.type;
  auto ld = [&](const std::vector<uint16_t> &x, int64_t bs, int64_t hs, int64_t rs, int hh, int r0,
                int i, int d) { return Acc(to_float(x[offset(pb, bs, hs, rs, b, hh, r0, i) + d], t)); };
  std::vector<Acc> K(size_t(sk) * dqk), V(size_t(sk) * dv), dK(size_t(sk) * dqk, 0),
      dV(size_t(sk) * dv, 0);
  for (int j = 0; j < sk; ++j) {
    for (int d = 0; d < dqk; ++d)
      K[j * dqk + d] = ld(pb.k, f.k_batch_stride, f.k_head_stride, f.k_row_stride, g, pb.k0[b], j, d);
    for (int d = 0; d < dv; ++d)
      V[j * dv + d] = ld(pb.v, f.v_batch_stride, f.v_head_stride, f.v_row_stride, g, pb.k0[b], j, d);
  }
  const Acc scale = Acc(f.softmax_scale);
  const double slope = pb.var.mod == ModK::Alibi ? pb.slopes[b * f.alibi_batch_stride + h] : 0;
  const uint32_t bh = uint32_t(b * pb.heads_q + h);
  const Acc rescale = pb.var.dropout ? Acc(f.dropout_rescale) : Acc(1);
  std::vector<Acc> S(sk), dlog(sk), Q(dqk), dO(dv), dQ(dqk), O(dv);
  std::vector<char> vis(sk), keep(sk);
  for (int i = i0; i < i1; ++i) {
    for (int d = 0; d < dqk; ++d)
      Q[d] = ld(pb.q, f.q_batch_stride, f.q_head_stride, f.q_row_stride, h, pb.q0[b], i, d);
    for (int d = 0; d < dv; ++d)
      dO[d] = ld(pb.dout, p.do_batch_stride, p.do_head_stride, p.do_row_stride, h, pb.q0[b], i, d);
    Acc mx = -INFINITY;
    for (int j = 0; j < sk; ++j) {
      Acc s = 0;
      for (int d = 0; d < dqk; ++d)
        s += Q[d] * K[j * dqk + d];
      dlog[j] = scale;
      if (pb.var.mod == ModK::Softcap) {
        const Acc th = std::tanh(scale * s / Acc(f.softcap));
        S[j] = Acc(f.softcap) * th;
        dlog[j] = scale * (1 - th * th);
      } else if (pb.var.mod == ModK::Alibi) {
        S[j] = scale * s - Acc(slope) * Acc(std::abs(i + sk - sq - j));
      } else {
        S[j] = scale * s;
      }
      vis[j] = host_visible(pb, b, h, i, j);
      keep[j] = !pb.var.dropout || fagen::dropout_keep(f.dropout_seed, f.dropout_offset,
                                                       f.dropout_threshold, bh, i, j);
      if (vis[j])
        mx = std::max(mx, S[j]);
    }
    const int64_t lse_at = (pb.var.varlen ? 0 : b * f.lse_batch_stride) + h * f.lse_head_stride +
                           pb.q0[b] + i;
    const int64_t o_at =
        offset(pb, f.o_batch_stride, f.o_head_stride, f.o_row_stride, b, h, pb.q0[b], i);
    Acc lse;
    if (!kSame) { // the forward: LSE and O, written for the kernel in its precisions
      double sum = 0;
      for (int j = 0; j < sk; ++j)
        sum += vis[j] ? std::exp(double(S[j] - mx)) : 0.0;
      lse = sum > 0 ? Acc(double(mx) + std::log(sum)) : Acc(-INFINITY);
      pb.lse[lse_at] = float(lse);
      std::fill(O.begin(), O.end(), Acc(0));
      for (int j = 0; j < sk; ++j)
        if (vis[j] && keep[j] && sum > 0) {
          const Acc pj = std::exp(S[j] - lse) * rescale;
          for (int d = 0; d < dv; ++d)
            O[d] += pj * V[j * dv + d];
        }
      for (int d = 0; d < dv; ++d)
        pb.o[o_at + d] = from_float(float(O[d]), t);
    } else {
      lse = Acc(pb.lse[lse_at]);
      for (int d = 0; d < dv; ++d)
        O[d] = Acc(to_float(pb.o[o_at + d], t));
    }
    Acc D = 0; // rowsum(dO o O): the exact O (fp64), the kernel's O (same precision)
    for (int d = 0; d < dv; ++d)
      D += dO[d] * O[d];
    std::fill(dQ.begin(), dQ.end(), Acc(0));
    for (int j = 0; j < sk; ++j) {
      if (!vis[j] || lse == Acc(-INFINITY))
        continue;
      const Acc pr = std::exp(S[j] - lse);
      Acc dp = 0;
      for (int d = 0; d < dv; ++d)
        dp += dO[d] * V[j * dv + d];
      const Acc pd = keep[j] ? pr * rescale : Acc(0);
      const Acc dpd = keep[j] ? dp * rescale : Acc(0);
      const Acc ds = pr * (dpd - D);
      Acc ds_raw = ds * dlog[j];
      if (kSame)
        ds_raw = pb.var.mod == ModK::None ? Acc(round_to(float(ds), t)) * scale
                                          : Acc(round_to(float(ds * dlog[j]), t));
      const Acc pdr = kSame ? Acc(round_to(float(pd), t)) : pd;
      for (int d = 0; d < dv; ++d)
        dV[j * dv + d] += pdr * dO[d];
      for (int d = 0; d < dqk; ++d) {
        dK[j * dqk + d] += ds_raw * Q[d];
        dQ[d] += ds_raw * K[j * dqk + d];
      }
    }
    std::vector<double> &dq_out = kSame ? pb.dq32 : pb.dq64;
    const int64_t dq_row = (pb.var.varlen ? 0 : int64_t(b) * pb.total_q) + pb.q0[b] + i;
    for (int d = 0; d < dqk; ++d)
      dq_out[(dq_row * pb.heads_q + h) * dqk + d] =
          kSame ? double(round_to(float(dQ[d]), t)) : double(dQ[d]);
  }
  dk_part.assign(dK.begin(), dK.end());
  dv_part.assign(dV.begin(), dV.end());
}

/// Both references of the whole problem: units of (batch, query head, 64 rows) in parallel,
/// then dK and dV reduced per (batch, kv head) in unit order (kSame: in fp32, rounded).
template <class Acc, bool kSame> static void reference(Problem &pb);

static void parallel_for(int n, const std::function<void(int)> &fn) {
  const int workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  std::atomic<int> next{0};
  for (int w = 0; w < std::min(workers, n); ++w)
    pool.emplace_back([&] {
      for (int i; (i = next++) < n;)
        fn(i);
    });
  for (auto &th : pool)
    th.join();
}

template <class Acc, bool kSame> static void reference(Problem &pb) {
  struct Unit {
    int b, h, i0, i1;
    std::vector<double> dk, dv;
  };
  std::vector<Unit> units;
  for (int b = 0; b < pb.batch; ++b)
    for (int h = 0; h < pb.heads_q; ++h)
      for (int i0 = 0; i0 < std::max(pb.sq[b], 1); i0 += 64)
        units.push_back({b, h, i0, std::min(i0 + 64, pb.sq[b]), {}, {}});
  parallel_for(int(units.size()), [&](int u) {
    Unit &w = units[u];
    reference_rows<Acc, kSame>(pb, w.b, w.h, w.i0, w.i1, w.dk, w.dv);
  });
  std::vector<double> &dk_out = kSame ? pb.dk32 : pb.dk64;
  std::vector<double> &dv_out = kSame ? pb.dv32 : pb.dv64;
  const int group = pb.heads_q / pb.heads_kv;
  for (int b = 0; b < pb.batch; ++b)
    for (int g = 0; g < pb.heads_kv; ++g) {
      const int sk = pb.sk[b];
      std::vector<Acc> dk(size_t(sk) * pb.hd_qk, 0), dv(size_t(sk) * pb.hd_v, 0);
      for (const Unit &w : units)
        if (w.b == b && w.h / group == g && !w.dk.empty()) {
          for (size_t x = 0; x < dk.size(); ++x)
            dk[x] += Acc(w.dk[x]);
          for (size_t x = 0; x < dv.size(); ++x)
            dv[x] += Acc(w.dv[x]);
        }
      for (int j = 0; j < sk; ++j) {
        const int64_t row = (pb.var.varlen ? 0 : int64_t(b) * pb.total_k) + pb.k0[b] + j;
        for (int d = 0; d < pb.hd_qk; ++d)
          dk_out[(row * pb.heads_kv + g) * pb.hd_qk + d] =
              kSame ? double(round_to(float(dk[j * pb.hd_qk + d]), pb.type)) : double(dk[j * pb.hd_qk + d]);
        for (int d = 0; d < pb.hd_v; ++d)
          dv_out[(row * pb.heads_kv + g) * pb.hd_v + d] =
              kSame ? double(round_to(float(dv[j * pb.hd_v + d]), pb.type)) : double(dv[j * pb.hd_v + d]);
      }
    }
}

/// Builds the problem of case `ci` (varlen: varlen case ci) for a kernel's dtype / dims /
/// variant, with inputs and both references. Dense gradients are [b][row][h][d] here.
static Problem make_problem(const BwdKernel &k, int ci) {
  Problem pb;
  pb.type = k.type, pb.hd_qk = k.hd_qk, pb.hd_v = k.hd_v, pb.var = k.var;
  float amp = 1.f;
  bool bshd = true;
  if (k.var.varlen) {
    const VarlenCase &c = kVarlenCases[ci];
    pb.batch = int(c.sq.size()), pb.heads_q = c.heads_q, pb.heads_kv = c.heads_kv;
    pb.sq = c.sq, pb.sk = c.sk;
    pb.total_q = pb.total_k = 0;
    pb.cu_q.push_back(0), pb.cu_k.push_back(0);
    for (int b = 0; b < pb.batch; ++b) {
      pb.q0.push_back(pb.total_q), pb.k0.push_back(pb.total_k);
      pb.total_q += c.sq[b], pb.total_k += c.sk[b];
      pb.cu_q.push_back(pb.total_q), pb.cu_k.push_back(pb.total_k);
    }
    pb.max_sq = *std::max_element(c.sq.begin(), c.sq.end());
    pb.max_sk = *std::max_element(c.sk.begin(), c.sk.end());
    char buf[96];
    std::snprintf(buf, sizeof(buf), "varlen%d:%dx%d/%d", ci, pb.batch, pb.heads_q, pb.heads_kv);
    pb.label = buf;
  } else {
    const Case &c = kCases[ci];
    pb.batch = c.batch, pb.heads_q = c.heads_q, pb.heads_kv = c.heads_kv;
    pb.max_sq = pb.total_q = c.seqlen_q, pb.max_sk = pb.total_k = c.seqlen_k;
    pb.sq.assign(c.batch, c.seqlen_q), pb.sk.assign(c.batch, c.seqlen_k);
    pb.q0.assign(c.batch, 0), pb.k0.assign(c.batch, 0);
    amp = c.amp, bshd = c.bshd;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%dx%d/%d,%d,%d%s", c.batch, c.heads_q, c.heads_kv,
                  c.seqlen_q, c.seqlen_k, c.bshd ? ",bshd" : "");
    pb.label = buf;
  }
  std::memset(&pb.p, 0, sizeof(pb.p));
  fagen_fwd_params &f = pb.p.fwd;
  f.batch = pb.batch, f.heads_q = pb.heads_q, f.heads_kv = pb.heads_kv;
  f.seqlen_q = pb.max_sq, f.seqlen_k = pb.max_sk, f.group_size = pb.heads_q / pb.heads_kv;
  f.softmax_scale = 1.f / std::sqrt(float(pb.hd_qk));
  f.scale_log2 = f.softmax_scale * 1.4426950408889634f;
  f.window_left = 90, f.window_right = 20;
  f.softcap = 2.f;
  f.alibi_batch_stride = pb.heads_q;
  f.dropout_p = 0.17f;
  f.dropout_threshold = fagen::dropout_threshold(f.dropout_p);
  f.dropout_rescale = fagen::dropout_rescale(f.dropout_threshold); // p quantized to 1/256
  f.dropout_seed = 0x123456789abcdefull + ci;
  f.dropout_offset = (uint64_t(7) << 32) + 12345;
  set_strides(pb, bshd);

  std::mt19937 gen(1000 * ci + 31 * k.hd_qk + k.hd_v + 7 * int(k.type));
  std::normal_distribution<float> normal(0.f, amp);
  const int rows_q = pb.var.varlen ? pb.total_q : pb.max_sq;
  const int rows_k = pb.var.varlen ? pb.total_k : pb.max_sk;
  const int nb = pb.var.varlen ? 1 : pb.batch;
  auto fill = [&](std::vector<uint16_t> &x, size_t n, float a) {
    x.resize(n);
    for (auto &e : x)
      e = from_float(a * normal(gen), k.type);
  };
  fill(pb.q, size_t(nb) * pb.heads_q * rows_q * pb.hd_qk, 1.f);
  fill(pb.k, size_t(nb) * pb.heads_kv * rows_k * pb.hd_qk, 1.f);
  fill(pb.v, size_t(nb) * pb.heads_kv * rows_k * pb.hd_v, 1.f);
  fill(pb.dout, size_t(nb) * pb.heads_q * rows_q * pb.hd_v, 1.f / amp);
  pb.o.assign(size_t(nb) * pb.heads_q * rows_q * pb.hd_v, 0);
  pb.lse.assign(size_t(nb) * pb.heads_q * rows_q, 0.f);
  for (int b = 0; b < pb.batch; ++b)
    for (int h = 0; h < pb.heads_q; ++h)
      pb.slopes.push_back(std::exp2(-8.f * (h + 1) / pb.heads_q) * (1.f + 0.25f * b));
  // Runtime block mask: per head, 16 x 16 blocks, broadcast over the batch.
  f.block_mask_batch_stride = 0, f.block_mask_head_stride = 256, f.block_mask_row_stride = 16;
  for (int h = 0; h < pb.heads_q; ++h)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        pb.block_mask.push_back((r + c + h) % 3 != 0 || r == c);

  const size_t nq = size_t(nb) * rows_q * pb.heads_q, nk = size_t(nb) * rows_k * pb.heads_kv;
  pb.dq64.assign(nq * pb.hd_qk, 0), pb.dq32.assign(nq * pb.hd_qk, 0);
  pb.dk64.assign(nk * pb.hd_qk, 0), pb.dk32.assign(nk * pb.hd_qk, 0);
  pb.dv64.assign(nk * pb.hd_v, 0), pb.dv32.assign(nk * pb.hd_v, 0);
  reference<double, false>(pb); // also writes the forward's O and LSE
  reference<float, true>(pb);
  return pb;
}

// --- running a kernel ----------------------------------------------------------------------------
struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 16))); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { CUDA_CHECK(cudaFree(ptr)); }
  template <class T> void upload(const std::vector<T> &x) {
    CUDA_CHECK(cudaMemcpy(ptr, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
};

static void launch(const BwdKernel &k, const fagen_bwd_params &p, int m_blocks,
                   cudaStream_t stream = 0) {
  void *args[] = {const_cast<fagen_bwd_params *>(&p)};
  dim3 grid_q(m_blocks, p.fwd.heads_q, p.fwd.batch);
  const dim3 grid_k = main_grid(k, p);
  CUDA_CHECK(cudaLaunchKernel(k.pre, grid_q, dim3(k.pre_threads), args, 0, stream));
#ifdef FAGEN_HARNESS_SM90
  if (k.ws) {
    fagen_bwd_tma_maps maps;
    std::string what;
    if (int r = fagen::encodeBwdTmaMaps(tensor_map_encoder(), p, k.hd_qk, k.hd_v, k.block_m,
                                        k.block_n, maps, what)) {
      std::fprintf(stderr, "%s: cuTensorMapEncodeTiled failed for %s (CUresult %d)\n", k.name,
                   what.c_str(), r);
      std::exit(1);
    }
    void *ws_args[] = {const_cast<fagen_bwd_params *>(&p), &maps};
    CUDA_CHECK(cudaLaunchKernel(k.main, grid_k, dim3(k.threads), ws_args, k.smem_bytes, stream));
  } else
#endif
  CUDA_CHECK(cudaLaunchKernel(k.main, grid_k, dim3(k.threads), args, k.smem_bytes, stream));
  CUDA_CHECK(cudaLaunchKernel(k.post, grid_q, dim3(k.pre_threads), args, 0, stream));
}

/// Device tensors of one problem, bound into a copy of its params.
struct DeviceProblem {
  static constexpr size_t kGuard = 4096; // poisoned elements past every output
  DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv, work, slopes, mask, cu_q, cu_k;
  fagen_bwd_params p;
  size_t nq, nk, nv, ndq;
  fagen_bwd_workspace ws;
  int m_blocks;
  DeviceProblem(const Problem &pb, const BwdKernel &kern)
      : q(pb.q.size() * 2), k(pb.k.size() * 2), v(pb.v.size() * 2), o(pb.o.size() * 2),
        dout(pb.dout.size() * 2), lse(pb.lse.size() * 4), dq((pb.q.size() + kGuard) * 2),
        dk((pb.k.size() + kGuard) * 2), dv((pb.v.size() + kGuard) * 2),
        work(workspace(pb, kern).total_bytes), slopes(pb.slopes.size() * 4),
        mask(pb.block_mask.size()), cu_q(pb.cu_q.size() * 4 + 4), cu_k(pb.cu_k.size() * 4 + 4) {
    q.upload(pb.q), k.upload(pb.k), v.upload(pb.v), o.upload(pb.o), dout.upload(pb.dout);
    lse.upload(pb.lse), slopes.upload(pb.slopes), mask.upload(pb.block_mask);
    if (pb.var.varlen)
      cu_q.upload(pb.cu_q), cu_k.upload(pb.cu_k);
    ws = workspace(pb, kern);
    m_blocks = (pb.max_sq + kern.block_m - 1) / kern.block_m;
    p = pb.p;
    if (!pb.var.varlen) { // whole query tiles a head (bwd_params.h)
      const int64_t dq_rows = fagen_bwd_dq_rows(0, pb.max_sq, 0, kern.block_m);
      p.dq_accum_head_stride = dq_rows * pb.hd_qk;
      p.dq_accum_batch_stride = int64_t(pb.heads_q) * dq_rows * pb.hd_qk;
    }
    p.fwd.q = q.ptr, p.fwd.k = k.ptr, p.fwd.v = v.ptr, p.fwd.o = o.ptr;
    p.fwd.lse = static_cast<float *>(lse.ptr);
    p.fwd.alibi_slopes = static_cast<float *>(slopes.ptr);
    p.fwd.block_mask = static_cast<uint8_t *>(mask.ptr);
    if (pb.var.varlen)
      p.fwd.cu_seqlens_q = static_cast<int32_t *>(cu_q.ptr),
      p.fwd.cu_seqlens_k = static_cast<int32_t *>(cu_k.ptr), p.fwd.total_q = pb.total_q,
      p.fwd.total_k = pb.total_k;
    p.dout = dout.ptr, p.dq = dq.ptr, p.dk = dk.ptr, p.dv = dv.ptr;
    char *w = static_cast<char *>(work.ptr);
    p.dq_accum = reinterpret_cast<float *>(w + ws.dq_accum_offset);
    p.d = reinterpret_cast<float *>(w + ws.d_offset);
    p.dq_semaphore = reinterpret_cast<int32_t *>(w + ws.semaphore_offset);
    p.semaphore_head_stride = m_blocks;
    p.semaphore_batch_stride = int64_t(m_blocks) * pb.heads_q;
    p.m_blocks = m_blocks;
    nq = pb.q.size(), nk = pb.k.size(), nv = pb.v.size();
  }
  static fagen_bwd_workspace workspace(const Problem &pb, const BwdKernel &kern) {
    const int rows_q = pb.var.varlen ? pb.total_q : pb.batch * pb.max_sq;
    const int64_t dq_rows = pb.var.varlen
                                ? pb.total_q
                                : pb.batch * fagen_bwd_dq_rows(0, pb.max_sq, 0, kern.block_m);
    return fagen_bwd_workspace_layout(rows_q, dq_rows, pb.heads_q, pb.hd_qk, pb.batch,
                                      (pb.max_sq + kern.block_m - 1) / kern.block_m,
                                      kern.deterministic, dq_slots(kern));
  }
};

struct Outputs {
  std::vector<uint16_t> dq, dk, dv;
};

/// NaN outputs (guards included) and workspace (the semaphores too: -1): _pre must reset what
/// the main kernel reads.
static void poison(DeviceProblem &d) {
  CUDA_CHECK(cudaMemset(d.dq.ptr, 0xff, d.dq.bytes));
  CUDA_CHECK(cudaMemset(d.dk.ptr, 0xff, d.dk.bytes));
  CUDA_CHECK(cudaMemset(d.dv.ptr, 0xff, d.dv.bytes));
  CUDA_CHECK(cudaMemset(d.work.ptr, 0xff, d.work.bytes));
}

static Outputs read_outputs(const DeviceProblem &d);

static Outputs run_once(const BwdKernel &kern, DeviceProblem &d) {
  poison(d);
  launch(kern, d.p, d.m_blocks);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return read_outputs(d);
}

/// Keeps one thread busy for about `us` microseconds.
__global__ void sleep_us(int us) {
  for (int i = 0; i < us; ++i)
    __nanosleep(1000);
}

/// The same problem launched twice at once on two streams (buffers of their own): the grids
/// share the SMs, so their CTAs start in other orders and at other times than alone, which a
/// deterministic kernel's dQ order must not depend on. Both streams wait for an event behind a
/// 2 ms sleep on a third, so that both launches are queued before either starts.
static std::pair<Outputs, Outputs> run_concurrent(const BwdKernel &kern, DeviceProblem &d,
                                                  DeviceProblem &d2) {
  static cudaStream_t streams[3] = {nullptr, nullptr, nullptr};
  static cudaEvent_t go = nullptr;
  for (cudaStream_t &s : streams)
    if (!s)
      CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (!go)
    CUDA_CHECK(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
  poison(d), poison(d2);
  CUDA_CHECK(cudaDeviceSynchronize());
  sleep_us<<<1, 1, 0, streams[2]>>>(2000);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(go, streams[2]));
  CUDA_CHECK(cudaStreamWaitEvent(streams[0], go, 0));
  CUDA_CHECK(cudaStreamWaitEvent(streams[1], go, 0));
  launch(kern, d.p, d.m_blocks, streams[0]);
  launch(kern, d2.p, d2.m_blocks, streams[1]);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return {read_outputs(d), read_outputs(d2)};
}

static Outputs read_outputs(const DeviceProblem &d) {
  Outputs out;
  out.dq.resize(d.dq.bytes / 2), out.dk.resize(d.dk.bytes / 2), out.dv.resize(d.dv.bytes / 2);
  CUDA_CHECK(cudaMemcpy(out.dq.data(), d.dq.ptr, d.dq.bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out.dk.data(), d.dk.ptr, d.dk.bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out.dv.data(), d.dv.ptr, d.dv.bytes, cudaMemcpyDeviceToHost));
  return out;
}

struct Errors {
  double err[3], same[3], maxref[3];
  bool guard_ok = true, nan_free = true;
};
constexpr double kEps = 1e-5;

/// Max abs errors of the kernel's gradients and of the same-precision reference's.
static Errors measure(const Problem &pb, const Outputs &out) {
  Errors e{};
  const fagen_bwd_params &p = pb.p;
  const int nb = pb.var.varlen ? 1 : pb.batch;
  const int rows_q = pb.var.varlen ? pb.total_q : pb.max_sq;
  const int rows_k = pb.var.varlen ? pb.total_k : pb.max_sk;
  auto one = [&](int which, const std::vector<uint16_t> &x, const std::vector<double> &r64,
                 const std::vector<double> &r32, int heads, int rows, int hd, int64_t bs,
                 int64_t hs, int64_t rs) {
    double err = 0, same = 0, mx = 0;
    for (int b = 0; b < nb; ++b)
      for (int i = 0; i < rows; ++i)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < hd; ++d) {
            const size_t ref_at = ((size_t(b) * rows + i) * heads + h) * hd + d;
            const float got =
                x.empty() ? 0.f : to_float(x[b * bs + h * hs + int64_t(i) * rs + d], pb.type);
            if (!std::isfinite(got))
              e.nan_free = false;
            err = std::max(err, std::fabs(double(got) - r64[ref_at]));
            same = std::max(same, std::fabs(r32[ref_at] - r64[ref_at]));
            mx = std::max(mx, std::fabs(r64[ref_at]));
          }
    e.err[which] = std::isfinite(err) ? err : INFINITY, e.same[which] = same, e.maxref[which] = mx;
    const size_t n = size_t(nb) * heads * rows * hd;
    for (size_t i = n; i < x.size(); ++i)
      e.guard_ok &= x[i] == 0xffff;
  };
  one(0, out.dq, pb.dq64, pb.dq32, pb.heads_q, rows_q, pb.hd_qk, p.dq_batch_stride,
      p.dq_head_stride, p.dq_row_stride);
  one(1, out.dk, pb.dk64, pb.dk32, pb.heads_kv, rows_k, pb.hd_qk, p.dk_batch_stride,
      p.dk_head_stride, p.dk_row_stride);
  one(2, out.dv, pb.dv64, pb.dv32, pb.heads_kv, rows_k, pb.hd_v, p.dv_batch_stride,
      p.dv_head_stride, p.dv_row_stride);
  return e;
}

// --- command line --------------------------------------------------------------------------------
struct Options {
  bool check = false, bench = false, ref_only = false; // --ref-only: references only (no GPU)
  const char *csv = nullptr, *filter = nullptr;
  int cases = 1 << 30; // --cases N: only the first N cases per kernel (compute-sanitizer)
  int seqlen = 0;      // --seqlen N: time only that sequence length (ncu on one launch)
  bool trace = false;  // --trace: a traced launch after each timing (-DFAGEN_WS_TRACE builds)
};

static bool selected(const char *name, const char *filter) {
  if (!filter)
    return true;
  std::string f(filter);
  size_t start = 0;
  while (start <= f.size()) {
    size_t end = f.find(',', start);
    std::string part = f.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty() && std::strstr(name, part.c_str()))
      return true;
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return false;
}

static int run_checks(const Options &opt) {
  int failures = 0, runs = 0;
  std::printf("%-62s %-22s %9s %9s %9s %9s %9s %9s\n", "kernel", "case", "errdQ", "toldQ", "errdK",
              "toldK", "errdV", "toldV");
  std::map<std::string, Problem> cache;
  for (const BwdKernel &k : kernels()) {
    if (!selected(k.name, opt.filter))
      continue;
    if (!opt.ref_only)
      CUDA_CHECK(cudaFuncSetAttribute(k.main, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      k.smem_bytes));
    const int cases = std::min(opt.cases, k.var.varlen ? kNumVarlenCases : kNumCases);
    for (int ci = 0; ci < cases; ++ci) {
      char key[128];
      std::snprintf(key, sizeof(key), "%d,%d,%d,%d,%d,%d,%d,%d,%d", int(k.type), k.hd_qk, k.hd_v,
                    int(k.var.mask), int(k.var.mod), int(k.var.dropout), int(k.var.sparse),
                    int(k.var.varlen), ci);
      auto it = cache.find(key);
      if (it == cache.end())
        it = cache.emplace(key, make_problem(k, ci)).first;
      const Problem &pb = it->second;
      if (opt.ref_only) {
        Outputs none;
        const Errors e = measure(pb, none);
        std::printf("%-62s %-22s same-precision errors %9.3g %9.3g %9.3g max %9.3g %9.3g %9.3g\n",
                    k.name, pb.label.c_str(), e.same[0], e.same[1], e.same[2], e.maxref[0],
                    e.maxref[1], e.maxref[2]);
        continue;
      }
      DeviceProblem d(pb, k);
      // Grouped grids: 1, 2 or 4 kv heads a group by case (CTAs past heads_kv exit; 4 kv
      // heads: two groups of 2; 3: a group of 2 and one of 1).
      if (k.grouped)
        d.p.tile_group_log2 = pb.heads_kv == 4 || pb.heads_kv == 3 ? 1 : ci % 3;
      const Outputs a = run_once(k, d), b = run_once(k, d);
      // Deterministic kernels: also bitwise equal when two launches run at once.
      bool rep_concurrent = true;
      if (k.deterministic) {
        DeviceProblem d2(pb, k);
        d2.p.tile_group_log2 = d.p.tile_group_log2;
        const auto [c1, c2] = run_concurrent(k, d, d2);
        for (const Outputs *c : {&c1, &c2})
          rep_concurrent &= c->dq == a.dq && c->dk == a.dk && c->dv == a.dv;
      }
      const Errors e = measure(pb, a);
      bool within = e.nan_free;
      double tol[3];
      const double scale = std::max({1.0, e.maxref[0], e.maxref[1], e.maxref[2]});
      for (int w = 0; w < 3; ++w) {
        tol[w] = 2 * e.same[w] + kEps * scale;
        within &= e.err[w] <= tol[w];
      }
      // dK, dV: always bitwise repeatable; dQ only when deterministic (else atomics order).
      const bool rep_kv = a.dk == b.dk && a.dv == b.dv;
      const bool rep_q = a.dq == b.dq;
      const bool ok =
          within && e.guard_ok && rep_kv && (rep_q || !k.deterministic) && rep_concurrent;
      std::printf("%-62s %-22s %9.3g %9.3g %9.3g %9.3g %9.3g %9.3g %s%s%s%s%s%s\n", k.name,
                  pb.label.c_str(), e.err[0], tol[0], e.err[1], tol[1], e.err[2], tol[2],
                  ok ? "ok" : "FAIL", e.guard_ok ? "" : " (guard overwritten)",
                  rep_kv ? "" : " (dK/dV not repeatable)",
                  rep_q ? " rep" : (k.deterministic ? " (dQ not repeatable)" : ""),
                  !k.deterministic ? "" : rep_concurrent ? " conc" : " (differs run concurrently)",
                  k.grouped ? (" g" + std::to_string(d.p.tile_group_log2)).c_str() : "");
      failures += !ok;
      ++runs;
    }
  }
  std::printf("CHECK SUMMARY: %d/%d passed\n", runs - failures, runs);
  return failures;
}

// --- timing ----------------------------------------------------------------------------------------
/// A plausible LSE for random inputs: log(seqlen) + 0.5 (P sums to ~1 per row).
__global__ void fill_lse(float *x, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

#ifdef FAGEN_WS_TRACE
/// One traced launch of an sm90ws kernel (ws_trace.cuh's buffer; CTA-wide events of the first
/// consumer warpgroup: work 0 = clock64 at 0 its start, 1 K/V landed, 2 the first Q landed,
/// 3 the second tile's start, 4 the walk done, 5 dK/dV stored; work 1 = 0 its tiles, 5 / 6
/// globaltimer at its end / the CTA's start, 7 the SM), then its TRACE line.
static void trace_launch(const BwdKernel &kern, const fagen_bwd_params &p, int m_blocks,
                         const char *label) {
  using u64 = unsigned long long;
  const dim3 grid = main_grid(kern, p);
  const size_t ctas = size_t(grid.x) * grid.y * grid.z;
  constexpr int kTiles = fagen::sm90::kWsTraceTiles;
  const size_t words = ctas * 4 * kTiles * 8;
  u64 *buf = nullptr, *none = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, words * sizeof(u64)));
  CUDA_CHECK(cudaMemset(buf, 0, words * sizeof(u64)));
  CUDA_CHECK(cudaMemcpyToSymbol(fagen::sm90::ws_trace_buf, &buf, sizeof(buf)));
  launch(kern, p, m_blocks);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyToSymbol(fagen::sm90::ws_trace_buf, &none, sizeof(none)));
  std::vector<u64> ev(words);
  CUDA_CHECK(cudaMemcpy(ev.data(), buf, words * sizeof(u64), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(buf));
  auto at = [&](size_t cta, int work, int event) {
    return ev[((cta * 4 + 1) * kTiles + work) * 8 + event];
  };
  double kv = 0, first_q = 0, tile = 0, first_tile = 0, epilogue = 0, beyond = 0, tiles = 0;
  u64 t0 = ~0ull, t1 = 0;
  double busy = 0;
  int ran = 0, walked = 0, two = 0;
  for (size_t c = 0; c < ctas; ++c) {
    const u64 start = at(c, 1, 6), end = at(c, 1, 5);
    if (start == 0 || end == 0)
      continue; // exited before the trace (a grouped grid's heads past heads_kv, varlen)
    ++ran;
    t0 = std::min(t0, start), t1 = std::max(t1, end);
    busy += double(end - start);
    const double n = double(at(c, 1, 0));
    if (n < 1)
      continue;
    ++walked;
    const double c0 = double(at(c, 0, 0)), c1 = double(at(c, 0, 1)), c2 = double(at(c, 0, 2));
    const double c4 = double(at(c, 0, 4)), c5 = double(at(c, 0, 5));
    const double per_tile = (c4 - c2) / n;
    kv += c1 - c0, first_q += c2 - c0, tile += per_tile, epilogue += c5 - c4, tiles += n;
    beyond += (c5 - c0 - (c4 - c2)) / per_tile;
    if (n >= 2)
      first_tile += double(at(c, 0, 3)) - c2, ++two;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double span = t1 > t0 ? double(t1 - t0) : 1.0;
  const double w = walked ? walked : 1;
  std::printf("TRACE %-52s CTAs %zu (ran %d, walked %d) tiles/CTA %.1f | cycles: K/V %.0f, "
              "first Q %.0f, tile %.0f (first %.0f), dK/dV %.0f; beyond its tiles %.2f tiles | "
              "span %.3f ms, SMs busy %.3f\n",
              label, ctas, ran, walked, tiles / w, kv / w, first_q / w, tile / w,
              two ? first_tile / two : 0.0, epilogue / w, beyond / w, span * 1e-6,
              busy / (span * prop.multiProcessorCount));
  std::fflush(stdout);
}
#endif

static void run_bench(const Options &opt) {
  FILE *csv = opt.csv ? std::fopen(opt.csv, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "head_dim,causal,seqlen,kernel,ms,tflops,main_ms\n");
  const int hds[] = {64, 128, 256};
  const int seqlens[] = {2048, 4096, 8192, 16384};
  cudaEvent_t ev[4];
  for (auto &e : ev)
    CUDA_CHECK(cudaEventCreate(&e));
  for (int hd : hds)
    for (int seqlen : seqlens)
      for (int causal = 0; causal < 2; ++causal) {
        if (opt.seqlen && seqlen != opt.seqlen)
          continue;
        const int batch = 16384 / seqlen, heads = 2048 / hd;
        const size_t elems = size_t(batch) * heads * seqlen * hd;
        DeviceBuffer q(elems * 2), k(elems * 2), v(elems * 2), o(elems * 2), dout(elems * 2),
            dq(elems * 2), dk(elems * 2), dv(elems * 2), lse(size_t(batch) * heads * seqlen * 4);
        // Room for any kernel: fagen_bwd_dq_rows pads a head by less than one query tile of at
        // most 256 rows; semaphores for 16-row tiles.
        const fagen_bwd_workspace ws = fagen_bwd_workspace_layout(
            int64_t(batch) * seqlen, int64_t(batch) * (seqlen + 256), heads, hd, batch,
            (seqlen + 15) / 16, 1, FAGEN_BWD_DET_DQ_SLOTS);
        DeviceBuffer work(ws.total_bytes);
        fill_random<<<1024, 256>>>((uint16_t *)q.ptr, elems, 1);
        fill_random<<<1024, 256>>>((uint16_t *)k.ptr, elems, 2);
        fill_random<<<1024, 256>>>((uint16_t *)v.ptr, elems, 3);
        fill_random<<<1024, 256>>>((uint16_t *)o.ptr, elems, 4);
        fill_random<<<1024, 256>>>((uint16_t *)dout.ptr, elems, 5);
        fill_lse<<<1024, 256>>>((float *)lse.ptr, size_t(batch) * heads * seqlen,
                                std::log(float(seqlen)) + 2.f);
        CUDA_CHECK(cudaGetLastError());
        const double flops = 4.0 * 2.5 * batch * heads * double(seqlen) * seqlen * hd *
                             (causal ? 0.5 : 1.0);
        for (const BwdKernel &kern : kernels()) {
          // Dense kernels, and the dropout ones (p = 0.1) to measure what dropout costs.
          const bool mask_ok = kern.var.mask == (causal ? MaskK::Causal : MaskK::None) &&
                               kern.var.mod == ModK::None &&
                               kern.var.sparse == SparseK::None && !kern.var.varlen;
          if (kern.hd_qk != hd || kern.hd_v != hd || !mask_ok || kern.type != ElType::BF16 ||
              !selected(kern.name, opt.filter))
            continue;
          fagen_bwd_params p;
          std::memset(&p, 0, sizeof(p));
          fagen_fwd_params &f = p.fwd;
          f.batch = batch, f.heads_q = f.heads_kv = heads, f.seqlen_q = f.seqlen_k = seqlen;
          f.group_size = 1;
          f.softmax_scale = 1.f / std::sqrt(float(hd));
          f.scale_log2 = f.softmax_scale * 1.4426950408889634f;
          // BHSD, as torch's (batch, heads, seqlen, hd) contiguous tensors.
          const int64_t rs = hd, hs = int64_t(seqlen) * hd, bs = int64_t(heads) * seqlen * hd;
          f.q_batch_stride = f.k_batch_stride = f.v_batch_stride = f.o_batch_stride = bs;
          f.q_head_stride = f.k_head_stride = f.v_head_stride = f.o_head_stride = hs;
          f.q_row_stride = f.k_row_stride = f.v_row_stride = f.o_row_stride = rs;
          p.do_batch_stride = p.dq_batch_stride = p.dk_batch_stride = p.dv_batch_stride = bs;
          p.do_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = hs;
          p.do_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = rs;
          f.lse_head_stride = seqlen, f.lse_batch_stride = int64_t(heads) * seqlen;
          if (kern.var.dropout) {
            f.dropout_p = 0.1f, f.dropout_threshold = fagen::dropout_threshold(f.dropout_p);
            f.dropout_rescale = fagen::dropout_rescale(f.dropout_threshold);
            f.dropout_seed = 42, f.dropout_offset = 7;
          }
          p.d_head_stride = seqlen, p.d_batch_stride = int64_t(heads) * seqlen;
          const int64_t dq_rows = fagen_bwd_dq_rows(0, seqlen, 0, kern.block_m);
          p.dq_accum_head_stride = dq_rows * hd;
          p.dq_accum_batch_stride = int64_t(heads) * dq_rows * hd;
          f.q = q.ptr, f.k = k.ptr, f.v = v.ptr, f.o = o.ptr, f.lse = (float *)lse.ptr;
          p.dout = dout.ptr, p.dq = dq.ptr, p.dk = dk.ptr, p.dv = dv.ptr;
          const int m_blocks = (seqlen + kern.block_m - 1) / kern.block_m;
          char *w = static_cast<char *>(work.ptr);
          const fagen_bwd_workspace wl = fagen_bwd_workspace_layout(
              int64_t(batch) * seqlen, batch * dq_rows, heads, hd, batch, m_blocks,
              kern.deterministic, dq_slots(kern));
          p.dq_accum = (float *)(w + wl.dq_accum_offset), p.d = (float *)(w + wl.d_offset);
          p.dq_semaphore = (int32_t *)(w + wl.semaphore_offset);
          p.semaphore_head_stride = m_blocks, p.semaphore_batch_stride = int64_t(m_blocks) * heads;
          p.m_blocks = m_blocks;
          CUDA_CHECK(cudaFuncSetAttribute(kern.main, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          kern.smem_bytes));
          const int reps = flops > 2e12 ? 10 : 25;
          // Grouped kernels: block order (g = 0) and the runtime's rule, timed in turns.
          std::vector<int> groups{0};
#ifdef FAGEN_HARNESS_SM90
          if (kern.grouped)
            if (int g = fagen_bwd_tile_group_log2(seqlen, 1, hd, hd, fagen::ws_bwd_dim(hd),
                                                  heads, (seqlen + kern.block_n - 1) /
                                                             kern.block_n);
                g > 0)
              groups.push_back(g);
#endif
          for (int g : groups) {
            p.tile_group_log2 = g;
            for (int i = 0; i < 3; ++i)
              launch(kern, p, m_blocks);
          }
          CUDA_CHECK(cudaGetLastError());
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<std::vector<float>> total(groups.size()), main_ms(groups.size());
          void *args[] = {&p};
          void *main_args[] = {&p, nullptr};
#ifdef FAGEN_HARNESS_SM90
          fagen_bwd_tma_maps maps;
          if (kern.ws) {
            std::string what;
            if (fagen::encodeBwdTmaMaps(tensor_map_encoder(), p, kern.hd_qk, kern.hd_v,
                                        kern.block_m, kern.block_n, maps, what) != 0) {
              std::fprintf(stderr, "%s: cuTensorMapEncodeTiled failed for %s\n", kern.name,
                           what.c_str());
              std::exit(1);
            }
            main_args[1] = &maps;
          }
#endif
          dim3 grid_q(m_blocks, heads, batch);
          for (int i = 0; i < reps; ++i)
            for (size_t gi = 0; gi < groups.size(); ++gi) {
              p.tile_group_log2 = groups[gi];
              const dim3 grid_k = main_grid(kern, p);
              CUDA_CHECK(cudaEventRecord(ev[0]));
              CUDA_CHECK(cudaLaunchKernel(kern.pre, grid_q, dim3(kern.pre_threads), args, 0, 0));
              CUDA_CHECK(cudaEventRecord(ev[1]));
              CUDA_CHECK(cudaLaunchKernel(kern.main, grid_k, dim3(kern.threads), main_args,
                                          kern.smem_bytes, 0));
              CUDA_CHECK(cudaEventRecord(ev[2]));
              CUDA_CHECK(cudaLaunchKernel(kern.post, grid_q, dim3(kern.pre_threads), args, 0, 0));
              CUDA_CHECK(cudaEventRecord(ev[3]));
              CUDA_CHECK(cudaEventSynchronize(ev[3]));
              float t, tm;
              CUDA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[3]));
              CUDA_CHECK(cudaEventElapsedTime(&tm, ev[1], ev[2]));
              total[gi].push_back(t), main_ms[gi].push_back(tm);
            }
          CUDA_CHECK(cudaGetLastError());
          for (size_t gi = 0; gi < groups.size(); ++gi) {
            std::sort(total[gi].begin(), total[gi].end());
            std::sort(main_ms[gi].begin(), main_ms[gi].end());
            const float med = total[gi][reps / 2], med_main = main_ms[gi][reps / 2];
            const double tflops = flops / (med * 1e-3) / 1e12;
            // The rule's grid is the name with _gG (a row of its own in the CSV).
            const std::string name =
                std::string(kern.name) + (gi ? "_g" + std::to_string(groups[gi]) : "");
            std::printf("BENCH hd=%d causal=%d seqlen=%5d %-56s %8.3f ms %6.1f TFLOP/s (main "
                        "%.3f ms, %.1f TFLOP/s)\n",
                        hd, causal, seqlen, name.c_str(), med, tflops, med_main,
                        flops / (med_main * 1e-3) / 1e12);
            if (csv)
              std::fprintf(csv, "%d,%d,%d,%s,%.4f,%.2f,%.4f\n", hd, causal, seqlen, name.c_str(),
                           med, tflops, med_main);
#ifdef FAGEN_WS_TRACE
            if (opt.trace && kern.ws) {
              p.tile_group_log2 = groups[gi];
              char label[160];
              std::snprintf(label, sizeof label, "%s seqlen=%d", name.c_str(), seqlen);
              trace_launch(kern, p, m_blocks, label);
            }
#endif
          }
          std::fflush(stdout);
        }
      }
  if (csv)
    std::fclose(csv);
}

int main(int argc, char **argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check"))
      opt.check = true;
    else if (!std::strcmp(argv[i], "--ref-only"))
      opt.check = opt.ref_only = true;
    else if (!std::strcmp(argv[i], "--bench"))
      opt.bench = true;
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc)
      opt.csv = argv[++i];
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      opt.filter = argv[++i];
    else if (!std::strcmp(argv[i], "--cases") && i + 1 < argc)
      opt.cases = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seqlen") && i + 1 < argc)
      opt.seqlen = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--trace"))
      opt.trace = opt.bench = true;
  }
#ifndef FAGEN_WS_TRACE
  if (opt.trace) {
    std::fprintf(stderr, "--trace needs a build with -DFAGEN_WS_TRACE (NVCC_FLAGS=-DFAGEN_WS_TRACE "
                         "tests/gpu/run_bwd.sh build90)\n");
    return 2;
  }
#endif
  if (!opt.check && !opt.bench)
    opt.check = opt.bench = true;
  if (opt.ref_only)
    return run_checks(opt);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, cc %d.%d, smem/block optin %zu\n", prop.name,
              prop.multiProcessorCount, prop.major, prop.minor, prop.sharedMemPerBlockOptin);
  const int failures = opt.check ? run_checks(opt) : 0;
  if (opt.bench)
    run_bench(opt);
  return failures ? 1 : 0;
}
