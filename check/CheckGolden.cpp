//===- CheckGolden.cpp - `fagen check --golden`: digests of seeded outputs -===//
//
// Digest, text format, comparison and files of the golden outputs (CheckGolden.h). The GPU
// side (which cases feed the digests, when files are written) is Check.cpp's.
//
//===----------------------------------------------------------------------===//

#include "check/CheckGolden.h"

#include "check/Reference.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>

namespace fagen {
namespace golden {

namespace {

/// `x` exactly, as a C99 hex float ("0x1.8p-3", "-inf", "nan").
std::string hexFloat(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", x);
  return text;
}

/// `x` for a reader, to fp32's precision.
std::string decimal(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.7g", x);
  return text;
}

/// The change from `was` to `now`, relative where `was` is nonzero: "+0.012%", "+3e-05 (from 0)".
std::string relativeChange(double was, double now) {
  char text[64];
  if (was == now)
    return "unchanged";
  if (was != 0 && std::isfinite(was) && std::isfinite(now))
    std::snprintf(text, sizeof text, "%+.3g%%", 100.0 * (now - was) / std::fabs(was));
  else
    std::snprintf(text, sizeof text, "%s -> %s", decimal(was).c_str(), decimal(now).c_str());
  return text;
}

/// |a - b|, 0 for equal infinities, infinite against a NaN or a lone infinity.
double difference(double a, double b) { return reference::absDiff(a, b); }

llvm::Error lineError(llvm::StringRef path, size_t line, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 llvm::formatv("{0}:{1}: ", path, line) + message);
}

bool parseDouble(llvm::StringRef text, double &out) {
  if (text.empty())
    return false;
  std::string s = text.str();
  char *end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

/// Parses the fields after "tensor": SHAPE NAME n=.. sha256=.. nonfinite=.. sum=.. rms=..
/// maxabs=.. probes=..; an error message, or "".
std::string parseTensorLine(llvm::StringRef rest, std::string &shape, TensorDigest &t) {
  llvm::SmallVector<llvm::StringRef, 12> fields;
  rest.split(fields, ' ', -1, false);
  const char *keys[] = {"n", "sha256", "nonfinite", "sum", "rms", "maxabs", "probes"};
  if (fields.size() != 2 + std::size(keys))
    return "expected 'tensor SHAPE NAME n=.. sha256=.. nonfinite=.. sum=.. rms=.. maxabs=.. "
           "probes=..'";
  shape = fields[0].str();
  t.name = fields[1].str();
  for (size_t i = 0; i < std::size(keys); ++i) {
    auto [key, value] = fields[2 + i].split('=');
    if (key != keys[i])
      return llvm::formatv("expected '{0}=' as field {1}, found '{2}'", keys[i], i + 3,
                           fields[2 + i]);
    double number = 0;
    bool ok = true;
    if (key == "n")
      ok = !value.getAsInteger(10, t.elements);
    else if (key == "nonfinite")
      ok = !value.getAsInteger(10, t.nonFinite);
    else if (key == "sha256") {
      ok = value == "-" || (value.size() == 64 && llvm::all_of(value, llvm::isHexDigit));
      t.sha256 = value == "-" ? "" : value.lower();
    } else if (key == "probes") {
      llvm::SmallVector<llvm::StringRef, kProbes> probes;
      if (!value.empty())
        value.split(probes, ',');
      for (llvm::StringRef p : probes) {
        ok = ok && parseDouble(p, number);
        t.probes.push_back(float(number));
      }
    } else {
      ok = parseDouble(value, number);
      (key == "sum" ? t.sum : key == "rms" ? t.rms : t.maxAbs) = number;
    }
    if (!ok)
      return llvm::formatv("bad value of {0}: '{1}'", key, value);
  }
  if (t.probes.size() != probeIndices(t.elements).size())
    return llvm::formatv("{0} probes for {1} elements, expected {2}", t.probes.size(), t.elements,
                         probeIndices(t.elements).size());
  return "";
}

/// Parses one header line (keyword, rest) into `file`; an error message, or "".
std::string parseHeaderLine(llvm::StringRef keyword, llvm::StringRef rest, GoldenFile &file) {
  if (keyword == "kernel") {
    auto [name, arch] = rest.split(' ');
    if (name.empty() || arch.empty() || arch.contains(' '))
      return "expected 'kernel NAME ARCH'";
    file.kernel = name.str(), file.arch = arch.str();
  } else if (keyword == "seqlen") {
    file.seqlenRange = rest.str();
  } else if (keyword == "dtype") {
    if (rest != "bf16" && rest != "fp16")
      return "expected 'dtype bf16' or 'dtype fp16'";
    file.dtype = rest.str();
  } else if (keyword == "seed") {
    if (rest.getAsInteger(10, file.seed))
      return "expected 'seed N'";
  } else if (keyword == "grid") {
    if (rest != "full" && rest != "quick")
      return "expected 'grid full' or 'grid quick'";
    file.grid = rest.str();
  } else if (keyword == "fagen") {
    file.fagenVersion = rest.str();
  } else if (keyword == "gpu") {
    file.gpu = rest.str();
  } else {
    return ("unknown line '" + keyword +
            "': expected kernel, seqlen, dtype, seed, grid, "
            "fagen, gpu or tensor")
        .str();
  }
  return "";
}

const TensorDigest *findTensor(const CaseDigest &c, llvm::StringRef name) {
  for (const TensorDigest &t : c.tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

const CaseDigest *findCase(const GoldenFile &f, llvm::StringRef shape) {
  for (const CaseDigest &c : f.cases)
    if (c.shape == shape)
      return &c;
  return nullptr;
}

/// The header fields of `now` that `golden` must share, or their differences.
std::vector<std::string> compareHeaders(const GoldenFile &golden, const GoldenFile &now) {
  std::vector<std::string> out;
  if (golden.kernel != now.kernel || golden.arch != now.arch ||
      golden.seqlenRange != now.seqlenRange)
    out.push_back(llvm::formatv("the golden file is for kernel {0} {1} {2}", golden.kernel,
                                golden.arch, golden.seqlenRange)
                      .str());
  if (golden.seed != now.seed)
    out.push_back(llvm::formatv("the golden file was written with seed {0}, this check runs "
                                "seed {1}: pass --seed {0}",
                                golden.seed, now.seed)
                      .str());
  if (golden.grid != now.grid)
    out.push_back(llvm::formatv("the golden file was written on the {0} grid, this check runs "
                                "the {1} grid (--quick)",
                                golden.grid, now.grid)
                      .str());
  if (golden.dtype != now.dtype)
    out.push_back("the golden file's dtype is " + golden.dtype + ", the kernel's " + now.dtype);
  return out;
}

/// The probe that moved most, and how many moved.
struct ProbeMove {
  size_t index = 0, moved = 0;
  double maxDiff = 0;
};

ProbeMove compareProbes(const TensorDigest &golden, const TensorDigest &now) {
  ProbeMove m;
  for (size_t i = 0; i < std::min(golden.probes.size(), now.probes.size()); ++i) {
    if (std::memcmp(&golden.probes[i], &now.probes[i], sizeof(float)) == 0)
      continue;
    ++m.moved;
    if (double d = difference(golden.probes[i], now.probes[i]); d > m.maxDiff || m.moved == 1)
      m.maxDiff = d, m.index = i;
  }
  return m;
}

/// How `now` moved from `golden`, after the reason `why`.
std::string describeMove(const TensorDigest &golden, const TensorDigest &now,
                         const std::string &why) {
  const ProbeMove m = compareProbes(golden, now);
  std::string text = now.name + ": " + why + "; ";
  if (m.moved == 0) {
    text += llvm::formatv("the {0} probes agree", golden.probes.size()).str();
  } else {
    const uint64_t element = probeIndices(golden.elements)[m.index];
    text += llvm::formatv("max |diff| {0} over the {1} probes ({2} moved; largest at element "
                          "{3}: {4} -> {5})",
                          decimal(m.maxDiff), golden.probes.size(), m.moved, element,
                          decimal(golden.probes[m.index]), decimal(now.probes[m.index]))
                .str();
  }
  text += ", rms " + relativeChange(golden.rms, now.rms) + ", sum " +
          relativeChange(golden.sum, now.sum) + ", max |x| " +
          relativeChange(golden.maxAbs, now.maxAbs);
  if (golden.nonFinite != now.nonFinite)
    text += llvm::formatv(", non-finite elements {0} -> {1}", golden.nonFinite, now.nonFinite);
  return text;
}

} // namespace

std::vector<uint64_t> probeIndices(uint64_t elements) {
  const uint64_t count = std::min<uint64_t>(elements, kProbes);
  std::vector<uint64_t> out(count);
  for (uint64_t i = 0; i < count; ++i)
    out[i] = count == 1 ? 0 : i * (elements - 1) / (count - 1);
  return out;
}

TensorDigest digestTensor(llvm::StringRef name, llvm::ArrayRef<float> values, bool bitwise) {
  TensorDigest t;
  t.name = name.str();
  t.elements = values.size();
  if (bitwise) {
    llvm::SHA256 sha;
    sha.update(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(values.data()),
                                       values.size() * sizeof(float)));
    t.sha256 = llvm::toHex(sha.final(), /*LowerCase=*/true);
  }
  double sumSquares = 0;
  for (float x : values) {
    if (!std::isfinite(x)) {
      ++t.nonFinite;
      continue;
    }
    t.sum += x;
    sumSquares += double(x) * x;
    t.maxAbs = std::max(t.maxAbs, double(std::fabs(x)));
  }
  const uint64_t finite = t.elements - t.nonFinite;
  t.rms = finite ? std::sqrt(sumSquares / double(finite)) : 0.0;
  for (uint64_t i : probeIndices(t.elements))
    t.probes.push_back(values[i]);
  return t;
}

bool bitwiseStable(const KernelRecord &k, llvm::StringRef tensor) {
  return !(k.pass == Pass::Backward && !k.deterministic && tensor == "dQ");
}

std::string shapeKey(const CheckShape &s) {
  return llvm::formatv("{0}x{1}/{2}_{3}x{4}_{5}{6}", s.batch, s.headsQ, s.headsKV, s.seqlenQ,
                       s.seqlenK, s.bhsd ? "bhsd" : "bshd", s.risingKeys ? "_rise" : "")
      .str();
}

namespace {
std::string seqlenRange(const KernelRecord &k) {
  if (k.seqlenMin == 0 && k.seqlenMax == kSeqlenUnbounded)
    return "";
  return llvm::formatv("{0}-{1}", k.seqlenMin,
                       k.seqlenMax == kSeqlenUnbounded ? std::string("inf")
                                                       : std::to_string(k.seqlenMax))
      .str();
}
} // namespace

std::string goldenFileName(const KernelRecord &k) {
  const std::string range = seqlenRange(k);
  return k.name + "." + k.arch + (range.empty() ? "" : "." + range) + ".golden";
}

GoldenFile goldenHeader(const KernelRecord &k, unsigned seed, bool quick) {
  GoldenFile f;
  f.kernel = k.name;
  f.arch = k.arch;
  f.seqlenRange = seqlenRange(k);
  f.dtype = toText(k.dtype);
  f.seed = seed;
  f.grid = quick ? "quick" : "full";
  return f;
}

double goldenTolerance(const TensorDigest &golden, llvm::StringRef dtype) {
  // The spacing of the dtype at |x| = m 2^e, m in [0.5, 1): 2^(e - p), p significand bits, as
  // reference::describeWorst computes it.
  const int bits = dtype == "fp16" ? 11 : 8;
  int exponent = 0;
  std::frexp(golden.maxAbs, &exponent);
  const double step = golden.maxAbs == 0 ? 0.0 : std::ldexp(1.0, exponent - bits);
  return 2 * step + reference::kEpsGrad;
}

std::string formatGolden(const GoldenFile &f) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "fagen-golden " << kFormatVersion << "\n"
     << "# `fagen check` outputs of one kernel on seeded inputs, per shape and tensor: elements,\n"
        "# SHA-256 of the fp32 values (\"-\": not bitwise stable, compared within a tolerance),\n"
        "# non-finite count, the finite elements' sum, rms, max |x|, and probes at evenly\n"
        "# strided elements (hex floats). Update: fagen check BUNDLE --golden DIR "
        "--update-golden\n"
     << "kernel " << f.kernel << " " << f.arch << "\n";
  if (!f.seqlenRange.empty())
    os << "seqlen " << f.seqlenRange << "\n";
  os << "dtype " << f.dtype << "\n"
     << "seed " << f.seed << "\n"
     << "grid " << f.grid << "\n";
  if (!f.fagenVersion.empty())
    os << "fagen " << f.fagenVersion << "\n";
  if (!f.gpu.empty())
    os << "gpu " << f.gpu << "\n";
  for (const CaseDigest &c : f.cases)
    for (const TensorDigest &t : c.tensors) {
      os << "tensor " << c.shape << " " << t.name << " n=" << t.elements
         << " sha256=" << (t.bitwise() ? t.sha256 : "-") << " nonfinite=" << t.nonFinite
         << " sum=" << hexFloat(t.sum) << " rms=" << hexFloat(t.rms)
         << " maxabs=" << hexFloat(t.maxAbs) << " probes=";
      for (size_t i = 0; i < t.probes.size(); ++i)
        os << (i ? "," : "") << hexFloat(t.probes[i]);
      os << "\n";
    }
  return text;
}

llvm::Expected<GoldenFile> parseGolden(llvm::StringRef text, llvm::StringRef path) {
  GoldenFile f;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  text.split(lines, '\n');
  const std::string magic = "fagen-golden " + std::to_string(kFormatVersion);
  if (lines[0].rtrim() != magic) {
    if (lines[0].starts_with("fagen-golden "))
      return lineError(path, 1,
                       "golden format '" + lines[0].rtrim() + "', this fagen reads '" + magic +
                           "': rewrite it with --update-golden");
    return lineError(path, 1, "expected '" + magic + "' (not a golden file)");
  }
  std::set<std::string> seen; // header keywords
  for (size_t i = 1; i < lines.size(); ++i) {
    llvm::StringRef line = lines[i].rtrim();
    if (line.empty() || line.starts_with("#"))
      continue;
    auto [keyword, rest] = line.split(' ');
    std::string problem;
    if (keyword == "tensor") {
      std::string shape;
      TensorDigest t;
      problem = parseTensorLine(rest, shape, t);
      if (problem.empty()) {
        if (f.cases.empty() || f.cases.back().shape != shape) {
          if (findCase(f, shape))
            problem = "shape " + shape + " again after other shapes";
          else
            f.cases.push_back({shape, {}});
        }
        if (problem.empty() && findTensor(f.cases.back(), t.name))
          problem = "tensor " + t.name + " of shape " + shape + " again";
        if (problem.empty())
          f.cases.back().tensors.push_back(std::move(t));
      }
    } else if (!seen.insert(keyword.str()).second) {
      problem = "a second '" + keyword.str() + "' line";
    } else {
      problem = parseHeaderLine(keyword, rest, f);
    }
    if (!problem.empty())
      return lineError(path, i + 1, problem);
  }
  for (const char *required : {"kernel", "dtype", "seed", "grid"})
    if (!seen.count(required))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     path + ": no '" + required + "' line");
  return f;
}

llvm::Expected<GoldenFile> readGolden(llvm::StringRef path) {
  // Only a regular file of a golden's size: a FIFO or device node would block or never end.
  constexpr uint64_t kMaxGoldenBytes = 16u << 20;
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(path, st))
    return llvm::createStringError(ec, "cannot read " + path + ": " + ec.message());
  if (st.type() != llvm::sys::fs::file_type::regular_file)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ": not a regular file");
  if (st.getSize() > kMaxGoldenBytes)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ": over 16 MiB, not a golden file");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read " + path + ": " + buffer.getError().message());
  return parseGolden((*buffer)->getBuffer(), path);
}

llvm::Error writeGolden(llvm::StringRef path, const GoldenFile &file) {
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return llvm::createStringError(ec, "cannot create " + dir + ": " + ec.message());
  int fd = -1;
  llvm::SmallString<256> temp;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(path + ".%%%%%%.tmp", fd, temp))
    return llvm::createStringError(ec, "cannot write " + path + ": " + ec.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << formatGolden(file);
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      llvm::sys::fs::remove(temp);
      return llvm::createStringError(ec, "cannot write " + temp + ": " + ec.message());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, path)) {
    llvm::sys::fs::remove(temp);
    return llvm::createStringError(ec, "cannot write " + path + ": " + ec.message());
  }
  return llvm::Error::success();
}

std::string compareTensor(const TensorDigest &golden, const TensorDigest &now,
                          llvm::StringRef dtype) {
  if (golden.elements != now.elements)
    return llvm::formatv("{0}: {1} elements in the golden file, {2} now", now.name, golden.elements,
                         now.elements);
  if (golden.bitwise() != now.bitwise())
    return now.name +
           (now.bitwise() ? ": now bitwise stable, the golden file has no hash"
                          : ": no longer bitwise stable, the golden file has a hash") +
           ": rewrite it with --update-golden";
  if (now.bitwise())
    return golden.sha256 == now.sha256 ? "" : describeMove(golden, now, "sha256 differs");
  // Every element within `tol` of the golden run's implies each of these: a probe and max |x|
  // within tol, rms within tol (|‖a‖ - ‖b‖| <= ‖a - b‖), the sum within tol per element.
  const double tol = goldenTolerance(golden, dtype);
  const ProbeMove m = compareProbes(golden, now);
  const double finite = double(golden.elements - golden.nonFinite);
  std::string over;
  if (golden.nonFinite != now.nonFinite)
    over = "non-finite elements differ";
  else if (m.maxDiff > tol)
    over = "a probe moved more than the tolerance";
  else if (difference(golden.maxAbs, now.maxAbs) > tol)
    over = "max |x| moved more than the tolerance";
  else if (difference(golden.rms, now.rms) > tol)
    over = "rms moved more than the tolerance";
  else if (difference(golden.sum, now.sum) > finite * tol)
    over = "the sum moved more than the tolerance per element";
  if (over.empty())
    return "";
  return describeMove(golden, now, over) +
         llvm::formatv("; tolerance {0} (2 {1} steps at max |x| {2}, plus {3}; not bitwise "
                       "stable: added with atomics)",
                       decimal(tol), dtype, decimal(golden.maxAbs), decimal(reference::kEpsGrad))
             .str();
}

std::vector<std::string> compareGolden(const GoldenFile &golden, const GoldenFile &now) {
  std::vector<std::string> out = compareHeaders(golden, now);
  if (!out.empty())
    return out;
  for (const CaseDigest &c : now.cases) {
    const CaseDigest *g = findCase(golden, c.shape);
    if (!g) {
      out.push_back(c.shape + ": not in the golden file (the check's shapes changed?)");
      continue;
    }
    for (const TensorDigest &t : c.tensors) {
      const TensorDigest *gt = findTensor(*g, t.name);
      if (!gt)
        out.push_back(c.shape + " " + t.name + ": not in the golden file");
      else if (std::string move = compareTensor(*gt, t, golden.dtype); !move.empty())
        out.push_back(c.shape + " " + move);
    }
    for (const TensorDigest &gt : g->tensors)
      if (!findTensor(c, gt.name))
        out.push_back(c.shape + " " + gt.name + ": in the golden file, not written by this check");
  }
  for (const CaseDigest &g : golden.cases)
    if (!findCase(now, g.shape))
      out.push_back(g.shape + ": in the golden file, no outputs in this check (a failed case, "
                              "or the check's shapes changed)");
  return out;
}

std::vector<std::string> staleGoldenFiles(llvm::StringRef dir,
                                          const std::vector<KernelRecord> &kernels,
                                          llvm::StringRef filter) {
  std::set<std::string> known;
  for (const KernelRecord &k : kernels)
    known.insert(goldenFileName(k));
  std::vector<std::string> out;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    std::string name = llvm::sys::path::filename(it->path()).str();
    if (llvm::StringRef(name).ends_with(".golden") && !known.count(name) &&
        llvm::sys::fs::is_regular_file(it->path()) &&
        (filter.empty() || llvm::StringRef(name).contains(filter)))
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace golden
} // namespace fagen
