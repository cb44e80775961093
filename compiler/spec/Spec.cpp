//===- Spec.cpp - parse and validate an attention spec --------------------===//
//
// The YAML tree is walked by iterating every mapping rather than looking keys up with
// `node["key"]`: yaml-cpp silently accepts unknown and duplicate keys, and a lookup loses the
// position of what it found. Every diagnostic points at the key or value it is about and says
// how to fix it. yaml-cpp throws; nothing escapes this file except llvm::Error.
//
//===----------------------------------------------------------------------===//

#include "compiler/spec/SpecParser.h"

#include "core/FileIO.h"

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

Variant VariantSpec::kernelVariant(Pass pass) const {
  Variant k;
  k.pass = pass;
  k.dtype = dtype;
  k.headDimQK = headDimQK;
  k.headDimV = headDimV;
  k.mask = mask;
  k.maskAlign = mask == Mask::None ? MaskAlign::BottomRight : maskAlign;
  k.scoreMod = scoreMod;
  k.dropout = dropout;
  k.varlen = varlen;
  if (blockSparse) {
    k.sparsity = blockSparse->isStatic() ? Sparsity::Static : Sparsity::Runtime;
    k.sparseBlock = blockSparse->block;
  }
  k.deterministic = pass == Pass::Backward && deterministic;
  k.pageSize = pageSize;
  return k;
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
std::string spec::printable(StringRef text) {
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
std::string spec::quoted(StringRef text) {
  constexpr size_t kMaxQuoted = 40;
  std::string out = "'" + printable(text.take_front(kMaxQuoted)) + "'";
  return text.size() > kMaxQuoted ? out + "..." : out;
}

std::string spec::joinNames(ArrayRef<std::string> names, StringRef separator) {
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
// Entry points
//===----------------------------------------------------------------------===//

llvm::Expected<AttentionSpec> fagen::parseSpec(const std::string &text, const std::string &file) {
  return SpecParser(file).parse(text);
}

llvm::Expected<AttentionSpec> fagen::parseSpecFile(const std::string &path) {
  std::string text, error;
  std::string file = path == "-" ? "<stdin>" : path;
  if (!readFileBounded(path, kMaxSpecBytes, "the spec", text, error))
    return makeSpecError(SourceLoc{file}, error);
  llvm::Expected<AttentionSpec> spec = parseSpec(text, file);
  if (spec && path != "-")
    spec->inputFiles.insert(spec->inputFiles.begin(), path);
  return spec;
}
