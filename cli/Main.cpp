//===- Main.cpp - the fagen command line ----------------------------------===//
//
// fagen build | plan | inspect | check | tune. Each command is a thin driver over one pipeline
// stage library in compiler/; this file only parses flags, prints, and maps failures to the
// documented exit codes.
//
//===----------------------------------------------------------------------===//

#include "compiler/build/Build.h"
#include "check/Check.h"
#include "compiler/emit/Emit.h"
#include "compiler/bundle/Package.h"
#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"
#include "tuner/TuningTable.h"
#include "tuner/Tuner.h"

#include "cli/Output.h"
#include "compiler/build/Subprocess.h"
#include "compiler/bundle/Bundle.h"
#include "core/FileIO.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <fcntl.h>
#include <unistd.h>

using namespace fagen;

namespace {

enum ExitCode {
  kExitOk = 0,
  kExitRejected = 1,  // a bad spec or bundle, or a failed check
  kExitUsage = 2,     // bad command-line flags
  kExitToolchain = 3, // nvcc missing or failing, a file that cannot be read or written
  kExitNoGpu = 4,     // `check` and `tune` need a GPU and a driver
};

const char *kExitCodesHelp = R"(Exit codes:
  0  success
  1  rejected input: a spec error (FILE:LINE:COL), an invalid bundle or tuning database,
     a failed check, or a tune that found no passing candidate or hit a CUDA error
  2  bad command-line usage: an unknown --arch, -o naming a device, FIFO or an input
  3  toolchain or I/O failure: nvcc missing or failing, a missing, unreadable or unwritable
     file (a spec or a bundle alike), a file over fagen's size limit
  130, 143  interrupted by SIGINT, SIGTERM (children stopped, temporary files removed)
  4  no GPU or no CUDA driver (check and tune)
)";

int reportError(llvm::Error err, int code) {
  llvm::errs() << "fagen: " << llvm::toString(std::move(err)) << "\n";
  return code;
}

/// How much a command prints besides its result: -q only errors, -v more detail.
struct Verbosity {
  bool quiet = false;
  bool verbose = false;
};

/// Canonicalizes --arch values; the error carries a "did you mean".
llvm::Expected<std::vector<std::string>> canonicalArchs(const std::vector<std::string> &in) {
  std::vector<std::string> out;
  for (const std::string &a : in) {
    llvm::Expected<std::string> c = canonicalArch(a);
    if (!c)
      return c.takeError();
    if (std::find(out.begin(), out.end(), *c) == out.end())
      out.push_back(*c);
  }
  return out;
}

void printJson(llvm::json::Value value) {
  llvm::outs() << llvm::formatv("{0:2}", value) << "\n";
}

struct PlanInputs {
  AttentionSpec spec;
  std::vector<KernelPlan> plans;
};

/// Reads (bounded) and parses the spec, then plans its kernels (with the tuned configs of
/// `tuning`, if any). A spec that cannot be read is an I/O failure (exit 3), as a bundle that
/// cannot be read; a spec that can be read but is wrong is rejected input (exit 1).
llvm::Expected<PlanInputs> loadAndPlan(const std::string &specPath,
                                       const std::vector<std::string> &archs, int &exitCode,
                                       const TuningTable *tuning = nullptr) {
  std::string text, error;
  exitCode = kExitToolchain;
  if (!readFileBounded(specPath, kMaxSpecBytes, ("the spec " + specPath).c_str(), text, error))
    return llvm::createStringError(std::errc::io_error, "%s", error.c_str());
  exitCode = kExitRejected;
  llvm::Expected<AttentionSpec> spec = parseSpec(text, specPath == "-" ? "<stdin>" : specPath);
  if (!spec)
    return spec.takeError();
  if (specPath != "-")
    spec->inputFiles.insert(spec->inputFiles.begin(), specPath);
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, archs, tuning);
  if (!plans)
    return plans.takeError();
  return PlanInputs{std::move(*spec), std::move(*plans)};
}

/// The winners of a tuning database for the planner, checked against this nvcc and fagen as
/// `fagen build` checks them (so `fagen plan --tuning` prints what `build` would build).
llvm::Expected<TuningTable> loadTuning(const std::string &path, bool allowMismatch, int &code) {
  code = kExitToolchain;
  llvm::Expected<Toolchain> toolchain = findToolchain();
  if (!toolchain)
    return toolchain.takeError();
  code = kExitRejected;
  return loadTuningTable(path, *toolchain, allowMismatch);
}

int commandPlan(const std::string &specPath, const std::vector<std::string> &archs, bool emit,
                bool json, const std::string &tuningPath, bool tuningAllowMismatch) {
  int code = kExitRejected;
  std::optional<TuningTable> tuning;
  if (!tuningPath.empty()) {
    llvm::Expected<TuningTable> table = loadTuning(tuningPath, tuningAllowMismatch, code);
    if (!table)
      return reportError(table.takeError(), code);
    tuning = std::move(*table);
  }
  llvm::Expected<PlanInputs> in = loadAndPlan(specPath, archs, code, tuning ? &*tuning : nullptr);
  if (!in)
    return reportError(in.takeError(), code);
  if (json) {
    printJson(plansJson(specPath, in->plans));
    return kExitOk;
  }
  if (!emit) {
    llvm::outs() << formatPlans(in->plans);
    return kExitOk;
  }
  for (const KernelPlan &p : in->plans)
    llvm::outs() << "// ---- " << p.name << " (" << p.arch << ")\n" << emitKernelSource(p);
  return kExitOk;
}

/// Make syntax: OUTPUT: INPUT... with spaces, '#' and '$' escaped; absolute paths, so the
/// build tool that reads it may run from any folder.
std::string depfileText(const std::string &output, const std::vector<std::string> &inputs) {
  auto escape = [](const std::string &path) {
    llvm::SmallString<256> abs(path);
    llvm::sys::fs::make_absolute(abs);
    llvm::sys::path::remove_dots(abs, /*remove_dot_dot=*/true);
    std::string out;
    for (char c : abs.str()) {
      if (c == ' ' || c == '#' || c == '\\')
        out += '\\';
      if (c == '$')
        out += '$';
      out += c;
    }
    return out;
  };
  std::string text = escape(output) + ":";
  for (const std::string &in : inputs)
    text += " \\\n  " + escape(in);
  return text + "\n";
}

struct BuildRequest {
  std::string specPath, output, depfile, tuningPath;
  bool tuningAllowMismatch = false;
  std::vector<std::string> archs;
  BuildOptions options;
};

/// Where the bundle may go: standard output ("-"), or a regular file (new or replaced) that is
/// none of the inputs. An exit code when not.
int checkOutput(const BuildRequest &req, const std::vector<std::string> &inputs) {
  if (req.output == "-") {
    if (!req.depfile.empty()) {
      llvm::errs() << "fagen: --depfile needs a bundle file (-o FILE), not standard output\n";
      return kExitUsage;
    }
    if (isatty(STDOUT_FILENO)) {
      llvm::errs() << "fagen: refusing to write a binary bundle to a terminal: redirect "
                      "standard output or name a file with -o FILE\n";
      return kExitUsage;
    }
    return kExitOk;
  }
  std::string error;
  for (const std::string &path : {req.output, req.depfile})
    if (!path.empty() && !checkOutputPath(path, inputs, error)) {
      llvm::errs() << "fagen: " << error << "\n";
      return kExitUsage;
    }
  return kExitOk;
}

int writeAll(int fd, const std::vector<uint8_t> &bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return errno ? errno : EIO;
    done += size_t(n);
  }
  return 0;
}

int commandBuild(const BuildRequest &req, Verbosity verbosity) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> inputs = {req.specPath};
  if (!req.tuningPath.empty())
    inputs.push_back(req.tuningPath);
  if (int code = checkOutput(req, inputs))
    return code;
  llvm::Expected<Toolchain> toolchain = findToolchain();
  if (!toolchain)
    return reportError(toolchain.takeError(), kExitToolchain);
  std::optional<TuningTable> tuning;
  if (!req.tuningPath.empty()) {
    int code = kExitRejected;
    llvm::Expected<TuningTable> table = loadTuning(req.tuningPath, req.tuningAllowMismatch, code);
    if (!table)
      return reportError(table.takeError(), code);
    tuning = std::move(*table);
  }
  int code = kExitRejected;
  llvm::Expected<PlanInputs> in =
      loadAndPlan(req.specPath, req.archs, code, tuning ? &*tuning : nullptr);
  if (!in)
    return reportError(in.takeError(), code);
  // The layout files are inputs too: -o must not name one.
  for (const std::string &file : in->spec.inputFiles)
    if (std::find(inputs.begin(), inputs.end(), file) == inputs.end())
      inputs.push_back(file);
  if (int code = checkOutput(req, inputs))
    return code;

  BuildOptions options = req.options;
  options.spillFallbacks = true;
  bool tty = isatty(STDERR_FILENO);
  if (!verbosity.quiet)
    options.progress = [tty](unsigned done, unsigned total, const std::string &status) {
      llvm::errs() << (tty ? "\r\033[K" : "") << "[" << done << "/" << total << "] " << status
                   << (tty && done < total ? "" : "\n");
      llvm::errs().flush();
    };
  if (!verbosity.quiet)
    llvm::errs() << "fagen: building " << in->plans.size() << " kernel(s) from " << req.specPath
                 << " with " << toolchain->describe() << "\n";
  if (verbosity.verbose)
    llvm::errs() << "fagen: nvcc " << toolchain->nvcc << ", compile cache "
                 << (options.useCache ? (options.cacheDir.empty() ? defaultCacheDir()
                                                                  : options.cacheDir)
                                      : std::string("off"))
                 << ", inputs " << llvm::join(inputs, " ") << "\n";
  llvm::Expected<std::vector<CompiledKernel>> kernels =
      compileKernels(*toolchain, in->plans, options);
  if (!kernels)
    return reportError(kernels.takeError(), kExitToolchain);

  Bundle bundle = assembleBundle(*toolchain, *kernels);
  std::vector<uint8_t> bytes = serializeBundle(bundle);
  if (req.output == "-") {
    if (int err = writeAll(STDOUT_FILENO, bytes))
      return reportError(llvm::createStringError(std::error_code(err, std::generic_category()),
                                                 "cannot write the bundle to standard output: %s",
                                                 std::strerror(err)),
                         kExitToolchain);
  } else if (llvm::Error err =
                 writeFileAtomically(req.output, std::string(bytes.begin(), bytes.end()))) {
    return reportError(std::move(err), kExitToolchain);
  }
  if (!req.depfile.empty())
    if (llvm::Error err = writeFileAtomically(req.depfile, depfileText(req.output, inputs)))
      return reportError(std::move(err), kExitToolchain);

  unsigned cached = 0;
  double compileSeconds = 0;
  for (const CompiledKernel &k : *kernels) {
    cached += k.cached;
    compileSeconds += k.seconds;
    std::string warning = spillWarning(k.plan.name, k.plan.arch, k.report.maxSpillBytes,
                                       k.report.maxRegisters);
    if (!verbosity.quiet && !warning.empty())
      llvm::errs() << "fagen: " << warning << "\n";
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!verbosity.quiet)
    llvm::errs() << llvm::formatv("fagen: wrote {0}: {1} kernel(s) for {2}, {3} bytes, in {4:f2} s "
                                  "({5} compiled, {6} cached; {7:f1} s of compile time)\n",
                                  req.output == "-" ? "standard output" : req.output,
                                  kernels->size(), llvm::join(bundle.archs, ", "), bytes.size(),
                                  total, kernels->size() - cached, cached, compileSeconds);
  return kExitOk;
}

int commandInspect(const std::string &path, bool json, Verbosity verbosity) {
  std::string bytes, error;
  if (!readFileBounded(path, kMaxBundleBytes, ("the bundle " + path).c_str(), bytes, error)) {
    llvm::errs() << "fagen: " << error << "\n";
    return kExitToolchain;
  }
  Bundle bundle;
  if (!parseBundle(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), bundle,
                   error)) {
    llvm::errs() << "fagen: " << path << ": " << error << "\n";
    return kExitRejected;
  }
  if (json)
    printJson(inspectJson(path, bundle));
  else
    llvm::outs() << inspectText(path, bundle, verbosity.verbose);
  return kExitOk;
}

/// `fagen check`: with --json or -q, the check's own lines go to standard error (-q: nowhere,
/// and a line on standard error names each failing kernel) and standard output gets the JSON
/// object or the summary line.
int commandCheck(CheckOptions options, bool json, Verbosity verbosity) {
  if (verbosity.verbose)
    options.explain = true;
  if (!json && !verbosity.quiet)
    return runCheck(options);
  CheckSummary summary;
  options.summary = &summary;
  llvm::outs().flush();
  int saved = dup(STDOUT_FILENO);
  int sink = verbosity.quiet ? ::open("/dev/null", O_WRONLY | O_CLOEXEC) : dup(STDERR_FILENO);
  dup2(sink, STDOUT_FILENO);
  close(sink);
  int code = runCheck(options);
  llvm::outs().flush();
  dup2(saved, STDOUT_FILENO);
  close(saved);
  if (!json) {
    // -q hides the case lines: name each failing kernel, so that a rerun can take just it.
    for (const CheckKernelResult &k : summary.kernels)
      if (k.casesFailed > 0)
        llvm::errs() << llvm::formatv("fagen check: {0} ({1}) failed {2} of {3} cases; rerun "
                                      "with --kernel {0} --explain for its errors\n",
                                      k.name, k.arch, k.casesFailed,
                                      k.casesFailed + k.casesPassed);
    if (!summary.gpu.empty())
      llvm::outs() << llvm::formatv("{0} passed, {1} failed, {2} skipped\n", summary.passed,
                                    summary.failed, summary.skipped);
    return code;
  }
  llvm::json::Array kernels;
  for (const CheckKernelResult &k : summary.kernels)
    kernels.push_back(llvm::json::Object{{"name", k.name},
                                         {"arch", k.arch},
                                         {"result", k.result},
                                         {"cases_passed", k.casesPassed},
                                         {"cases_failed", k.casesFailed}});
  printJson(llvm::json::Object{
      {"bundle", options.bundlePath},
      {"gpu", summary.gpu.empty() ? llvm::json::Value(nullptr) : summary.gpu},
      {"exit_code", code},
      {"passed", summary.passed},
      {"failed", summary.failed},
      {"skipped", summary.skipped},
      {"kernels", std::move(kernels)}});
  return code;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"fagen: an ahead-of-time compiler for FlashAttention kernels.\n"
               "Reads a YAML attention spec, plans and generates specialized CUDA kernels,\n"
               "compiles them with nvcc and packages the cubins into one bundle that the\n"
               "fagen runtime library loads. No GPU is needed to build.\n\n"
               "  fagen build specs/default.yaml --arch sm_90 -o attn.fab\n"
               "  fagen plan specs/default.yaml --arch sm_90a\n"
               "  fagen inspect attn.fab\n"
               "  fagen check attn.fab            (on a GPU)\n"
               "  fagen tune specs/default.yaml --arch sm_90a -o tuning.db   (on a GPU)\n"
               "  fagen build specs/default.yaml --arch sm_90a --tuning tuning.db -o attn.fab\n\n"
               "Targets: sm_80/86/89 and sm_90 build the portable mma.sync template; sm_90a uses\n"
               "the warp-specialized wgmma template for forwards at head dims 64, 96, 128, 192\n"
               "and 256 (every variant), the portable one otherwise; sm_100/100a the portable\n"
               "one.\n"
               "Reference: README.md, docs/spec.md, docs/tuning.md, docs/bundle-format.md.\n",
               "fagen"};
  app.footer(kExitCodesHelp);
  app.set_version_flag("--version", std::string("fagen ") + FAGEN_VERSION_STRING);
  app.require_subcommand(1);

  std::string specPath, bundlePath;
  std::vector<std::string> archs;
  BuildRequest buildReq;
  BuildOptions &buildOptions = buildReq.options;
  bool noCache = false, json = false;
  Verbosity verbosity;
  // -q and -v, before or after the command.
  auto addVerbosity = [&](CLI::App *cmd) {
    cmd->add_flag("-q,--quiet", verbosity.quiet, "print nothing but errors (and the result)");
    cmd->add_flag("-v,--verbose", verbosity.verbose, "print more detail");
  };
  addVerbosity(&app);

  auto archHelp = "target arch, repeatable: sm_80 sm_86 sm_89 sm_90 sm_90a sm_100 sm_100a "
                  "(replaces the spec's targets)";

  CLI::App *build = app.add_subcommand("build", "compile a spec into a bundle");
  build->add_option("spec", specPath, "the attention spec (YAML)")->required();
  build->add_option("-o,--output", buildReq.output,
                    "the bundle to write: a regular file, written to a temporary file and "
                    "renamed (never a device, FIFO or the spec), or - for standard output")
      ->required();
  build->add_option("--depfile", buildReq.depfile,
                    "also write a Make depfile naming the bundle and every file it was built "
                    "from (the spec, its block layout files, the tuning database)");
  build->add_option("--arch", archs, archHelp);
  build->add_option("-j,--jobs", buildOptions.jobs, "parallel nvcc jobs (default: one per core)");
  build->add_option("--dump-dir", buildOptions.dumpDir,
                    "keep each kernel's .cu, .ptx, .cubin and ptxas report in this folder");
  build->add_option("--cache-dir", buildOptions.cacheDir,
                    "compile cache folder (default: $FAGEN_CACHE_DIR, $XDG_CACHE_HOME/fagen or "
                    "~/.cache/fagen)");
  build->add_flag("--no-cache", noCache, "compile everything, read and write no cache");
  build->add_option("--tuning", buildReq.tuningPath,
                    "use the winners of this `fagen tune` database: one kernel per tuned seqlen "
                    "bucket, dispatched by the runtime on each call's shape");
  build->add_flag("--tuning-allow-mismatch", buildReq.tuningAllowMismatch,
                  "use tuning records made with another nvcc or fagen version");
  addVerbosity(build);
  build->footer(kExitCodesHelp);

  CLI::App *plan = app.add_subcommand("plan", "print the kernels a spec would build");
  plan->add_option("spec", specPath, "the attention spec (YAML)")->required();
  plan->add_option("--arch", archs, archHelp);
  bool emit = false;
  plan->add_flag("--emit", emit, "print the generated CUDA source of each kernel instead");
  plan->add_flag("--json", json, "print the plans as one JSON object");
  std::string planTuning;
  bool planTuningAllowMismatch = false;
  plan->add_option("--tuning", planTuning,
                   "plan with the winners of this `fagen tune` database, as build --tuning "
                   "does (checked against this nvcc and fagen)");
  plan->add_flag("--tuning-allow-mismatch", planTuningAllowMismatch,
                 "use tuning records made with another nvcc or fagen version");
  addVerbosity(plan);
  plan->footer(kExitCodesHelp);

  CLI::App *inspect = app.add_subcommand("inspect", "print a bundle's versions, archs and kernels");
  inspect->add_option("bundle", bundlePath, "a bundle written by fagen build")->required();
  inspect->add_flag("--json", json, "print the bundle's description as one JSON object");
  addVerbosity(inspect);
  inspect->footer(kExitCodesHelp);

  CheckOptions checkOptions;
  CLI::App *check = app.add_subcommand(
      "check", "run every kernel of a bundle on this GPU against a float64 CPU reference");
  const std::string checkDetails =
      "Runs every kernel of a bundle that this GPU can run, forward and backward, of every\n"
      "variant, on seeded random inputs over a grid of odd shapes, against a float64 CPU\n"
      "reference: the kernel's error may be at most twice a same-precision reference's plus\n"
      "an epsilon (O and LSE; each of dQ, dK, dV). Outputs are poisoned first. A backward\n"
      "kernel gets O and LSE from a forward kernel of its variant in the bundle, else from\n"
      "the float64 reference rounded to the dtype (the table says which); a deterministic\n"
      "one runs twice and must repeat bit for bit. A persistent forward kernel (at most one\n"
      "CTA per SM, each walking a static deal of tiles) runs on the plan's grid and again on\n"
      "3 CTAs; a forward kernel with a tile counter runs without a workspace, then with one\n"
      "on the plan's grid and on 3 CTAs (many tiles each); every run must give the same\n"
      "bits. Varlen kernels run each shape as packed sequences of uneven lengths; runtime\n"
      "block masks are random (30% of the blocks, some rows none); static layouts are read\n"
      "from the cubin and verified by their hash. In one shape (\"rise\" in the table; not\n"
      "with --quick) a forward kernel's keys grow along the sequence (row j scaled by\n"
      "2^min(j/48, 7)), so that key tiles raise the row max past the rescale threshold\n"
      "and past what exp2 spans.\n\n"
      "Golden digests (--golden DIR) catch a change of numerics between commits: one file\n"
      "per kernel, DIR/KERNEL.ARCH.golden, holds for every shape and output (O, LSE; dQ,\n"
      "dK, dV) a SHA-256 of the fp32 values, their sum, rms, max |x| and 32 probe values.\n"
      "A tensor must match bitwise, except dQ of a backward kernel that adds it with\n"
      "atomics (not deterministic): its probes and statistics within 2 steps of the dtype\n"
      "at its largest |x| (docs/numerics.md). The check fails on a tensor that moved\n"
      "(saying which kernel, shape and tensor, and by how much), on a kernel without a\n"
      "golden file, and on a golden file without a kernel. After a deliberate numerics\n"
      "change, rewrite them and commit the diff:\n"
      "  fagen check attn.fab --golden tests/golden/attn --update-golden\n\n";
  check->add_option("bundle", checkOptions.bundlePath, "a bundle written by fagen build")
      ->required();
  check->add_option("--golden", checkOptions.goldenDir,
                    "compare every kernel's outputs on every shape with its golden file in "
                    "this folder (see below); fails on any difference, missing or extra file");
  check->add_flag("--update-golden", checkOptions.updateGolden,
                  "instead of failing, rewrite (atomically) the golden files whose outputs "
                  "moved or that are missing, and remove those of kernels the bundle no "
                  "longer has; a kernel with a failing case keeps its file");
  check->add_option("--seed", checkOptions.seed, "random seed of the inputs (default 1234)");
  check->add_flag("--quick", checkOptions.quick, "a reduced shape grid (for compute-sanitizer)");
  check->add_option("--kernel", checkOptions.kernelFilter,
                    "only kernels whose name contains this text");
  check->add_flag("--explain", checkOptions.explain,
                  "under every case, each output's largest error: the element, the kernel's, "
                  "float64 and same-precision values there, and the dtype's step (a mismatch "
                  "always prints its outputs over the bound)");
  check->add_flag("--nonfinite", checkOptions.nonFinite,
                  "instead of the shape grid, one shape per kernel with one NaN or +Inf input "
                  "element per case (forward: NaN in K, V, Q, +Inf in Q; backward: NaN in dO), "
                  "each output element checked against docs/numerics.md's guarantee; one "
                  "PASS/FAIL line per case");
  check->add_flag("--json", json,
                  "print the result as one JSON object (per kernel: passed, failed, skipped); "
                  "the case lines go to standard error");
  addVerbosity(check);
  check->footer(checkDetails + kExitCodesHelp);

  TuneOptions tuneOptions;
  std::string shapes;
  CLI::App *tune = app.add_subcommand(
      "tune", "measure each kernel's candidate configs (dense forward and backward kernels; "
              "decode kernels' split rule) on this GPU into a tuning database");
  tune->add_option("spec", tuneOptions.specPath, "the attention spec (YAML)")->required();
  tune->add_option("--arch", tuneOptions.archs, archHelp);
  tune->add_option("--shapes", shapes,
                   "representative sequence lengths of the shape buckets, e.g. 512,2048,8192 "
                   "(the default)");
  std::string decodeContexts;
  tune->add_option("--decode-contexts", decodeContexts,
                   "cache lengths the decode kernels' split rule is measured on, each at batch "
                   "1, 4 and 16 with 8 kv heads and one query token, e.g. 2048,16384,65536 (the "
                   "default); one rule wins over all of them");
  tune->add_option("-o,--output", tuneOptions.dbPath,
                   "the tuning database to append to (default tuning.db); an interrupted run "
                   "resumes from it");
  tune->add_option("--report", tuneOptions.reportPath,
                   "write an SVG plot of every candidate's TFLOP/s per bucket, winners marked");
  tune->add_option("-j,--jobs", tuneOptions.jobs, "parallel nvcc jobs (default: one per core)");
  tune->add_option("--runs", tuneOptions.runs,
                   "timed launches per candidate and bucket (default 30; median, p10, p90)");
  tune->add_flag("--allow-mismatch", tuneOptions.allowMismatch,
                 "resume from records of this GPU made with another nvcc, driver or fagen");
  tune->add_option("--kernel", tuneOptions.kernelFilter,
                   "only kernels whose name or workload contains this text (e.g. bwd: the "
                   "backward kernels, timed as a call runs them, gated on dQ, dK and dV)");
  tune->add_option("--cache-dir", tuneOptions.cacheDir, "compile cache folder (as for build)");
  addVerbosity(tune);
  tune->footer(kExitCodesHelp);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    app.exit(e);
    return kExitUsage;
  }

  if (verbosity.quiet && verbosity.verbose) {
    llvm::errs() << "fagen: -q and -v contradict each other: pass one\n";
    return kExitUsage;
  }
  // An unknown arch is a usage error, found before any file is read.
  std::vector<std::string> &archFlags = *tune ? tuneOptions.archs : archs;
  llvm::Expected<std::vector<std::string>> canonical = canonicalArchs(archFlags);
  if (!canonical)
    return reportError(canonical.takeError(), kExitUsage);
  archFlags = *canonical;

  buildOptions.useCache = !noCache;
  if (*build) {
    buildReq.specPath = specPath;
    buildReq.archs = archs;
    cleanUpOnInterrupt("fagen");
    return commandBuild(buildReq, verbosity);
  }
  if (*plan)
    return commandPlan(specPath, archs, emit, json, planTuning, planTuningAllowMismatch);
  if (*inspect)
    return commandInspect(bundlePath, json, verbosity);
  if (*check) {
    if (checkOptions.updateGolden && checkOptions.goldenDir.empty()) {
      llvm::errs() << "fagen: --update-golden needs --golden DIR\n";
      return kExitUsage;
    }
    if (checkOptions.nonFinite && !checkOptions.goldenDir.empty()) {
      llvm::errs() << "fagen: --golden compares the shape grid's outputs, not --nonfinite's: "
                      "run them separately\n";
      return kExitUsage;
    }
    return commandCheck(checkOptions, json, verbosity);
  }
  if (*tune) {
    if (!shapes.empty()) {
      llvm::Expected<std::vector<int>> seqlens = parseSeqlenList(shapes);
      if (!seqlens)
        return reportError(seqlens.takeError(), kExitUsage);
      tuneOptions.seqlens = *seqlens;
    }
    if (!decodeContexts.empty()) {
      llvm::Expected<std::vector<int>> contexts =
          parseSeqlenList(decodeContexts, "--decode-contexts", "2048,16384,65536");
      if (!contexts)
        return reportError(contexts.takeError(), kExitUsage);
      tuneOptions.decodeContexts = *contexts;
    }
    // A spec that cannot be read exits as in build and plan (the tuner would call it rejected).
    std::string text, error;
    if (tuneOptions.specPath != "-" &&
        !readFileBounded(tuneOptions.specPath, kMaxSpecBytes,
                         ("the spec " + tuneOptions.specPath).c_str(), text, error)) {
      llvm::errs() << "fagen: " << error << "\n";
      return kExitToolchain;
    }
    cleanUpOnInterrupt("fagen");
    if (verbosity.quiet) { // tune's progress lines go to standard output; its errors to stderr
      int sink = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      dup2(sink, STDOUT_FILENO);
      close(sink);
    }
    return runTune(tuneOptions);
  }
  return kExitUsage;
}
