//===- SpecReader.cpp - the spec parser: diagnostics and typed readers ---===//

#include "compiler/spec/SpecParser.h"

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
using namespace fagen::spec;

/// How a value reads in "X must be ..., got DESCRIPTION".
std::string spec::describe(const YAML::Node &node) {
  if (node.IsSequence())
    return "a list";
  if (node.IsMap())
    return "a mapping";
  if (!node.IsScalar())
    return "nothing";
  return quoted(node.Scalar());
}

bool spec::isInteger(StringRef text) {
  text.consume_front("-") || text.consume_front("+");
  return !text.empty() && llvm::all_of(text, llvm::isDigit);
}

/// Variant names are [a-z0-9_]+; spec names also allow A-Z and '-'.
bool spec::isNameChar(char c, bool allowUpperAndDash) {
  return llvm::isDigit(c) || (c >= 'a' && c <= 'z') || c == '_' ||
         (allowUpperAndDash && ((c >= 'A' && c <= 'Z') || c == '-'));
}

/// `text` with every character outside the name charset turned into '_', lowercased for
/// variant names; trimmed of leading and trailing '_'.
std::string spec::sanitizeName(StringRef text, bool allowUpperAndDash) {
  std::string out;
  for (char c : text) {
    char lowered = allowUpperAndDash ? c : llvm::toLower(c);
    out += isNameChar(lowered, allowUpperAndDash) ? lowered : '_';
  }
  return StringRef(out).trim('_').take_front(kMaxNameLength).str();
}

/// "first at line 3", or "first at column 12" when `first` is on the line of `here`.
std::string spec::firstAt(const SourceLoc &first, const SourceLoc &here) {
  if (first.line == here.line)
    return "first at column " + std::to_string(first.col);
  return "first at line " + std::to_string(first.line);
}

/// yaml-cpp's messages for a tab in indentation ("illegal block entry") do not say so.
std::string spec::tabHint(StringRef text, const YAML::Mark &mark) {
  llvm::SmallVector<StringRef, 0> lines;
  text.split(lines, '\n');
  if (mark.line < 0 || static_cast<size_t>(mark.line) >= lines.size())
    return "";
  StringRef indent = lines[mark.line].take_while([](char c) { return c == ' ' || c == '\t'; });
  return indent.contains('\t') ? " (YAML does not allow tabs in indentation)" : "";
}


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

