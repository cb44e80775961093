//===- SpecParse.cpp - the spec parser: the structure of a spec ----------===//

#include "compiler/spec/SpecParser.h"
#include "templates/abi/decode_params.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

using namespace fagen;
using llvm::ArrayRef;
using llvm::StringRef;
using namespace fagen::spec;

//===----------------------------------------------------------------------===//
// The spec's structure
//===----------------------------------------------------------------------===//

namespace {
/// Records where each document of a YAML stream starts.
class DocumentStarts : public YAML::EventHandler {
public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark &mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark &, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark &, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark &, const std::string &, YAML::anchor_t,
                const std::string &) override {}
  void OnSequenceStart(const YAML::Mark &, const std::string &, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark &, const std::string &, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
} // namespace

llvm::Expected<YAML::Node> SpecParser::loadDocument(const std::string &text) {
  // yaml-cpp 0.7's LoadAll never returns on some inputs (a stray ',' at the top level gives
  // empty documents forever, none consuming it; found by tests/fuzz). So documents are
  // counted here, stopping when one starts where the previous did, and only the first is
  // loaded.
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentStarts documents;
    while (documents.starts.size() < 3 && parser.HandleNextDocument(documents)) {
      const std::vector<YAML::Mark> &starts = documents.starts;
      if (starts.size() >= 2 && starts.back().pos == starts[starts.size() - 2].pos) {
        size_t pos = std::min<size_t>(std::max(starts.back().pos, 0), text.size());
        return makeSpecError(locOf(starts.back()),
                             "invalid YAML: unexpected " + quoted(StringRef(text).substr(pos, 1)));
      }
    }
    if (documents.starts.size() > 1)
      return makeSpecError(locOf(documents.starts[1]),
                           "a spec is one YAML document: remove the '---' and what follows, or "
                           "split it into several spec files");
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion &e) {
    return makeSpecError(locOf(e.mark),
                         "invalid YAML: nested too deeply: the YAML reader stops at its depth "
                         "limit of " + std::to_string(e.depth()) +
                         " levels (a spec nests a few levels: variants, a variant, its keys)");
  } catch (const YAML::ParserException &e) {
    return makeSpecError(locOf(e.mark),
                         "invalid YAML: " + printable(e.msg) + tabHint(text, e.mark));
  } catch (const std::exception &e) {
    return makeSpecError(SourceLoc{file, 1, 1}, "invalid YAML: " + printable(e.what()));
  }
}

llvm::Expected<AttentionSpec> SpecParser::parse(const std::string &text) {
  llvm::Expected<YAML::Node> root = loadDocument(text);
  if (!root)
    return root.takeError();
  if (root->IsNull())
    return makeSpecError(
        SourceLoc{file, 1, 1},
        "the spec is empty: it needs at least a 'variants' list (see docs/spec.md)");
  AttentionSpec spec;
  spec.file = file;
  try {
    parseTop(*root, spec);
  } catch (const std::exception &e) {
    // The walk only reads nodes whose type it checked; this is a backstop, not a path.
    error(SourceLoc{file, 1, 1}, "internal error while reading the spec: " + printable(e.what()));
  }
  if (!diagnostics.empty())
    return takeErrors();
  spec.inputFiles = layoutFiles;
  return spec;
}

void SpecParser::parseTop(const YAML::Node &root, AttentionSpec &spec) {
  spec.loc = locOf(root);
  if (!root.IsMap()) {
    error(spec.loc, "the spec must be a mapping with a 'variants' list, got " + describe(root));
    return;
  }
  Entries entries = readMapping(root, {"name", "targets", "variants"});
  for (const auto &[key, entry] : entries)
    spec.keyLocs[key] = entry.valueLoc;

  spec.name = sanitizeName(llvm::sys::path::stem(file), /*allowUpperAndDash=*/true);
  if (spec.name.empty())
    spec.name = "spec";
  if (auto it = entries.find("name"); it != entries.end())
    spec.name = readName(it->second, "spec name", /*allowUpperAndDash=*/true).value_or(spec.name);
  if (auto it = entries.find("targets"); it != entries.end())
    spec.targets = readTargets(it->second, spec.keyLocs);

  auto variants = entries.find("variants");
  if (variants == entries.end()) {
    if (!entries.has("variants"))
      error(spec.loc, "the spec needs a 'variants' list (see docs/spec.md)");
    return;
  }
  std::optional<YAML::Node> list =
      readList(variants->second, "variants", "[{name: prefill, dtype: bf16, head_dim: 128}]");
  if (!list)
    return;
  for (size_t i = 0; i < list->size(); ++i)
    parseVariant((*list)[i], i, spec);
  checkUniqueNames(spec);
}

void SpecParser::parseVariant(const YAML::Node &node, size_t index, AttentionSpec &spec) {
  SourceLoc loc = locOf(node);
  if (!node.IsMap()) {
    error(loc, "each variant must be a mapping like {name: prefill, dtype: bf16, head_dim: "
               "128}, got " +
                   describe(node));
    return;
  }
  static const std::vector<std::string> keys = {
      "name",   "dtype",   "head_dim",     "head_dim_qk",   "head_dim_v", "mask",
      "mask_align", "score_mod", "dropout", "varlen",     "block_sparse", "deterministic",
      "passes", "decode",  "kv_cache",     "page_size",     "heads",      "targets",
      "tile"};
  Entries entries = readMapping(node, keys);
  VariantSpec variant;
  variant.loc = loc;
  for (const auto &[key, entry] : entries)
    variant.keyLocs[key] = entry.valueLoc;

  std::string label = "variant #" + std::to_string(index + 1);
  if (auto it = entries.find("name"); it != entries.end()) {
    variant.name = readName(it->second, "variant name", /*allowUpperAndDash=*/false).value_or("");
    if (!variant.name.empty())
      label = "variant '" + variant.name + "'";
  } else if (!entries.has("name")) {
    error(loc, label + " is missing required key 'name'");
  }

  if (auto it = entries.find("dtype"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"bfloat16", "bf16"},
        {"float16", "fp16"},
        {"half", "fp16"},
        {"f16", "fp16"},
        {"fp32", "fp32 inputs are not supported (accumulation is always fp32)"},
        {"float32", "fp32 inputs are not supported (accumulation is always fp32)"},
        {"fp8", "fp8 is not supported yet"}};
    if (std::optional<std::string> dtype =
            readChoice(it->second, "dtype", spellings<DType>(), hints))
      variant.dtype = *fromText<DType>(*dtype);
  } else if (!entries.has("dtype")) {
    error(loc, label + " is missing required key 'dtype' (fp16 or bf16)");
  }

  parseHeadDims(entries, label, variant);

  parsePasses(entries, variant);
  parseSemantics(entries, variant);
  if (auto it = entries.find("heads"); it != entries.end())
    parseHeads(it->second, variant);
  if (auto it = entries.find("targets"); it != entries.end())
    variant.targets = readTargets(it->second, variant.keyLocs);
  if (auto it = entries.find("tile"); it != entries.end())
    parseTile(it->second, variant);
  if (auto it = entries.find("decode"); it != entries.end())
    parseDecode(it->second, variant);
  parseKvCache(entries, variant);

  spec.variants.push_back(std::move(variant));
}

void SpecParser::parseHeadDims(const Entries &entries, const std::string &label,
                               VariantSpec &variant) {
  auto one = entries.find("head_dim");
  auto qk = entries.find("head_dim_qk");
  auto v = entries.find("head_dim_v");
  auto readHeadDim = [&](const Entry &entry) {
    return readRange(entry, entry.key, 32, 256, 8).value_or(0);
  };
  if (one != entries.end()) {
    if (qk != entries.end() || v != entries.end()) {
      const Entry &extra = qk != entries.end() ? qk->second : v->second;
      error(extra.keyLoc, "use either head_dim or head_dim_qk and head_dim_v, not both");
      return;
    }
    variant.headDimQK = variant.headDimV = readHeadDim(one->second);
    variant.keyLocs["head_dim_qk"] = variant.keyLocs["head_dim_v"] = one->second.valueLoc;
    return;
  }
  if (qk == entries.end() && v == entries.end()) {
    if (!entries.has("head_dim") && !entries.has("head_dim_qk") && !entries.has("head_dim_v"))
      error(variant.loc, label + " is missing required key 'head_dim'");
    return;
  }
  if (qk == entries.end() || v == entries.end()) {
    const Entry &given = qk != entries.end() ? qk->second : v->second;
    std::string other = qk != entries.end() ? "head_dim_v" : "head_dim_qk";
    error(given.keyLoc,
          given.key + " needs " + other + " too (or use head_dim when they are equal)");
    return;
  }
  variant.keyLocs["head_dim"] = qk->second.valueLoc;
  variant.headDimQK = readHeadDim(qk->second);
  variant.headDimV = readHeadDim(v->second);
}

void SpecParser::parsePasses(const Entries &entries, VariantSpec &variant) {
  auto it = entries.find("passes");
  if (it == entries.end()) {
    variant.passes = {Pass::Forward};
    return;
  }
  std::optional<YAML::Node> list = readList(it->second, "passes", "[fwd]");
  if (!list)
    return;
  for (const YAML::Node &node : *list) {
    Entry item = itemEntry(node, it->second);
    if (!node.IsScalar()) {
      error(item.valueLoc, "passes must list pass names like fwd, got " + describe(node));
      continue;
    }
    const std::string &text = node.Scalar();
    std::optional<Pass> pass = fromText<Pass>(text);
    const bool decode = text == "decode"; // a forward kernel of its own, not a Pass
    if (!pass && !decode) {
      std::string lower = StringRef(text).lower();
      std::string meant = lower == "forward"    ? "fwd"
                          : lower == "backward" ? "bwd"
                                                : closestMatch(text, {"fwd", "bwd", "decode"});
      error(item.valueLoc, "unknown pass " + quoted(text) +
                               (meant.empty() ? ": the passes are fwd, bwd and decode"
                                              : ": did you mean " + meant + "?"));
      continue;
    }
    if (decode ? variant.decode.has_value() : llvm::is_contained(variant.passes, *pass)) {
      error(item.valueLoc, "pass " + text + " is listed twice: remove one of them");
      continue;
    }
    variant.keyLocs["passes." + text] = item.valueLoc;
    if (decode)
      variant.decode = DecodeSpec();
    else
      variant.passes.push_back(*pass);
  }
}

/// The attention semantics beyond the head dims: mask and its alignment, score mod, dropout,
/// varlen, block sparsity, and the backward's determinism.
void SpecParser::parseSemantics(const Entries &entries, VariantSpec &variant) {
  variant.mask = Mask::None;
  bool maskRead = true;
  if (auto it = entries.find("mask"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"full", "none"},          {"bidirectional", "none"}, {"no", "none"},
        {"sliding_window", "window"}, {"sliding", "window"}, {"local", "window"},
        {"swa", "window"},         {"causal_top_left", "write mask: causal with mask_align: top_left"},
        {"causal_lower_right", "causal"}};
    std::optional<std::string> mask = readChoice(it->second, "mask", spellings<Mask>(), hints);
    maskRead = mask.has_value();
    variant.mask = mask ? *fromText<Mask>(*mask) : Mask::None;
  }
  if (auto it = entries.find("mask_align"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"top-left", "top_left"},         {"topleft", "top_left"},
        {"upper_left", "top_left"},       {"bottom-right", "bottom_right"},
        {"bottomright", "bottom_right"},  {"lower_right", "bottom_right"}};
    std::optional<std::string> align =
        readChoice(it->second, "mask_align", spellings<MaskAlign>(), hints);
    if (align && maskRead && variant.mask == Mask::None)
      error(it->second.valueLoc,
            std::string("mask_align applies to the causal and window masks") +
                (entries.count("mask") ? ", and this variant's mask is none: remove mask_align"
                                       : ": add 'mask: causal' or 'mask: window', or remove "
                                         "mask_align"));
    variant.maskAlign = align ? *fromText<MaskAlign>(*align) : MaskAlign::BottomRight;
  }
  if (auto it = entries.find("score_mod"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"tanh", "softcap"},  {"soft_cap", "softcap"}, {"logit_softcap", "softcap"},
        {"cap", "softcap"},   {"identity", "none"},    {"bias", "alibi"},
        {"relative_position", "relative position biases other than ALiBi are not supported"}};
    std::optional<std::string> scoreMod =
        readChoice(it->second, "score_mod", spellings<ScoreMod>(), hints);
    variant.scoreMod = scoreMod ? *fromText<ScoreMod>(*scoreMod) : ScoreMod::None;
  }
  if (auto it = entries.find("dropout"); it != entries.end())
    variant.dropout = readBool(it->second, "dropout").value_or(false);
  if (auto it = entries.find("varlen"); it != entries.end())
    variant.varlen = readBool(it->second, "varlen").value_or(false);
  if (auto it = entries.find("block_sparse"); it != entries.end())
    parseBlockSparse(it->second, variant);
  if (auto it = entries.find("deterministic"); it != entries.end()) {
    std::optional<bool> deterministic = readBool(it->second, "deterministic");
    if (deterministic && *deterministic && !llvm::is_contained(variant.passes, Pass::Backward) &&
        (!variant.passes.empty() || variant.decode))
      error(it->second.valueLoc, "deterministic applies to the backward pass: add bwd to "
                                 "passes, or remove deterministic");
    variant.deterministic = deterministic.value_or(false);
  }
}

namespace {
/// A static layout's table holds at most this many blocks per side: 512 x 512 one-byte entries
/// in the generated source (16k tokens at block 64, 128k at block 256).
constexpr int kMaxLayoutBlocks = 512;
} // namespace

void SpecParser::parseBlockSparse(const Entry &entry, VariantSpec &variant) {
  if (!entry.value.IsMap()) {
    error(entry.valueLoc, "block_sparse must be a mapping like {block: 128, layout: runtime}, "
                          "got " +
                              describe(entry.value));
    return;
  }
  Entries keys = readMapping(entry.value, {"block", "layout", "local", "global", "stride",
                                          "file", "max_seqlen"});
  BlockSparseSpec sparse;
  for (const auto &[key, item] : keys)
    variant.keyLocs["block_sparse." + key] = item.valueLoc;
  bool ok = true;
  if (auto it = keys.find("block"); it != keys.end()) {
    sparse.block = readRange(it->second, "block_sparse.block", 64, 256, 64).value_or(0);
    ok &= sparse.block != 0;
  } else {
    if (!keys.has("block"))
      error(entry.valueLoc, "block_sparse needs 'block', the tokens per block (64, 128, 192 or "
                            "256)");
    ok = false;
  }
  static const std::vector<std::string> layouts = {"runtime", "local_global", "strided", "file"};
  auto layout = keys.find("layout");
  if (layout == keys.end()) {
    if (!keys.has("layout"))
      error(entry.valueLoc, "block_sparse needs 'layout': runtime, local_global, strided or file");
    return;
  }
  static const std::map<std::string, std::string> hints = {
      {"dynamic", "runtime"},     {"longformer", "local_global"}, {"bigbird", "local_global"},
      {"local", "local_global"},  {"global", "local_global"},     {"stride", "strided"},
      {"static", "the static layouts are local_global, strided and file"}};
  std::optional<std::string> name = readChoice(layout->second, "block_sparse.layout", layouts, hints);
  if (!name)
    return;
  sparse.layout = *name;

  ok &= readLayoutArguments(entry, keys, sparse);
  if (ok)
    variant.blockSparse = std::move(sparse);
}

/// The arguments of sparse.layout (local, global, stride, max_seqlen, file); an argument the
/// layout does not take is an error naming the layouts it belongs to. False after an error.
bool SpecParser::readLayoutArguments(const Entry &entry, const Entries &keys,
                                     BlockSparseSpec &sparse) {
  bool ok = true;
  // Which arguments each layout takes; the others are errors naming the layouts they belong to.
  static const std::map<std::string, std::vector<std::string>> arguments = {
      {"runtime", {}},
      {"local_global", {"local", "global", "max_seqlen"}},
      {"strided", {"stride", "local", "max_seqlen"}},
      {"file", {"file"}}};
  static const std::map<std::string, std::string> owners = {
      {"local", "the local_global and strided layouts"},
      {"global", "the local_global layout"},
      {"stride", "the strided layout"},
      {"file", "the file layout"},
      {"max_seqlen", "the local_global and strided layouts (a file layout's size is its rows "
                     "and columns)"}};
  const std::vector<std::string> &allowed = arguments.at(sparse.layout);
  for (const auto &[key, item] : keys) {
    if (key == "block" || key == "layout" || llvm::is_contained(allowed, key))
      continue;
    error(item.keyLoc, "block_sparse." + key + " applies to " + owners.at(key) + ", not " +
                           sparse.layout + ": remove it");
    ok = false;
  }
  auto require = [&](const std::string &key, const std::string &what) -> const Entry * {
    auto it = keys.find(key);
    if (it != keys.end())
      return &it->second;
    if (!keys.has(key))
      error(entry.valueLoc, "block_sparse layout " + sparse.layout + " needs '" + key + "', " +
                                what);
    ok = false;
    return nullptr;
  };
  auto optionalInt = [&](const std::string &key, int lo, int fallback) {
    auto it = keys.find(key);
    if (it == keys.end() || !llvm::is_contained(allowed, key))
      return fallback;
    std::optional<int> value = readRange(it->second, "block_sparse." + key, lo, INT_MAX, 1);
    ok &= value.has_value();
    return value.value_or(fallback);
  };
  if (sparse.layout == "local_global") {
    if (const Entry *local = require("local", "the blocks each block sees on either side of "
                                              "the diagonal, itself included (at least 1)")) {
      std::optional<int> value = readRange(*local, "block_sparse.local", 1, INT_MAX, 1);
      ok &= value.has_value();
      sparse.local = value.value_or(0);
    }
    sparse.global = optionalInt("global", 0, 0);
  } else if (sparse.layout == "strided") {
    if (const Entry *stride = require("stride", "the distance in blocks between the diagonals "
                                                "that are computed (at least 1)")) {
      std::optional<int> value = readRange(*stride, "block_sparse.stride", 1, INT_MAX, 1);
      ok &= value.has_value();
      sparse.stride = value.value_or(0);
    }
    sparse.local = optionalInt("local", 1, 1);
  }
  if (sparse.layout == "local_global" || sparse.layout == "strided")
    if (const Entry *maxSeqlen = require("max_seqlen", "the longest sequence the table must "
                                                       "cover, in tokens"))
      ok &= readMaxSeqlen(*maxSeqlen, sparse);
  if (sparse.layout == "file")
    if (const Entry *file = require("file", "the path of a file of 0/1 rows, relative to the spec"))
      readLayoutFile(*file, sparse);
  return ok;
}

/// max_seqlen of a pattern layout: its table (max_seqlen / block blocks a side) must fit.
bool SpecParser::readMaxSeqlen(const Entry &maxSeqlen, BlockSparseSpec &sparse) {
  std::optional<int> value = readRange(maxSeqlen, "block_sparse.max_seqlen", 1, INT_MAX, 1);
  sparse.maxSeqlen = value.value_or(0);
  if (!value || !sparse.block)
    return value.has_value();
  int64_t blocks = (int64_t(*value) + sparse.block - 1) / sparse.block;
  if (blocks <= kMaxLayoutBlocks)
    return true;
  error(maxSeqlen.valueLoc,
        llvm::formatv("block_sparse.max_seqlen {0} at block {1} makes a {2} x {2} block table; "
                      "at most {3} x {3} fit: raise block or lower max_seqlen",
                      *value, sparse.block, blocks, kMaxLayoutBlocks)
            .str());
  return false;
}



/// Reads a layout file: one row of blocks per line, '0' (skipped) or '1' (computed) per block,
/// spaces between them optional, '#' to the end of the line a comment, blank lines ignored.
void SpecParser::readLayoutFile(const Entry &entry, BlockSparseSpec &sparse) {
  if (!entry.value.IsScalar() || entry.value.Scalar().empty()) {
    error(entry.valueLoc, "block_sparse.file must be a path like layout.txt, got " +
                              describe(entry.value));
    return;
  }
  sparse.file = entry.value.Scalar();
  llvm::SmallString<256> path(sparse.file);
  if (!llvm::sys::path::is_absolute(path) && file != "<stdin>") {
    path = llvm::sys::path::parent_path(file);
    llvm::sys::path::append(path, sparse.file);
  }
  std::string pathText = path.str().str();
  // Only regular files of a sane size: a spec naming /dev/zero must not hang the compiler.
  constexpr uint64_t kMaxLayoutFileBytes = 4 << 20;
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(pathText, status) && !llvm::sys::fs::is_regular_file(status)) {
    error(entry.valueLoc, "the block layout '" + printable(pathText) + "' is not a regular file");
    return;
  }
  if (status.getSize() > kMaxLayoutFileBytes) {
    error(entry.valueLoc, "the block layout '" + printable(pathText) + "' is larger than 4 MB");
    return;
  }
  layoutFiles.push_back(pathText);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(pathText, /*IsText=*/true);
  if (!buffer) {
    error(entry.valueLoc, "cannot read the block layout '" + printable(pathText) + "': " +
                              buffer.getError().message() +
                              " (the path is relative to the spec's folder)");
    return;
  }
  llvm::SmallVector<StringRef, 0> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  size_t firstRowLine = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    StringRef line = lines[n].split('#').first.rtrim(" \t\r");
    if (line.trim().empty())
      continue;
    std::vector<uint8_t> row;
    for (size_t col = 0; col < line.size(); ++col) {
      char c = line[col];
      if (c == ' ' || c == '\t' || c == ',')
        continue;
      if (c != '0' && c != '1') {
        errorIn(entry.valueLoc, SourceLoc{pathText, int(n + 1), int(col + 1)},
              "a block layout holds 0 (skipped) and 1 (computed) per block, got " +
                  quoted(line.substr(col, 1)));
        return;
      }
      row.push_back(c == '1');
    }
    if (!sparse.fileRows.empty() && row.size() != sparse.fileRows.front().size()) {
      errorIn(entry.valueLoc, SourceLoc{pathText, int(n + 1), 1},
              llvm::formatv("this row has {0} blocks and the first row (line {1}) {2}: every row "
                          "needs the same number",
                          row.size(), firstRowLine + 1, sparse.fileRows.front().size())
                .str());
      return;
    }
    if (sparse.fileRows.empty())
      firstRowLine = n;
    if (row.size() > size_t(kMaxLayoutBlocks) || sparse.fileRows.size() == size_t(kMaxLayoutBlocks)) {
      errorIn(entry.valueLoc, SourceLoc{pathText, int(n + 1), 1},
              llvm::formatv("a block layout has at most {0} rows and {0} columns: raise the block "
                          "size",
                          kMaxLayoutBlocks)
                .str());
      return;
    }
    sparse.fileRows.push_back(std::move(row));
  }
  if (sparse.fileRows.empty())
    error(entry.valueLoc, "the block layout '" + printable(pathText) + "'" +
                              " has no rows: write one line of 0/1 per block row");
}

void SpecParser::parseHeads(const Entry &entry, VariantSpec &variant) {
  if (!entry.value.IsMap()) {
    error(entry.valueLoc,
          "heads must be a mapping like {q: 32, kv: 8}, got " + describe(entry.value));
    return;
  }
  Entries heads = readMapping(entry.value, {"q", "kv"});
  auto q = heads.find("q");
  if (q == heads.end()) {
    if (!heads.has("q"))
      error(entry.valueLoc, "heads needs 'q', the number of query heads");
    return;
  }
  variant.keyLocs["heads.q"] = q->second.valueLoc;
  std::optional<int> headsQ = readRange(q->second, "heads.q", 1, INT_MAX, 1);
  std::optional<int> headsKV = headsQ;
  auto kv = heads.find("kv");
  if (kv != heads.end()) {
    variant.keyLocs["heads.kv"] = kv->second.valueLoc;
    headsKV = readRange(kv->second, "heads.kv", 1, INT_MAX, 1);
  }
  if (!headsQ || !headsKV)
    return;
  if (*headsQ % *headsKV != 0) {
    error(kv->second.valueLoc, "heads.q (" + std::to_string(*headsQ) +
                                   ") must be a multiple of heads.kv (" + std::to_string(*headsKV) +
                                   ")");
    return;
  }
  variant.headsQ = *headsQ;
  variant.headsKV = *headsKV;
}

void SpecParser::parseTile(const Entry &entry, VariantSpec &variant) {
  if (!entry.value.IsMap()) {
    error(entry.valueLoc, "tile must be a mapping like {block_m: 128, block_n: 64, warps: 4, "
                          "stages: 2}, got " +
                              describe(entry.value));
    return;
  }
  Entries keys = readMapping(entry.value, {"block_m", "block_n", "warps", "stages", "template",
                                          "rescale_tau", "exp2_emu_percent", "exp2_poly_degree",
                                          "staged_epilogue"});
  TileOverride tile;
  tile.loc = entry.valueLoc;
  for (const auto &[key, item] : keys) {
    std::string what = "tile." + key;
    variant.keyLocs[what] = item.valueLoc;
    if (key == "block_m")
      tile.blockM = readRange(item, what, 16, 256, 16).value_or(0);
    else if (key == "block_n")
      tile.blockN = readRange(item, what, 16, 256, 16).value_or(0);
    else if (key == "stages")
      tile.stages = readRange(item, what, 1, 4, 1).value_or(0);
    else if (key == "rescale_tau")
      tile.rescaleTau = readRange(item, what, -1, 8, 1);
    else if (key == "exp2_emu_percent")
      tile.exp2EmuPercent = readRange(item, what, 0, 50, 1);
    else if (key == "exp2_poly_degree")
      tile.exp2PolyDegree = readRange(item, what, 3, 5, 1);
    else if (key == "staged_epilogue")
      tile.stagedEpilogue = readBool(item, what);
    else if (key == "template") {
      std::string templ = item.value.IsScalar() ? item.value.Scalar() : "";
      if (templ == "sm80" || templ == "sm90" || templ == "sm90ws")
        tile.templ = templ;
      else
        error(item.valueLoc, what + " must be sm80 (portable, mma.sync), sm90 (wgmma, cp.async, "
                                    "sm_90a) or sm90ws (wgmma, TMA, warp-specialized, sm_90a), "
                                    "got " + describe(item.value));
    } else if (std::optional<int> warps = readInt(item, what)) {
      if (*warps == 1 || *warps == 2 || *warps == 4 || *warps == 8 || *warps == 12)
        tile.warps = *warps;
      else
        error(item.valueLoc,
              what + " must be one of 1, 2, 4, 8, 12, got " + std::to_string(*warps));
    }
  }
  variant.tile = tile;
}

void SpecParser::parseDecode(const Entry &entry, VariantSpec &variant) {
  if (!entry.value.IsMap()) {
    error(entry.valueLoc, "decode must be a mapping like {q_tokens: 4}, got " +
                              describe(entry.value));
    return;
  }
  Entries keys = readMapping(entry.value, {"q_tokens"});
  if (!variant.decode) {
    error(entry.keyLoc, "decode configures the decode kernel: add decode to passes (e.g. "
                        "passes: [fwd, decode]), or remove decode");
    return;
  }
  if (auto it = keys.find("q_tokens"); it != keys.end()) {
    variant.keyLocs["decode.q_tokens"] = it->second.valueLoc;
    variant.decode->qTokens =
        readRange(it->second, "decode.q_tokens", 1, FAGEN_DECODE_MAX_Q_TOKENS, 1).value_or(1);
  }
}

/// `kv_cache: paged` and `page_size`: a paged KV cache, which the decode kernel serves (a
/// paged decode variant lists no other pass), and the varlen forward (chunked prefill).
void SpecParser::parseKvCache(const Entries &entries, VariantSpec &variant) {
  auto cache = entries.find("kv_cache");
  auto pageSize = entries.find("page_size");
  bool paged = false, cacheRead = true;
  if (cache != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"paged_attention", "paged"}, {"pages", "paged"},  {"blocked", "paged"},
        {"dense", "contiguous"},      {"linear", "contiguous"}};
    std::optional<std::string> kind =
        readChoice(cache->second, "kv_cache", {"contiguous", "paged"}, hints);
    paged = kind && *kind == "paged";
    cacheRead = kind.has_value();
  }
  if (pageSize != entries.end() && !paged) {
    if (cacheRead)
      error(pageSize->second.keyLoc, "page_size applies to a paged KV cache: add 'kv_cache: "
                                     "paged', or remove page_size");
    return;
  }
  if (!paged)
    return;
  if (pageSize == entries.end()) {
    error(cache->second.valueLoc,
          "kv_cache: paged needs page_size, the tokens of a page (16, 32, 64, 128 or 256)");
    return;
  }
  std::optional<int> tokens = readInt(pageSize->second, "page_size");
  if (!tokens)
    return;
  if (!FAGEN_PAGE_SIZE_VALID(*tokens)) {
    error(pageSize->second.valueLoc,
          "page_size must be a power of two in " + std::to_string(FAGEN_PAGE_SIZE_MIN) + ".." +
              std::to_string(FAGEN_PAGE_SIZE_MAX) + " (16, 32, 64, 128 or 256 tokens), got " +
              std::to_string(*tokens));
    return;
  }
  variant.pageSize = *tokens;
  if (variant.decode) {
    for (Pass pass : variant.passes)
      error(variant.locOf(std::string("passes.") + toText(pass)),
            std::string("pass ") + toText(pass) + " does not read a paged KV cache beside the "
            "decode kernel (a paged forward, chunked prefill, is a varlen variant of its own): "
            "list it in a variant of its own");
    return;
  }
  // Chunked prefill: the forward over varlen queries and the pages (templates/sm80/fwd_kernel.cuh
  // fwd_paged_kernel). What it has not been built and checked with is refused here.
  if (!variant.varlen) {
    error(cache->second.valueLoc,
          "kv_cache: paged is served by the decode kernel (passes: [decode]) or by a varlen "
          "forward, chunked prefill (varlen: true, passes: [fwd])");
    return;
  }
  for (Pass pass : variant.passes)
    if (pass != Pass::Forward)
      error(variant.locOf(std::string("passes.") + toText(pass)),
            std::string("pass ") + toText(pass) + " does not read a paged KV cache (the paged "
            "forward serves inference): list it in a variant of its own without kv_cache");
  auto refuse = [&](const char *key, const std::string &what) {
    error(variant.locOf(key), what + " is not served over a paged KV cache (the paged forward "
                                     "takes masks none and causal): list it in a variant of "
                                     "its own without kv_cache");
  };
  if (variant.dropout)
    refuse("dropout", "dropout");
  if (variant.blockSparse)
    refuse("block_sparse", "block_sparse");
  if (variant.scoreMod != ScoreMod::None)
    refuse("score_mod", std::string("score_mod ") + toText(variant.scoreMod));
  if (variant.mask == Mask::Window)
    refuse("mask", "mask window");
}

void SpecParser::checkUniqueNames(const AttentionSpec &spec) {
  std::map<std::string, SourceLoc> seen;
  for (const VariantSpec &variant : spec.variants) {
    if (variant.name.empty())
      continue;
    auto [first, inserted] = seen.try_emplace(variant.name, variant.locOf("name"));
    if (!inserted)
      error(variant.locOf("name"), "duplicate variant name '" + variant.name + "' (" +
                                       firstAt(first->second, variant.locOf("name")) +
                                       "): variant names must be unique");
  }
}

