//===- SpecParser.h - the spec parser's internals (private) -----------------===//
//
// The parser walks one YAML document and collects every diagnostic: SpecReader.cpp holds its
// diagnostics and the typed readers of keys (int, range, choice, name, list, bool, targets),
// SpecParse.cpp the spec's structure (top level, variants, semantics, block sparsity, heads,
// tiles, decode). Not included outside compiler/spec.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_SPEC_SPECPARSER_H
#define FAGEN_COMPILER_SPEC_SPECPARSER_H

#include "compiler/spec/Spec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fagen {
namespace spec {

using llvm::ArrayRef;
using llvm::StringRef;

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


/// `text` with control characters escaped (\n, \t, \xNN), so a diagnostic stays one line.
std::string printable(StringRef text);
/// User text quoted for a diagnostic: one line, and cut short when long.
std::string quoted(StringRef text);
std::string joinNames(ArrayRef<std::string> names, StringRef separator = ", ");

/// How a value reads in "X must be ..., got DESCRIPTION".
std::string describe(const YAML::Node &node);
bool isInteger(StringRef text);
/// Variant names are [a-z0-9_]+; spec names also allow A-Z and '-'.
bool isNameChar(char c, bool allowUpperAndDash);
/// `text` with every character outside the name charset turned into '_', lowercased for
/// variant names; trimmed of leading and trailing '_'.
std::string sanitizeName(StringRef text, bool allowUpperAndDash);
/// "first at line 3", or "first at column 12" when `first` is on the line of `here`.
std::string firstAt(const SourceLoc &first, const SourceLoc &here);
/// yaml-cpp's messages for a tab in indentation ("illegal block entry") do not say so.
std::string tabHint(StringRef text, const YAML::Mark &mark);

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
  void parseDecode(const Entry &entry, VariantSpec &variant);
  void parseKvCache(const Entries &entries, VariantSpec &variant);
  void checkUniqueNames(const AttentionSpec &spec);

  std::string file;
  std::vector<std::string> layoutFiles; ///< block layout files read, as opened
  /// In walk order; reported sorted by position.
  std::vector<std::pair<SourceLoc, std::string>> diagnostics;
};

} // namespace spec
} // namespace fagen

#endif // FAGEN_COMPILER_SPEC_SPECPARSER_H
