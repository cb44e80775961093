// fagen GPU dev harness for the sm90 (wgmma, sm_90a) forward template: correctness against
// compiler/Reference.h at odd shapes, then timing of the FlashAttention-3 benchmark shapes.
// Kernels are instantiated exactly as the emitter does; the checking and timing code is in
// harness_common.cuh. The portable template's hd 256 default is built beside them, to be timed
// in the same process. Build and run: tests/gpu/run_sm90.sh.
//
//   sm90_harness [--check] [--bench] [--csv FILE] [--filter SUBSTRING[,SUBSTRING...]] (a part
//                ending in '$' must end the name)
//                [--seqlens 2048,16384] [--ratio-csv FILE] [--reduced]
#include "sm80/fwd_kernel.cuh"
#include "sm90/fwd_kernel.cuh"
#include "config_options.cuh"

#include "harness_common.cuh"

// --- kernels, instantiated like generated files ----------------------------------------------
// SUFFIX names the non-default options: _e<percent>d<degree> = emulated exp2; _rb / _ra = the
// cp.async refill issued before / after the step's wgmmas where the default is the other one
// (kRefillAfterIssue). No sm90 kernel is built to miss the tolerance rule (expect_fail false).
#define FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, MASK, MASKNAME, EMU, DEG, REFILL, SUFFIX)   \
  using cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX =                             \
      fagen::sm90::FwdConfig<harness::Sm90Fwd<fagen::EL, HD, BM, BN, S, fagen::Variant<fagen::MASK>, \
                                              EMU, DEG, REFILL>>;                                  \
  extern "C" __global__ void __launch_bounds__(                                                    \
      cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kThreads,                      \
      cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kMinBlocksPerSm)               \
      fagen_fwd_sm90_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##SUFFIX(                  \
          const __grid_constant__ fagen_fwd_params params) {                                       \
    fagen::sm90::fwd_kernel<cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX>(params); \
  }                                                                                                \
  static Register reg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX(                    \
      {"fagen_fwd_sm90_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "s" #S #SUFFIX,          \
       (const void *)fagen_fwd_sm90_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##s##S##SUFFIX,    \
       TYPE, HD, maskOf(#MASK), BM,                                                                \
       cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kThreads,                     \
       cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX::kSmemBytes, false});

#define BOTH_MASKS(...) BOTH_MASKS_(__VA_ARGS__)
#define BOTH_MASKS_(EL, ELNAME, TYPE, HD, BM, BN, S)                                               \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, 0, 3, HD == 256, )               \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, 0, 3, HD == 256, )
#define EMU(...) EMU_(__VA_ARGS__)
#define EMU_(EL, ELNAME, TYPE, HD, BM, BN, S, PCT, DEG)                                            \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, PCT, DEG, HD == 256,             \
                 _e##PCT##d##DEG)                                                                  \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, PCT, DEG, HD == 256,         \
                 _e##PCT##d##DEG)
/// The other refill order than the head dim's default (SUFFIX _rb: before, _ra: after).
#define REFILL(...) REFILL_(__VA_ARGS__)
#define REFILL_(EL, ELNAME, TYPE, HD, BM, BN, S, AFTER, SUFFIX)                                    \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, 0, 3, AFTER, SUFFIX)             \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, 0, 3, AFTER, SUFFIX)

/// The portable template (sm80) at the planner's hd 256 default today (64 x 64, 4 warps,
/// 1 stage, tau 0): the baseline the sm90 hd 256 tiles must beat.
#define PORTABLE(...) PORTABLE_(__VA_ARGS__)
#define PORTABLE_(EL, ELNAME, TYPE, HD, BM, BN, W, S, MASK, MASKNAME)                              \
  using cfg80_##ELNAME##_##HD##_##MASKNAME =                                                       \
      fagen::sm80::FwdConfig<                                                                      \
          harness::Sm80Fwd<fagen::EL, HD, HD, BM, BN, W, S, fagen::Variant<fagen::MASK>>>;         \
  extern "C" __global__ void __launch_bounds__(cfg80_##ELNAME##_##HD##_##MASKNAME::kThreads,       \
                                               cfg80_##ELNAME##_##HD##_##MASKNAME::kMinBlocksPerSm) \
      fagen_fwd_sm80_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##w##W##s##S(                    \
          const __grid_constant__ fagen_fwd_params params) {                                       \
    fagen::sm80::fwd_kernel<cfg80_##ELNAME##_##HD##_##MASKNAME>(params);                           \
  }                                                                                                \
  static Register reg80_##ELNAME##_##HD##_##MASKNAME(                                              \
      {"fagen_fwd_sm80_" #ELNAME "_hd" #HD "_" #MASKNAME "_m" #BM "n" #BN "w" #W "s" #S,           \
       (const void *)fagen_fwd_sm80_##ELNAME##_hd##HD##_##MASKNAME##_m##BM##n##BN##w##W##s##S,     \
       TYPE, HD, maskOf(#MASK), BM, cfg80_##ELNAME##_##HD##_##MASKNAME::kThreads,                  \
       cfg80_##ELNAME##_##HD##_##MASKNAME::kSmemBytes, false});

#define KBF16 bfloat16_t, bf16, ElementType::BF16
#define KF16 half_t, f16, ElementType::F16
// Candidates for the planner's defaults (bf16): two warpgroups per CTA, or one (several CTAs
// per SM, not in lockstep), with and without emulated exp2; then fp16 coverage and 3 stages.
BOTH_MASKS(KBF16, 64, 128, 128, 2)
BOTH_MASKS(KBF16, 64, 128, 64, 2)
BOTH_MASKS(KBF16, 64, 64, 128, 2)
BOTH_MASKS(KBF16, 64, 64, 64, 2)
EMU(KBF16, 64, 128, 128, 2, 25, 3)
EMU(KBF16, 64, 128, 128, 2, 50, 3)
EMU(KBF16, 64, 64, 128, 2, 25, 3)
BOTH_MASKS(KBF16, 128, 128, 128, 2)
BOTH_MASKS(KBF16, 128, 128, 64, 2)
BOTH_MASKS(KBF16, 128, 64, 64, 2)
BOTH_MASKS(KBF16, 128, 64, 128, 2)
EMU(KBF16, 128, 128, 128, 2, 25, 3)
EMU(KBF16, 128, 64, 64, 2, 25, 3)
BOTH_MASKS(KF16, 64, 128, 128, 2)
BOTH_MASKS(KF16, 128, 128, 128, 2)
EMU(KF16, 128, 128, 128, 2, 25, 3)
BOTH_MASKS(KBF16, 64, 128, 128, 3)
BOTH_MASKS(KBF16, 128, 128, 64, 3)
// hd 256 (issue 5): two warpgroups, O = 128 fp32 registers a thread; 128 x 80 is the widest key
// tile two stages fit (225 KB), 128 x 64 (193 KB) the one with registers to spare. The refill
// order both ways; the hd 128 default with the refill after its wgmmas, for the record.
BOTH_MASKS(KBF16, 256, 128, 80, 2)
BOTH_MASKS(KBF16, 256, 128, 64, 2)
REFILL(KBF16, 256, 128, 80, 2, false, _rb)
REFILL(KBF16, 256, 128, 64, 2, false, _rb)
BOTH_MASKS(KF16, 256, 128, 80, 2)
BOTH_MASKS(KF16, 256, 128, 64, 2)
REFILL(KBF16, 128, 128, 128, 2, true, _ra)
PORTABLE(KBF16, 256, 64, 64, 4, 1, NoMask, nomask)
PORTABLE(KBF16, 256, 64, 64, 4, 1, CausalMask, causal)

int main(int argc, char **argv) { return harness_main(argc, argv); }
