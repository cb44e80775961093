// fagen GPU dev harness for the warp-specialized sm90 forward (TMA + mbarriers + setmaxnreg,
// optional ping-pong; templates/sm90/fwd_ws_kernel.cuh) beside the cp.async wgmma kernel's
// planner defaults (sm90/fwd_kernel.cuh), checked and timed in one process. Kernels are
// instantiated as the emitter does (so the persistent ones without a mask have kStaggerSlack,
// the slack CTAs started half a tile late, since 2026-12-02: earlier timings are not like for like); checking and timing are
// harness_common.cuh's. Build and run: tests/gpu/run_sm90.sh ws-build / ws.
#include "sm90/fwd_kernel.cuh"
#include "sm90/fwd_ws_kernel.cuh"
#include "config_options.cuh"

#include "harness_common.cuh"

// SUFFIX: _pp = ping-pong of the consumer warpgroups, _np = none. Each kernel is registered
// twice: one CTA per work tile, and persistent (_pers: as many CTAs as SMs).
#define WS_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, MASK, MASKNAME, PP, EMU, SUFFIX)                \
  using wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX =                            \
      fagen::sm90::WsFwdConfig<                                                                    \
          harness::Sm90WsFwd<fagen::EL, HD, HD, BM, BN, S, fagen::Variant<fagen::MASK>, PP, EMU>>; \
  extern "C" __global__ void __launch_bounds__(                                                    \
      wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kThreads, 1)                  \
      fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##SUFFIX(                \
          const __grid_constant__ fagen_fwd_params params,                                         \
          const __grid_constant__ fagen_fwd_tma_maps maps) {                                       \
    fagen::sm90::fwd_ws_kernel<wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX>(     \
        params, maps);                                                                             \
  }                                                                                                \
  static Register wreg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX(                   \
      {"fagen_fwd_sm90ws_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S #SUFFIX,        \
       (const void *)fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##SUFFIX, \
       TYPE, HD, maskOf(#MASK), BM,                                                                \
       wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kThreads,                    \
       wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kSmemBytes, false,           \
       VariantInfo{}, BN, false});                                                                 \
  static Register wpreg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX(                  \
      {"fagen_fwd_sm90ws_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S #SUFFIX "_pers", \
       (const void *)fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##SUFFIX, \
       TYPE, HD, maskOf(#MASK), BM,                                                                \
       wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kThreads,                    \
       wcfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kSmemBytes, false,           \
       VariantInfo{}, BN, true});

#define WS_BOTH(...) WS_BOTH_(__VA_ARGS__)
#define WS_BOTH_(EL, ELNAME, TYPE, HD, BM, BN, S, PP, SUFFIX)                                      \
  WS_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, PP, 0, SUFFIX)                        \
  WS_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, PP, 0, SUFFIX)
/// Emulated exp2 on EMU percent of the probabilities (degree 3), suffix _eEMU.
#define WS_EMU(...) WS_EMU_(__VA_ARGS__)
#define WS_EMU_(EL, ELNAME, TYPE, HD, BM, BN, S, EMU)                                              \
  WS_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, true, EMU, _pp_e##EMU)                \
  WS_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, true, EMU, _pp_e##EMU)

/// O stored with TMA (kTmaStoreO, tau 8 as the planner's kernels), suffix _to; both masks, both
/// grids.
#define WS_TMA_O(...) WS_TMA_O_(__VA_ARGS__)
#define WS_TMA_O_(EL, ELNAME, TYPE, HD, BM, BN, S)                                                 \
  WS_TMA_O_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask)                                 \
  WS_TMA_O_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal)
#define WS_TMA_O_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, MASK, MASKNAME)                           \
  using ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME = fagen::sm90::WsFwdConfig<                \
      harness::Sm90WsFwd<fagen::EL, HD, HD, BM, BN, S, fagen::Variant<fagen::MASK>, true, 0, 3,     \
                         false, 8, false, true>>;                                                  \
  extern "C" __global__ void __launch_bounds__(                                                    \
      ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME::kThreads, 1)                                \
      fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##_to(                   \
          const __grid_constant__ fagen_fwd_params params,                                         \
          const __grid_constant__ fagen_fwd_tma_maps maps) {                                       \
    fagen::sm90::fwd_ws_kernel<ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME>(params, maps);     \
  }                                                                                                \
  static Register oreg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME(                                 \
      {"fagen_fwd_sm90ws_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S "_to",          \
       (const void *)fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##_to,    \
       TYPE, HD, maskOf(#MASK), BM, ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME::kThreads,     \
       ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME::kSmemBytes, false, VariantInfo{}, BN,      \
       false, true});                                                                              \
  static Register opreg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME(                                \
      {"fagen_fwd_sm90ws_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S "_to_pers",     \
       (const void *)fagen_fwd_sm90ws_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##_to,    \
       TYPE, HD, maskOf(#MASK), BM, ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME::kThreads,     \
       ocfg_##ELNAME##_##HD##_##BM##_##BN##_##MASKNAME::kSmemBytes, false, VariantInfo{}, BN,      \
       true, true});

// The cp.async kernel at the planner's sm_90a defaults, to time against.
#define CP_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, MASK, MASKNAME)                                 \
  using ccfg_##ELNAME##_##HD##_##MASKNAME =                                                        \
      fagen::sm90::FwdConfig<harness::Sm90Fwd<fagen::EL, HD, BM, BN, S, fagen::Variant<fagen::MASK>>>; \
  extern "C" __global__ void __launch_bounds__(ccfg_##ELNAME##_##HD##_##MASKNAME::kThreads, 1)     \
      fagen_fwd_sm90_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S(                          \
          const __grid_constant__ fagen_fwd_params params) {                                       \
    fagen::sm90::fwd_kernel<ccfg_##ELNAME##_##HD##_##MASKNAME>(params);                            \
  }                                                                                                \
  static Register creg_##ELNAME##_##HD##_##MASKNAME(                                               \
      {"fagen_fwd_sm90_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S,                  \
       (const void *)fagen_fwd_sm90_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S, TYPE, HD,  \
       maskOf(#MASK), BM, ccfg_##ELNAME##_##HD##_##MASKNAME::kThreads,                             \
       ccfg_##ELNAME##_##HD##_##MASKNAME::kSmemBytes, false});
#define CP_BOTH(...) CP_BOTH_(__VA_ARGS__)
#define CP_BOTH_(EL, ELNAME, TYPE, HD, BM, BN, S)                                                  \
  CP_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask)                                       \
  CP_KERNEL(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal)

#define KBF16 bfloat16_t, bf16, ElementType::BF16
#define KF16 half_t, f16, ElementType::F16
WS_BOTH(KBF16, 128, 128, 128, 2, true, _pp)
WS_BOTH(KBF16, 128, 128, 128, 2, false, _np)
WS_BOTH(KBF16, 128, 128, 176, 2, true, _pp)
WS_BOTH(KBF16, 64, 192, 128, 2, true, _pp)
WS_BOTH(KBF16, 64, 128, 128, 2, true, _pp)
WS_BOTH(KBF16, 256, 128, 80, 2, true, _pp)
WS_BOTH(KF16, 128, 128, 128, 2, true, _pp)
WS_BOTH(KF16, 128, 128, 176, 2, true, _pp)
WS_EMU(KBF16, 128, 128, 128, 2, 25)
WS_EMU(KBF16, 128, 128, 128, 2, 12)
WS_EMU(KBF16, 64, 192, 128, 2, 25)
WS_EMU(KBF16, 256, 128, 80, 2, 25)
WS_TMA_O(KBF16, 128, 128, 128, 2)
WS_TMA_O(KBF16, 128, 192, 80, 2)
WS_TMA_O(KBF16, 64, 192, 128, 2)
WS_TMA_O(KF16, 128, 128, 128, 2)
CP_BOTH(KBF16, 64, 64, 128, 2)
CP_BOTH(KBF16, 128, 128, 128, 2)
CP_BOTH(KBF16, 256, 128, 64, 2)

int main(int argc, char **argv) { return harness_main(argc, argv); }
