//===- Build.cpp - generated source -> cubin, with a content-addressed cache =//

#include "compiler/build/Build.h"

#include "compiler/build/EmbeddedTemplates.h"
#include "compiler/build/Subprocess.h"
#include "core/FileIO.h"
#include "compiler/emit/Emit.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <regex>

namespace fagen {

namespace {

std::string sha256Hex(llvm::StringRef data) {
  llvm::SHA256 hash;
  hash.update(data);
  std::array<uint8_t, 32> digest = hash.final();
  return llvm::toHex(digest, /*LowerCase=*/true);
}

/// Reads a cubin, a ptxas report or a log, bounded as a bundle is.
llvm::Expected<std::string> readFile(const std::string &path) {
  std::string bytes, error;
  if (!readFileBounded(path, kMaxBundleBytes, path.c_str(), bytes, error))
    return llvm::createStringError(std::errc::io_error, "%s", error.c_str());
  return bytes;
}

/// Runs a program, capturing stdout+stderr into `output`. Returns its exit code (-1 when it
/// could not be started or was killed; `output` then holds the reason).
int runProgram(const std::vector<std::string> &args, const std::string &workDir,
               std::string &output) {
  std::string logPath = workDir + "/nvcc.log";
  std::string error;
  int rc = runProcess(args, logPath, error);
  if (rc < 0) {
    output = error;
    return -1;
  }
  llvm::Expected<std::string> log = readFile(logPath);
  output = log ? *log : llvm::toString(log.takeError());
  return rc;
}

/// Writes the embedded templates into `<cacheDir>/templates/<hash>/` once, atomically (a
/// folder is filled under a temporary name, then renamed).
llvm::Expected<std::string> materializeTemplates(const std::string &cacheDir) {
  std::string dir = cacheDir + "/templates/" + templatesHash().substr(0, 16);
  if (llvm::sys::fs::is_directory(dir))
    return dir;
  if (std::error_code ec = llvm::sys::fs::create_directories(cacheDir + "/templates"))
    return llvm::createStringError(ec, "cannot create the cache folder %s: %s (set "
                                       "FAGEN_CACHE_DIR to a writable folder)",
                                   cacheDir.c_str(), ec.message().c_str());
  // createUniqueDirectory puts a relative prefix under the system's temporary folder: the
  // prefix is made absolute, so that the folder is filled beside `dir` and renamed in place.
  llvm::SmallString<256> prefix(cacheDir + "/templates/tmp"), tmp;
  llvm::sys::fs::make_absolute(prefix);
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(prefix, tmp))
    return llvm::createStringError(ec, "cannot create a folder under %s: %s", cacheDir.c_str(),
                                   ec.message().c_str());
  for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i) {
    const EmbeddedFile &f = kEmbeddedTemplates[i];
    llvm::SmallString<256> path(tmp);
    llvm::sys::path::append(path, f.path);
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(path));
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return llvm::createStringError(ec, "cannot write %s: %s", path.c_str(), ec.message().c_str());
    os.write(f.data, f.size);
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, dir)) {
    // Another fagen process won the race; its copy is identical.
    llvm::sys::fs::remove_directories(tmp);
    if (!llvm::sys::fs::is_directory(dir))
      return llvm::createStringError(ec, "cannot create %s: %s", dir.c_str(), ec.message().c_str());
  }
  return dir;
}

struct CacheEntry {
  std::string cubinPath, reportPath;
};

CacheEntry cachePaths(const std::string &cacheDir, const std::string &key) {
  std::string base = cacheDir + "/kernels/" + key.substr(0, 2) + "/" + key;
  return {base + ".cubin", base + ".ptxas.txt"};
}

/// Compiles one kernel (or fetches it from the cache).
llvm::Expected<CompiledKernel> compileOne(const Toolchain &tc, const KernelPlan &plan,
                                          const BuildOptions &opt, const std::string &cacheDir,
                                          const std::string &templateDir) {
  auto start = std::chrono::steady_clock::now();
  CompiledKernel result;
  result.plan = plan;
  std::string source = emitKernelSource(plan);
  std::vector<std::string> flags = nvccFlags(plan.arch);
  std::string key = compileCacheKey(tc, flags, source);
  CacheEntry entry = cachePaths(cacheDir, key);
  std::string stem = plan.name + "." + plan.arch;

  if (opt.useCache && opt.dumpDir.empty() && llvm::sys::fs::exists(entry.cubinPath)) {
    llvm::Expected<std::string> cubin = readFile(entry.cubinPath);
    llvm::Expected<std::string> report = readFile(entry.reportPath);
    if (cubin && report) {
      result.cubin = std::move(*cubin);
      result.report = parsePlanReport(*report, plan);
      result.cached = true;
      return result;
    }
    llvm::consumeError(cubin.takeError());
    llvm::consumeError(report.takeError());
  }

  llvm::SmallString<256> workDir;
  if (llvm::Error err = createTempDir("fagen-build", workDir))
    return err;
  llvm::scope_exit cleanup([&] { removeTempDir(workDir.str().str()); });
  std::string cuPath = (workDir + "/kernel.cu").str();
  if (llvm::Error err = writeFileAtomically(cuPath, source))
    return err;

  // Relative names only: nothing of this machine's paths ends up in the cubin.
  std::vector<std::string> args = {tc.nvcc, "-cubin", "-std=c++17", "-O3", "-I", templateDir};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"-Xptxas", "-v", "-o", (workDir + "/kernel.cubin").str(), cuPath});
  std::string output;
  int rc = runProgram(args, workDir.str().str(), output);
  if (rc != 0) {
    if (!opt.dumpDir.empty())
      llvm::consumeError(writeFileAtomically(opt.dumpDir + "/" + stem + ".cu", source));
    return llvm::createStringError(
        std::errc::io_error, "nvcc failed for kernel %s (%s), exit code %d:\n%s%s", plan.name.c_str(),
        plan.arch.c_str(), rc, output.c_str(),
        opt.dumpDir.empty() ? "rerun with --dump-dir DIR to keep the generated source\n" : "");
  }
  llvm::Expected<std::string> cubin = readFile((workDir + "/kernel.cubin").str());
  if (!cubin)
    return cubin.takeError();
  result.cubin = std::move(*cubin);
  result.report = parsePlanReport(output, plan);
  if (result.report.registers < 0)
    return llvm::createStringError(std::errc::io_error,
                                   "nvcc printed no ptxas report for kernel %s (%s) or one of its "
                                   "entry points:\n%s",
                                   plan.name.c_str(), plan.arch.c_str(), output.c_str());

  if (!opt.dumpDir.empty()) {
    std::vector<std::string> ptxArgs = {tc.nvcc, "-ptx", "-std=c++17", "-O3", "-I", templateDir};
    ptxArgs.insert(ptxArgs.end(), flags.begin(), flags.end());
    ptxArgs.insert(ptxArgs.end(), {"-o", (workDir + "/kernel.ptx").str(), cuPath});
    std::string ptxOut;
    if (runProgram(ptxArgs, workDir.str().str(), ptxOut) != 0)
      return llvm::createStringError(std::errc::io_error, "nvcc -ptx failed for %s:\n%s",
                                     plan.name.c_str(), ptxOut.c_str());
    llvm::Expected<std::string> ptx = readFile((workDir + "/kernel.ptx").str());
    if (!ptx)
      return ptx.takeError();
    for (auto [ext, bytes] : {std::pair<const char *, const std::string *>{".cu", &source},
                              {".ptx", &*ptx},
                              {".cubin", &result.cubin},
                              {".ptxas.txt", &result.report.text}})
      if (llvm::Error err = writeFileAtomically(opt.dumpDir + "/" + stem + ext, *bytes))
        return err;
  }

  if (opt.useCache) {
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(entry.cubinPath));
    // The report first, the cubin last: a cubin present means a complete entry.
    if (llvm::Error err = writeFileAtomically(entry.reportPath, result.report.text))
      return err;
    if (llvm::Error err = writeFileAtomically(entry.cubinPath, result.cubin))
      return err;
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace

llvm::Expected<Toolchain> findToolchain() {
  std::vector<std::string> candidates;
  if (const char *home = std::getenv("CUDA_HOME"))
    candidates.push_back(std::string(home) + "/bin/nvcc");
  if (llvm::ErrorOr<std::string> onPath = llvm::sys::findProgramByName("nvcc"))
    candidates.push_back(*onPath);
  candidates.push_back("/usr/local/cuda/bin/nvcc");
  for (const std::string &nvcc : candidates) {
    if (!llvm::sys::fs::can_execute(nvcc))
      continue;
    llvm::SmallString<128> tmp;
    if (llvm::Error err = createTempDir("fagen-nvcc", tmp))
      return err;
    std::string output;
    int rc = runProgram({nvcc, "--version"}, tmp.str().str(), output);
    removeTempDir(tmp.str().str());
    if (rc != 0)
      continue;
    std::smatch m;
    if (!std::regex_search(output, m, std::regex(R"(V(\d+\.\d+\.\d+))")))
      continue;
    llvm::SmallString<256> real;
    if (llvm::sys::fs::real_path(nvcc, real))
      real = nvcc;
    return Toolchain{nvcc, m[1].str(), real.str().str() + "\n" + output};
  }
  return llvm::createStringError(
      std::errc::no_such_file_or_directory,
      "nvcc not found (looked in $CUDA_HOME/bin, PATH and /usr/local/cuda/bin): install the "
      "CUDA toolkit 13 or set CUDA_HOME to its folder");
}

PtxasReport parsePtxasReport(const std::string &output, const std::string &kernel) {
  PtxasReport report;
  bool inKernel = false;
  std::string text;
  llvm::SmallVector<llvm::StringRef, 16> lines;
  llvm::StringRef(output).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    if (line.contains("ptxas info") && line.contains("'" + kernel + "'"))
      inKernel = true;
    else if (line.contains("ptxas info") && line.contains("Compiling entry function"))
      inKernel = false;
    if (!inKernel)
      continue;
    text += line.str() + "\n";
    std::smatch m;
    std::string s = line.str();
    if (std::regex_search(s, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
      report.stackFrameBytes = std::stoi(m[1]);
      report.spillStoreBytes = std::stoi(m[2]);
      report.spillLoadBytes = std::stoi(m[3]);
    }
    if (std::regex_search(s, m, std::regex(R"(Used (\d+) registers)")))
      report.registers = std::stoi(m[1]);
  }
  report.text = text;
  report.maxRegisters = report.registers;
  report.maxSpillBytes = report.spillBytes();
  return report;
}

PtxasReport parsePlanReport(const std::string &output, const KernelPlan &plan) {
  std::vector<std::string> names = entryPointNames(plan);
  PtxasReport report = parsePtxasReport(output, names.front());
  for (size_t i = 1; i < names.size(); ++i) {
    PtxasReport other = parsePtxasReport(output, names[i]);
    if (other.registers < 0)
      report.registers = -1; // a missing entry point makes the whole report incomplete
    report.maxRegisters = std::max(report.maxRegisters, other.registers);
    report.maxSpillBytes = std::max(report.maxSpillBytes, other.spillBytes());
    report.text += other.text;
  }
  return report;
}

std::vector<std::string> nvccFlags(const std::string &arch) {
  std::string num = arch.substr(3); // "90a"
  // A __host__ __device__ function calling a host-only one (20011) or a host-only constexpr one
  // (20013) is only a warning to nvcc, and the device code it builds computes garbage: an
  // error here.
  return {"-gencode", "arch=compute_" + num + ",code=sm_" + num, "--diag-error", "20011,20013"};
}

std::string compileCacheKey(const Toolchain &tc, const std::vector<std::string> &flags,
                            const std::string &source) {
  // nvcc adds these variables' flags to every command line (a -lineinfo or -G there changes
  // the cubin), so a cubin built under them is another cubin.
  auto env = [](const char *name) {
    const char *value = std::getenv(name);
    return std::string(value ? value : "");
  };
  return sha256Hex(llvm::formatv("fagen-cache-2\n{0}\n{1}\n{2}\n{3}\nprepend={4}\n"
                                 "append={5}\n{6}\n{7}",
                                 FAGEN_VERSION_STRING, tc.version, tc.identity,
                                 llvm::join(flags, " "), env("NVCC_PREPEND_FLAGS"),
                                 env("NVCC_APPEND_FLAGS"), templatesHash(), source)
                       .str());
}

std::string templatesHash() {
  static const std::string hash = [] {
    llvm::SHA256 h;
    for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i) {
      const EmbeddedFile &f = kEmbeddedTemplates[i];
      h.update(llvm::StringRef(f.path));
      h.update(llvm::StringRef("\0", 1));
      h.update(llvm::StringRef(std::to_string(f.size)));
      h.update(llvm::StringRef("\0", 1));
      h.update(llvm::StringRef(f.data, f.size));
    }
    std::array<uint8_t, 32> digest = h.final();
    return llvm::toHex(digest, true);
  }();
  return hash;
}

std::string defaultCacheDir() {
  if (const char *dir = std::getenv("FAGEN_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/fagen";
  llvm::SmallString<128> home;
  if (llvm::sys::path::home_directory(home))
    return (home + "/.cache/fagen").str();
  return "/tmp/fagen-cache";
}

llvm::Error writeFileAtomically(const std::string &path, const std::string &bytes) {
  // The rename would replace a device node or FIFO with a regular file.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) && llvm::sys::fs::exists(status) &&
      !llvm::sys::fs::is_regular_file(status))
    return llvm::createStringError(std::errc::invalid_argument,
                                   "refusing to write %s: it is not a regular file",
                                   path.c_str());
  int fd = -1;
  llvm::SmallString<256> tmp;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(path + ".tmp-%%%%%%%%", fd, tmp))
    return llvm::createStringError(ec, "cannot write %s: %s", path.c_str(), ec.message().c_str());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os.write(bytes.data(), bytes.size());
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return llvm::createStringError(ec, "cannot write %s: %s", path.c_str(), ec.message().c_str());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return llvm::createStringError(ec, "cannot write %s: %s", path.c_str(), ec.message().c_str());
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<CompiledKernel>> compileKernels(const Toolchain &toolchain,
                                                           const std::vector<KernelPlan> &plans,
                                                           const BuildOptions &options) {
  std::string cacheDir = options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir;
  llvm::Expected<std::string> templateDir = materializeTemplates(cacheDir);
  if (!templateDir)
    return templateDir.takeError();
  if (!options.dumpDir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpDir))
      return llvm::createStringError(ec, "cannot create --dump-dir %s: %s",
                                     options.dumpDir.c_str(), ec.message().c_str());

  std::vector<std::optional<CompiledKernel>> results(plans.size());
  std::vector<std::string> errors(plans.size());
  std::mutex mutex;
  unsigned done = 0;
  {
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency(options.jobs));
    for (size_t i = 0; i < plans.size(); ++i) {
      pool.async([&, i] {
        llvm::Expected<CompiledKernel> r =
            compileOne(toolchain, plans[i], options, cacheDir, *templateDir);
        // The fallback replaces the planned kernel only if it builds and spills less; a
        // fallback that cannot be built leaves the planned kernel in place.
        if (r && options.spillFallbacks && plans[i].spillFallback &&
            r->report.maxSpillBytes > spillFallbackBytes(plans[i].templ)) {
          llvm::Expected<KernelPlan> second = applyConfig(plans[i], *plans[i].spillFallback);
          if (!second) {
            llvm::consumeError(second.takeError());
          } else {
            llvm::Expected<CompiledKernel> r2 =
                compileOne(toolchain, *second, options, cacheDir, *templateDir);
            if (!r2) {
              llvm::consumeError(r2.takeError());
            } else if (r2->report.maxSpillBytes < r->report.maxSpillBytes) {
              r2->replaced = plans[i].name;
              r2->replacedSpillBytes = r->report.maxSpillBytes;
              r2->seconds += r->seconds;
              r = std::move(r2);
            }
          }
        }
        std::lock_guard<std::mutex> lock(mutex);
        ++done;
        std::string status;
        if (!r) {
          errors[i] = llvm::toString(r.takeError());
          status = llvm::formatv("{0} ({1}): FAILED", plans[i].name, plans[i].arch).str();
        } else {
          const std::string &name = r->plan.name;
          status = r->cached ? llvm::formatv("{0} ({1}): cached", name, plans[i].arch).str()
                             : llvm::formatv("{0} ({1}): {2:f1} s, {3} registers, {4} spill bytes",
                                             name, plans[i].arch, r->seconds,
                                             r->report.registers, r->report.spillBytes())
                                   .str();
          if (!r->replaced.empty())
            status += llvm::formatv(" (instead of {0}, which spilled {1} bytes)", r->replaced,
                                    r->replacedSpillBytes)
                          .str();
          results[i] = std::move(*r);
        }
        if (options.progress)
          options.progress(done, plans.size(), status);
      });
    }
    pool.wait();
  }
  std::string allErrors;
  for (const std::string &e : errors)
    if (!e.empty())
      allErrors += e + "\n";
  if (!allErrors.empty())
    return llvm::createStringError(std::errc::io_error, "%s", allErrors.c_str());
  std::vector<CompiledKernel> out;
  for (auto &r : results) {
    // A fallback can be a kernel that another plan asked for: keep one, serving both.
    auto same = std::find_if(out.begin(), out.end(), [&](const CompiledKernel &k) {
      return k.plan.name == r->plan.name && k.plan.arch == r->plan.arch &&
             k.plan.seqlenMin == r->plan.seqlenMin && k.plan.seqlenMax == r->plan.seqlenMax;
    });
    if (same != out.end()) {
      same->plan.variant += "," + r->plan.variant;
      continue;
    }
    out.push_back(std::move(*r));
  }
  return out;
}

} // namespace fagen
