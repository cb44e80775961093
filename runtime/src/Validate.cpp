//===- Validate.cpp - the C ABI: problem validation -------------------------===//
#include "runtime/src/RuntimeInternal.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

//===--- Problem validation (no GPU needed) --------------------------------===//

bool checkStrides(const char *tensor, const int64_t strides[3], const int64_t extents[4],
                  bool isOutput, bool varlen, std::string &error) {
  static const char *kDims[3] = {"batch", "head", "row"};
  if (strides[0] == 0 && strides[1] == 0 && strides[2] == 0 &&
      (extents[0] > 1 || extents[1] > 1 || extents[2] > 1)) {
    error = std::string(tensor) +
            "_strides are all 0: set them (fagen_fwd_problem_set_bshd_strides "
            "or _bhsd_strides fills every tensor's)";
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    std::string which = std::string(tensor) + "_strides[" + str(i) + "] (" + kDims[i] + ")";
    std::string value = str(strides[i]);
    if (strides[i] < 0) {
      error = which + " is " + value + ": strides must be >= 0";
      return false;
    }
    if (strides[i] % 8 != 0) {
      error = which + " is " + value +
              " elements, not a multiple of 8: every row must start 16-byte aligned for vector "
              "loads (the head dim is assumed contiguous); pad or copy the tensor";
      return false;
    }
    if (isOutput && strides[i] == 0 && extents[i] > 1 && !(varlen && i == 0)) {
      error = which + " is 0 but the " + kDims[i] + " extent is " + str(extents[i]) +
              ": outputs would overwrite each other";
      return false;
    }
  }
  return !isOutput || checkNoOverlap(tensor, strides, extents, varlen, error);
}

/// An output's elements must be distinct: with its dimensions ordered by stride (the head dim,
/// stride 1, first), each stride must reach past everything the smaller ones span. (Sufficient,
/// as PyTorch's non-overlap check; a layout interleaving dimensions in another's gaps is
/// refused too.)
bool checkNoOverlap(const char *tensor, const int64_t strides[3], const int64_t extents[4],
                    bool varlen, std::string &error) {
  static const char *kDims[4] = {"batch", "head", "row", "head dim"};
  struct Dim {
    int index; // 0..2: strides[i]; 3: the head dim
    int64_t stride, extent;
  };
  Dim dims[4] = {{3, 1, extents[3]},
                 {0, strides[0], varlen ? 1 : extents[0]},
                 {1, strides[1], extents[1]},
                 {2, strides[2], extents[2]}};
  std::stable_sort(dims, dims + 4, [](const Dim &a, const Dim &b) { return a.stride < b.stride; });
  int64_t span = 1; // elements covered by the dimensions so far, from the first
  const Dim *spanned = nullptr;
  for (const Dim &d : dims) {
    if (d.extent <= 1)
      continue;
    if (spanned != nullptr && d.stride < span) {
      error = std::string(tensor) + "_strides overlap: " + tensor + "'s " + kDims[d.index] +
              " stride (" + str(d.stride) + ") is inside the " + str(span) +
              " elements its " + kDims[spanned->index] +
              " dimension and those below span, so two outputs would land on one element; "
              "use the strides of a dense (e.g. BSHD or BHSD) tensor";
      return false;
    }
    span = d.stride * (d.extent - 1) + span;
    spanned = &d;
  }
  return true;
}

int32_t capWindowBound(int32_t bound, int32_t seqlenQ, int32_t seqlenK) {
  const int64_t cap = int64_t(std::max(seqlenQ, seqlenK)) + kWindowCapSlack;
  return bound > cap ? int32_t(cap) : bound;
}

bool validateShape(const fagen_fwd_problem &p, std::string &error) {
  struct Positive {
    const char *name;
    int32_t value;
  };
  for (Positive f : {Positive{"batch", p.batch}, {"heads_q", p.heads_q},
                     {"heads_kv", p.heads_kv}, {"seqlen_q", p.seqlen_q},
                     {"seqlen_k", p.seqlen_k}, {"head_dim_qk", p.head_dim_qk},
                     {"head_dim_v", p.head_dim_v}}) {
    if (f.value < 1) {
      error = std::string(f.name) + " (" + str(f.value) + ") must be >= 1";
      return false;
    }
  }
  for (auto [name, value] : {std::pair<const char *, int32_t>{"seqlen_q", p.seqlen_q},
                             {"seqlen_k", p.seqlen_k}}) {
    if (value > kMaxSeqlen) {
      error = std::string(name) + " (" + str(value) + ") exceeds " + str(kMaxSeqlen) +
              " (2^30 - 1024): the kernels form sums of sequence positions and window sizes "
              "in 32 bits; split the sequence (context parallelism, merging the partial "
              "(O, LSE) states)";
      return false;
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    error = "heads_q (" + str(p.heads_q) + ") is not a multiple of heads_kv (" +
            str(p.heads_kv) + ")";
    return false;
  }
  // The grid is (tiles, heads, batch); CUDA limits grid y and z to 65535.
  if (p.heads_q > 65535 || p.batch > 65535) {
    error = std::string(p.heads_q > 65535 ? "heads_q (" + str(p.heads_q)
                                          : "batch (" + str(p.batch)) +
            ") exceeds 65535, the CUDA grid limit; split the call";
    return false;
  }
  if (raw(p.dtype) != FAGEN_DTYPE_FP16 && raw(p.dtype) != FAGEN_DTYPE_BF16) {
    error = "dtype (" + str(raw(p.dtype)) +
            ") is not FAGEN_DTYPE_FP16 (0) or FAGEN_DTYPE_BF16 (1)";
    return false;
  }
  if (!std::isfinite(p.softmax_scale)) {
    error = "softmax_scale (" + std::to_string(p.softmax_scale) +
            ") must be finite (0 means 1/sqrt(head_dim_qk))";
    return false;
  }
  return true;
}

bool validateMask(const fagen_fwd_problem &p, std::string &error) {
  if (p.causal != 0 && p.causal != 1) {
    error = "causal (" + str(p.causal) + ") must be 0 or 1";
    return false;
  }
  int32_t mask = raw(p.mask), align = raw(p.mask_align);
  if (mask < FAGEN_MASK_NONE || mask > FAGEN_MASK_WINDOW) {
    error = "mask (" + str(mask) + ") is not FAGEN_MASK_NONE (0), FAGEN_MASK_CAUSAL (1) or "
                                   "FAGEN_MASK_WINDOW (2)";
    return false;
  }
  if (mask == FAGEN_MASK_WINDOW && p.causal) {
    error = "causal (1) contradicts mask FAGEN_MASK_WINDOW: set causal = 0 (a causal window is "
            "window_right = 0)";
    return false;
  }
  if (align != FAGEN_MASK_ALIGN_BOTTOM_RIGHT && align != FAGEN_MASK_ALIGN_TOP_LEFT) {
    error = "mask_align (" + str(align) + ") is not FAGEN_MASK_ALIGN_BOTTOM_RIGHT (0) or "
                                          "FAGEN_MASK_ALIGN_TOP_LEFT (1)";
    return false;
  }
  for (auto [name, value] : {std::pair<const char *, int32_t>{"window_left", p.window_left},
                             {"window_right", p.window_right}}) {
    if (mask == FAGEN_MASK_WINDOW && value < -1) {
      error = std::string(name) + " (" + str(value) + ") must be >= 0, or -1 for unbounded";
      return false;
    }
    if (mask != FAGEN_MASK_WINDOW && value != 0 && value != -1) {
      error = std::string(name) + " (" + str(value) +
              ") is set but mask is not FAGEN_MASK_WINDOW: set mask = FAGEN_MASK_WINDOW for a "
              "sliding window";
      return false;
    }
  }
  return true;
}

bool validateScoreModAndDropout(const fagen_fwd_problem &p, std::string &error) {
  int32_t mod = raw(p.score_mod);
  if (mod < FAGEN_SCORE_MOD_NONE || mod > FAGEN_SCORE_MOD_ALIBI) {
    error = "score_mod (" + str(mod) + ") is not FAGEN_SCORE_MOD_NONE (0), "
                                       "FAGEN_SCORE_MOD_SOFTCAP (1) or FAGEN_SCORE_MOD_ALIBI (2)";
    return false;
  }
  if (mod == FAGEN_SCORE_MOD_SOFTCAP && !(std::isfinite(p.softcap) && p.softcap > 0)) {
    error = "softcap (" + std::to_string(p.softcap) +
            ") must be finite and > 0 with FAGEN_SCORE_MOD_SOFTCAP (Gemma 2 uses 50)";
    return false;
  }
  if (mod != FAGEN_SCORE_MOD_SOFTCAP && p.softcap != 0) {
    error = "softcap (" + std::to_string(p.softcap) +
            ") is set but score_mod is not FAGEN_SCORE_MOD_SOFTCAP: set score_mod = "
            "FAGEN_SCORE_MOD_SOFTCAP, or softcap = 0";
    return false;
  }
  if (!(p.dropout_p >= 0 && p.dropout_p < 1)) {
    error = "dropout_p (" + std::to_string(p.dropout_p) +
            ") must be in [0, 1): the probability of dropping an element of P";
    return false;
  }
  return true;
}

bool validateVarlenAndSparsity(const fagen_fwd_problem &p, std::string &error) {
  if (p.varlen != 0 && p.varlen != 1) {
    error = "varlen (" + str(p.varlen) + ") must be 0 or 1";
    return false;
  }
  if (!p.varlen && (p.total_q != 0 || p.total_k != 0)) {
    error = std::string(p.total_q ? "total_q (" + str(p.total_q) : "total_k (" + str(p.total_k)) +
            ") is set but varlen is 0: set varlen = 1 for packed sequences, else leave it 0";
    return false;
  }
  if (p.varlen) {
    for (auto [name, total, longest, longestName] :
         {std::tuple<const char *, int64_t, int32_t, const char *>{"total_q", p.total_q,
                                                                  p.seqlen_q, "seqlen_q"},
          {"total_k", p.total_k, p.seqlen_k, "seqlen_k"}}) {
      if (total < longest || total > INT32_MAX) {
        error = std::string(name) + " (" + str(total) + ") must be in [" + longestName + " (" +
                str(longest) + "), 2^31 - 1]: with varlen it is the number of packed rows " +
                "(cu_seqlens[batch]), and " + longestName + " the longest sequence";
        return false;
      }
    }
  }
  int32_t sparsity = raw(p.sparsity);
  if (sparsity < FAGEN_SPARSITY_NONE || sparsity > FAGEN_SPARSITY_STATIC) {
    error = "sparsity (" + str(sparsity) +
            ") is not FAGEN_SPARSITY_NONE (0), "
            "FAGEN_SPARSITY_RUNTIME (1) or FAGEN_SPARSITY_STATIC (2)";
    return false;
  }
  if (p.sparse_block < 0) {
    error = "sparse_block (" + str(p.sparse_block) + ") must be >= 0";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_NONE && (p.sparse_block != 0 || p.sparse_hash != 0)) {
    error = std::string(p.sparse_block ? "sparse_block (" + str(p.sparse_block)
                                       : "sparse_hash (" + hashText(p.sparse_hash)) +
            ") is set but sparsity is FAGEN_SPARSITY_NONE: set sparsity, or leave it 0";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_RUNTIME && p.sparse_block == 0) {
    error = "sparse_block (0) must be the block size of the runtime block mask (the spec's "
            "block_sparse.block, e.g. 128)";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_RUNTIME && p.sparse_hash != 0) {
    error = "sparse_hash (" + hashText(p.sparse_hash) +
            ") names a static layout but sparsity is FAGEN_SPARSITY_RUNTIME: leave it 0";
    return false;
  }
  if (p.reserved0 != 0) {
    error = "reserved0 (" + str(p.reserved0) + ") must be 0: zero-initialize the problem";
    return false;
  }
  return true;
}

/// The forward's problem: shapes, the variant, the strides of Q, K, V and O.
bool validateProblem(const fagen_fwd_problem &p, std::string &error) {
  if (!validateShape(p, error) || !validateMask(p, error) ||
      !validateScoreModAndDropout(p, error) || !validateVarlenAndSparsity(p, error))
    return false;
  int64_t rowsQ = p.varlen ? p.total_q : p.seqlen_q, rowsK = p.varlen ? p.total_k : p.seqlen_k;
  // Extents: batch, heads, rows, head dim.
  int64_t qExtents[4] = {p.batch, p.heads_q, rowsQ, p.head_dim_qk};
  int64_t kExtents[4] = {p.batch, p.heads_kv, rowsK, p.head_dim_qk};
  int64_t vExtents[4] = {p.batch, p.heads_kv, rowsK, p.head_dim_v};
  int64_t oExtents[4] = {p.batch, p.heads_q, rowsQ, p.head_dim_v};
  return checkStrides("q", p.q_strides, qExtents, false, p.varlen, error) &&
         checkStrides("k", p.k_strides, kExtents, false, p.varlen, error) &&
         checkStrides("v", p.v_strides, vExtents, false, p.varlen, error) &&
         checkStrides("o", p.o_strides, oExtents, true, p.varlen, error);
}

/// The backward's gradients: dO like O, dQ like Q, dK like K, dV like V.
bool validateGradientStrides(const fagen_fwd_problem &p, std::string &error) {
  int64_t rowsQ = p.varlen ? p.total_q : p.seqlen_q, rowsK = p.varlen ? p.total_k : p.seqlen_k;
  int64_t dqExtents[4] = {p.batch, p.heads_q, rowsQ, p.head_dim_qk};
  int64_t doExtents[4] = {p.batch, p.heads_q, rowsQ, p.head_dim_v};
  int64_t dkExtents[4] = {p.batch, p.heads_kv, rowsK, p.head_dim_qk};
  int64_t dvExtents[4] = {p.batch, p.heads_kv, rowsK, p.head_dim_v};
  return checkStrides("do", p.do_strides, doExtents, false, p.varlen, error) &&
         checkStrides("dq", p.dq_strides, dqExtents, true, p.varlen, error) &&
         checkStrides("dk", p.dk_strides, dkExtents, true, p.varlen, error) &&
         checkStrides("dv", p.dv_strides, dvExtents, true, p.varlen, error);
}

} // namespace fagen::rt
