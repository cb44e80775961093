//===- Variant.h - the one variant vocabulary of fagen ----------------------===//
//
// Everything that decides which kernel computes a call: pass, dtype, head dims, mask and its
// alignment, score mod, dropout, varlen, block sparsity, deterministic backward. One set of
// enums with one spelling each (the spec's and the bundle manifest's words), the tokens of the
// kernel names, and the text the runtime and the tools print. Plain C++17 without LLVM: the
// spec, planner, emitter, bundle writer and reader, runtime and check all use it.
//
// The enums and their spellings are in core/VariantKinds.h (code beside the CUDA templates,
// whose fagen::Variant is a class template, includes only that one).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_CORE_VARIANT_H
#define FAGEN_CORE_VARIANT_H

#include "core/VariantKinds.h"

#include <string>

namespace fagen {

/// A kernel's variant. Defaults: a dense forward without mask, score mod or dropout.
struct Variant {
  Pass pass = Pass::Forward;
  DType dtype = DType::FP16;
  int headDimQK = 0;
  int headDimV = 0;
  Mask mask = Mask::None;
  MaskAlign maskAlign = MaskAlign::BottomRight; ///< meaningful only with a mask
  ScoreMod scoreMod = ScoreMod::None;
  bool dropout = false; ///< Philox dropout on P
  bool varlen = false;  ///< packed sequences with cu_seqlens
  Sparsity sparsity = Sparsity::None;
  int sparseBlock = 0;        ///< tokens per block (0 without sparsity)
  std::string sparseHash;     ///< static layout: 8 hex digits naming the table
  bool deterministic = false; ///< bwd: bitwise-repeatable dQ
  /// K and V in a paged KV cache of this many tokens a page (block table, per-sequence
  /// lengths: templates/abi/decode_params.h); 0: contiguous K and V.
  int pageSize = 0;

  bool isForward() const { return pass == Pass::Forward; }
  bool isBackward() const { return pass == Pass::Backward; }
  bool hasMask() const { return mask != Mask::None; }
  bool isTopLeft() const { return mask != Mask::None && maskAlign == MaskAlign::TopLeft; }
  bool isPaged() const { return pageSize != 0; }

  /// The kernel-name token of the mask: "none", "causal", "window", "causaltl", "windowtl".
  std::string maskToken() const;
  /// The kernel-name tokens of the rest of the variant, in name order: the score mod,
  /// "drop", "bsr128" (runtime sparsity) or "bs128_1a2b3c4d" (static), "varlen", "det",
  /// "paged16" (a paged KV cache of 16-token pages).
  std::vector<std::string> featureTokens() const;
  /// "fwd bf16 hd128x128 causal softcap": pass, dtype, head dims, mask and feature tokens; the
  /// tuning database's workload key (with the arch appended) and the planner's grouping key.
  std::string key() const;
  /// "fp16 head_dim 128/128 mask causal top_left softcap dropout": how the runtime describes a
  /// kernel's or a call's variant (the pass aside).
  std::string text() const;
  /// The spec keys that ask for this variant ("dtype fp16, head_dim 128 and mask causal"), for
  /// the runtime's "add a variant with ... to the spec" message.
  std::string specKeys() const;

  /// Field-by-field equality (the alignment compared even without a mask).
  bool operator==(const Variant &o) const;
  bool operator!=(const Variant &o) const { return !(*this == o); }
};

/// Whether a kernel built for `kernel` computes a call of variant `call` (shapes and seqlen
/// ranges aside): the same variant, where the alignment counts only with a mask, a
/// deterministic backward serves a call that does not ask for one, and a static layout call
/// with block 0 or no hash takes any block or layout.
bool servesCall(const Variant &kernel, const Variant &call);

} // namespace fagen

#endif // FAGEN_CORE_VARIANT_H
