//===- Bundle.h - the bundle file: data model, writer and validating reader -===//
//
// One file holds every kernel an application needs: a header (magic, format version), a
// section table with a checksum per section, a text manifest, and the cubins. The writer is
// used by the compiler, the reader by the runtime and by `fagen inspect`; neither needs LLVM
// or CUDA. The format is documented in docs/bundle-format.md.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_RUNTIME_BUNDLE_H
#define FAGEN_RUNTIME_BUNDLE_H

#include "core/Variant.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fagen {

/// Bumped on any incompatible change of the file layout or the manifest keys.
constexpr uint32_t kBundleFormatVersion = 9;

/// Upper end of an open seqlen range.
constexpr int64_t kSeqlenUnbounded = int64_t(1) << 40;

/// One compiled kernel, as the manifest describes it: its variant (core/Variant.h) and how it
/// was built.
struct KernelRecord : Variant {
  std::string name;      ///< symbol in the cubin (a backward's main kernel; NAME_pre, NAME_post)
  std::string arch;      ///< "sm_80", "sm_90", "sm_90a", "sm_100a"
  std::string templ;     ///< template family: "sm80" (portable mma.sync), "sm90", "sm90ws",
                         ///< "sm80decode" (split-KV decode: NAME, NAME_combine, NAME_merge)
  /// sm80decode: the most query tokens per sequence of the forward calls it serves; 0 else.
  int qTokens = 0;
  /// sm80decode: the split rule of its calls (templates/common/decode_split.h
  /// decode_num_splits: one wave of decodeCtasPerSm CTAs per SM, splits of at least
  /// decodeMinTiles key tiles); 0 else.
  int decodeCtasPerSm = 0, decodeMinTiles = 0;
  std::string variant;   ///< the spec variant's name
  int sparseRows = 0, sparseCols = 0;     ///< static layout: table size in blocks
  int prePostThreads = 0;                 ///< bwd: threads of NAME_pre and NAME_post;
                                          ///< sm80decode: of NAME_combine and NAME_merge
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int threads = 0;       ///< threads per block
  int smemBytes = 0;     ///< dynamic shared memory per block
  int paramsVersion = 0; ///< FAGEN_FWD_PARAMS_VERSION (fwd) / FAGEN_BWD_PARAMS_VERSION (bwd) /
                         ///< FAGEN_DECODE_PARAMS_VERSION (sm80decode)
  int registers = -1;    ///< from the ptxas report; -1 = unknown
  int spillBytes = -1;   ///< spill stores + loads, from the ptxas report
  int rescaleTau = 0;     ///< FA4 conditional-rescaling threshold (-1 always, 0 exact skip)
  int exp2EmuPercent = 0; ///< percent of exp2 on the FMA units (FA4 emulated exp2)
  int exp2PolyDegree = 3; ///< that polynomial's degree
  bool persistent = false; ///< sm90ws: one CTA per SM walking the work tiles (else one per tile)
  /// sm90ws forward: takes work tiles from a counter in the forward workspace when the caller
  /// gives one (one CTA per SM); without, as `persistent` says.
  bool tileCounter = false;
  /// sm90ws forward, not varlen: stores O through TMA (the runtime encodes O's tensor map, and O
  /// must meet TMA's layout rules).
  bool tmaStoreO = false;
  /// The calls this kernel is tuned for: max(seqlen_q, seqlen_k) in [seqlenMin, seqlenMax]
  /// (0..kSeqlenUnbounded for an untuned kernel, which serves every call). Among kernels of
  /// one variant and arch, the runtime prefers the narrowest range that holds the call.
  int64_t seqlenMin = 0;
  int64_t seqlenMax = kSeqlenUnbounded;
  std::string tuning;    ///< provenance of the config: "default", "spec", or the tuning record
  uint32_t cubinSection = 0; ///< index into Bundle::cubins
};

/// The whole bundle. Byte-identical serialization for identical contents.
struct Bundle {
  std::string fagenVersion;
  std::string toolchain;              ///< e.g. "nvcc 13.0.88"
  std::vector<std::string> archs;     ///< sorted, unique
  std::vector<KernelRecord> kernels;  ///< sorted by name
  std::vector<std::string> cubins;    ///< raw cubin bytes
};

/// Whether kernel `k` is a split-KV decode kernel (template sm80decode).
inline bool isDecodeKernel(const KernelRecord &k) { return k.templ == "sm80decode"; }

/// Serializes a bundle. Deterministic: no timestamps, no paths.
std::vector<uint8_t> serializeBundle(const Bundle &bundle);

/// Parses and validates bytes as a bundle. On failure returns false and sets `error` to a
/// message naming what was expected, what was found, and the fix. Never crashes on any input.
bool parseBundle(const uint8_t *data, size_t size, Bundle &out, std::string &error);

/// Compute-capability arithmetic shared by planner and loader.
/// "sm_90a" -> 90; returns -1 for a malformed name.
int archComputeCapability(const std::string &arch);
/// Whether a cubin built for `arch` loads on a device of compute capability major.minor.
/// sm_XY loads on X.Z for Z >= Y; sm_XYa loads only on X.Y.
bool archRunsOn(const std::string &arch, int major, int minor);

} // namespace fagen

#endif // FAGEN_RUNTIME_BUNDLE_H
