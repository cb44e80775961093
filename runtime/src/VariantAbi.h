//===- VariantAbi.h - core/Variant.h's enums as the C ABI's -----------------===//
//
// core/Variant.h's enums carry the values of fagen/fagen.h's: a value converts by a cast, and
// these static_asserts keep the two in step. For the runtime and for tools (`fagen check`)
// that fill a fagen_fwd_problem from a kernel's variant.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_RUNTIME_VARIANTABI_H
#define FAGEN_RUNTIME_VARIANTABI_H

#include "fagen/fagen.h"

#include "core/Variant.h"

namespace fagen {

static_assert(int(Pass::Forward) == FAGEN_PASS_FORWARD &&
                  int(Pass::Backward) == FAGEN_PASS_BACKWARD,
              "core's Pass must have fagen_pass's values");
static_assert(int(DType::FP16) == FAGEN_DTYPE_FP16 && int(DType::BF16) == FAGEN_DTYPE_BF16,
              "core's DType must have fagen_dtype's values");
static_assert(int(Mask::None) == FAGEN_MASK_NONE && int(Mask::Causal) == FAGEN_MASK_CAUSAL &&
                  int(Mask::Window) == FAGEN_MASK_WINDOW,
              "core's Mask must have fagen_mask's values");
static_assert(int(MaskAlign::BottomRight) == FAGEN_MASK_ALIGN_BOTTOM_RIGHT &&
                  int(MaskAlign::TopLeft) == FAGEN_MASK_ALIGN_TOP_LEFT,
              "core's MaskAlign must have fagen_mask_align's values");
static_assert(int(ScoreMod::None) == FAGEN_SCORE_MOD_NONE &&
                  int(ScoreMod::Softcap) == FAGEN_SCORE_MOD_SOFTCAP &&
                  int(ScoreMod::Alibi) == FAGEN_SCORE_MOD_ALIBI,
              "core's ScoreMod must have fagen_score_mod's values");
static_assert(int(Sparsity::None) == FAGEN_SPARSITY_NONE &&
                  int(Sparsity::Runtime) == FAGEN_SPARSITY_RUNTIME &&
                  int(Sparsity::Static) == FAGEN_SPARSITY_STATIC,
              "core's Sparsity must have fagen_sparsity's values");

inline fagen_pass toAbi(Pass v) { return static_cast<fagen_pass>(v); }
inline fagen_dtype toAbi(DType v) { return static_cast<fagen_dtype>(v); }
inline fagen_mask toAbi(Mask v) { return static_cast<fagen_mask>(v); }
inline fagen_mask_align toAbi(MaskAlign v) { return static_cast<fagen_mask_align>(v); }
inline fagen_score_mod toAbi(ScoreMod v) { return static_cast<fagen_score_mod>(v); }
inline fagen_sparsity toAbi(Sparsity v) { return static_cast<fagen_sparsity>(v); }

} // namespace fagen

#endif // FAGEN_RUNTIME_VARIANTABI_H
