//===- Bundle.cpp - the bundle file: writer and validating reader ---------===//
//
// Layout (little-endian; docs/bundle-format.md is the reference):
//
//   0   8  magic "FAGENBND"
//   8   4  format version (kBundleFormatVersion)
//   12  4  section count N (>= 1)
//   16  8  header checksum: FNV-1a 64 of bytes [0, 16) followed by the section table
//   24 32N section table: {u32 kind, u32 reserved = 0, u64 offset, u64 size, u64 checksum}
//   ...    sections, each at the first 16-byte boundary after the previous one, zero padding
//
// Section 0 is the text manifest (kind 1); sections 1..N-1 are cubins (kind 2), cubin i in
// section i + 1. The file ends where the last section ends. The reader accepts only this
// canonical encoding, so parse followed by serialize gives back the same bytes.
//
//===----------------------------------------------------------------------===//
#include "compiler/bundle/Bundle.h"
#include "templates/abi/decode_params.h"
#include "templates/common/decode_split.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <tuple>

namespace fagen {
namespace {

constexpr char kMagic[8] = {'F', 'A', 'G', 'E', 'N', 'B', 'N', 'D'};
constexpr size_t kHeaderBytes = 24;
constexpr size_t kEntryBytes = 32;
constexpr size_t kAlign = 16;
constexpr uint32_t kKindManifest = 1;
constexpr uint32_t kKindCubin = 2;
/// A bundle with more cubins than this is certainly not one fagen wrote.
constexpr uint64_t kMaxSections = 1u << 16;

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
/// The fuzzer skips checksum comparison so that mutations reach the checks behind it.
constexpr bool kVerifyChecksums = false;
#else
constexpr bool kVerifyChecksums = true;
#endif

constexpr const char *kRebuild = "the file is corrupt; rebuild it";

uint64_t fnv1a(const uint8_t *data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void putU32(std::vector<uint8_t> &out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out[at + i] = uint8_t(v >> (8 * i));
}
void putU64(std::vector<uint8_t> &out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[at + i] = uint8_t(v >> (8 * i));
}
uint32_t getU32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
uint64_t getU64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

const char *kindName(uint32_t kind) {
  switch (kind) {
  case kKindManifest:
    return "manifest";
  case kKindCubin:
    return "cubin";
  default:
    return "unknown";
  }
}

uint64_t headerChecksum(const uint8_t *file, size_t sectionCount) {
  uint64_t h = fnv1a(file, 16);
  return fnv1a(file + kHeaderBytes, sectionCount * kEntryBytes, h);
}

//===--- Manifest text ----------------------------------------------------===//
//
// One record per line: a record type ("bundle", "kernel") and space-separated key=value pairs
// in sorted key order. Values are percent-encoded: a byte that is not printable ASCII, a space,
// '%' or '=' is written as %XX (upper-case hex); every other byte is written as itself.

bool isPlainByte(unsigned char c) { return c > ' ' && c < 0x7f && c != '%' && c != '='; }

std::string encodeValue(const std::string &value) {
  static const char *kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (isPlainByte(c)) {
      out += char(c);
      continue;
    }
    out += '%';
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// Decodes a value; refuses encodings the writer would not produce.
bool decodeValue(const std::string &text, std::string &out, std::string &why) {
  out.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    if (c != '%') {
      if (!isPlainByte(c)) {
        why = "byte 0x" + std::string(1, "0123456789ABCDEF"[c >> 4]) +
              std::string(1, "0123456789ABCDEF"[c & 15]) + " must be percent-encoded";
        return false;
      }
      out += char(c);
      continue;
    }
    if (i + 2 >= text.size()) {
      why = "'%' at the end of the value is not followed by two hex digits";
      return false;
    }
    int hi = hexDigit(text[i + 1]), lo = hexDigit(text[i + 2]);
    if (hi < 0 || lo < 0) {
      why = "'%' is not followed by two upper-case hex digits";
      return false;
    }
    unsigned char decoded = uint8_t(hi * 16 + lo);
    if (isPlainByte(decoded)) {
      why = "'%" + text.substr(i + 1, 2) + "' encodes a byte that must be written as itself";
      return false;
    }
    out += char(decoded);
    i += 2;
  }
  return true;
}

using Fields = std::map<std::string, std::string>;

std::string recordLine(const std::string &type, const Fields &fields) {
  std::string line = type;
  for (const auto &[key, value] : fields) // std::map: sorted keys
    line += " " + key + "=" + encodeValue(value);
  return line + "\n";
}

Fields kernelFields(const KernelRecord &k) {
  return {{"arch", k.arch},
          {"block_m", std::to_string(k.blockM)},
          {"block_n", std::to_string(k.blockN)},
          {"cubin", std::to_string(k.cubinSection)},
          {"decode_ctas_per_sm", std::to_string(k.decodeCtasPerSm)},
          {"decode_min_tiles", std::to_string(k.decodeMinTiles)},
          {"deterministic", std::to_string(int(k.deterministic))},
          {"dropout", std::to_string(int(k.dropout))},
          {"dtype", toText(k.dtype)},
          {"exp2_emu_percent", std::to_string(k.exp2EmuPercent)},
          {"exp2_poly_degree", std::to_string(k.exp2PolyDegree)},
          {"head_dim_qk", std::to_string(k.headDimQK)},
          {"head_dim_v", std::to_string(k.headDimV)},
          {"mask", toText(k.mask)},
          {"mask_align", toText(k.maskAlign)},
          {"name", k.name},
          {"page_size", std::to_string(k.pageSize)},
          {"params_version", std::to_string(k.paramsVersion)},
          {"pass", toText(k.pass)},
          {"persistent", std::to_string(int(k.persistent))},
          {"pre_post_threads", std::to_string(k.prePostThreads)},
          {"q_tokens", std::to_string(k.qTokens)},
          {"registers", std::to_string(k.registers)},
          {"rescale_tau", std::to_string(k.rescaleTau)},
          {"score_mod", toText(k.scoreMod)},
          {"seqlen_max", std::to_string(k.seqlenMax)},
          {"seqlen_min", std::to_string(k.seqlenMin)},
          {"smem_bytes", std::to_string(k.smemBytes)},
          {"sparse_block", std::to_string(k.sparseBlock)},
          {"sparse_cols", std::to_string(k.sparseCols)},
          {"sparse_hash", k.sparseHash},
          {"sparse_rows", std::to_string(k.sparseRows)},
          {"sparsity", toText(k.sparsity)},
          {"spill_bytes", std::to_string(k.spillBytes)},
          {"stages", std::to_string(k.stages)},
          {"template", k.templ},
          {"threads", std::to_string(k.threads)},
          {"tile_counter", std::to_string(int(k.tileCounter))},
          {"tma_store_o", std::to_string(int(k.tmaStoreO))},
          {"tuning", k.tuning},
          {"variant", k.variant},
          {"varlen", std::to_string(int(k.varlen))},
          {"warps", std::to_string(k.warps)}};
}

std::string joinArchs(const std::vector<std::string> &archs) {
  std::string out;
  for (const std::string &a : archs)
    out += (out.empty() ? "" : ",") + a;
  return out;
}

std::string manifestText(const Bundle &bundle) {
  std::string text = recordLine("bundle", {{"archs", joinArchs(bundle.archs)},
                                           {"fagen_version", bundle.fagenVersion},
                                           {"toolchain", bundle.toolchain}});
  for (const KernelRecord &k : bundle.kernels)
    text += recordLine("kernel", kernelFields(k));
  return text;
}

/// Reads the fields of one manifest record and reports what is wrong with it, if anything.
class RecordReader {
public:
  RecordReader(int line, std::string what, Fields fields)
      : line(line), what(std::move(what)), fields(std::move(fields)) {}

  bool str(const char *key, std::string &out, bool allowEmpty) {
    auto it = fields.find(key);
    if (it == fields.end())
      return fail(std::string("required key '") + key + "' is missing");
    if (!allowEmpty && it->second.empty())
      return fail(std::string("key '") + key + "' is empty");
    out = it->second;
    fields.erase(it);
    return true;
  }

  /// A canonical decimal integer in [lo, hi].
  bool integer(const char *key, int64_t lo, int64_t hi, int64_t &out) {
    std::string text;
    if (!str(key, text, false))
      return false;
    bool negative = text[0] == '-';
    std::string digits = negative ? text.substr(1) : text;
    bool canonical = !digits.empty() && digits.size() <= 18 &&
                     std::all_of(digits.begin(), digits.end(),
                                 [](char c) { return c >= '0' && c <= '9'; }) &&
                     (digits.size() == 1 || digits[0] != '0') && !(negative && digits == "0");
    if (!canonical)
      return fail(std::string("key '") + key + "' has value '" + text +
                  "', expected a decimal integer");
    int64_t v = std::stoll(digits);
    out = negative ? -v : v;
    if (out < lo || out > hi)
      return fail(std::string("key '") + key + "' is " + text + ", expected a value in [" +
                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return true;
  }

  bool integer(const char *key, int64_t lo, int64_t hi, int &out) {
    int64_t v = 0;
    if (!integer(key, lo, hi, v))
      return false;
    out = int(v);
    return true;
  }

  bool flag(const char *key, bool &out) {
    int v = 0;
    if (!integer(key, 0, 1, v))
      return false;
    out = v != 0;
    return true;
  }

  /// A string that is one of `allowed`.
  bool oneOf(const char *key, std::initializer_list<const char *> allowed, std::string &out) {
    if (!str(key, out, false))
      return false;
    std::string list;
    for (const char *a : allowed) {
      if (out == a)
        return true;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    return fail(std::string("key '") + key + "' is '" + out + "', expected one of " + list);
  }

  /// A value of E in its one spelling (core/Variant.h).
  template <class E> bool oneOf(const char *key, E &out) {
    std::string text;
    if (!str(key, text, false))
      return false;
    if (std::optional<E> v = fromText<E>(text)) {
      out = *v;
      return true;
    }
    std::string list;
    for (const std::string &a : spellings<E>())
      list += (list.empty() ? "" : ", ") + a;
    return fail(std::string("key '") + key + "' is '" + text + "', expected one of " + list);
  }

  /// Every key must have been consumed.
  bool finish() {
    if (fields.empty())
      return true;
    return fail("unknown key '" + fields.begin()->first + "'");
  }

  bool fail(const std::string &why) {
    if (error.empty())
      error = "bundle manifest line " + std::to_string(line) + " (" + what + "): " + why +
              ": the manifest is malformed; rebuild the bundle with this fagen";
    return false;
  }

  std::string error;

private:
  int line;
  std::string what;
  Fields fields;
};

/// Splits "type k=v k=v" into its type and decoded fields, checking key order and syntax.
bool splitRecord(const std::string &lineText, int line, std::string &type, Fields &fields,
                 std::string &error) {
  auto fail = [&](const std::string &why) {
    error = "bundle manifest line " + std::to_string(line) + ": " + why +
            ": the manifest is malformed; rebuild the bundle with this fagen";
    return false;
  };
  fields.clear();
  size_t pos = lineText.find(' ');
  type = lineText.substr(0, pos);
  if (type.empty())
    return fail("expected a record type ('bundle' or 'kernel') at the start of the line");
  std::string previousKey;
  while (pos != std::string::npos) {
    size_t next = lineText.find(' ', pos + 1);
    std::string pair = lineText.substr(pos + 1, next == std::string::npos ? next : next - pos - 1);
    pos = next;
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("expected key=value, found '" + pair + "'");
    std::string key = pair.substr(0, eq);
    for (char c : key)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
        return fail("key '" + key + "' has a character outside [a-z0-9_]");
    if (!previousKey.empty() && key <= previousKey)
      return fail("key '" + key + "' " + (key == previousKey ? "appears twice" : "is out of order") +
                  " (keys are unique and sorted)");
    previousKey = key;
    std::string value, why;
    if (!decodeValue(pair.substr(eq + 1), value, why))
      return fail("value of key '" + key + "': " + why);
    fields[key] = value;
  }
  return true;
}

bool parseBundleRecord(int line, Fields fields, Bundle &out, std::string &error) {
  RecordReader r(line, "bundle", std::move(fields));
  std::string archs;
  bool ok = r.str("archs", archs, true) && r.str("fagen_version", out.fagenVersion, false) &&
            r.str("toolchain", out.toolchain, true) && r.finish();
  out.archs.clear();
  for (size_t start = 0; ok && start <= archs.size() && !archs.empty();) {
    size_t comma = std::min(archs.find(',', start), archs.size());
    std::string arch = archs.substr(start, comma - start);
    if (archComputeCapability(arch) < 0)
      ok = r.fail("arch '" + arch + "' in 'archs' is not an arch name like sm_80 or sm_90a");
    else if (!out.archs.empty() && arch <= out.archs.back())
      ok = r.fail("'archs' must be sorted and unique, found '" + archs + "'");
    out.archs.push_back(arch);
    start = comma + 1;
  }
  if (!ok)
    error = r.error;
  return ok;
}

constexpr int64_t kMaxSparseBlock = 1 << 16;  ///< tokens per block
constexpr int64_t kMaxSparseBlocks = 1 << 20; ///< rows or columns of a static layout

bool isHashText(const std::string &s) {
  return s.size() == 8 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

/// The rules between keys: what each pass and each kind of sparsity implies.
bool checkKernelConsistency(const KernelRecord &k, RecordReader &r) {
  auto n = [](int v) { return std::to_string(v); };
  if (k.isForward() && k.deterministic)
    return r.fail("deterministic is 1 on a fwd kernel; only bwd kernels have the mode");
  if (k.persistent && k.templ != "sm90ws")
    return r.fail("persistent is 1 on a kernel of template '" + k.templ +
                  "'; only sm90ws kernels walk work tiles");
  if (k.tileCounter && (k.templ != "sm90ws" || !k.isForward()))
    return r.fail("tile_counter is 1 on a " + std::string(toText(k.pass)) +
                  " kernel of template '" + k.templ +
                  "'; only sm90ws forward kernels take work tiles from a counter");
  if (k.tmaStoreO && (k.templ != "sm90ws" || !k.isForward() || k.varlen))
    return r.fail("tma_store_o is 1 on a " + std::string(k.varlen ? "varlen " : "") +
                  toText(k.pass) + " kernel of template '" + k.templ +
                  "'; only sm90ws forward kernels without varlen store O through TMA");
  if (isDecodeKernel(k)) {
    if (!k.isForward() || k.qTokens < 1 || k.qTokens > 16 || k.prePostThreads == 0)
      return r.fail("a kernel of template sm80decode must be a fwd kernel with q_tokens in "
                    "1..16 and pre_post_threads (of NAME_combine and NAME_merge) above 0, got "
                    "pass " + std::string(toText(k.pass)) + ", q_tokens " + n(k.qTokens) +
                    ", pre_post_threads " + n(k.prePostThreads));
    if (k.dropout || k.varlen || k.scoreMod == ScoreMod::Alibi || k.sparsity != Sparsity::None)
      return r.fail("a kernel of template sm80decode has no dropout, varlen, alibi or block "
                    "sparsity");
    if (k.pageSize != 0 && !FAGEN_PAGE_SIZE_VALID(k.pageSize))
      return r.fail("page_size is " + n(k.pageSize) + "; a paged decode kernel's pages are a "
                    "power of two in 16..256 tokens");
    if (k.decodeCtasPerSm == 0 || k.decodeMinTiles == 0)
      return r.fail("a kernel of template sm80decode needs its split rule: decode_ctas_per_sm "
                    "in 1.." + n(kDecodeMaxCtasPerSm) + " and decode_min_tiles in 1.." +
                    n(kDecodeMaxMinTiles) + ", got " + n(k.decodeCtasPerSm) + " and " +
                    n(k.decodeMinTiles));
  } else if (k.decodeCtasPerSm != 0 || k.decodeMinTiles != 0) {
    return r.fail("decode_ctas_per_sm and decode_min_tiles are " + n(k.decodeCtasPerSm) +
                  " and " + n(k.decodeMinTiles) + " on a kernel of template '" + k.templ +
                  "'; only sm80decode kernels have a split rule (expected 0 and 0)");
  } else if (k.pageSize != 0 && ((k.templ != "sm80" && k.templ != "sm90ws") || !k.isForward() ||
                                  !k.varlen || !FAGEN_PAGE_SIZE_VALID(k.pageSize))) {
    return r.fail("page_size is " + n(k.pageSize) + " on a " + toText(k.pass) +
                  " kernel of template '" + k.templ + "'" + (k.varlen ? "" : " without varlen") +
                  "; only sm80decode kernels and varlen sm80 and sm90ws fwd kernels (chunked prefill) read "
                  "a paged KV cache, of pages a power of two in 16..256 tokens");
  } else if (k.qTokens != 0) {
    return r.fail("q_tokens is " + n(k.qTokens) + " on a kernel of template '" + k.templ +
                  "'; only sm80decode kernels serve a number of query tokens");
  }
  if (k.isForward() && !isDecodeKernel(k) && k.prePostThreads != 0)
    return r.fail("pre_post_threads is " + n(k.prePostThreads) +
                  " on a fwd kernel, expected 0 (only bwd kernels have NAME_pre and NAME_post, "
                  "sm80decode kernels NAME_combine and NAME_merge)");
  if (k.isBackward() && k.prePostThreads == 0)
    return r.fail("pre_post_threads is 0 on a bwd kernel, expected the threads of NAME_pre "
                  "and NAME_post (1 to 1024)");
  if (k.sparsity == Sparsity::None) {
    if (k.sparseBlock != 0 || k.sparseRows != 0 || k.sparseCols != 0 || !k.sparseHash.empty())
      return r.fail("sparsity is none but sparse_block, sparse_rows, sparse_cols or "
                    "sparse_hash is set (expected 0, 0, 0 and empty)");
    return true;
  }
  if (k.sparseBlock == 0)
    return r.fail("sparsity is " + std::string(toText(k.sparsity)) + " but sparse_block is 0");
  if (k.sparseBlock % k.blockM != 0 || k.sparseBlock % k.blockN != 0)
    return r.fail("sparse_block " + n(k.sparseBlock) + " is not a multiple of the tile " +
                  n(k.blockM) + "x" + n(k.blockN) + " (the kernel's tiles must divide it)");
  if (k.sparsity == Sparsity::Runtime) {
    if (k.sparseRows != 0 || k.sparseCols != 0 || !k.sparseHash.empty())
      return r.fail("sparsity is runtime but sparse_rows, sparse_cols or sparse_hash is set "
                    "(a static layout's keys)");
    return true;
  }
  if (k.sparseRows == 0 || k.sparseCols == 0)
    return r.fail("sparsity is static but sparse_rows or sparse_cols is 0");
  if (!isHashText(k.sparseHash))
    return r.fail("sparse_hash '" + k.sparseHash + "' is not 8 lower-case hex digits");
  return true;
}

bool parseKernelRecord(int line, Fields fields, size_t cubinCount, Bundle &out,
                       std::string &error) {
  auto nameIt = fields.find("name");
  RecordReader r(line, nameIt == fields.end() ? "kernel" : "kernel " + nameIt->second,
                 std::move(fields));
  KernelRecord k;
  int64_t cubin = 0;
  constexpr int64_t kMaxSmem = 1 << 24;
  bool ok = (cubinCount > 0 || r.fail("the bundle has no cubin sections")) &&
            r.str("arch", k.arch, false) && r.integer("block_m", 1, 1024, k.blockM) &&
            r.integer("block_n", 1, 1024, k.blockN) &&
            r.integer("cubin", 0, int64_t(cubinCount) - 1, cubin) &&
            r.integer("decode_ctas_per_sm", 0, kDecodeMaxCtasPerSm, k.decodeCtasPerSm) &&
            r.integer("decode_min_tiles", 0, kDecodeMaxMinTiles, k.decodeMinTiles) &&
            r.flag("deterministic", k.deterministic) && r.flag("dropout", k.dropout) &&
            r.oneOf("dtype", k.dtype) && r.integer("exp2_emu_percent", 0, 100, k.exp2EmuPercent) &&
            r.integer("exp2_poly_degree", 1, 16, k.exp2PolyDegree) &&
            r.integer("head_dim_qk", 1, 1024, k.headDimQK) &&
            r.integer("head_dim_v", 1, 1024, k.headDimV) && r.oneOf("mask", k.mask) &&
            r.oneOf("mask_align", k.maskAlign) && r.str("name", k.name, false) &&
            r.integer("page_size", 0, 1 << 20, k.pageSize) &&
            r.integer("params_version", 1, INT32_MAX, k.paramsVersion) && r.oneOf("pass", k.pass) &&
            r.flag("persistent", k.persistent) &&
            r.integer("pre_post_threads", 0, 1024, k.prePostThreads) &&
            r.integer("q_tokens", 0, 1024, k.qTokens) &&
            r.integer("registers", -1, 255, k.registers) &&
            r.integer("rescale_tau", -1, 64, k.rescaleTau) && r.oneOf("score_mod", k.scoreMod) &&
            r.integer("seqlen_max", 0, kSeqlenUnbounded, k.seqlenMax) &&
            r.integer("seqlen_min", 0, kSeqlenUnbounded, k.seqlenMin) &&
            r.integer("smem_bytes", 0, kMaxSmem, k.smemBytes) &&
            r.integer("sparse_block", 0, kMaxSparseBlock, k.sparseBlock) &&
            r.integer("sparse_cols", 0, kMaxSparseBlocks, k.sparseCols) &&
            r.str("sparse_hash", k.sparseHash, true) &&
            r.integer("sparse_rows", 0, kMaxSparseBlocks, k.sparseRows) &&
            r.oneOf("sparsity", k.sparsity) &&
            r.integer("spill_bytes", -1, INT32_MAX, k.spillBytes) &&
            r.integer("stages", 1, 16, k.stages) && r.str("template", k.templ, true) &&
            r.integer("threads", 1, 1024, k.threads) && r.flag("tile_counter", k.tileCounter) &&
            r.flag("tma_store_o", k.tmaStoreO) && r.str("tuning", k.tuning, true) &&
            r.str("variant", k.variant, true) && r.flag("varlen", k.varlen) &&
            r.integer("warps", 1, 32, k.warps) && r.finish();
  if (ok && k.seqlenMin > k.seqlenMax)
    ok = r.fail("seqlen_min " + std::to_string(k.seqlenMin) + " is above seqlen_max " +
                std::to_string(k.seqlenMax));
  // The planner's head dims (compiler/plan: a multiple of 8 in 32..256); no template was
  // ever instantiated for another.
  for (auto [key, dim] : {std::pair<const char *, int>{"head_dim_qk", k.headDimQK},
                          {"head_dim_v", k.headDimV}})
    if (ok && (dim % 8 != 0 || dim < 32 || dim > 256))
      ok = r.fail(std::string(key) + " " + std::to_string(dim) +
                  " is impossible: fagen builds head dims that are multiples of 8 in 32..256");
  if (ok)
    ok = checkKernelConsistency(k, r);
  if (ok && archComputeCapability(k.arch) < 0)
    ok = r.fail("arch '" + k.arch + "' is not an arch name like sm_80 or sm_90a");
  if (ok && !std::binary_search(out.archs.begin(), out.archs.end(), k.arch))
    ok = r.fail("arch " + k.arch + " is not in the bundle's archs (" + joinArchs(out.archs) + ")");
  if (!ok) {
    error = r.error;
    return false;
  }
  k.cubinSection = uint32_t(cubin);
  out.kernels.push_back(std::move(k));
  return true;
}

/// Two records of one kernel (name, arch and seqlen range) would make the runtime's choice
/// depend on their order.
bool checkUniqueKernels(const Bundle &bundle, std::string &error) {
  using Key = std::tuple<const std::string *, const std::string *, int64_t, int64_t>;
  std::vector<Key> keys;
  keys.reserve(bundle.kernels.size());
  for (const KernelRecord &k : bundle.kernels)
    keys.emplace_back(&k.name, &k.arch, k.seqlenMin, k.seqlenMax);
  auto less = [](const Key &a, const Key &b) {
    return std::tie(*std::get<0>(a), *std::get<1>(a), std::get<2>(a), std::get<3>(a)) <
           std::tie(*std::get<0>(b), *std::get<1>(b), std::get<2>(b), std::get<3>(b));
  };
  std::sort(keys.begin(), keys.end(), less);
  for (size_t i = 1; i < keys.size(); ++i) {
    if (less(keys[i - 1], keys[i]))
      continue;
    auto [name, arch, lo, hi] = keys[i];
    error = "bundle manifest: kernel " + *name + " (" + *arch + ", seqlen " +
            std::to_string(lo) + ".." + std::to_string(hi) +
            ") is recorded twice: the manifest is malformed; rebuild the bundle with this fagen";
    return false;
  }
  return true;
}

bool parseManifest(const uint8_t *data, size_t size, size_t cubinCount, Bundle &out,
                   std::string &error) {
  if (size == 0 || data[size - 1] != '\n') {
    error = "bundle manifest does not end with a newline: the manifest is malformed; rebuild "
            "the bundle with this fagen";
    return false;
  }
  std::string text(reinterpret_cast<const char *>(data), size);
  size_t start = 0;
  int line = 0;
  bool sawBundle = false;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string lineText = text.substr(start, end - start);
    start = end + 1;
    ++line;
    std::string type;
    Fields fields;
    if (!splitRecord(lineText, line, type, fields, error))
      return false;
    if (line == 1 && type != "bundle") {
      error = "bundle manifest line 1: expected the 'bundle' record, found '" + type +
              "': the manifest is malformed; rebuild the bundle with this fagen";
      return false;
    }
    if (type == "bundle" && sawBundle) {
      error = "bundle manifest line " + std::to_string(line) +
              ": a second 'bundle' record: the manifest is malformed; rebuild the bundle with "
              "this fagen";
      return false;
    }
    if (type == "bundle") {
      sawBundle = true;
      if (!parseBundleRecord(line, std::move(fields), out, error))
        return false;
      continue;
    }
    if (type != "kernel") {
      error = "bundle manifest line " + std::to_string(line) + ": unknown record type '" + type +
              "', expected 'bundle' or 'kernel': the manifest is malformed; rebuild the "
              "bundle with this fagen";
      return false;
    }
    if (!parseKernelRecord(line, std::move(fields), cubinCount, out, error))
      return false;
  }
  return checkUniqueKernels(out, error);
}

std::string at(uint64_t byte) { return "byte " + std::to_string(byte); }

std::string sectionLabel(size_t index, uint32_t kind) {
  return "section " + std::to_string(index) + " (" + kindName(kind) + ")";
}

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

} // namespace

std::vector<uint8_t> serializeBundle(const Bundle &bundle) {
  std::string manifest = manifestText(bundle);
  size_t count = 1 + bundle.cubins.size();
  std::vector<const std::string *> payloads = {&manifest};
  for (const std::string &cubin : bundle.cubins)
    payloads.push_back(&cubin);

  std::vector<uint64_t> offsets;
  size_t end = kHeaderBytes + count * kEntryBytes;
  for (const std::string *p : payloads) {
    offsets.push_back(alignUp(end));
    end = offsets.back() + p->size();
  }

  std::vector<uint8_t> out(end, 0);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  putU32(out, 8, kBundleFormatVersion);
  putU32(out, 12, uint32_t(count));
  for (size_t i = 0; i < count; ++i) {
    const std::string &p = *payloads[i];
    if (!p.empty())
      std::memcpy(out.data() + offsets[i], p.data(), p.size());
    size_t entry = kHeaderBytes + i * kEntryBytes;
    putU32(out, entry, i == 0 ? kKindManifest : kKindCubin);
    putU64(out, entry + 8, offsets[i]);
    putU64(out, entry + 16, p.size());
    putU64(out, entry + 24, fnv1a(out.data() + offsets[i], p.size()));
  }
  putU64(out, 16, headerChecksum(out.data(), count));
  return out;
}

bool parseBundle(const uint8_t *data, size_t size, Bundle &out, std::string &error) {
  out = Bundle();
  if (data == nullptr && size != 0) {
    error = "bundle data is a null pointer";
    return false;
  }
  if (size < sizeof kMagic || std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    error = "not a fagen bundle: the file does not start with the magic bytes \"FAGENBND\": "
            "pass the .fab file written by `fagen build`";
    return false;
  }
  if (size < kHeaderBytes) {
    error = "bundle is truncated: the header needs " + std::to_string(kHeaderBytes) +
            " bytes but the file has " + std::to_string(size) +
            " bytes: the file was cut short; rebuild or copy it again";
    return false;
  }
  uint32_t version = getU32(data + 8);
  if (version > kBundleFormatVersion) {
    error = "bundle format version " + std::to_string(version) +
            " is newer than this fagen reads (format " + std::to_string(kBundleFormatVersion) +
            "): the bundle was written by a newer fagen; upgrade fagen (and the runtime "
            "library) to read it";
    return false;
  }
  if (version != kBundleFormatVersion) {
    error = "bundle format version " + std::to_string(version) +
            " is not supported by this fagen (expects " + std::to_string(kBundleFormatVersion) +
            "): rebuild the bundle with this fagen version";
    return false;
  }
  uint64_t count = getU32(data + 12);
  if (count == 0 || count > kMaxSections) {
    error = "bundle header says " + std::to_string(count) + " sections, expected 1 to " +
            std::to_string(kMaxSections) + ": " + kRebuild;
    return false;
  }
  uint64_t tableEnd = kHeaderBytes + count * kEntryBytes;
  if (tableEnd > size) {
    error = "bundle is truncated: the section table (" + std::to_string(count) +
            " sections) ends at " + at(tableEnd) + " but the file has " + std::to_string(size) +
            " bytes: the file was cut short; rebuild or copy it again";
    return false;
  }
  uint64_t stored = getU64(data + 16), computed = headerChecksum(data, count);
  if (kVerifyChecksums && stored != computed) {
    error = "checksum mismatch in the bundle header: stored " + hex64(stored) + ", computed " +
            hex64(computed) + ": " + kRebuild;
    return false;
  }

  uint64_t expectedOffset = alignUp(tableEnd);
  uint64_t previousEnd = tableEnd;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t *entry = data + kHeaderBytes + i * kEntryBytes;
    uint32_t kind = getU32(entry);
    uint64_t offset = getU64(entry + 8), length = getU64(entry + 16);
    std::string label = sectionLabel(i, kind);
    uint32_t expectedKind = i == 0 ? kKindManifest : kKindCubin;
    if (kind != expectedKind) {
      error = "section " + std::to_string(i) + " has kind " + std::to_string(kind) +
              ", expected " + std::to_string(expectedKind) + " (" + kindName(expectedKind) +
              "): " + kRebuild;
      return false;
    }
    if (getU32(entry + 4) != 0) {
      error = label + " has a non-zero reserved field: " + kRebuild;
      return false;
    }
    if (offset < previousEnd) {
      error = label + " starts at " + at(offset) + ", overlapping the previous part that ends at " +
              at(previousEnd) + ": " + kRebuild;
      return false;
    }
    if (offset != expectedOffset) {
      error = label + " starts at " + at(offset) + ", expected " + at(expectedOffset) +
              " (sections follow each other at 16-byte boundaries): " + kRebuild;
      return false;
    }
    if (offset > size || length > size - offset) {
      error = "bundle is truncated: " + label + " ends at " +
              (length > UINT64_MAX - offset ? std::string("a byte beyond 2^64")
                                            : at(offset + length)) +
              " but the file has " + std::to_string(size) +
              " bytes: the file was cut short; rebuild or copy it again";
      return false;
    }
    for (uint64_t b = previousEnd; b < offset; ++b) {
      if (data[b] != 0) {
        error = "padding " + at(b) + " before " + label + " is not zero: " + kRebuild;
        return false;
      }
    }
    uint64_t sum = fnv1a(data + offset, length);
    if (kVerifyChecksums && sum != getU64(entry + 24)) {
      error = "checksum mismatch in " + label + ": stored " + hex64(getU64(entry + 24)) +
              ", computed " + hex64(sum) + ": " + kRebuild;
      return false;
    }
    previousEnd = offset + length;
    expectedOffset = alignUp(previousEnd);
  }
  if (previousEnd != size) {
    error = "bundle has " + std::to_string(size - previousEnd) +
            " bytes of trailing data after the last section, which ends at " + at(previousEnd) +
            ": " + kRebuild;
    return false;
  }

  for (uint64_t i = 1; i < count; ++i) {
    const uint8_t *entry = data + kHeaderBytes + i * kEntryBytes;
    uint64_t offset = getU64(entry + 8), length = getU64(entry + 16);
    static const uint8_t kElf[4] = {0x7f, 'E', 'L', 'F'};
    if (length < sizeof kElf || std::memcmp(data + offset, kElf, sizeof kElf) != 0) {
      error = sectionLabel(i, kKindCubin) +
              " does not start with the ELF magic \\x7fELF, so it is not a cubin: " + kRebuild;
      return false;
    }
    out.cubins.emplace_back(reinterpret_cast<const char *>(data + offset), length);
  }

  const uint8_t *entry = data + kHeaderBytes;
  if (!parseManifest(data + getU64(entry + 8), getU64(entry + 16), count - 1, out, error)) {
    out = Bundle();
    return false;
  }
  return true;
}

} // namespace fagen
