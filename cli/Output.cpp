//===- Output.cpp - what fagen plan, inspect and check print, as text and JSON -===//

#include "cli/Output.h"

#include "compiler/bundle/Package.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace fagen {

namespace {

llvm::json::Value seqlenBound(int64_t v) {
  if (v >= kSeqlenUnbounded)
    return nullptr;
  return v;
}

/// The variant's keys, as the spec and the manifest spell them.
llvm::json::Object variantJson(const Variant &v) {
  llvm::json::Object o{{"pass", toText(v.pass)},
                       {"dtype", toText(v.dtype)},
                       {"head_dim_qk", v.headDimQK},
                       {"head_dim_v", v.headDimV},
                       {"mask", toText(v.mask)},
                       {"mask_align", toText(v.maskAlign)},
                       {"score_mod", toText(v.scoreMod)},
                       {"dropout", v.dropout},
                       {"varlen", v.varlen},
                       {"sparsity", toText(v.sparsity)},
                       {"deterministic", v.deterministic}};
  if (v.sparsity != Sparsity::None)
    o["sparse_block"] = v.sparseBlock;
  if (v.sparsity == Sparsity::Static)
    o["sparse_hash"] = v.sparseHash;
  return o;
}

} // namespace

std::string spillWarning(const std::string &name, const std::string &arch, int spillBytes,
                         int registers) {
  if (spillBytes <= 0)
    return "";
  return llvm::formatv("warning: kernel {0} ({1}) spills {2} bytes to local memory at {3} "
                       "registers: it computes the right result, more slowly; a smaller tile "
                       "(the spec's tile:) or `fagen tune` may avoid it",
                       name, arch, spillBytes, registers)
      .str();
}

std::string templateRecordText(const KernelRecord &k) {
  const std::string record = verifiedOn(k);
  // A template with a record that does not cover this kernel's variant names the variant.
  const bool uncovered = record.empty() && !verifiedOn(k.templ, k.pass, k.arch).empty();
  const std::string what = "template " + k.templ +
                           (k.pass == Pass::Backward ? " (backward)" : "") + " on " + k.arch +
                           (uncovered ? ", this variant (" + k.text() + ")" : "");
  if (record.empty())
    return what +
           ": no verification record (compiled, never run by fagen's tests); run `fagen check` "
           "on such a GPU";
  return what + ": verified on " + record +
         "; a record of the template, not a check of this bundle (run `fagen check` on the "
         "GPU for that)";
}

llvm::json::Value plansJson(const std::string &specPath, const std::vector<KernelPlan> &plans) {
  llvm::json::Array kernels;
  for (const KernelPlan &p : plans) {
    llvm::json::Object k = variantJson(p);
    k["name"] = p.name;
    k["variant"] = p.variant;
    k["arch"] = p.arch;
    k["template"] = p.templ;
    k["block_m"] = p.blockM;
    k["block_n"] = p.blockN;
    k["warps"] = p.warps;
    k["stages"] = p.stages;
    k["threads"] = p.threads;
    k["smem_bytes"] = p.smemBytes;
    k["rescale_tau"] = p.rescaleTau;
    k["exp2_emu_percent"] = p.exp2EmuPercent;
    k["exp2_poly_degree"] = p.exp2PolyDegree;
    k["persistent"] = p.persistent;
    k["tile_counter"] = p.tileCounter;
    k["tma_store_o"] = p.tmaStoreO;
    k["q_tokens"] = p.qTokens;
    k["page_size"] = p.pageSize;
    k["staged_epilogue"] = p.stagedEpilogue;
    k["rotate_query_walk"] = p.rotateQueryWalk;
    k["dq_writer"] = p.dqWriter;
    k["seqlen_min"] = p.seqlenMin;
    k["seqlen_max"] = seqlenBound(p.seqlenMax);
    k["tuning"] = p.tuning;
    if (p.spillFallback)
      k["spill_fallback"] = p.spillFallback->text();
    kernels.push_back(std::move(k));
  }
  return llvm::json::Object{{"spec", specPath}, {"kernels", std::move(kernels)}};
}

std::string inspectText(const std::string &path, const Bundle &bundle, bool verbose) {
  std::string out = llvm::formatv("bundle {0}\n  format version {1}, built by fagen {2} with "
                                  "{3}\n  archs: {4}\n  kernels: {5}\n",
                                  path, kBundleFormatVersion, bundle.fagenVersion,
                                  bundle.toolchain, llvm::join(bundle.archs, ", "),
                                  bundle.kernels.size())
                        .str();
  for (const KernelRecord &k : bundle.kernels) {
    out += llvm::formatv(
               "\nkernel {0}\n  arch={1} template={2} pass={3} variant={4}\n"
               "  dtype={5} head_dim_qk={6} head_dim_v={7} mask={8}\n"
               "  block_m={9} block_n={10} warps={11} stages={12} threads={13} smem={14}\n"
               "  rescale_tau={15} exp2_emu_percent={16} exp2_poly_degree={17}\n",
               k.name, k.arch, k.templ, toText(k.pass), k.variant, toText(k.dtype), k.headDimQK,
               k.headDimV, toText(k.mask), k.blockM, k.blockN, k.warps, k.stages, k.threads,
               k.smemBytes, k.rescaleTau, k.exp2EmuPercent, k.exp2PolyDegree)
               .str();
    if (k.persistent)
      out += "  persistent: one thread block per SM, each walking its work tiles\n";
    if (k.tileCounter)
      out += std::string("  tile counter: with a forward workspace (4 bytes), one thread block "
                         "per SM takes the next work tile, heaviest first; without, ") +
             (k.persistent ? "as persistent says" : "one thread block per work tile") + "\n";
    if (k.tmaStoreO)
      out += "  O stored through shared memory with TMA (O's strides must meet TMA's rules, as "
             "Q's)\n";
    if (isDecodeKernel(k))
      out += llvm::formatv("  decode: serves forward calls of up to {0} query tokens per "
                           "sequence, keys split across CTAs (NAME_combine merges the splits; "
                           "NAME_merge serves fagen_run_merge_states; {1} threads)\n",
                           k.qTokens, k.prePostThreads)
                 .str();
    if (k.isPaged())
      out += llvm::formatv("  paged KV cache: {0}-token pages through a block table, cache "
                           "lengths seqused_k\n",
                           k.pageSize)
                 .str();
    if (k.seqlenMin != 0 || k.seqlenMax != kSeqlenUnbounded)
      out += "  serves max(seqlen_q, seqlen_k): " + seqlenRangeText(k.seqlenMin, k.seqlenMax) +
             "\n";
    out += llvm::formatv("  registers={0} spill_bytes={1} cubin_bytes={2}\n  tuning: {3}\n",
                         k.registers, k.spillBytes, bundle.cubins[k.cubinSection].size(),
                         k.tuning)
               .str();
    if (std::string w = spillWarning(k.name, k.arch, k.spillBytes, k.registers); !w.empty())
      out += "  " + w + "\n";
    if (verbose)
      out += llvm::formatv("  variant keys: {0}\n  params_version={1} mask_align={2} "
                           "score_mod={3} dropout={4} varlen={5} sparsity={6} cubin_section={7}\n",
                           k.text(), k.paramsVersion, toText(k.maskAlign), toText(k.scoreMod),
                           int(k.dropout), int(k.varlen), toText(k.sparsity), k.cubinSection + 1)
                 .str();
    out += "  " + templateRecordText(k) + "\n";
  }
  return out;
}

llvm::json::Value inspectJson(const std::string &path, const Bundle &bundle) {
  llvm::json::Array kernels, warnings;
  for (const KernelRecord &k : bundle.kernels) {
    llvm::json::Object o = variantJson(k);
    o["name"] = k.name;
    o["variant"] = k.variant;
    o["arch"] = k.arch;
    o["template"] = k.templ;
    o["block_m"] = k.blockM;
    o["block_n"] = k.blockN;
    o["warps"] = k.warps;
    o["stages"] = k.stages;
    o["threads"] = k.threads;
    o["smem_bytes"] = k.smemBytes;
    o["rescale_tau"] = k.rescaleTau;
    o["exp2_emu_percent"] = k.exp2EmuPercent;
    o["exp2_poly_degree"] = k.exp2PolyDegree;
    o["persistent"] = k.persistent;
    o["tile_counter"] = k.tileCounter;
    o["tma_store_o"] = k.tmaStoreO;
    o["q_tokens"] = k.qTokens;
    o["page_size"] = k.pageSize;
    o["seqlen_min"] = k.seqlenMin;
    o["seqlen_max"] = seqlenBound(k.seqlenMax);
    o["registers"] = k.registers;
    o["spill_bytes"] = k.spillBytes;
    o["cubin_bytes"] = int64_t(bundle.cubins[k.cubinSection].size());
    o["params_version"] = k.paramsVersion;
    o["tuning"] = k.tuning;
    std::string record = verifiedOn(k);
    // The template's record, not a claim about this bundle's kernels.
    o["template_verified_on"] = record.empty() ? llvm::json::Value(nullptr) : record;
    if (std::string w = spillWarning(k.name, k.arch, k.spillBytes, k.registers); !w.empty())
      warnings.push_back(w);
    kernels.push_back(std::move(o));
  }
  llvm::json::Array archs;
  for (const std::string &a : bundle.archs)
    archs.push_back(a);
  return llvm::json::Object{{"bundle", path},
                            {"format_version", int64_t(kBundleFormatVersion)},
                            {"fagen_version", bundle.fagenVersion},
                            {"toolchain", bundle.toolchain},
                            {"archs", std::move(archs)},
                            {"kernels", std::move(kernels)},
                            {"warnings", std::move(warnings)}};
}

} // namespace fagen
