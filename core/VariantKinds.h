//===- VariantKinds.h - the words of fagen's variant vocabulary -------------===//
//
// The enums of core/Variant.h with their spellings (the spec's and the bundle manifest's
// words), without the Variant struct: what code that also includes the CUDA templates needs
// (the templates have a class template fagen::Variant of their own; check/Reference.h, which
// the GPU harnesses include beside them, includes this header only).
//
// The enums' values are those of the C ABI's enums in fagen/fagen.h (fagen_pass, fagen_dtype,
// fagen_mask, fagen_mask_align, fagen_score_mod, fagen_sparsity); the runtime static_asserts it.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_CORE_VARIANTKINDS_H
#define FAGEN_CORE_VARIANTKINDS_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fagen {

enum class Pass { Forward = 0, Backward = 1 };            ///< "fwd" | "bwd"
enum class DType { FP16 = 0, BF16 = 1 };                  ///< "fp16" | "bf16"
enum class Mask { None = 0, Causal = 1, Window = 2 };     ///< "none" | "causal" | "window"
enum class MaskAlign { BottomRight = 0, TopLeft = 1 };    ///< "bottom_right" | "top_left"
enum class ScoreMod { None = 0, Softcap = 1, Alibi = 2 }; ///< "none" | "softcap" | "alibi"
/// Block sparsity: none, a block mask given at run time, or a layout compiled in.
enum class Sparsity { None = 0, Runtime = 1, Static = 2 }; ///< "none" | "runtime" | "static"

/// The spelling of a value, as the spec and the bundle manifest write it.
const char *toText(Pass v);
const char *toText(DType v);
const char *toText(Mask v);
const char *toText(MaskAlign v);
const char *toText(ScoreMod v);
const char *toText(Sparsity v);

/// Every spelling of E, in value order ({"none", "causal", "window"} for Mask).
template <class E> const std::vector<std::string> &spellings();

/// The value spelled `text`, or nothing for a word that is not one of spellings<E>().
template <class E> std::optional<E> fromText(std::string_view text);

} // namespace fagen

#endif // FAGEN_CORE_VARIANTKINDS_H
