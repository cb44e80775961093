//===- Spec.h - the attention spec: YAML in, validated AttentionSpec out ---===//
//
// First stage of the pipeline. A spec lists the attention variants an application needs;
// parsing checks every key, type and value and reports errors as
// `FILE:LINE:COL: error: MESSAGE` with the fix. The reference is docs/spec.md.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_SPEC_H
#define FAGEN_COMPILER_SPEC_H

#include "core/Variant.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fagen {

/// A position in a spec file (1-based line and column).
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
};

/// Formats `FILE:LINE:COL: error: MESSAGE`.
std::string formatDiagnostic(const SourceLoc &loc, const std::string &message);
/// An llvm::Error carrying formatDiagnostic(loc, message).
llvm::Error makeSpecError(const SourceLoc &loc, const std::string &message);

/// Forces a kernel configuration instead of the planner's default (for experiments and for
/// pinning a known-good config). Zero means "planner's choice".
struct TileOverride {
  int blockM = 0;
  int blockN = 0;
  int warps = 0;
  int stages = 0;
  std::string templ;                 ///< "sm80", "sm90", "sm90ws" or "" (planner's choice)
  std::optional<int> rescaleTau;     ///< FA4 conditional-rescaling threshold, -1..8
  std::optional<int> exp2EmuPercent; ///< percent of exp2 on the FMA units, 0..50
  std::optional<int> exp2PolyDegree; ///< that polynomial's degree, 3..5
  std::optional<bool> stagedEpilogue; ///< sm90ws: O out through shared memory
  SourceLoc loc; ///< of the `tile` mapping, where the planner reports a combination it rejects
};

/// A block-sparse layout (`block_sparse:`): which (block_q, block_k) blocks of the attention
/// matrix are computed. docs/spec.md#block-sparse.
struct BlockSparseSpec {
  int block = 0;      ///< tokens per block, a multiple of 64 in 64..256
  std::string layout; ///< "runtime" | "local_global" | "strided" | "file"
  int local = 0;      ///< local_global, strided: blocks within this distance of the diagonal
  int global = 0;     ///< local_global: the first `global` block rows and columns
  int stride = 0;     ///< strided: block (r, c) visible iff (r - c) is a multiple of stride
  int maxSeqlen = 0;  ///< local_global, strided: the table covers this many tokens
  std::string file;   ///< file: the layout file as written in the spec
  /// file: its rows of 0/1, read when the spec is parsed (rows x cols, equal row lengths).
  std::vector<std::vector<uint8_t>> fileRows;
  bool isStatic() const { return layout != "runtime"; }
};

/// The split-KV decode kernel of a variant (`decode` in `passes`, settings in `decode:`):
/// docs/spec.md#decode.
struct DecodeSpec {
  /// The most query tokens per sequence a call may have for the decode kernel to serve it
  /// (1: plain decoding; more: speculative verification), 1..FAGEN_DECODE_MAX_Q_TOKENS.
  int qTokens = 1;
};

/// One attention variant: everything that changes the generated kernel.
struct VariantSpec {
  std::string name;                  ///< unique within the spec; [a-z0-9_]+
  DType dtype = DType::FP16;
  int headDimQK = 0;                 ///< multiple of 8 in 32..256
  int headDimV = 0;                  ///< multiple of 8 in 32..256; may differ from headDimQK
  Mask mask = Mask::None;
  MaskAlign maskAlign = MaskAlign::BottomRight; ///< causal and window masks
  ScoreMod scoreMod = ScoreMod::None;
  bool dropout = false;              ///< dropout on P (p, seed, offset at run time)
  bool varlen = false;               ///< packed sequences with cu_seqlens
  std::optional<BlockSparseSpec> blockSparse;
  bool deterministic = false;        ///< bwd: bitwise-repeatable dQ/dK/dV
  std::vector<Pass> passes;          ///< in file order, each at most once
  /// Set when `passes` lists decode: the variant's split-KV decode kernel (a forward kernel of
  /// template sm80decode, beside or instead of the fwd pass's).
  std::optional<DecodeSpec> decode;
  /// `kv_cache: paged` with `page_size: N`: K and V in a paged KV cache of N-token pages
  /// (docs/spec.md#paged-kv-cache); 0: contiguous. Served by the decode kernel and the varlen
  /// forward (chunked prefill).
  int pageSize = 0;
  std::vector<std::string> targets;  ///< archs; empty = the spec's top-level targets
  int headsQ = 0, headsKV = 0;       ///< optional model shape (0 = unspecified); its GQA ratio shapes fagen tune's buckets
  std::optional<TileOverride> tile;  ///< pins the forward kernel's config
  SourceLoc loc;                     ///< of the variant's mapping
  /// Where each key's value stands. Nested keys are dotted ("heads.q", "tile.block_m",
  /// "block_sparse.block", "decode.q_tokens"; "kv_cache", "page_size"), each pass is "passes.<pass>" ("passes.decode"
  /// too), each target is "targets.<arch>" (canonical arch), and "head_dim",
  /// "head_dim_qk" and "head_dim_v" are all present when either form was written, pointing at
  /// what was written.
  std::map<std::string, SourceLoc> keyLocs;
  /// Location of `key`'s value, or of the variant when the key is absent.
  const SourceLoc &locOf(const std::string &key) const;
  /// The kernel variant this spec variant asks for in `pass`: the alignment only with a mask,
  /// the deterministic mode only in the backward, the block sparsity's kind and block (a
  /// static layout's hash is the planner's, which builds its table).
  Variant kernelVariant(Pass pass) const;
};

/// A parsed, validated spec.
struct AttentionSpec {
  std::string file;                  ///< as given on the command line
  std::string name;                  ///< optional; defaults to the file's stem
  std::vector<std::string> targets;  ///< default archs for variants that name none
  std::vector<VariantSpec> variants; ///< in file order, at least one
  SourceLoc loc;                     ///< of the top-level mapping
  /// Where each top-level key's value stands; "targets.<arch>" for each default target.
  std::map<std::string, SourceLoc> keyLocs;
  /// Every file the spec was read from: the spec itself (unless standard input), then each
  /// block layout file, as opened (`fagen build --depfile` lists them).
  std::vector<std::string> inputFiles;
  /// Location of `key`'s value, or of the spec when the key is absent.
  const SourceLoc &locOf(const std::string &key) const;
};

/// The archs fagen knows: "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a".
const std::vector<std::string> &knownArchs();
/// Returns the canonical arch for `text` ("sm_90a", "90a", "SM_90A" -> "sm_90a") or an error
/// message with a "did you mean" suggestion.
llvm::Expected<std::string> canonicalArch(const std::string &text);

/// The closest candidate within a small edit distance, or "" (for "did you mean").
std::string closestMatch(const std::string &word, const std::vector<std::string> &candidates);

/// Parses and validates a spec from text; `file` names it in diagnostics.
llvm::Expected<AttentionSpec> parseSpec(const std::string &text, const std::string &file);
/// Reads and parses a spec file.
llvm::Expected<AttentionSpec> parseSpecFile(const std::string &path);

} // namespace fagen

#endif // FAGEN_COMPILER_SPEC_H
