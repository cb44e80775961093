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

#include "compiler/bundle/Bundle.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>

#include <chrono>
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
  2  bad command-line usage
  3  toolchain or I/O failure: nvcc missing or failing, an unreadable or unwritable file
  4  no GPU or no CUDA driver (check and tune)
)";

int reportError(llvm::Error err, int code) {
  llvm::errs() << "fagen: " << llvm::toString(std::move(err)) << "\n";
  return code;
}

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

struct PlanInputs {
  AttentionSpec spec;
  std::vector<KernelPlan> plans;
};

/// Parses the spec and plans its kernels (with the tuned configs of `tuning`, if any).
llvm::Expected<PlanInputs> loadAndPlan(const std::string &specPath,
                                       const std::vector<std::string> &archFlags,
                                       const TuningTable *tuning = nullptr) {
  llvm::Expected<std::vector<std::string>> archs = canonicalArchs(archFlags);
  if (!archs)
    return archs.takeError();
  llvm::Expected<AttentionSpec> spec = parseSpecFile(specPath);
  if (!spec)
    return spec.takeError();
  llvm::Expected<std::vector<KernelPlan>> plans = planKernels(*spec, *archs, tuning);
  if (!plans)
    return plans.takeError();
  return PlanInputs{std::move(*spec), std::move(*plans)};
}

int commandPlan(const std::string &specPath, const std::vector<std::string> &archFlags,
                bool emit) {
  llvm::Expected<PlanInputs> in = loadAndPlan(specPath, archFlags);
  if (!in)
    return reportError(in.takeError(), kExitRejected);
  if (!emit) {
    llvm::outs() << formatPlans(in->plans);
    return kExitOk;
  }
  for (const KernelPlan &p : in->plans)
    llvm::outs() << "// ---- " << p.name << " (" << p.arch << ")\n" << emitKernelSource(p);
  return kExitOk;
}

int commandBuild(const std::string &specPath, const std::vector<std::string> &archFlags,
                 const std::string &output, const BuildOptions &baseOptions, bool quiet,
                 const std::string &tuningPath, bool tuningAllowMismatch) {
  auto start = std::chrono::steady_clock::now();
  llvm::Expected<Toolchain> toolchain = findToolchain();
  if (!toolchain)
    return reportError(toolchain.takeError(), kExitToolchain);
  std::optional<TuningTable> tuning;
  if (!tuningPath.empty()) {
    llvm::Expected<TuningTable> table =
        loadTuningTable(tuningPath, *toolchain, tuningAllowMismatch);
    if (!table)
      return reportError(table.takeError(), kExitRejected);
    tuning = std::move(*table);
  }
  llvm::Expected<PlanInputs> in = loadAndPlan(specPath, archFlags, tuning ? &*tuning : nullptr);
  if (!in)
    return reportError(in.takeError(), kExitRejected);

  BuildOptions options = baseOptions;
  options.spillFallbacks = true;
  bool tty = isatty(STDERR_FILENO);
  if (!quiet)
    options.progress = [tty](unsigned done, unsigned total, const std::string &status) {
      llvm::errs() << (tty ? "\r\033[K" : "") << "[" << done << "/" << total << "] " << status
                   << (tty && done < total ? "" : "\n");
      llvm::errs().flush();
    };
  if (!quiet)
    llvm::errs() << "fagen: building " << in->plans.size() << " kernel(s) from " << specPath
                 << " with " << toolchain->describe() << "\n";
  llvm::Expected<std::vector<CompiledKernel>> kernels =
      compileKernels(*toolchain, in->plans, options);
  if (!kernels)
    return reportError(kernels.takeError(), kExitToolchain);

  Bundle bundle = assembleBundle(*toolchain, *kernels);
  std::vector<uint8_t> bytes = serializeBundle(bundle);
  if (llvm::Error err =
          writeFileAtomically(output, std::string(bytes.begin(), bytes.end())))
    return reportError(std::move(err), kExitToolchain);

  unsigned cached = 0;
  double compileSeconds = 0;
  for (const CompiledKernel &k : *kernels) {
    cached += k.cached;
    compileSeconds += k.seconds;
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet)
    llvm::errs() << llvm::formatv("fagen: wrote {0}: {1} kernel(s) for {2}, {3} bytes, in {4:f2} s "
                                  "({5} compiled, {6} cached; {7:f1} s of compile time)\n",
                                  output, kernels->size(), llvm::join(bundle.archs, ", "),
                                  bytes.size(), total, kernels->size() - cached, cached,
                                  compileSeconds);
  return kExitOk;
}

int commandInspect(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buffer)
    return reportError(llvm::createStringError(buffer.getError(), "cannot read %s: %s",
                                               path.c_str(),
                                               buffer.getError().message().c_str()),
                       kExitToolchain);
  Bundle bundle;
  std::string error;
  const auto *data = reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart());
  if (!parseBundle(data, (*buffer)->getBufferSize(), bundle, error)) {
    llvm::errs() << "fagen: " << path << ": " << error << "\n";
    return kExitRejected;
  }
  llvm::outs() << llvm::formatv("bundle {0}\n  format version {1}, built by fagen {2} with {3}\n"
                                "  archs: {4}\n  kernels: {5}\n",
                                path, kBundleFormatVersion, bundle.fagenVersion, bundle.toolchain,
                                llvm::join(bundle.archs, ", "), bundle.kernels.size());
  for (const KernelRecord &k : bundle.kernels) {
    std::string status = verifiedOn(k.templ, k.pass, k.arch);
    llvm::outs() << llvm::formatv(
        "\nkernel {0}\n  arch={1} template={2} pass={3} variant={4}\n"
        "  dtype={5} head_dim_qk={6} head_dim_v={7} mask={8}\n"
        "  block_m={9} block_n={10} warps={11} stages={12} threads={13} smem={14}\n"
        "  rescale_tau={15} exp2_emu_percent={16} exp2_poly_degree={17}\n",
        k.name, k.arch, k.templ, toText(k.pass), k.variant, toText(k.dtype), k.headDimQK,
        k.headDimV, toText(k.mask), k.blockM, k.blockN, k.warps, k.stages, k.threads, k.smemBytes,
        k.rescaleTau, k.exp2EmuPercent, k.exp2PolyDegree);
    if (k.persistent)
      llvm::outs() << "  persistent: one thread block per SM, each walking its work tiles\n";
    if (k.tileCounter)
      llvm::outs() << "  tile counter: with a forward workspace (4 bytes), one thread block per "
                      "SM takes the next work tile, heaviest first; without, "
                   << (k.persistent ? "as persistent says" : "one thread block per work tile")
                   << "\n";
    if (k.tmaStoreO)
      llvm::outs() << "  O stored through shared memory with TMA (O's strides must meet TMA's "
                      "rules, as Q's)\n";
    if (k.seqlenMin != 0 || k.seqlenMax != kSeqlenUnbounded)
      llvm::outs() << llvm::formatv("  serves max(seqlen_q, seqlen_k) in {0}..{1}\n", k.seqlenMin,
                                    k.seqlenMax);
    llvm::outs() << llvm::formatv(
        "  registers={0} spill_bytes={1} cubin_bytes={2}\n  tuning: {3}\n  status: {4}\n",
        k.registers, k.spillBytes, bundle.cubins[k.cubinSection].size(), k.tuning,
        status.empty() ? std::string("compiled, not run") : "verified on " + status);
  }
  return kExitOk;
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

  std::string specPath, output, bundlePath;
  std::vector<std::string> archs;
  BuildOptions buildOptions;
  bool noCache = false, quiet = false;

  auto archHelp = "target arch, repeatable: sm_80 sm_86 sm_89 sm_90 sm_90a sm_100 sm_100a "
                  "(replaces the spec's targets)";

  CLI::App *build = app.add_subcommand("build", "compile a spec into a bundle");
  build->add_option("spec", specPath, "the attention spec (YAML)")->required();
  build->add_option("-o,--output", output, "the bundle to write (written atomically)")->required();
  build->add_option("--arch", archs, archHelp);
  build->add_option("-j,--jobs", buildOptions.jobs, "parallel nvcc jobs (default: one per core)");
  build->add_option("--dump-dir", buildOptions.dumpDir,
                    "keep each kernel's .cu, .ptx, .cubin and ptxas report in this folder");
  build->add_option("--cache-dir", buildOptions.cacheDir,
                    "compile cache folder (default: $FAGEN_CACHE_DIR, $XDG_CACHE_HOME/fagen or "
                    "~/.cache/fagen)");
  build->add_flag("--no-cache", noCache, "compile everything, read and write no cache");
  std::string tuningPath;
  bool tuningAllowMismatch = false;
  build->add_option("--tuning", tuningPath,
                    "use the winners of this `fagen tune` database: one kernel per tuned seqlen "
                    "bucket, dispatched by the runtime on each call's shape");
  build->add_flag("--tuning-allow-mismatch", tuningAllowMismatch,
                  "use tuning records made with another nvcc or fagen version");
  build->add_flag("-q,--quiet", quiet, "print nothing but errors");
  build->footer(kExitCodesHelp);

  CLI::App *plan = app.add_subcommand("plan", "print the kernels a spec would build");
  plan->add_option("spec", specPath, "the attention spec (YAML)")->required();
  plan->add_option("--arch", archs, archHelp);
  bool emit = false;
  plan->add_flag("--emit", emit, "print the generated CUDA source of each kernel instead");
  plan->footer(kExitCodesHelp);

  CLI::App *inspect = app.add_subcommand("inspect", "print a bundle's versions, archs and kernels");
  inspect->add_option("bundle", bundlePath, "a bundle written by fagen build")->required();
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
  check->footer(checkDetails + kExitCodesHelp);

  TuneOptions tuneOptions;
  std::string shapes;
  CLI::App *tune = app.add_subcommand(
      "tune", "measure each kernel's candidate configs on this GPU into a tuning database");
  tune->add_option("spec", tuneOptions.specPath, "the attention spec (YAML)")->required();
  tune->add_option("--arch", tuneOptions.archs, archHelp);
  tune->add_option("--shapes", shapes,
                   "representative sequence lengths of the shape buckets, e.g. 512,2048,8192 "
                   "(the default)");
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
                   "only kernels whose name or workload contains this text");
  tune->add_option("--cache-dir", tuneOptions.cacheDir, "compile cache folder (as for build)");
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

  buildOptions.useCache = !noCache;
  if (*build)
    return commandBuild(specPath, archs, output, buildOptions, quiet, tuningPath,
                        tuningAllowMismatch);
  if (*plan)
    return commandPlan(specPath, archs, emit);
  if (*inspect)
    return commandInspect(bundlePath);
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
    return runCheck(checkOptions);
  }
  if (*tune) {
    if (!shapes.empty()) {
      llvm::Expected<std::vector<int>> seqlens = parseSeqlenList(shapes);
      if (!seqlens)
        return reportError(seqlens.takeError(), kExitUsage);
      tuneOptions.seqlens = *seqlens;
    }
    return runTune(tuneOptions);
  }
  return kExitUsage;
}
