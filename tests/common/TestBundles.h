//===- TestBundles.h - small bundles for tests, fuzz seeds and fakes -------===//
#ifndef FAGEN_TESTS_COMMON_TESTBUNDLES_H
#define FAGEN_TESTS_COMMON_TESTBUNDLES_H

#include "templates/abi/bwd_params.h"
#include "templates/abi/decode_params.h"
#include "templates/common/decode_split.h"
#include "compiler/bundle/Bundle.h"
#include "fagen/fagen.h"

#include <string>
#include <vector>

namespace fagen::test {

/// Bytes that pass the loader's cubin check (the ELF magic) and name where they came from.
inline std::string fakeCubin(const std::string &tag) {
  return std::string("\x7f" "ELF\x02\x01\x01", 7) + tag;
}

inline KernelRecord testKernel(const std::string &name, const std::string &arch,
                               const std::string &dtype, int headDim, const std::string &mask,
                               uint32_t cubin) {
  KernelRecord k;
  k.name = name;
  k.pass = Pass::Forward;
  k.arch = arch;
  k.templ = "sm80";
  k.variant = "v_" + dtype + "_" + std::to_string(headDim) + "_" + mask;
  k.dtype = *fromText<DType>(dtype);
  k.headDimQK = headDim;
  k.headDimV = headDim;
  k.mask = *fromText<Mask>(mask);
  k.blockM = 128;
  k.blockN = 64;
  k.warps = 4;
  k.stages = 2;
  k.threads = 128;
  k.smemBytes = 49152;
  k.paramsVersion = FAGEN_FWD_PARAMS_VERSION;
  k.registers = 168;
  k.spillBytes = 0;
  k.tuning = "default";
  k.cubinSection = cubin;
  return k;
}

/// Kernels for fp16/bf16 x head dim 64/128 x none/causal on sm_80 and sm_90a: four kernels, two
/// cubins (one per arch).
inline Bundle makeTestBundle() {
  Bundle b;
  b.fagenVersion = "0.1.0";
  b.toolchain = "nvcc 13.0.88";
  b.archs = {"sm_80", "sm_90a"};
  b.cubins = {fakeCubin("sm_80 cubin"), fakeCubin("sm_90a cubin")};
  b.kernels = {testKernel("fagen_fwd_bf16_d128_causal_sm80", "sm_80", "bf16", 128, "causal", 0),
               testKernel("fagen_fwd_fp16_d128_causal_sm80", "sm_80", "fp16", 128, "causal", 0),
               testKernel("fagen_fwd_fp16_d128_causal_sm90a", "sm_90a", "fp16", 128, "causal", 1),
               testKernel("fagen_fwd_fp16_d64_none_sm80", "sm_80", "fp16", 64, "none", 0)};
  return b;
}

/// A backward kernel (three entry points NAME_pre, NAME, NAME_post in its cubin).
inline KernelRecord testBackwardKernel(const std::string &name, const std::string &arch,
                                       const std::string &dtype, int headDim,
                                       const std::string &mask, uint32_t cubin) {
  KernelRecord k = testKernel(name, arch, dtype, headDim, mask, cubin);
  k.pass = Pass::Backward;
  k.blockM = 64;
  k.blockN = 128;
  k.warps = 8;
  k.threads = 256;
  k.smemBytes = 81920;
  k.prePostThreads = 128;
  k.paramsVersion = FAGEN_BWD_PARAMS_VERSION;
  return k;
}

/// Every kind of variant, forward and backward, all for sm_90 (the fake GPU's default), one
/// cubin. Indices: see the names.
inline Bundle makeVariantBundle() {
  Bundle b;
  b.fagenVersion = "0.1.0";
  b.toolchain = "nvcc 13.0.88";
  b.archs = {"sm_90"};
  b.cubins = {fakeCubin("sm_90 variants")};
  KernelRecord fwdCausal = testKernel("fagen_fwd_fp16_hd128_causal_sm80", "sm_90", "fp16", 128,
                                      "causal", 0);
  KernelRecord bwdCausal = testBackwardKernel("fagen_bwd_fp16_hd128_causal_sm80", "sm_90",
                                              "fp16", 128, "causal", 0);
  KernelRecord bwdCausalDet = bwdCausal;
  bwdCausalDet.name = "fagen_bwd_fp16_hd128_causal_det_sm80";
  bwdCausalDet.deterministic = true;
  // Every run-time feature at once: window (top-left), softcap, dropout, varlen.
  KernelRecord fwdWindow = testKernel("fagen_fwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80",
                                      "sm_90", "bf16", 64, "window", 0);
  fwdWindow.maskAlign = MaskAlign::TopLeft;
  fwdWindow.scoreMod = ScoreMod::Softcap;
  fwdWindow.dropout = true;
  fwdWindow.varlen = true;
  KernelRecord bwdWindow = testBackwardKernel(
      "fagen_bwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80", "sm_90", "bf16", 64, "window", 0);
  bwdWindow.maskAlign = MaskAlign::TopLeft;
  bwdWindow.scoreMod = ScoreMod::Softcap;
  bwdWindow.dropout = true;
  bwdWindow.varlen = true;
  KernelRecord fwdAlibi = testKernel("fagen_fwd_fp16_hd128_none_alibi_bsr128_sm80", "sm_90",
                                     "fp16", 128, "none", 0);
  fwdAlibi.scoreMod = ScoreMod::Alibi;
  fwdAlibi.sparsity = Sparsity::Runtime;
  fwdAlibi.sparseBlock = 128;
  KernelRecord fwdStatic = testKernel("fagen_fwd_fp16_hd128_causal_bs128_0123abcd_sm80", "sm_90",
                                      "fp16", 128, "causal", 0);
  fwdStatic.sparsity = Sparsity::Static;
  fwdStatic.sparseBlock = 128;
  fwdStatic.sparseRows = 8;
  fwdStatic.sparseCols = 16;
  fwdStatic.sparseHash = "0123abcd";
  b.kernels = {bwdWindow, bwdCausal, bwdCausalDet, fwdWindow, fwdAlibi, fwdStatic, fwdCausal};
  return b;
}

/// A split-KV decode kernel (NAME, NAME_combine and NAME_merge in its cubin) for up to
/// `qTokens` query tokens: 16 packed rows, 64 keys a tile.
inline KernelRecord testDecodeKernel(const std::string &name, const std::string &arch,
                                     const std::string &dtype, int headDim,
                                     const std::string &mask, uint32_t cubin, int qTokens) {
  KernelRecord k = testKernel(name, arch, dtype, headDim, mask, cubin);
  k.templ = "sm80decode";
  k.qTokens = qTokens;
  k.decodeCtasPerSm = kDecodeCtasPerSm;
  k.decodeMinTiles = kDecodeMinTilesPerSplit;
  k.blockM = 16;
  k.blockN = 64;
  k.warps = 4;
  k.stages = 3;
  k.threads = 128;
  k.smemBytes = 108800;
  k.prePostThreads = FAGEN_MERGE_THREADS;
  k.paramsVersion = FAGEN_DECODE_PARAMS_VERSION;
  return k;
}

/// The test bundle (makeTestBundle) with decode kernels beside its forwards: fp16 hd 128 causal
/// on sm_90 for up to 4 query tokens (kernel 4), bf16 hd 64 none on sm_90 for 1 (kernel 5).
inline Bundle makeDecodeBundle() {
  Bundle b = makeTestBundle();
  b.archs = {"sm_80", "sm_90", "sm_90a"};
  b.cubins.push_back(fakeCubin("sm_90 decode cubin"));
  b.kernels.push_back(testDecodeKernel("fagen_fwd_fp16_hd128_causal_sm80decode_m16n64w4s3",
                                       "sm_90", "fp16", 128, "causal", 2, 4));
  b.kernels.push_back(testDecodeKernel("fagen_fwd_bf16_hd64_none_sm80decode_m16n64w4s6",
                                       "sm_90", "bf16", 64, "none", 2, 1));
  return b;
}

/// The decode bundle (makeDecodeBundle) with paged decode kernels of the same variants, and a
/// paged varlen forward (chunked prefill) of the first:
/// fp16 hd 128 causal, 16-token pages, up to 4 query tokens (kernel 6), and bf16 hd 64 none,
/// 256-token pages (kernel 7).
inline Bundle makePagedDecodeBundle() {
  Bundle b = makeDecodeBundle();
  KernelRecord p16 = testDecodeKernel("fagen_fwd_fp16_hd128_causal_paged16_sm80decode_m16n64w4s3",
                                      "sm_90", "fp16", 128, "causal", 2, 4);
  p16.pageSize = 16;
  KernelRecord p256 = testDecodeKernel("fagen_fwd_bf16_hd64_none_paged256_sm80decode_m16n64w4s6",
                                       "sm_90", "bf16", 64, "none", 2, 1);
  p256.pageSize = 256;
  // Chunked prefill: a varlen sm80 forward over 16-token pages (fagen_decode_params).
  KernelRecord prefill = testKernel("fagen_fwd_fp16_hd128_causal_varlen_paged16_sm80_m128n64w4s2",
                                    "sm_90", "fp16", 128, "causal", 2);
  prefill.varlen = true;
  prefill.pageSize = 16;
  prefill.paramsVersion = FAGEN_DECODE_PARAMS_VERSION;
  b.kernels.push_back(p16);
  b.kernels.push_back(p256);
  b.kernels.push_back(prefill);
  return b;
}

/// The smallest useful bundle: one kernel, one tiny cubin (for every-offset tests).
inline Bundle makeTinyBundle() {
  Bundle b;
  b.fagenVersion = "1";
  b.archs = {"sm_80"};
  b.cubins = {fakeCubin("")};
  b.kernels = {testKernel("k", "sm_80", "fp16", 64, "none", 0)};
  b.kernels[0].variant = "v";
  b.kernels[0].tuning = "";
  return b;
}

/// A valid BSHD problem: batch 2, 16 query heads over 4 kv heads, seqlen 1000 / 577.
inline fagen_fwd_problem testProblem(fagen_dtype dtype = FAGEN_DTYPE_FP16, int headDim = 128,
                                     int causal = 1) {
  fagen_fwd_problem p = FAGEN_FWD_PROBLEM_INIT;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 4;
  p.seqlen_q = 1000;
  p.seqlen_k = 577;
  p.head_dim_qk = headDim;
  p.head_dim_v = headDim;
  p.dtype = dtype;
  p.causal = causal;
  fagen_fwd_problem_set_bshd_strides(&p);
  return p;
}

inline std::vector<uint8_t> testBundleBytes() { return serializeBundle(makeTestBundle()); }

} // namespace fagen::test

#endif // FAGEN_TESTS_COMMON_TESTBUNDLES_H
