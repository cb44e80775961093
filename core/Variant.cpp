//===- Variant.cpp - the one variant vocabulary of fagen --------------------===//

#include "core/Variant.h"

namespace fagen {

namespace {

template <class E> struct Names;
template <> struct Names<Pass> { static constexpr const char *kText[] = {"fwd", "bwd"}; };
template <> struct Names<DType> { static constexpr const char *kText[] = {"fp16", "bf16"}; };
template <> struct Names<Mask> {
  static constexpr const char *kText[] = {"none", "causal", "window"};
};
template <> struct Names<MaskAlign> {
  static constexpr const char *kText[] = {"bottom_right", "top_left"};
};
template <> struct Names<ScoreMod> {
  static constexpr const char *kText[] = {"none", "softcap", "alibi"};
};
template <> struct Names<Sparsity> {
  static constexpr const char *kText[] = {"none", "runtime", "static"};
};

template <class E> const char *textOf(E v) {
  constexpr size_t n = sizeof(Names<E>::kText) / sizeof(Names<E>::kText[0]);
  size_t i = static_cast<size_t>(v);
  return i < n ? Names<E>::kText[i] : "?";
}

std::string str(int v) { return std::to_string(v); }

} // namespace

const char *toText(Pass v) { return textOf(v); }
const char *toText(DType v) { return textOf(v); }
const char *toText(Mask v) { return textOf(v); }
const char *toText(MaskAlign v) { return textOf(v); }
const char *toText(ScoreMod v) { return textOf(v); }
const char *toText(Sparsity v) { return textOf(v); }

template <class E> const std::vector<std::string> &spellings() {
  static const std::vector<std::string> all(std::begin(Names<E>::kText), std::end(Names<E>::kText));
  return all;
}

template <class E> std::optional<E> fromText(std::string_view text) {
  const std::vector<std::string> &all = spellings<E>();
  for (size_t i = 0; i < all.size(); ++i)
    if (text == all[i])
      return static_cast<E>(i);
  return std::nullopt;
}

#define FAGEN_VARIANT_ENUM(E)                                                                      \
  template const std::vector<std::string> &spellings<E>();                                         \
  template std::optional<E> fromText<E>(std::string_view text);
FAGEN_VARIANT_ENUM(Pass)
FAGEN_VARIANT_ENUM(DType)
FAGEN_VARIANT_ENUM(Mask)
FAGEN_VARIANT_ENUM(MaskAlign)
FAGEN_VARIANT_ENUM(ScoreMod)
FAGEN_VARIANT_ENUM(Sparsity)
#undef FAGEN_VARIANT_ENUM

std::string Variant::maskToken() const {
  if (mask == Mask::None)
    return "none";
  return toText(mask) + std::string(maskAlign == MaskAlign::TopLeft ? "tl" : "");
}

std::vector<std::string> Variant::featureTokens() const {
  std::vector<std::string> out;
  if (scoreMod != ScoreMod::None)
    out.push_back(toText(scoreMod));
  if (dropout)
    out.push_back("drop");
  if (sparsity == Sparsity::Runtime)
    out.push_back("bsr" + str(sparseBlock));
  if (sparsity == Sparsity::Static)
    out.push_back("bs" + str(sparseBlock) + "_" + sparseHash);
  if (varlen)
    out.push_back("varlen");
  if (deterministic)
    out.push_back("det");
  if (pageSize != 0)
    out.push_back("paged" + str(pageSize));
  return out;
}

std::string Variant::key() const {
  std::string k = std::string(toText(pass)) + " " + toText(dtype) + " hd" + str(headDimQK) + "x" +
                  str(headDimV) + " " + maskToken();
  for (const std::string &feature : featureTokens())
    k += " " + feature;
  return k;
}

std::string Variant::text() const {
  std::string t = std::string(toText(dtype)) + " head_dim " + str(headDimQK) + "/" + str(headDimV) +
                  " mask " + toText(mask);
  if (isTopLeft())
    t += " top_left";
  if (scoreMod != ScoreMod::None)
    t += std::string(" ") + toText(scoreMod);
  if (dropout)
    t += " dropout";
  if (varlen)
    t += " varlen";
  if (sparsity != Sparsity::None)
    t += std::string(" block_sparse ") + toText(sparsity) +
         (sparseBlock ? " " + str(sparseBlock) : "") +
         (sparseHash.empty() ? "" : " layout " + sparseHash);
  if (deterministic)
    t += " deterministic";
  if (pageSize != 0)
    t += " paged_kv " + str(pageSize);
  return t;
}

std::string Variant::specKeys() const {
  std::vector<std::string> keys = {
      std::string("dtype ") + toText(dtype),
      "head_dim " + str(headDimQK) +
          (headDimV == headDimQK ? "" : " (head_dim_v " + str(headDimV) + ")"),
      std::string("mask ") + toText(mask)};
  if (isTopLeft())
    keys.push_back("mask_align top_left");
  if (scoreMod != ScoreMod::None)
    keys.push_back(std::string("score_mod ") + toText(scoreMod));
  if (dropout)
    keys.push_back("dropout true");
  if (varlen)
    keys.push_back("varlen true");
  if (sparsity == Sparsity::Runtime)
    keys.push_back("block_sparse {block: " + str(sparseBlock) + ", layout: runtime}");
  if (sparsity == Sparsity::Static)
    keys.push_back("a static block_sparse layout" +
                   (sparseBlock ? " (block " + str(sparseBlock) + ")" : std::string()));
  if (pageSize != 0)
    keys.push_back("kv_cache paged, page_size " + str(pageSize) + " and passes [decode]");
  if (pass == Pass::Backward)
    keys.push_back(std::string("passes [fwd, bwd]") +
                   (deterministic ? " and deterministic true" : ""));
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i)
    out += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return out;
}

bool Variant::operator==(const Variant &o) const {
  return pass == o.pass && dtype == o.dtype && headDimQK == o.headDimQK && headDimV == o.headDimV &&
         mask == o.mask && maskAlign == o.maskAlign && scoreMod == o.scoreMod &&
         dropout == o.dropout && varlen == o.varlen && sparsity == o.sparsity &&
         sparseBlock == o.sparseBlock && sparseHash == o.sparseHash &&
         deterministic == o.deterministic && pageSize == o.pageSize;
}

bool servesCall(const Variant &k, const Variant &c) {
  if (k.pass != c.pass || k.dtype != c.dtype || k.headDimQK != c.headDimQK ||
      k.headDimV != c.headDimV || k.mask != c.mask ||
      (c.mask != Mask::None && k.maskAlign != c.maskAlign) || k.scoreMod != c.scoreMod ||
      k.dropout != c.dropout || k.varlen != c.varlen || k.sparsity != c.sparsity ||
      k.pageSize != c.pageSize)
    return false;
  if (c.deterministic && !k.deterministic)
    return false;
  if (c.sparsity == Sparsity::Runtime)
    return k.sparseBlock == c.sparseBlock;
  if (c.sparsity == Sparsity::Static)
    return (c.sparseBlock == 0 || k.sparseBlock == c.sparseBlock) &&
           (c.sparseHash.empty() || k.sparseHash == c.sparseHash);
  return true;
}

} // namespace fagen
