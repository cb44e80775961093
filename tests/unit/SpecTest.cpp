//===- SpecTest.cpp - the spec parser: values, defaults, every diagnostic --===//

#include "compiler/spec/Spec.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace fagen;

namespace {

/// Parses `yaml` as "t.yaml" and returns the diagnostic text; fails the test if it parsed.
std::string errorOf(const std::string &yaml) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  if (spec) {
    ADD_FAILURE() << "expected an error for:\n" << yaml;
    return "";
  }
  return llvm::toString(spec.takeError());
}

/// Parses `yaml` as "t.yaml", failing the test on an error.
AttentionSpec parseOk(const std::string &yaml) {
  llvm::Expected<AttentionSpec> spec = parseSpec(yaml, "t.yaml");
  if (!spec) {
    ADD_FAILURE() << llvm::toString(spec.takeError());
    return AttentionSpec();
  }
  return std::move(*spec);
}

/// A minimal valid variant list to wrap a top-level key in.
const char *kOneVariant = "variants: [{name: a, dtype: bf16, head_dim: 64}]\n";

} // namespace

//===----------------------------------------------------------------------===//
// Valid specs
//===----------------------------------------------------------------------===//

TEST(Spec, FullVariant) {
  AttentionSpec spec = parseOk(R"(# comment
name: llama3_8b
targets: [sm_80, 90a]
variants:
  - name: prefill
    dtype: bf16
    head_dim: 128
    mask: causal
    passes: [fwd]
    heads: {q: 32, kv: 8}
    targets: [SM_90A, sm100a]
    tile: {block_m: 128, block_n: 64, warps: 4, stages: 2}
)");
  EXPECT_EQ(spec.file, "t.yaml");
  EXPECT_EQ(spec.name, "llama3_8b");
  EXPECT_EQ(spec.targets, (std::vector<std::string>{"sm_80", "sm_90a"}));
  ASSERT_EQ(spec.variants.size(), 1u);
  const VariantSpec &v = spec.variants[0];
  EXPECT_EQ(v.name, "prefill");
  EXPECT_EQ(v.dtype, DType::BF16);
  EXPECT_EQ(v.headDimQK, 128);
  EXPECT_EQ(v.headDimV, 128);
  EXPECT_EQ(v.mask, Mask::Causal);
  EXPECT_EQ(v.passes, (std::vector<Pass>{Pass::Forward}));
  EXPECT_EQ(v.headsQ, 32);
  EXPECT_EQ(v.headsKV, 8);
  EXPECT_EQ(v.targets, (std::vector<std::string>{"sm_90a", "sm_100a"}));
  ASSERT_TRUE(v.tile.has_value());
  EXPECT_EQ(v.tile->blockM, 128);
  EXPECT_EQ(v.tile->blockN, 64);
  EXPECT_EQ(v.tile->warps, 4);
  EXPECT_EQ(v.tile->stages, 2);
  EXPECT_EQ(v.tile->loc.line, 12);
  EXPECT_EQ(v.tile->loc.col, 11);
}

TEST(Spec, Locations) {
  AttentionSpec spec = parseOk(R"(targets: [sm_80]
variants:
  - name: prefill
    dtype: bf16
    head_dim: 128
    heads: {q: 32, kv: 8}
    tile: {warps: 4}
)");
  EXPECT_EQ(spec.loc.line, 1);
  EXPECT_EQ(spec.locOf("targets").line, 1);
  EXPECT_EQ(spec.locOf("targets").col, 10);
  EXPECT_EQ(spec.locOf("targets.sm_80").col, 11);
  EXPECT_EQ(spec.locOf("name").line, 1); // absent: the spec's own location
  const VariantSpec &v = spec.variants[0];
  EXPECT_EQ(v.loc.file, "t.yaml");
  EXPECT_EQ(v.loc.line, 3);
  EXPECT_EQ(v.loc.col, 5);
  EXPECT_EQ(v.locOf("dtype").line, 4);
  EXPECT_EQ(v.locOf("dtype").col, 12);
  EXPECT_EQ(v.locOf("head_dim_qk").line, 5); // written as head_dim
  EXPECT_EQ(v.locOf("heads.kv").col, 24);
  EXPECT_EQ(v.locOf("tile.warps").line, 7);
  EXPECT_EQ(v.locOf("mask").line, 3); // absent: the variant's location
}

TEST(Spec, Defaults) {
  llvm::Expected<AttentionSpec> spec =
      parseSpec("variants: [{name: a, dtype: fp16, head_dim: 64}]", "dir/my model.v2.yaml");
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->name, "my_model_v2");
  EXPECT_TRUE(spec->targets.empty());
  const VariantSpec &v = spec->variants[0];
  EXPECT_EQ(v.mask, Mask::None);
  EXPECT_EQ(v.passes, (std::vector<Pass>{Pass::Forward}));
  EXPECT_TRUE(v.targets.empty());
  EXPECT_EQ(v.headsQ, 0);
  EXPECT_EQ(v.headsKV, 0);
  EXPECT_FALSE(v.tile.has_value());
  EXPECT_EQ(v.maskAlign, MaskAlign::BottomRight);
  EXPECT_EQ(v.scoreMod, ScoreMod::None);
  EXPECT_FALSE(v.dropout);
  EXPECT_FALSE(v.varlen);
  EXPECT_FALSE(v.blockSparse.has_value());
  EXPECT_FALSE(v.deterministic);
}

TEST(Spec, SplitHeadDimsAndPartialOverrides) {
  AttentionSpec spec = parseOk(R"(variants:
  - {name: a, dtype: fp16, head_dim_qk: 96, head_dim_v: 96, heads: {q: 12}, tile: {stages: 3}}
  - {name: b_2, dtype: bf16, head_dim: 256, tile: {}}
)");
  ASSERT_EQ(spec.variants.size(), 2u);
  EXPECT_EQ(spec.variants[0].headDimQK, 96);
  EXPECT_EQ(spec.variants[0].headDimV, 96);
  EXPECT_EQ(spec.variants[0].locOf("head_dim").col, 41);
  EXPECT_EQ(spec.variants[0].headsQ, 12);
  EXPECT_EQ(spec.variants[0].headsKV, 12);
  EXPECT_EQ(spec.variants[0].tile->stages, 3);
  EXPECT_EQ(spec.variants[0].tile->blockM, 0);
  EXPECT_EQ(spec.variants[1].tile->warps, 0);
}

TEST(Spec, ExampleSpecsParse) {
  std::string dir = std::string(FAGEN_SOURCE_DIR) + "/specs";
  std::error_code ec;
  int count = 0;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    if (llvm::sys::path::extension(it->path()) != ".yaml")
      continue;
    ++count;
    llvm::Expected<AttentionSpec> spec = parseSpecFile(it->path());
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    EXPECT_FALSE(spec->variants.empty()) << it->path();
    EXPECT_FALSE(spec->targets.empty()) << it->path();
  }
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_GE(count, 4);
}

TEST(Spec, DefaultSpecIsWhatTheReadmeBuilds) {
  llvm::Expected<AttentionSpec> spec =
      parseSpecFile(std::string(FAGEN_SOURCE_DIR) + "/specs/default.yaml");
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->targets, (std::vector<std::string>{"sm_80", "sm_90"}));
  ASSERT_EQ(spec->variants.size(), 2u);
  EXPECT_EQ(spec->variants[0].dtype, DType::BF16);
  EXPECT_EQ(spec->variants[0].mask, Mask::Causal);
  EXPECT_EQ(spec->variants[0].headDimQK, 128);
  EXPECT_EQ(spec->variants[1].dtype, DType::BF16);
  EXPECT_EQ(spec->variants[1].mask, Mask::None);
  EXPECT_EQ(spec->variants[1].headDimQK, 64);
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

TEST(Spec, CanonicalArch) {
  for (const char *text : {"sm_90a", "90a", "SM_90A", "sm90a", "sm-90a", " sm_90a "}) {
    llvm::Expected<std::string> arch = canonicalArch(text);
    ASSERT_TRUE(bool(arch)) << text << ": " << llvm::toString(arch.takeError());
    EXPECT_EQ(*arch, "sm_90a") << text;
  }
  for (const std::string &known : knownArchs()) {
    llvm::Expected<std::string> arch = canonicalArch(known);
    ASSERT_TRUE(bool(arch)) << llvm::toString(arch.takeError());
    EXPECT_EQ(*arch, known);
  }
  llvm::Expected<std::string> dotted = canonicalArch("8.6");
  ASSERT_TRUE(bool(dotted));
  EXPECT_EQ(*dotted, "sm_86");
}

TEST(Spec, CanonicalArchErrors) {
  auto errorText = [](const std::string &text) {
    llvm::Expected<std::string> arch = canonicalArch(text);
    EXPECT_FALSE(bool(arch)) << text;
    return arch ? std::string() : llvm::toString(arch.takeError());
  };
  EXPECT_EQ(errorText("sm_91"), "unknown arch 'sm_91': did you mean sm_90? (known archs: sm_80, "
                                "sm_86, sm_89, sm_90, sm_90a, sm_100, sm_100a)");
  EXPECT_EQ(errorText("hopper"), "unknown arch 'hopper' (known archs: sm_80, sm_86, sm_89, "
                                 "sm_90, sm_90a, sm_100, sm_100a)");
  EXPECT_EQ(errorText("compute_90a"),
            "arch 'compute_90a' is a virtual (PTX) arch; targets are real GPU archs: use sm_90a");
  errorText("");
  errorText("sm_");
  errorText("sm_90b");
  errorText("9.");
}

TEST(Spec, ClosestMatch) {
  std::vector<std::string> keys = {"name", "dtype", "head_dim", "head_dim_qk", "mask"};
  EXPECT_EQ(closestMatch("head_dimm", keys), "head_dim");
  EXPECT_EQ(closestMatch("HEAD_DIM", keys), "head_dim");
  EXPECT_EQ(closestMatch("dtpye", keys), "dtype");
  EXPECT_EQ(closestMatch("x", {"q", "kv"}), "");
  EXPECT_EQ(closestMatch("completely_different", keys), "");
  EXPECT_EQ(closestMatch("", keys), "");
}

TEST(Spec, FormatDiagnostic) {
  EXPECT_EQ(formatDiagnostic(SourceLoc{"a.yaml", 3, 7}, "bad"), "a.yaml:3:7: error: bad");
  EXPECT_EQ(formatDiagnostic(SourceLoc{"a.yaml", 0, 0}, "bad"), "a.yaml: error: bad");
  EXPECT_EQ(llvm::toString(makeSpecError(SourceLoc{"a.yaml", 1, 2}, "m")), "a.yaml:1:2: error: m");
}

//===----------------------------------------------------------------------===//
// Diagnostics: one test each, exact text
//===----------------------------------------------------------------------===//

TEST(SpecError, UnreadableFile) {
  llvm::Expected<AttentionSpec> spec = parseSpecFile("/nonexistent/dir/x.yaml");
  ASSERT_FALSE(bool(spec));
  EXPECT_EQ(llvm::toString(spec.takeError()),
            "/nonexistent/dir/x.yaml: error: cannot read the spec: No such file or directory");
}

TEST(SpecError, Empty) {
  const char *expected = "t.yaml:1:1: error: the spec is empty: it needs at least a 'variants' "
                         "list (see docs/spec.md)";
  EXPECT_EQ(errorOf(""), expected);
  EXPECT_EQ(errorOf("# only a comment\n\n"), expected);
}

TEST(SpecError, YamlSyntax) {
  EXPECT_EQ(errorOf("variants: [a, b\n"),
            "t.yaml:2:1: error: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(errorOf("a: b\n c: d\n"), "t.yaml:2:3: error: invalid YAML: illegal map value");
}

TEST(SpecError, SeveralDocuments) {
  EXPECT_EQ(errorOf(std::string(kOneVariant) + "---\n" + kOneVariant),
            "t.yaml:2:1: error: a spec is one YAML document: remove the '---' and what follows, "
            "or split it into several spec files");
}

TEST(SpecError, StrayCommaAtTopLevel) {
  // yaml-cpp's LoadAll loops forever on this (found by the fuzzer); the parser must not.
  EXPECT_EQ(errorOf(","), "t.yaml:1:1: error: invalid YAML: unexpected ','");
  EXPECT_EQ(errorOf("---\n,\n"), "t.yaml:2:1: error: invalid YAML: unexpected ','");
}

TEST(SpecError, TopLevelNotAMapping) {
  EXPECT_EQ(errorOf("- a\n- b\n"),
            "t.yaml:1:1: error: the spec must be a mapping with a 'variants' list, got a list");
}

TEST(SpecError, MissingVariants) {
  EXPECT_EQ(errorOf("# c\nname: x\n"),
            "t.yaml:2:1: error: the spec needs a 'variants' list (see docs/spec.md)");
}

TEST(SpecError, VariantsNotAList) {
  EXPECT_EQ(errorOf("variants: {name: a}\n"),
            "t.yaml:1:11: error: variants must be a list like [{name: prefill, dtype: bf16, "
            "head_dim: 128}], got a mapping");
}

TEST(SpecError, VariantsEmpty) {
  EXPECT_EQ(errorOf("variants: []\n"),
            "t.yaml:1:11: error: variants must not be empty: write [{name: prefill, dtype: bf16, "
            "head_dim: 128}] or remove the key");
}

TEST(SpecError, VariantNotAMapping) {
  EXPECT_EQ(errorOf("variants:\n  - prefill\n"),
            "t.yaml:2:5: error: each variant must be a mapping like {name: prefill, dtype: bf16, "
            "head_dim: 128}, got 'prefill'");
}

TEST(SpecError, UnknownKeyWithSuggestion) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dimm: 128\n"),
            "t.yaml:4:5: error: unknown key 'head_dimm': did you mean 'head_dim'?");
}

TEST(SpecError, UnknownKeyWithoutSuggestion) {
  EXPECT_EQ(errorOf(std::string(kOneVariant) + "model: llama\n"),
            "t.yaml:2:1: error: unknown key 'model': valid keys here are name, targets, variants");
}

TEST(SpecError, NonScalarKey) {
  EXPECT_EQ(errorOf(std::string(kOneVariant) + "? [a]\n: 1\n"),
            "t.yaml:2:3: error: keys must be plain words, got a list");
}

TEST(SpecError, DuplicateKey) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dim: 64\n    dtype: fp16\n"),
            "t.yaml:5:5: error: duplicate key 'dtype' (first at line 3): remove one of them");
}

TEST(SpecError, DuplicateKeyOnOneLine) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: {q: 8, q: 4}}]\n"),
            "t.yaml:1:63: error: duplicate key 'q' (first at column 57): remove one of them");
}

TEST(SpecError, MissingName) {
  EXPECT_EQ(errorOf("variants:\n  - dtype: bf16\n    head_dim: 64\n"),
            "t.yaml:2:5: error: variant #1 is missing required key 'name'");
}

TEST(SpecError, MissingDtype) {
  EXPECT_EQ(errorOf("variants:\n  - name: prefill\n    head_dim: 64\n"),
            "t.yaml:2:5: error: variant 'prefill' is missing required key 'dtype' (fp16 or bf16)");
}

TEST(SpecError, MissingHeadDim) {
  EXPECT_EQ(errorOf("variants:\n  - name: prefill\n    dtype: bf16\n"),
            "t.yaml:2:5: error: variant 'prefill' is missing required key 'head_dim'");
}

TEST(SpecError, MisspelledKeyIsNotAlsoMissing) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtpye: bf16\n    head_dim: 64\n"),
            "t.yaml:3:5: error: unknown key 'dtpye': did you mean 'dtype'?");
}

TEST(SpecError, BadVariantName) {
  EXPECT_EQ(errorOf("variants: [{name: Pre-fill, dtype: bf16, head_dim: 64}]\n"),
            "t.yaml:1:19: error: variant name 'Pre-fill' must match [a-z0-9_]+: did you mean "
            "'pre_fill'?");
}

TEST(SpecError, EmptyVariantName) {
  EXPECT_EQ(errorOf("variants: [{name: '', dtype: bf16, head_dim: 64}]\n"),
            "t.yaml:1:19: error: variant name must not be empty");
}

TEST(SpecError, LongVariantName) {
  EXPECT_EQ(
      errorOf("variants: [{name: " + std::string(65, 'a') + ", dtype: bf16, head_dim: 64}]\n"),
      "t.yaml:1:19: error: variant name must be at most 64 characters long, got 65");
}

TEST(SpecError, BadSpecName) {
  EXPECT_EQ(errorOf(std::string("name: my spec\n") + kOneVariant),
            "t.yaml:1:7: error: spec name 'my spec' must match [A-Za-z0-9_-]+: did you mean "
            "'my_spec'?");
}

TEST(SpecError, DuplicateVariantName) {
  EXPECT_EQ(errorOf("variants:\n  - {name: a, dtype: bf16, head_dim: 64}\n"
                    "  - {name: a, dtype: fp16, head_dim: 64}\n"),
            "t.yaml:3:12: error: duplicate variant name 'a' (first at line 2): variant names must "
            "be unique");
}

TEST(SpecError, DtypeSuggestion) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf61, head_dim: 64}]\n"),
            "t.yaml:1:29: error: dtype must be one of fp16, bf16: did you mean bf16?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bfloat16, head_dim: 64}]\n"),
            "t.yaml:1:29: error: dtype must be one of fp16, bf16: did you mean bf16?");
}

TEST(SpecError, DtypeUnsupported) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: fp32, head_dim: 64}]\n"),
            "t.yaml:1:29: error: dtype must be one of fp16, bf16: fp32 inputs are not supported "
            "(accumulation is always fp32)");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: int4, head_dim: 64}]\n"),
            "t.yaml:1:29: error: dtype must be one of fp16, bf16, got 'int4'");
}

TEST(SpecError, DtypeWrongType) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: [bf16], head_dim: 64}]\n"),
            "t.yaml:1:29: error: dtype must be one of fp16, bf16, got a list");
}

TEST(SpecError, HeadDimNotAnInteger) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: abc}]\n"),
            "t.yaml:1:45: error: head_dim must be an integer, got 'abc'");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 128.0}]\n"),
            "t.yaml:1:45: error: head_dim must be an integer, got '128.0'");
}

TEST(SpecError, HeadDimQuoted) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: \"128\"}]\n"),
            "t.yaml:1:45: error: head_dim must be an integer, got the quoted string '128': remove "
            "the quotes");
}

TEST(SpecError, HeadDimEmpty) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dim:\n"),
            "t.yaml:4:5: error: head_dim must be an integer, got nothing");
}

TEST(SpecError, HeadDimOutOfRange) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 100}]\n"),
            "t.yaml:1:45: error: head_dim must be a multiple of 8 in 32..256, got 100");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 512}]\n"),
            "t.yaml:1:45: error: head_dim must be a multiple of 8 in 32..256, got 512");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 24}]\n"),
            "t.yaml:1:45: error: head_dim must be a multiple of 8 in 32..256, got 24");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 99999999999}]\n"),
            "t.yaml:1:45: error: head_dim is out of range, got '99999999999'");
}

TEST(SpecError, HeadDimBothForms) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, head_dim_qk: 64}]\n"),
            "t.yaml:1:49: error: use either head_dim or head_dim_qk and head_dim_v, not both");
}

TEST(SpecError, HeadDimHalfOfSplit) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim_qk: 64}]\n"),
            "t.yaml:1:35: error: head_dim_qk needs head_dim_v too (or use head_dim when they are "
            "equal)");
}

TEST(SpecError, HeadDimVOutOfRange) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dim_qk: 192\n"
                    "    head_dim_v: 260\n"),
            "t.yaml:5:17: error: head_dim_v must be a multiple of 8 in 32..256, got 260");
}

TEST(SpecError, MaskSuggestion) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: casual}]\n"),
            "t.yaml:1:55: error: mask must be one of none, causal, window: did you mean causal?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: sliding_window}]\n"),
            "t.yaml:1:55: error: mask must be one of none, causal, window: did you mean window?");
}

TEST(SpecError, MaskUnknown) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: diagonal}]\n"),
            "t.yaml:1:55: error: mask must be one of none, causal, window, got 'diagonal'");
}

TEST(SpecError, BackwardPassSpelling) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [fwd, backward]}]\n"),
            "t.yaml:1:63: error: unknown pass 'backward': did you mean bwd?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [bwd, bwd]}]\n"),
            "t.yaml:1:63: error: pass bwd is listed twice: remove one of them");
}

TEST(SpecError, UnknownPass) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [forward]}]\n"),
            "t.yaml:1:58: error: unknown pass 'forward': did you mean fwd?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [xyz]}]\n"),
            "t.yaml:1:58: error: unknown pass 'xyz': the passes are fwd, bwd and decode");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decod]}]\n"),
            "t.yaml:1:58: error: unknown pass 'decod': did you mean decode?");
}

TEST(SpecDecode, PassesListDecode) {
  AttentionSpec spec = parseOk("variants:\n"
                               "  - name: serve\n"
                               "    dtype: bf16\n"
                               "    head_dim: 128\n"
                               "    passes: [fwd, decode]\n"
                               "    decode: {q_tokens: 4}\n");
  const VariantSpec &v = spec.variants[0];
  ASSERT_TRUE(v.decode.has_value());
  EXPECT_EQ(v.decode->qTokens, 4);
  EXPECT_EQ(v.passes, std::vector<Pass>{Pass::Forward});
  EXPECT_EQ(v.locOf("passes.decode").line, 5);
  EXPECT_EQ(v.locOf("passes.decode").col, 19);
  EXPECT_EQ(v.locOf("decode.q_tokens").line, 6);
  // decode alone: no forward kernel; q_tokens 1 by default.
  AttentionSpec only = parseOk("variants: [{name: a, dtype: fp16, head_dim: 64, passes: [decode]}]\n");
  EXPECT_TRUE(only.variants[0].passes.empty());
  ASSERT_TRUE(only.variants[0].decode.has_value());
  EXPECT_EQ(only.variants[0].decode->qTokens, 1);
  EXPECT_FALSE(parseOk("variants: [{name: a, dtype: fp16, head_dim: 64}]\n").variants[0].decode);
}

TEST(SpecDecode, Errors) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, decode: {q_tokens: 2}}]\n"),
            "t.yaml:1:49: error: decode configures the decode kernel: add decode to passes (e.g. "
            "passes: [fwd, decode]), or remove decode");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decode],\n"
                    "              decode: {q_tokens: 17}}]\n"),
            "t.yaml:2:34: error: decode.q_tokens must be in 1..16, got 17");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decode],\n"
                    "              decode: {q_token: 2}}]\n"),
            "t.yaml:2:24: error: unknown key 'q_token': did you mean 'q_tokens'?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decode],\n"
                    "              decode: 4}]\n"),
            "t.yaml:2:23: error: decode must be a mapping like {q_tokens: 4}, got '4'");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decode, decode]}]\n"),
            "t.yaml:1:66: error: pass decode is listed twice: remove one of them");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [decode],\n"
                    "              deterministic: true}]\n"),
            "t.yaml:2:30: error: deterministic applies to the backward pass: add bwd to passes, "
            "or remove deterministic");
}

TEST(SpecError, PassesNotAList) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: fwd}]\n"),
            "t.yaml:1:57: error: passes must be a list like [fwd], got 'fwd'");
}

TEST(SpecError, PassesEmpty) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: []}]\n"),
            "t.yaml:1:57: error: passes must not be empty: write [fwd] or remove the key");
}

TEST(SpecError, PassListedTwice) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [fwd, fwd]}]\n"),
            "t.yaml:1:63: error: pass fwd is listed twice: remove one of them");
}

TEST(SpecError, PassNotAWord) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, passes: [[fwd]]}]\n"),
            "t.yaml:1:58: error: passes must list pass names like fwd, got a list");
}

TEST(SpecError, HeadsNotAMapping) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: 32}]\n"),
            "t.yaml:1:56: error: heads must be a mapping like {q: 32, kv: 8}, got '32'");
}

TEST(SpecError, HeadsMissingQ) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: {kv: 8}}]\n"),
            "t.yaml:1:56: error: heads needs 'q', the number of query heads");
}

TEST(SpecError, HeadsNotPositive) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: {q: 8, kv: 0}}]\n"),
            "t.yaml:1:67: error: heads.kv must be at least 1, got 0");
}

TEST(SpecError, HeadsNotDivisible) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: {q: 32, kv: 6}}]\n"),
            "t.yaml:1:68: error: heads.q (32) must be a multiple of heads.kv (6)");
}

TEST(SpecError, HeadsUnknownKey) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, heads: {q: 8, k: 8}}]\n"),
            "t.yaml:1:63: error: unknown key 'k': did you mean 'kv'?");
}

TEST(SpecError, UnknownArch) {
  EXPECT_EQ(errorOf(std::string("targets: [sm_80, sm_91]\n") + kOneVariant),
            "t.yaml:1:18: error: unknown arch 'sm_91': did you mean sm_90? (known archs: sm_80, "
            "sm_86, sm_89, sm_90, sm_90a, sm_100, sm_100a)");
}

TEST(SpecError, VirtualArch) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, targets: [compute_90a]}]\n"),
            "t.yaml:1:59: error: arch 'compute_90a' is a virtual (PTX) arch; targets are real GPU "
            "archs: use sm_90a");
}

TEST(SpecError, ArchListedTwice) {
  EXPECT_EQ(errorOf(std::string("targets:\n  - sm_90\n  - 90\n") + kOneVariant),
            "t.yaml:3:5: error: target sm_90 is listed twice (first at line 2): remove one of "
            "them");
}

TEST(SpecError, TargetsNotAList) {
  EXPECT_EQ(errorOf(std::string("targets: sm_90\n") + kOneVariant),
            "t.yaml:1:10: error: targets must be a list like [sm_80, sm_90a], got 'sm_90'");
}

TEST(SpecError, TargetsEmpty) {
  EXPECT_EQ(errorOf(std::string("targets: []\n") + kOneVariant),
            "t.yaml:1:10: error: targets must not be empty: write [sm_80, sm_90a] or remove the "
            "key");
}

TEST(SpecError, TargetNotAWord) {
  EXPECT_EQ(errorOf(std::string("targets: [{sm: 90}]\n") + kOneVariant),
            "t.yaml:1:11: error: targets must list archs like sm_90a, got a mapping");
}

TEST(SpecError, TileNotAMapping) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: 128}]\n"),
            "t.yaml:1:55: error: tile must be a mapping like {block_m: 128, block_n: 64, warps: 4, "
            "stages: 2}, got '128'");
}

TEST(SpecError, TileBlockM) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: {block_m: 100}}]\n"),
            "t.yaml:1:65: error: tile.block_m must be a multiple of 16 in 16..256, got 100");
}

TEST(SpecError, TileBlockN) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: {block_n: 512}}]\n"),
            "t.yaml:1:65: error: tile.block_n must be a multiple of 16 in 16..256, got 512");
}

TEST(SpecError, TileWarps) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: {warps: 3}}]\n"),
            "t.yaml:1:63: error: tile.warps must be one of 1, 2, 4, 8, 12, got 3");
}

TEST(SpecError, TileStages) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: {stages: 0}}]\n"),
            "t.yaml:1:64: error: tile.stages must be in 1..4, got 0");
}

TEST(SpecError, TileUnknownKey) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, tile: {blockm: 64}}]\n"),
            "t.yaml:1:56: error: unknown key 'blockm': did you mean 'block_m'?");
}

TEST(SpecError, AllErrorsInFileOrder) {
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dim: 100\n"
                    "    dtype: fp16\n    mask: casual\n"),
            "t.yaml:4:15: error: head_dim must be a multiple of 8 in 32..256, got 100\n"
            "t.yaml:5:5: error: duplicate key 'dtype' (first at line 3): remove one of them\n"
            "t.yaml:6:11: error: mask must be one of none, causal, window: did you mean causal?");
}

TEST(SpecError, ErrorCountIsCapped) {
  std::string yaml = "variants:\n";
  for (int i = 0; i < 30; ++i)
    yaml += "  - {name: v" + std::to_string(i) + ", dtype: x, head_dim: 64}\n";
  std::string text = errorOf(yaml);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 20);
  EXPECT_NE(text.find("t.yaml: error: too many errors; stopping"), std::string::npos);
}

TEST(SpecError, HostileInputsDoNotThrow) {
  // Deep nesting, aliases, binary, tags and huge scalars must all come back as errors.
  std::string deep(100000, '[');
  errorOf(deep);
  errorOf("a: &x [*x]\nvariants: *x\n");
  errorOf(std::string("\0\xff\xfe variants:\x01", 14));
  errorOf("variants: [{name: a, dtype: !!binary AAAA, head_dim: !!int 0x40}]\n");
  errorOf("variants: [{name: a, dtype: bf16, head_dim: " + std::string(100000, '9') + "}]\n");
  errorOf("variants: [{name: " + std::string(100000, 'Z') + ", dtype: bf16, head_dim: 64}]\n");
  errorOf("!!map {? !!seq [a]: b}\n");
}

//===----------------------------------------------------------------------===//
// Variant semantics: masks, score mods, dropout, varlen, block sparsity, backward
//===----------------------------------------------------------------------===//

TEST(Spec, EveryVariantKey) {
  AttentionSpec spec = parseOk(R"(variants:
  - name: train
    dtype: bf16
    head_dim_qk: 192
    head_dim_v: 128
    mask: window
    mask_align: top_left
    score_mod: softcap
    dropout: true
    varlen: True
    block_sparse: {block: 128, layout: runtime}
    passes: [fwd, bwd]
    deterministic: true
)");
  ASSERT_EQ(spec.variants.size(), 1u);
  const VariantSpec &v = spec.variants[0];
  EXPECT_EQ(v.headDimQK, 192);
  EXPECT_EQ(v.headDimV, 128);
  EXPECT_EQ(v.mask, Mask::Window);
  EXPECT_EQ(v.maskAlign, MaskAlign::TopLeft);
  EXPECT_EQ(v.scoreMod, ScoreMod::Softcap);
  EXPECT_TRUE(v.dropout);
  EXPECT_TRUE(v.varlen);
  ASSERT_TRUE(v.blockSparse.has_value());
  EXPECT_EQ(v.blockSparse->block, 128);
  EXPECT_EQ(v.blockSparse->layout, "runtime");
  EXPECT_FALSE(v.blockSparse->isStatic());
  EXPECT_EQ(v.passes, (std::vector<Pass>{Pass::Forward, Pass::Backward}));
  EXPECT_TRUE(v.deterministic);
  EXPECT_EQ(v.locOf("block_sparse.block").line, 11);
  EXPECT_EQ(v.locOf("passes.bwd").col, 19);
}

TEST(Spec, HeadDimsAreMultiplesOfEight) {
  AttentionSpec spec = parseOk("variants: [{name: a, dtype: bf16, head_dim: 72},\n"
                               "           {name: b, dtype: bf16, head_dim_qk: 40, head_dim_v: 256}]");
  EXPECT_EQ(spec.variants[0].headDimQK, 72);
  EXPECT_EQ(spec.variants[1].headDimQK, 40);
  EXPECT_EQ(spec.variants[1].headDimV, 256);
}

TEST(Spec, StaticLayouts) {
  AttentionSpec spec = parseOk(R"(variants:
  - {name: lg, dtype: bf16, head_dim: 64, block_sparse: {block: 64, layout: local_global, local: 2, global: 1, max_seqlen: 4096}}
  - {name: st, dtype: bf16, head_dim: 64, block_sparse: {block: 256, layout: strided, stride: 4, max_seqlen: 8192}}
)");
  const BlockSparseSpec &lg = *spec.variants[0].blockSparse;
  EXPECT_TRUE(lg.isStatic());
  EXPECT_EQ(lg.local, 2);
  EXPECT_EQ(lg.global, 1);
  EXPECT_EQ(lg.maxSeqlen, 4096);
  const BlockSparseSpec &st = *spec.variants[1].blockSparse;
  EXPECT_EQ(st.stride, 4);
  EXPECT_EQ(st.local, 1); // the diagonal block by default
}

TEST(Spec, LayoutFileIsRelativeToTheSpec) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("fagen-spec-test", dir));
  llvm::SmallString<128> layouts(dir);
  llvm::sys::path::append(layouts, "layouts");
  ASSERT_FALSE(llvm::sys::fs::create_directories(layouts));
  {
    std::error_code ec;
    llvm::raw_fd_ostream out((layouts + "/l.txt").str(), ec);
    out << "# a 2 x 3 layout\n1 0 1\n\n0,1,1   # trailing comment\n";
  }
  std::string specPath = (dir + "/s.yaml").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(specPath, ec);
    out << "variants: [{name: f, dtype: bf16, head_dim: 64, block_sparse: "
           "{block: 64, layout: file, file: layouts/l.txt}}]\n";
  }
  llvm::Expected<AttentionSpec> spec = parseSpecFile(specPath);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  const BlockSparseSpec &f = *spec->variants[0].blockSparse;
  EXPECT_EQ(f.file, "layouts/l.txt");
  EXPECT_EQ(f.fileRows, (std::vector<std::vector<uint8_t>>{{1, 0, 1}, {0, 1, 1}}));
  llvm::sys::fs::remove_directories(dir);
}

TEST(SpecError, MaskAlignWithoutAMask) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask_align: top_left}]\n"),
            "t.yaml:1:61: error: mask_align applies to the causal and window masks: add 'mask: "
            "causal' or 'mask: window', or remove mask_align");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: none, mask_align: "
                    "top_left}]\n"),
            "t.yaml:1:73: error: mask_align applies to the causal and window masks, and this "
            "variant's mask is none: remove mask_align");
  // A misspelled mask is reported once, not again through mask_align.
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: casual, mask_align: "
                    "top_left}]\n"),
            "t.yaml:1:55: error: mask must be one of none, causal, window: did you mean causal?");
}

TEST(SpecError, MaskAlignSuggestion) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: causal, mask_align: "
                    "top-left}]\n"),
            "t.yaml:1:75: error: mask_align must be one of bottom_right, top_left: did you mean "
            "top_left?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: causal, mask_align: "
                    "center}]\n"),
            "t.yaml:1:75: error: mask_align must be one of bottom_right, top_left, got 'center'");
}

TEST(SpecError, MaskHint) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, mask: causal_top_left}]\n"),
            "t.yaml:1:55: error: mask must be one of none, causal, window: write mask: causal "
            "with mask_align: top_left");
}

TEST(SpecError, ScoreMod) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, score_mod: softcapp}]\n"),
            "t.yaml:1:60: error: score_mod must be one of none, softcap, alibi: did you mean "
            "softcap?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, score_mod: tanh}]\n"),
            "t.yaml:1:60: error: score_mod must be one of none, softcap, alibi: did you mean "
            "softcap?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, score_mod: [alibi]}]\n"),
            "t.yaml:1:60: error: score_mod must be one of none, softcap, alibi, got a list");
}

TEST(SpecError, Booleans) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, dropout: 0.1}]\n"),
            "t.yaml:1:58: error: dropout must be true or false, got '0.1'");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, dropout: yes}]\n"),
            "t.yaml:1:58: error: dropout must be true or false: did you mean true?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, varlen: 'false'}]\n"),
            "t.yaml:1:57: error: varlen must be true or false, got the quoted string 'false': "
            "remove the quotes");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, varlen: {a: 1}}]\n"),
            "t.yaml:1:57: error: varlen must be true or false, got a mapping");
  EXPECT_EQ(errorOf("variants:\n  - name: a\n    dtype: bf16\n    head_dim: 64\n    varlen:\n"),
            "t.yaml:5:5: error: varlen must be true or false, got nothing");
}

TEST(SpecError, DeterministicNeedsTheBackward) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, deterministic: true}]\n"),
            "t.yaml:1:64: error: deterministic applies to the backward pass: add bwd to passes, "
            "or remove deterministic");
  // false is harmless.
  parseOk("variants: [{name: a, dtype: bf16, head_dim: 64, deterministic: false}]\n");
}

TEST(SpecError, BlockSparseShape) {
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: 128}]\n"),
            "t.yaml:1:63: error: block_sparse must be a mapping like {block: 128, layout: "
            "runtime}, got '128'");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: {layout: "
                    "runtime}}]\n"),
            "t.yaml:1:63: error: block_sparse needs 'block', the tokens per block (64, 128, 192 "
            "or 256)");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: {block: "
                    "32, layout: runtime}}]\n"),
            "t.yaml:1:71: error: block_sparse.block must be a multiple of 64 in 64..256, got 32");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: {block: "
                    "64}}]\n"),
            "t.yaml:1:63: error: block_sparse needs 'layout': runtime, local_global, strided or "
            "file");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: {block: 64, "
                    "layout: bigbird}}]\n"),
            "t.yaml:1:83: error: block_sparse.layout must be one of runtime, local_global, "
            "strided, file: did you mean local_global?");
  EXPECT_EQ(errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: {block: 64, "
                    "layout: runtime, strde: 2}}]\n"),
            "t.yaml:1:92: error: unknown key 'strde': did you mean 'stride'?");
}

TEST(SpecError, BlockSparseArguments) {
  auto sparse = [](const std::string &mapping) {
    return errorOf("variants: [{name: a, dtype: bf16, head_dim: 64, block_sparse: " + mapping +
                   "}]\n");
  };
  EXPECT_EQ(sparse("{block: 64, layout: runtime, max_seqlen: 4096}"),
            "t.yaml:1:92: error: block_sparse.max_seqlen applies to the local_global and strided "
            "layouts (a file layout's size is its rows and columns), not runtime: remove it");
  EXPECT_EQ(sparse("{block: 64, layout: strided, global: 1, stride: 2, max_seqlen: 64}"),
            "t.yaml:1:92: error: block_sparse.global applies to the local_global layout, not "
            "strided: remove it");
  EXPECT_EQ(sparse("{block: 64, layout: local_global, local: 1, file: x.txt, max_seqlen: 64}"),
            "t.yaml:1:107: error: block_sparse.file applies to the file layout, not local_global: "
            "remove it");
  EXPECT_EQ(sparse("{block: 64, layout: local_global, max_seqlen: 64}"),
            "t.yaml:1:63: error: block_sparse layout local_global needs 'local', the blocks each "
            "block sees on either side of the diagonal, itself included (at least 1)");
  EXPECT_EQ(sparse("{block: 64, layout: local_global, local: 1, global: -1, max_seqlen: 64}"),
            "t.yaml:1:115: error: block_sparse.global must be at least 0, got -1");
  EXPECT_EQ(sparse("{block: 64, layout: strided, max_seqlen: 64}"),
            "t.yaml:1:63: error: block_sparse layout strided needs 'stride', the distance in "
            "blocks between the diagonals that are computed (at least 1)");
  EXPECT_EQ(sparse("{block: 64, layout: strided, stride: 0, max_seqlen: 64}"),
            "t.yaml:1:100: error: block_sparse.stride must be at least 1, got 0");
  EXPECT_EQ(sparse("{block: 64, layout: strided, stride: 2}"),
            "t.yaml:1:63: error: block_sparse layout strided needs 'max_seqlen', the longest "
            "sequence the table must cover, in tokens");
  EXPECT_EQ(sparse("{block: 64, layout: strided, stride: 2, max_seqlen: 40000}"),
            "t.yaml:1:115: error: block_sparse.max_seqlen 40000 at block 64 makes a 625 x 625 "
            "block table; at most 512 x 512 fit: raise block or lower max_seqlen");
  EXPECT_EQ(sparse("{block: 64, layout: file}"),
            "t.yaml:1:63: error: block_sparse layout file needs 'file', the path of a file of 0/1 "
            "rows, relative to the spec");
  EXPECT_EQ(sparse("{block: 64, layout: file, file: [a]}"),
            "t.yaml:1:95: error: block_sparse.file must be a path like layout.txt, got a list");
}

TEST(SpecError, LayoutFileContents) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("fagen-spec-test", dir));
  auto write = [&](const std::string &name, const std::string &text) {
    std::error_code ec;
    llvm::raw_fd_ostream out((dir + "/" + name).str(), ec);
    out << text;
  };
  auto errorWith = [&](const std::string &layout) {
    write("l.txt", layout);
    write("s.yaml", "variants: [{name: f, dtype: bf16, head_dim: 64, block_sparse: "
                    "{block: 64, layout: file, file: l.txt}}]\n");
    llvm::Expected<AttentionSpec> spec = parseSpecFile((dir + "/s.yaml").str());
    return spec ? std::string() : llvm::toString(spec.takeError());
  };
  std::string layout = (dir + "/l.txt").str(), specFile = (dir + "/s.yaml").str();
  EXPECT_EQ(errorWith("1 0\n1 x\n"),
            layout + ":2:3: error: a block layout holds 0 (skipped) and 1 (computed) per block, "
                     "got 'x'");
  EXPECT_EQ(errorWith("# c\n1 0 0\n1 1\n"),
            layout + ":3:1: error: this row has 2 blocks and the first row (line 2) 3: every row "
                     "needs the same number");
  EXPECT_EQ(errorWith("# nothing\n\n"),
            specFile + ":1:95: error: the block layout '" + layout +
                "' has no rows: write one line of 0/1 per block row");
  EXPECT_EQ(errorWith(std::string(513, '1') + "\n"),
            layout + ":1:1: error: a block layout has at most 512 rows and 512 columns: raise "
                     "the block size");
  write("s.yaml", "variants: [{name: f, dtype: bf16, head_dim: 64, block_sparse: "
                  "{block: 64, layout: file, file: /dev/zero}}]\n");
  llvm::Expected<AttentionSpec> device = parseSpecFile(specFile);
  ASSERT_FALSE(bool(device));
  EXPECT_EQ(llvm::toString(device.takeError()),
            specFile + ":1:95: error: the block layout '/dev/zero' is not a regular file");
  llvm::sys::fs::remove(layout);
  write("s.yaml", "variants: [{name: f, dtype: bf16, head_dim: 64, block_sparse: "
                  "{block: 64, layout: file, file: l.txt}}]\n");
  llvm::Expected<AttentionSpec> spec = parseSpecFile(specFile);
  ASSERT_FALSE(bool(spec));
  EXPECT_EQ(llvm::toString(spec.takeError()),
            specFile + ":1:95: error: cannot read the block layout '" + layout +
                "': No such file or directory (the path is relative to the spec's folder)");
  llvm::sys::fs::remove_directories(dir);
}
