// fagen GPU dev harness for the sm90 (wgmma, sm_90a) forward template: correctness against
// compiler/Reference.h at odd shapes, then timing of the FlashAttention-3 benchmark shapes.
// Kernels are instantiated exactly as the emitter does; the checking and timing code is in
// harness_common.cuh. Build and run: tests/gpu/run_sm90.sh.
//
//   sm90_harness [--check] [--bench] [--csv FILE] [--filter SUBSTRING[,SUBSTRING...]] (a part
//                ending in '$' must end the name)
//                [--seqlens 2048,16384] [--ratio-csv FILE] [--reduced]
#include "sm90/fwd_kernel.cuh"

#include "harness_common.cuh"

// --- kernels, instantiated like generated files ----------------------------------------------
// SUFFIX names the non-default softmax options: _e<percent>d<degree> = emulated exp2. No sm90
// kernel is built to miss the tolerance rule (expect_fail false).
#define FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, MASK, MASKNAME, EMU, DEG, SUFFIX)           \
  using cfg_##ELNAME##_##HD##_##BM##_##BN##_##S##_##MASKNAME##SUFFIX =                             \
      fagen::sm90::FwdConfig<fagen::EL, HD, BM, BN, S, fagen::Variant<fagen::MASK>, EMU, DEG>; \
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
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, 0, 3, )                          \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, 0, 3, )
#define EMU(...) EMU_(__VA_ARGS__)
#define EMU_(EL, ELNAME, TYPE, HD, BM, BN, S, PCT, DEG)                                            \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, NoMask, nomask, PCT, DEG, _e##PCT##d##DEG)       \
  FAGEN_KERNEL_X(EL, ELNAME, TYPE, HD, BM, BN, S, CausalMask, causal, PCT, DEG, _e##PCT##d##DEG)

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

int main(int argc, char **argv) { return harness_main(argc, argv); }
