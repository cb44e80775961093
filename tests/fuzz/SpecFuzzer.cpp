//===- SpecFuzzer.cpp - libFuzzer target for the spec parser --------------===//
//
// parseSpec must turn any bytes into either a spec that satisfies every documented rule or
// `FILE:LINE:COL: error: ...` diagnostics, never a crash, a leak, undefined behaviour or an
// exception. Run: build-fuzz/tests/fuzz/fagen_spec_fuzzer -dict=tests/fuzz/spec.dict
// NEW_CORPUS_DIR tests/fuzz/corpus/spec
//
//===----------------------------------------------------------------------===//

#include "Spec.h"

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
    check(v.dtype == "fp16" || v.dtype == "bf16", "dtype");
    check(v.headDimQK == v.headDimV, "equal head dims");
    check(v.headDimQK >= 32 && v.headDimQK <= 256 && v.headDimQK % 16 == 0, "head dim range");
    check(v.mask == "none" || v.mask == "causal", "mask");
    check(v.passes == std::vector<std::string>{"fwd"}, "passes");
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
    check(line.starts_with("fuzz.yaml:"), "diagnostic names the file");
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
