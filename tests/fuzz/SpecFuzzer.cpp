//===- SpecFuzzer.cpp - libFuzzer target for the spec parser --------------===//
//
// parseSpec must turn any bytes into either a spec that satisfies every documented rule or
// `FILE:LINE:COL: error: ...` diagnostics, never a crash, a leak, undefined behaviour or an
// exception. Run: build-fuzz/tests/fuzz/fagen_spec_fuzzer -dict=tests/fuzz/spec.dict
// NEW_CORPUS_DIR tests/fuzz/corpus/spec
//
//===----------------------------------------------------------------------===//

#include "compiler/spec/Spec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

using namespace fagen;

namespace {

[[noreturn]] void fail(const char *what) {
  std::fprintf(stderr, "spec fuzzer: invariant violated: %s\n", what);
  std::abort();
}

void check(bool condition, const char *what) {
  if (!condition)
    fail(what);
}

bool isKnownArch(const std::string &arch) { return llvm::is_contained(knownArchs(), arch); }

/// The rules of docs/spec.md, restated on the parser's output.
void checkValid(const AttentionSpec &spec) {
  check(!spec.name.empty() && spec.name.size() <= 64, "spec name length");
  check(!spec.variants.empty(), "at least one variant");
  check(llvm::all_of(spec.targets, isKnownArch), "spec targets are known archs");
  std::set<std::string> names;
  for (const VariantSpec &v : spec.variants) {
    check(names.insert(v.name).second, "variant names are unique");
    check(!v.name.empty() && v.name.size() <= 64, "variant name length");
    check(v.dtype == DType::FP16 || v.dtype == DType::BF16, "dtype");
    for (int d : {v.headDimQK, v.headDimV})
      check(d >= 32 && d <= 256 && d % 8 == 0, "head dims are multiples of 8 in [32, 256]");
    check(v.mask == Mask::None || v.mask == Mask::Causal || v.mask == Mask::Window, "mask");
    check(v.maskAlign == MaskAlign::BottomRight || v.maskAlign == MaskAlign::TopLeft, "mask_align");
    check(v.scoreMod == ScoreMod::None || v.scoreMod == ScoreMod::Softcap ||
              v.scoreMod == ScoreMod::Alibi,
          "score_mod");
    std::set<Pass> passes(v.passes.begin(), v.passes.end());
    check(!v.passes.empty() && passes.size() == v.passes.size(), "passes non-empty, unique");
    check(llvm::all_of(v.passes, [](Pass p) { return p == Pass::Forward || p == Pass::Backward; }),
          "passes are fwd / bwd");
    check(!v.deterministic || passes.count(Pass::Backward), "deterministic needs bwd");
    if (v.blockSparse) {
      const BlockSparseSpec &b = *v.blockSparse;
      check(b.block >= 64 && b.block <= 256 && b.block % 64 == 0, "block_sparse.block");
      check(b.layout == "runtime" || b.layout == "local_global" || b.layout == "strided" ||
                b.layout == "file",
            "block_sparse.layout");
      check(b.layout != "file" || !b.fileRows.empty(), "a layout file has rows");
    }
    check(llvm::all_of(v.targets, isKnownArch), "variant targets are known archs");
    check((v.headsQ == 0 && v.headsKV == 0) ||
              (v.headsQ >= 1 && v.headsKV >= 1 && v.headsQ % v.headsKV == 0),
          "heads");
    check(v.loc.line >= 1 && v.loc.col >= 1, "variant location");
    if (!v.tile)
      continue;
    const TileOverride &t = *v.tile;
    check(t.blockM == 0 || (t.blockM >= 16 && t.blockM <= 256 && t.blockM % 16 == 0), "block_m");
    check(t.blockN == 0 || (t.blockN >= 16 && t.blockN <= 256 && t.blockN % 16 == 0), "block_n");
    check(t.warps == 0 || t.warps == 1 || t.warps == 2 || t.warps == 4 || t.warps == 8, "warps");
    check(t.stages >= 0 && t.stages <= 4, "stages");
  }
}

/// Every line of a failed parse is a located diagnostic for this file.
void checkDiagnostics(const std::string &text) {
  llvm::SmallVector<llvm::StringRef, 8> lines;
  llvm::StringRef(text).split(lines, '\n');
  check(!lines.empty(), "an error has text");
  for (llvm::StringRef line : lines) {
    // The spec, or a block layout file it names (`block_sparse.file`), with line and column.
    auto [file, rest] = line.split(':');
    auto [lineNo, rest2] = rest.split(':');
    auto [colNo, tail] = rest2.split(':');
    unsigned n = 0;
    const bool located = !lineNo.getAsInteger(10, n) && !colNo.getAsInteger(10, n);
    check(!file.empty() && (located || rest.starts_with(" error: too many errors")),
          "diagnostic says FILE:LINE:COL (or FILE: too many errors)");
    check(line.contains(": error: "), "diagnostic says error");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<AttentionSpec> spec = parseSpec(text, "fuzz.yaml");
  if (!spec) {
    checkDiagnostics(llvm::toString(spec.takeError()));
    return 0;
  }
  checkValid(*spec);
  return 0;
}
