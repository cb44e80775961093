//===- Spec.cpp - parse and validate an attention spec --------------------===//
//
// The YAML tree is walked by iterating every mapping rather than looking keys up with
// `node["key"]`: yaml-cpp silently accepts unknown and duplicate keys, and a lookup loses the
// position of what it found. Every diagnostic points at the key or value it is about and says
// how to fix it. yaml-cpp throws; nothing escapes this file except llvm::Error.
//
//===----------------------------------------------------------------------===//

#include "compiler/spec/Spec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

using namespace fagen;
using llvm::ArrayRef;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Diagnostics, archs and suggestions
//===----------------------------------------------------------------------===//

std::string fagen::formatDiagnostic(const SourceLoc &loc, const std::string &message) {
  std::string out = loc.file.empty() ? "<spec>" : loc.file;
  if (loc.line > 0) {
    out += ":" + std::to_string(loc.line);
    if (loc.col > 0)
      out += ":" + std::to_string(loc.col);
  }
  return out + ": error: " + message;
}

llvm::Error fagen::makeSpecError(const SourceLoc &loc, const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), formatDiagnostic(loc, message));
}

const SourceLoc &VariantSpec::locOf(const std::string &key) const {
  auto it = keyLocs.find(key);
  return it == keyLocs.end() ? loc : it->second;
}

const SourceLoc &AttentionSpec::locOf(const std::string &key) const {
  auto it = keyLocs.find(key);
  return it == keyLocs.end() ? loc : it->second;
}

const std::vector<std::string> &fagen::knownArchs() {
  static const std::vector<std::string> archs = {"sm_80",  "sm_86",  "sm_89",  "sm_90",
                                                 "sm_90a", "sm_100", "sm_100a"};
  return archs;
}

std::string fagen::closestMatch(const std::string &word,
                                const std::vector<std::string> &candidates) {
  // Two edits catch a typo or a swapped pair in a short word; longer words get a third of
  // their length. Candidates are few, so a bounded edit distance is cheap on any input.
  unsigned threshold = std::max<unsigned>(2, std::min<size_t>(word.size(), 64) / 3);
  std::string best;
  unsigned bestDistance = threshold + 1;
  for (const std::string &candidate : candidates) {
    unsigned distance = StringRef(word).edit_distance_insensitive(
        candidate, /*AllowReplacements=*/true, /*MaxEditDistance=*/threshold);
    // A distance as long as the word means nothing of it survived ("x" vs "q").
    if (distance >= std::max(word.size(), candidate.size()))
      continue;
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  return best;
}

/// `text` with control characters escaped (\n, \t, \xNN), so a diagnostic stays one line.
static std::string printable(StringRef text) {
  std::string out;
  for (char c : text) {
    unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (byte < 0x20 || byte == 0x7f)
      out += "\\x" + llvm::utohexstr(byte, /*LowerCase=*/true, /*Width=*/2);
    else
      out += c;
  }
  return out;
}

/// User text quoted for a diagnostic: one line, and cut short when long.
static std::string quoted(StringRef text) {
  constexpr size_t kMaxQuoted = 40;
  std::string out = "'" + printable(text.take_front(kMaxQuoted)) + "'";
  return text.size() > kMaxQuoted ? out + "..." : out;
}

static std::string joinNames(ArrayRef<std::string> names, StringRef separator = ", ") {
  return llvm::join(names.begin(), names.end(), separator);
}

/// Splits "sm_90a", "SM-90A", "90a", "9.0a", "compute_90a" into the number-and-suffix part
/// ("90a") and whether a virtual (compute_) arch was named. Returns "" when `text` does not
/// look like an arch at all.
static std::string archDigits(StringRef text, bool &isVirtual) {
  std::string lower = text.trim().lower();
  StringRef rest = lower;
  isVirtual = rest.consume_front("compute");
  if (!isVirtual)
    rest.consume_front("sm");
  if (!rest.consume_front("_"))
    rest.consume_front("-");
  StringRef number = rest.take_while(llvm::isDigit);
  StringRef suffix = rest.drop_front(number.size());
  // Compute-capability spelling: "9.0" -> "90", "10.0a" -> "100a".
  if (suffix.consume_front(".")) {
    StringRef minor = suffix.take_while(llvm::isDigit);
    if (minor.size() != 1)
      return "";
    suffix = suffix.drop_front(1);
    return number.empty() ? "" : (number + minor + suffix).str();
  }
  if (number.empty() || (!suffix.empty() && suffix != "a" && suffix != "f"))
    return "";
  return (number + suffix).str();
}

llvm::Expected<std::string> fagen::canonicalArch(const std::string &text) {
  bool isVirtual = false;
  std::string digits = archDigits(text, isVirtual);
  std::string candidate = digits.empty() ? StringRef(text).trim().lower() : "sm_" + digits;
  const std::vector<std::string> &archs = knownArchs();
  bool known = std::find(archs.begin(), archs.end(), candidate) != archs.end();
  if (known && !isVirtual)
    return candidate;
  std::string message;
  if (known) {
    message = "arch " + quoted(text) +
              " is a virtual (PTX) arch; targets are real GPU archs: use " + candidate;
  } else {
    message = "unknown arch " + quoted(text);
    std::string suggestion = closestMatch(candidate, archs);
    if (!suggestion.empty())
      message += ": did you mean " + suggestion + "?";
    message += " (known archs: " + joinNames(archs) + ")";
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// The parser
//===----------------------------------------------------------------------===//

namespace {

/// Past this many errors the rest are usually consequences of the first ones.
constexpr size_t kMaxErrors = 20;
/// Names end up in kernel symbol and file names.
constexpr size_t kMaxNameLength = 64;

/// One `key: value` pair of a mapping, or one item of a list (empty key).
struct Entry {
  std::string key;
  YAML::Node value;
  SourceLoc keyLoc;
  SourceLoc valueLoc; ///< the key's location when the value is empty (yaml-cpp has no mark)
};

/// The known keys of a mapping, each at its first occurrence.
struct Entries : std::map<std::string, Entry> {
  /// Known keys that an unknown key was reported as a misspelling of: a missing-key error
  /// for them would only repeat the "did you mean".
  std::set<std::string> misspelled;
  bool has(const std::string &key) const { return count(key) || misspelled.count(key); }
};

/// How a value reads in "X must be ..., got DESCRIPTION".
std::string describe(const YAML::Node &node) {
  if (node.IsSequence())
    return "a list";
  if (node.IsMap())
    return "a mapping";
  if (!node.IsScalar())
    return "nothing";
  return quoted(node.Scalar());
}

bool isInteger(StringRef text) {
  text.consume_front("-") || text.consume_front("+");
  return !text.empty() && llvm::all_of(text, llvm::isDigit);
}

/// Variant names are [a-z0-9_]+; spec names also allow A-Z and '-'.
bool isNameChar(char c, bool allowUpperAndDash) {
  return llvm::isDigit(c) || (c >= 'a' && c <= 'z') || c == '_' ||
         (allowUpperAndDash && ((c >= 'A' && c <= 'Z') || c == '-'));
}

/// `text` with every character outside the name charset turned into '_', lowercased for
/// variant names; trimmed of leading and trailing '_'.
std::string sanitizeName(StringRef text, bool allowUpperAndDash) {
  std::string out;
  for (char c : text) {
    char lowered = allowUpperAndDash ? c : llvm::toLower(c);
    out += isNameChar(lowered, allowUpperAndDash) ? lowered : '_';
  }
  return StringRef(out).trim('_').take_front(kMaxNameLength).str();
}

/// "first at line 3", or "first at column 12" when `first` is on the line of `here`.
std::string firstAt(const SourceLoc &first, const SourceLoc &here) {
  if (first.line == here.line)
    return "first at column " + std::to_string(first.col);
  return "first at line " + std::to_string(first.line);
}

/// yaml-cpp's messages for a tab in indentation ("illegal block entry") do not say so.
std::string tabHint(StringRef text, const YAML::Mark &mark) {
  llvm::SmallVector<StringRef, 0> lines;
  text.split(lines, '\n');
  if (mark.line < 0 || static_cast<size_t>(mark.line) >= lines.size())
    return "";
  StringRef indent = lines[mark.line].take_while([](char c) { return c == ' ' || c == '\t'; });
  return indent.contains('\t') ? " (YAML does not allow tabs in indentation)" : "";
}

/// Walks one spec document, collecting every diagnostic.
class SpecParser {
public:
  explicit SpecParser(std::string file) : file(std::move(file)) {}

  llvm::Expected<AttentionSpec> parse(const std::string &text);

private:
  /// The one YAML document in `text`, or a syntax error.
  llvm::Expected<YAML::Node> loadDocument(const std::string &text);
  SourceLoc locOf(const YAML::Mark &mark) const;
  SourceLoc locOf(const YAML::Node &node) const { return locOf(node.Mark()); }
  void error(const SourceLoc &loc, const std::string &message);
  /// An error in another file (a block layout), reported in the order of `specLoc`.
  void errorIn(const SourceLoc &specLoc, const SourceLoc &loc, const std::string &message);
  llvm::Error takeErrors();

  Entries readMapping(const YAML::Node &map, ArrayRef<std::string> keys);
  Entry itemEntry(const YAML::Node &item, const Entry &list) const;
  std::optional<int> readInt(const Entry &entry, const std::string &what);
  std::optional<int> readRange(const Entry &entry, const std::string &what, int lo, int hi,
                               int multipleOf);
  std::optional<std::string> readChoice(const Entry &entry, const std::string &what,
                                        const std::vector<std::string> &choices,
                                        const std::map<std::string, std::string> &hints);
  std::optional<std::string> readName(const Entry &entry, const std::string &what,
                                      bool allowUpperAndDash);
  std::optional<YAML::Node> readList(const Entry &entry, const std::string &what,
                                     const std::string &example);
  std::optional<bool> readBool(const Entry &entry, const std::string &what);
  std::vector<std::string> readTargets(const Entry &entry,
                                       std::map<std::string, SourceLoc> &keyLocs);

  void parseTop(const YAML::Node &root, AttentionSpec &spec);
  void parseVariant(const YAML::Node &node, size_t index, AttentionSpec &spec);
  void parseHeadDims(const Entries &entries, const std::string &label, VariantSpec &variant);
  void parsePasses(const Entries &entries, VariantSpec &variant);
  void parseSemantics(const Entries &entries, VariantSpec &variant);
  void parseBlockSparse(const Entry &entry, VariantSpec &variant);
  bool readLayoutArguments(const Entry &entry, const Entries &keys, BlockSparseSpec &sparse);
  bool readMaxSeqlen(const Entry &maxSeqlen, BlockSparseSpec &sparse);
  void readLayoutFile(const Entry &entry, BlockSparseSpec &sparse);
  void parseHeads(const Entry &entry, VariantSpec &variant);
  void parseTile(const Entry &entry, VariantSpec &variant);
  void checkUniqueNames(const AttentionSpec &spec);

  std::string file;
  /// In walk order; reported sorted by position.
  std::vector<std::pair<SourceLoc, std::string>> diagnostics;
};

} // namespace

SourceLoc SpecParser::locOf(const YAML::Mark &mark) const {
  // yaml-cpp marks are 0-based, and -1 when unknown.
  return SourceLoc{file, std::max(mark.line, 0) + 1, std::max(mark.column, 0) + 1};
}

void SpecParser::error(const SourceLoc &loc, const std::string &message) {
  if (diagnostics.size() < kMaxErrors)
    diagnostics.emplace_back(loc, formatDiagnostic(loc, message));
}

void SpecParser::errorIn(const SourceLoc &specLoc, const SourceLoc &loc,
                         const std::string &message) {
  if (diagnostics.size() < kMaxErrors)
    diagnostics.emplace_back(specLoc, formatDiagnostic(loc, message));
}

llvm::Error SpecParser::takeErrors() {
  if (diagnostics.empty())
    return llvm::Error::success();
  std::stable_sort(diagnostics.begin(), diagnostics.end(), [](const auto &a, const auto &b) {
    return std::make_pair(a.first.line, a.first.col) < std::make_pair(b.first.line, b.first.col);
  });
  std::vector<std::string> lines;
  for (const auto &diagnostic : diagnostics)
    lines.push_back(diagnostic.second);
  std::string text = joinNames(lines, "\n");
  if (diagnostics.size() == kMaxErrors)
    text += "\n" + formatDiagnostic(SourceLoc{file}, "too many errors; stopping");
  diagnostics.clear();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

Entries SpecParser::readMapping(const YAML::Node &map, ArrayRef<std::string> keys) {
  Entries entries;
  for (auto it = map.begin(); it != map.end(); ++it) {
    YAML::Node key = it->first, value = it->second;
    SourceLoc keyLoc = locOf(key);
    if (!key.IsScalar()) {
      error(keyLoc, "keys must be plain words, got " + describe(key));
      continue;
    }
    const std::string &name = key.Scalar();
    if (!llvm::is_contained(keys, name)) {
      std::string suggestion = closestMatch(name, keys);
      if (!suggestion.empty())
        entries.misspelled.insert(suggestion);
      error(keyLoc, "unknown key " + quoted(name) +
                        (suggestion.empty() ? ": valid keys here are " + joinNames(keys)
                                            : ": did you mean '" + suggestion + "'?"));
      continue;
    }
    SourceLoc valueLoc = value.IsNull() ? keyLoc : locOf(value);
    auto [first, inserted] = entries.try_emplace(name, Entry{name, value, keyLoc, valueLoc});
    if (!inserted)
      error(keyLoc, "duplicate key " + quoted(name) + " (" + firstAt(first->second.keyLoc, keyLoc) +
                        "): remove one of them");
  }
  return entries;
}

Entry SpecParser::itemEntry(const YAML::Node &item, const Entry &list) const {
  SourceLoc loc = item.IsNull() ? list.valueLoc : locOf(item);
  return Entry{"", item, loc, loc};
}

std::optional<int> SpecParser::readInt(const Entry &entry, const std::string &what) {
  const YAML::Node &value = entry.value;
  if (!value.IsScalar()) {
    error(entry.valueLoc, what + " must be an integer, got " + describe(value));
    return std::nullopt;
  }
  StringRef text = value.Scalar();
  // yaml-cpp tags a quoted scalar "!": "128" is a string, as in any YAML loader.
  if (value.Tag() == "!") {
    error(entry.valueLoc, what + " must be an integer, got the quoted string " + quoted(text) +
                              (isInteger(text) ? ": remove the quotes" : ""));
    return std::nullopt;
  }
  if (!isInteger(text)) {
    error(entry.valueLoc, what + " must be an integer, got " + quoted(text));
    return std::nullopt;
  }
  int result = 0;
  if (text.drop_while([](char c) { return c == '+'; }).getAsInteger(10, result)) {
    error(entry.valueLoc, what + " is out of range, got " + quoted(text));
    return std::nullopt;
  }
  return result;
}

/// An integer in lo..hi and a multiple of `multipleOf`; the message states the rule.
std::optional<int> SpecParser::readRange(const Entry &entry, const std::string &what, int lo,
                                         int hi, int multipleOf) {
  std::optional<int> value = readInt(entry, what);
  if (!value)
    return std::nullopt;
  if (*value >= lo && *value <= hi && *value % multipleOf == 0)
    return value;
  std::string rule = hi == INT_MAX ? "at least " + std::to_string(lo)
                                   : "in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (multipleOf != 1)
    rule = "a multiple of " + std::to_string(multipleOf) + " " + rule;
  error(entry.valueLoc, what + " must be " + rule + ", got " + std::to_string(*value));
  return std::nullopt;
}

/// One of `choices`. `hints` maps other spellings (lowercase) to either a choice, suggested
/// as "did you mean", or to a sentence explaining why that value is not offered.
std::optional<std::string> SpecParser::readChoice(const Entry &entry, const std::string &what,
                                                  const std::vector<std::string> &choices,
                                                  const std::map<std::string, std::string> &hints) {
  const YAML::Node &value = entry.value;
  std::string expected = what + " must be one of " + joinNames(choices);
  if (!value.IsScalar()) {
    error(entry.valueLoc, expected + ", got " + describe(value));
    return std::nullopt;
  }
  const std::string &text = value.Scalar();
  if (llvm::is_contained(choices, text))
    return text;
  std::string suggestion = closestMatch(text, choices);
  auto hint = hints.find(StringRef(text).lower());
  if (hint != hints.end() && !llvm::is_contained(choices, hint->second)) {
    error(entry.valueLoc, expected + ": " + hint->second);
    return std::nullopt;
  }
  if (hint != hints.end())
    suggestion = hint->second;
  error(entry.valueLoc, expected + (suggestion.empty() ? ", got " + quoted(text)
                                                       : ": did you mean " + suggestion + "?"));
  return std::nullopt;
}

std::optional<std::string> SpecParser::readName(const Entry &entry, const std::string &what,
                                                bool allowUpperAndDash) {
  const char *charset = allowUpperAndDash ? "[A-Za-z0-9_-]+" : "[a-z0-9_]+";
  if (!entry.value.IsScalar()) {
    error(entry.valueLoc,
          what + " must be a word matching " + charset + ", got " + describe(entry.value));
    return std::nullopt;
  }
  const std::string &text = entry.value.Scalar();
  if (text.empty()) {
    error(entry.valueLoc, what + " must not be empty");
    return std::nullopt;
  }
  if (text.size() > kMaxNameLength) {
    error(entry.valueLoc, what + " must be at most " + std::to_string(kMaxNameLength) +
                              " characters long, got " + std::to_string(text.size()));
    return std::nullopt;
  }
  if (llvm::all_of(text, [&](char c) { return isNameChar(c, allowUpperAndDash); }))
    return text;
  std::string suggestion = sanitizeName(text, allowUpperAndDash);
  error(entry.valueLoc, what + " " + quoted(text) + " must match " + charset +
                            (suggestion.empty() ? "" : ": did you mean '" + suggestion + "'?"));
  return std::nullopt;
}

std::optional<YAML::Node> SpecParser::readList(const Entry &entry, const std::string &what,
                                               const std::string &example) {
  if (!entry.value.IsSequence()) {
    error(entry.valueLoc,
          what + " must be a list like " + example + ", got " + describe(entry.value));
    return std::nullopt;
  }
  if (entry.value.size() == 0) {
    error(entry.valueLoc, what + " must not be empty: write " + example + " or remove the key");
    return std::nullopt;
  }
  return entry.value;
}

std::optional<bool> SpecParser::readBool(const Entry &entry, const std::string &what) {
  const YAML::Node &value = entry.value;
  if (!value.IsScalar()) {
    error(entry.valueLoc, what + " must be true or false, got " + describe(value));
    return std::nullopt;
  }
  StringRef text = value.Scalar();
  bool isTrue = text == "true" || text == "True" || text == "TRUE";
  bool isFalse = text == "false" || text == "False" || text == "FALSE";
  if (value.Tag() == "!") {
    error(entry.valueLoc, what + " must be true or false, got the quoted string " + quoted(text) +
                              (isTrue || isFalse ? ": remove the quotes" : ""));
    return std::nullopt;
  }
  if (isTrue || isFalse)
    return isTrue;
  // YAML 1.1 spellings that yaml-cpp reads as strings in a YAML 1.2 world.
  std::string lower = text.lower();
  const char *meant = lower == "yes" || lower == "on" || lower == "1" || lower == "y" ? "true"
                      : lower == "no" || lower == "off" || lower == "0" || lower == "n"
                          ? "false"
                          : nullptr;
  error(entry.valueLoc, what + " must be true or false" +
                            (meant ? std::string(": did you mean ") + meant + "?"
                                   : ", got " + quoted(text)));
  return std::nullopt;
}

std::vector<std::string> SpecParser::readTargets(const Entry &entry,
                                                 std::map<std::string, SourceLoc> &keyLocs) {
  std::vector<std::string> archs;
  std::optional<YAML::Node> list = readList(entry, "targets", "[sm_80, sm_90a]");
  if (!list)
    return archs;
  for (const YAML::Node &node : *list) {
    Entry item = itemEntry(node, entry);
    if (!node.IsScalar()) {
      error(item.valueLoc, "targets must list archs like sm_90a, got " + describe(node));
      continue;
    }
    llvm::Expected<std::string> arch = canonicalArch(node.Scalar());
    if (!arch) {
      error(item.valueLoc, llvm::toString(arch.takeError()));
      continue;
    }
    auto [first, inserted] = keyLocs.try_emplace("targets." + *arch, item.valueLoc);
    if (!inserted) {
      error(item.valueLoc, "target " + *arch + " is listed twice (" +
                               firstAt(first->second, item.valueLoc) + "): remove one of them");
      continue;
    }
    archs.push_back(*arch);
  }
  return archs;
}

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
      "passes", "heads",   "targets",      "tile"};
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
    variant.dtype = readChoice(it->second, "dtype", {"fp16", "bf16"}, hints).value_or("");
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
    variant.passes = {"fwd"};
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
    if (text != "fwd" && text != "bwd") {
      std::string lower = StringRef(text).lower();
      std::string meant = lower == "forward"    ? "fwd"
                          : lower == "backward" ? "bwd"
                                                : closestMatch(text, {"fwd", "bwd"});
      error(item.valueLoc, "unknown pass " + quoted(text) +
                               (meant.empty() ? ": the passes are fwd and bwd"
                                              : ": did you mean " + meant + "?"));
      continue;
    }
    if (llvm::is_contained(variant.passes, text)) {
      error(item.valueLoc, "pass " + text + " is listed twice: remove one of them");
      continue;
    }
    variant.keyLocs["passes." + text] = item.valueLoc;
    variant.passes.push_back(text);
  }
}

/// The attention semantics beyond the head dims: mask and its alignment, score mod, dropout,
/// varlen, block sparsity, and the backward's determinism.
void SpecParser::parseSemantics(const Entries &entries, VariantSpec &variant) {
  variant.mask = "none";
  bool maskRead = true;
  if (auto it = entries.find("mask"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"full", "none"},          {"bidirectional", "none"}, {"no", "none"},
        {"sliding_window", "window"}, {"sliding", "window"}, {"local", "window"},
        {"swa", "window"},         {"causal_top_left", "write mask: causal with mask_align: top_left"},
        {"causal_lower_right", "causal"}};
    std::optional<std::string> mask =
        readChoice(it->second, "mask", {"none", "causal", "window"}, hints);
    maskRead = mask.has_value();
    variant.mask = mask.value_or("none");
  }
  if (auto it = entries.find("mask_align"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"top-left", "top_left"},         {"topleft", "top_left"},
        {"upper_left", "top_left"},       {"bottom-right", "bottom_right"},
        {"bottomright", "bottom_right"},  {"lower_right", "bottom_right"}};
    std::optional<std::string> align =
        readChoice(it->second, "mask_align", {"bottom_right", "top_left"}, hints);
    if (align && maskRead && variant.mask == "none")
      error(it->second.valueLoc,
            std::string("mask_align applies to the causal and window masks") +
                (entries.count("mask") ? ", and this variant's mask is none: remove mask_align"
                                       : ": add 'mask: causal' or 'mask: window', or remove "
                                         "mask_align"));
    variant.maskAlign = align.value_or("bottom_right");
  }
  if (auto it = entries.find("score_mod"); it != entries.end()) {
    static const std::map<std::string, std::string> hints = {
        {"tanh", "softcap"},  {"soft_cap", "softcap"}, {"logit_softcap", "softcap"},
        {"cap", "softcap"},   {"identity", "none"},    {"bias", "alibi"},
        {"relative_position", "relative position biases other than ALiBi are not supported"}};
    variant.scoreMod =
        readChoice(it->second, "score_mod", {"none", "softcap", "alibi"}, hints).value_or("none");
  }
  if (auto it = entries.find("dropout"); it != entries.end())
    variant.dropout = readBool(it->second, "dropout").value_or(false);
  if (auto it = entries.find("varlen"); it != entries.end())
    variant.varlen = readBool(it->second, "varlen").value_or(false);
  if (auto it = entries.find("block_sparse"); it != entries.end())
    parseBlockSparse(it->second, variant);
  if (auto it = entries.find("deterministic"); it != entries.end()) {
    std::optional<bool> deterministic = readBool(it->second, "deterministic");
    if (deterministic && *deterministic && !llvm::is_contained(variant.passes, "bwd") &&
        !variant.passes.empty())
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

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Expected<AttentionSpec> fagen::parseSpec(const std::string &text, const std::string &file) {
  return SpecParser(file).parse(text);
}

llvm::Expected<AttentionSpec> fagen::parseSpecFile(const std::string &path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  std::string file = path == "-" ? "<stdin>" : path;
  if (!buffer)
    return makeSpecError(SourceLoc{file}, "cannot read the spec: " + buffer.getError().message());
  return parseSpec((*buffer)->getBuffer().str(), file);
}
