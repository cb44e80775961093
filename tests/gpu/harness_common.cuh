// fagen GPU dev harnesses: what the sm80 (fwd_harness.cu) and sm90 (sm90_harness.cu) harnesses
// share. Correctness of every registered kernel against check/Reference.h at odd shapes and
// input families (poisoned outputs, bitwise repeatability, the tolerance rule), then timing of
// the FlashAttention-3 benchmark shapes. A harness includes its template and this header,
// instantiates its kernels like the emitter does, registers each with a static `Register`, and
// returns harness_main(argc, argv).
//
//   <harness> [--check] [--bench] [--csv FILE] [--filter SUBSTRING[,SUBSTRING...]] (a part
//             ending in '$' must end the name)
//             [--seqlens 2048,16384] [--ratio-csv FILE] [--reduced]
//
// The run scripts (run_harness.sh, run_sm90.sh, run_fa4.sh, sdpa_bench.py) parse the printed
// lines: keep their format.
#ifndef FAGEN_TESTS_GPU_HARNESS_COMMON_CUH
#define FAGEN_TESTS_GPU_HARNESS_COMMON_CUH

#include "Reference.h"
#include "TmaMaps.h"
#include "common/philox.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_util.cuh"

using namespace fagen::reference;

// --- kernels -----------------------------------------------------------------------------------
/// An attention variant as the harness's reference sees it (the template's Variant type, and
/// the head dims). Every field's default is the dense variant.
enum class VMask { None, Causal, CausalTopLeft, Window, WindowTopLeft };
enum class VScore { None, Softcap, Alibi };
enum class VSparse { None, Runtime, Static };
struct VariantInfo {
  VMask mask = VMask::None;
  VScore score = VScore::None;
  bool dropout = false;
  VSparse sparse = VSparse::None;
  int block = 0;                         // block-sparse block size
  const uint8_t *table = nullptr;        // VSparse::Static: the layout (host copy)
  int table_rows = 0, table_cols = 0;
  bool varlen = false;
  int head_dim_v = 0;                    // 0: the kernel's head_dim (head_dim_qk)
  const char *bench_against = nullptr;   // a dense kernel of the same tile to time against
};

/// One instantiated kernel and its launch geometry, the same for both templates: one CTA of
/// `threads` threads per `block_m` query rows, head and batch, with `smem_bytes` of dynamic
/// shared memory. The rest of the config is spelled in the name.
struct KernelInfo {
  const char *name;
  const void *func;
  ElementType type;
  int head_dim; // head_dim_qk
  fagen::Mask mask;
  int block_m, threads, smem_bytes;
  bool expect_fail; // built to miss the tolerance rule: proves that the check can fail
  VariantInfo variant;
  int tma_block_n = 0; // nonzero: a TMA kernel (second argument fagen_fwd_tma_maps, K/V boxes
                       // of this many rows) with a 1-D grid of work tiles (sm90/fwd_ws_kernel.cuh)
  bool persistent = false; // TMA kernels: as many CTAs as SMs (at most one per work tile)
  bool tma_store_o = false; // TMA kernels built with kTmaStoreO (O's map encoded)
};
/// The registered kernels, in definition order (checks and timings run in this order).
static std::vector<KernelInfo> &kernels() {
  static std::vector<KernelInfo> k;
  return k;
}
struct Register {
  Register(KernelInfo info) {
    if (info.mask == fagen::Mask::Causal && info.variant.mask == VMask::None)
      info.variant.mask = VMask::Causal;
    if (!info.variant.head_dim_v)
      info.variant.head_dim_v = info.head_dim;
    kernels().push_back(info);
  }
};

/// Whether a kernel computes plain attention (no mask but none / causal, no score mod, dropout,
/// sparsity or varlen, one head dim): the FlashAttention-3 benchmark's kernels.
static bool is_dense(const KernelInfo &k) {
  const VariantInfo &v = k.variant;
  return (v.mask == VMask::None || v.mask == VMask::Causal) && v.score == VScore::None &&
         !v.dropout && v.sparse == VSparse::None && !v.varlen && v.head_dim_v == k.head_dim;
}

/// The mask kind of a template mask's name.
static constexpr fagen::Mask maskOf(const char *s) { return s[0] == 'C' ? fagen::Mask::Causal : fagen::Mask::None; }

static void launch(const KernelInfo &k, const fagen_fwd_params &p) {
  dim3 grid((p.seqlen_q + k.block_m - 1) / k.block_m, p.heads_q, p.batch);
  if (!k.tma_block_n) {
    void *args[] = {const_cast<fagen_fwd_params *>(&p)};
    CUDA_CHECK(cudaLaunchKernel(k.func, grid, dim3(k.threads), args, k.smem_bytes, 0));
    return;
  }
  static const int sms = [] {
    int n = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
    return n;
  }();
  const int tiles = grid.x * grid.y * grid.z;
  grid = dim3(k.persistent ? std::min(tiles, sms) : tiles);
  fagen_fwd_tma_maps maps;
  std::string what;
  if (int r = fagen::encodeFwdTmaMaps(tensor_map_encoder(), p, k.head_dim, k.head_dim, k.block_m,
                                      k.tma_block_n, maps, what, 0, 0, k.tma_store_o)) {
    std::fprintf(stderr, "%s: cuTensorMapEncodeTiled failed for %s (CUresult %d)\n", k.name,
                 what.c_str(), r);
    std::exit(2);
  }
  void *args[] = {const_cast<fagen_fwd_params *>(&p), &maps};
  CUDA_CHECK(cudaLaunchKernel(k.func, grid, dim3(k.threads), args, k.smem_bytes, 0));
}

// --- command line ------------------------------------------------------------------------------
struct Options {
  bool check = false, bench = false; // neither given: both
  const char *csv = nullptr;         // --csv: the timings, for sdpa_bench.py
  const char *filter = nullptr;      // --filter: run only kernels whose name contains one of
                                     // these comma-separated substrings
  const char *seqlens = nullptr;     // --seqlens: bench only these sequence lengths
  FILE *ratio_csv = nullptr;         // --ratio-csv: per case, error / bound for O and LSE
  bool reduced = false;              // --reduced: random inputs, the first kReducedCases cases
                                     // (for compute-sanitizer, ~100x slower)
};

static Options parse_args(int argc, char **argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check"))
      opt.check = true;
    else if (!std::strcmp(argv[i], "--reduced"))
      opt.reduced = true;
    else if (!std::strcmp(argv[i], "--bench"))
      opt.bench = true;
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc)
      opt.csv = argv[++i];
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      opt.filter = argv[++i];
    else if (!std::strcmp(argv[i], "--seqlens") && i + 1 < argc)
      opt.seqlens = argv[++i];
    else if (!std::strcmp(argv[i], "--ratio-csv") && i + 1 < argc)
      opt.ratio_csv = std::fopen(argv[++i], "w");
  }
  if (!opt.check && !opt.bench)
    opt.check = opt.bench = true;
  return opt;
}

/// Whether --filter selects this kernel name (no filter: all of them).
static bool selected(const char *name, const char *filter) {
  if (!filter)
    return true;
  const size_t name_len = std::strlen(name);
  for (const char *p = filter; *p;) {
    const char *end = std::strchr(p, ',');
    std::string part = end ? std::string(p, end) : std::string(p);
    if (!part.empty() && part.back() == '$') { // anchored: the name ends with it
      part.pop_back();
      if (name_len >= part.size() && part == name + name_len - part.size())
        return true;
    } else if (!part.empty() && std::strstr(name, part.c_str())) {
      return true;
    }
    if (!end)
      break;
    p = end + 1;
  }
  return false;
}

// --- problems ----------------------------------------------------------------------------------
struct Case {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool bshd; // else bhsd
  float amp; // input scale
};

// Every Sq/Sk of {1, 17, 127, 577, 1000} appears on both sides; Sq > Sk makes causal rows with no
// visible key; GQA 4:1 and 2:1; both layouts.
static const Case kCases[] = {
    {1, 2, 2, 1, 1, false, 1.f},      {2, 4, 1, 17, 17, true, 1.f},
    {2, 4, 4, 127, 577, false, 1.f},  {1, 8, 2, 577, 127, true, 2.f},
    {2, 2, 2, 1000, 1000, false, 1.f}, {1, 4, 1, 1000, 17, true, 1.f},
    {1, 2, 2, 17, 1000, false, 3.f},  {2, 4, 1, 1, 577, true, 1.f},
    {1, 4, 2, 577, 577, false, 1.f},  {2, 2, 1, 127, 1, true, 1.f},
};
static constexpr int kNumCases = int(sizeof(kCases) / sizeof(kCases[0]));
static constexpr int kReducedCases = 4; // --reduced: only the first ones

/// Input families for the rescaling paths: on top of the random inputs, a trend in head dim 0
/// (q = 1 there, so key j's logit gains softmax_scale * k[j][0]). Slow: +0.02 per key (1.8 log2
/// units per 64 keys), the row max creeps up and tau 8 keeps stale maxima for several tiles;
/// fast: +0.1 per key (9.2 log2 units per 64 keys), every tile of 64 or more keys rescales; first
/// key: key 0 gains 12 * amp^2 (the max never moves after the first tile). Logits stay below
/// ~110, where fp32 rounding of the LSE stays well inside kEpsLse. Variant kernels run the
/// random family only (the softmax paths are the dense kernels' business).
enum class Family { Random, SlowGrowth, FastGrowth, FirstKey };
static const Family kFamilies[] = {Family::Random, Family::SlowGrowth, Family::FastGrowth,
                                   Family::FirstKey};
static const char *familyName(Family f) {
  switch (f) {
  case Family::Random:
    return "";
  case Family::SlowGrowth:
    return ",slow";
  case Family::FastGrowth:
    return ",fast";
  case Family::FirstKey:
    return ",first";
  }
  return "";
}

/// One case's inputs on the host (params hold host pointers to q, k, v; the run-time arguments
/// of the variant beside them) and the reference results they are checked against.
struct HostProblem {
  std::vector<uint16_t> q, k, v;
  fagen_fwd_params p;
  VariantInfo variant;
  int hd_qk, hd_v;
  ElementType type;
  std::vector<int32_t> cu_q, cu_k; // varlen: batch + 1 offsets
  std::vector<float> slopes;       // alibi
  std::vector<uint8_t> block_mask; // runtime block mask
  size_t o_elems = 0, lse_elems = 0;
  FwdResult ref64, same;
  FwdError same_err;

  int seq_q(int b) const { return variant.varlen ? cu_q[b + 1] - cu_q[b] : p.seqlen_q; }
  int seq_k(int b) const { return variant.varlen ? cu_k[b + 1] - cu_k[b] : p.seqlen_k; }
  /// Element offset of row i of batch entry b, head h, in a tensor with these strides.
  int64_t offset(int64_t batch_stride, int64_t head_stride, int64_t row_stride, int b, int h,
                 int i, bool is_q) const {
    const int64_t row0 = variant.varlen ? (is_q ? cu_q[b] : cu_k[b]) : 0;
    return (variant.varlen ? 0 : b * batch_stride) + h * head_stride + (row0 + i) * row_stride;
  }
  int64_t lse_offset(int b, int h, int i) const {
    return variant.varlen ? cu_q[b] + i + h * p.lse_head_stride
                          : b * p.lse_batch_stride + h * p.lse_head_stride + i;
  }
};

static void set_strides(fagen_fwd_params &p, int hd_qk, int hd_v, bool bshd) {
  auto set = [&](int64_t &b, int64_t &h, int64_t &r, int heads, int seqlen, int hd) {
    if (bshd) {
      r = int64_t(heads) * hd, h = hd, b = int64_t(seqlen) * heads * hd;
    } else {
      r = hd, h = int64_t(seqlen) * hd, b = int64_t(heads) * seqlen * hd;
    }
  };
  set(p.q_batch_stride, p.q_head_stride, p.q_row_stride, p.heads_q, p.seqlen_q, hd_qk);
  set(p.k_batch_stride, p.k_head_stride, p.k_row_stride, p.heads_kv, p.seqlen_k, hd_qk);
  set(p.v_batch_stride, p.v_head_stride, p.v_row_stride, p.heads_kv, p.seqlen_k, hd_v);
  set(p.o_batch_stride, p.o_head_stride, p.o_row_stride, p.heads_q, p.seqlen_q, hd_v);
  p.lse_head_stride = p.seqlen_q, p.lse_batch_stride = int64_t(p.heads_q) * p.seqlen_q;
}

static fagen_fwd_params make_params(int b, int hq, int hk, int sq, int sk, int hd_qk, int hd_v,
                                    bool bshd) {
  fagen_fwd_params p;
  std::memset(&p, 0, sizeof(p));
  p.batch = b, p.heads_q = hq, p.heads_kv = hk, p.seqlen_q = sq, p.seqlen_k = sk;
  p.group_size = hq / hk;
  p.softmax_scale = 1.f / std::sqrt(float(hd_qk));
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  p.window_left = p.window_right = -1;
  set_strides(p, hd_qk, hd_v, bshd);
  return p;
}
static fagen_fwd_params make_params(int b, int hq, int hk, int sq, int sk, int hd, bool bshd) {
  return make_params(b, hq, hk, sq, sk, hd, hd, bshd);
}

/// Dropout's run-time arguments for probability `drop_p`.
static void set_dropout(fagen_fwd_params &p, float drop_p, uint64_t seed, uint64_t offset) {
  p.dropout_p = drop_p;
  p.dropout_threshold = fagen::dropout_threshold(drop_p);
  p.dropout_rescale = fagen::dropout_rescale(p.dropout_threshold);
  p.dropout_seed = seed, p.dropout_offset = offset;
}

/// The variant's run-time arguments of case ci: window bounds (sometimes unbounded on a side),
/// softcap, per-head (sometimes per batch entry) ALiBi slopes, a random block mask (sometimes
/// broadcast over heads), dropout p / seed / a 64-bit offset, varlen lengths.
static void set_variant_args(HostProblem &hp, int ci, std::mt19937 &gen) {
  fagen_fwd_params &p = hp.p;
  const VariantInfo &v = hp.variant;
  p.window_left = ci % 4 == 3 ? -1 : 5 + 37 * ci % 90;
  p.window_right = ci % 3 == 0 ? -1 : 11 * ci % 30;
  p.softcap = 2.f + ci;
  if (v.score == VScore::Alibi) {
    p.alibi_batch_stride = ci % 2 ? p.heads_q : 0;
    hp.slopes.resize(size_t(ci % 2 ? p.batch : 1) * p.heads_q);
    for (size_t i = 0; i < hp.slopes.size(); ++i)
      hp.slopes[i] = std::exp2(-8.f * float(i % p.heads_q + 1) / p.heads_q) *
                     (1.f + 0.25f * float(i / p.heads_q));
  }
  if (v.dropout)
    set_dropout(p, 0.17f + 0.02f * ci, 0x123456789abcull + ci, 0x100000001ull * ci + 7);
  if (v.sparse == VSparse::Runtime) {
    const int rows = (p.seqlen_q + v.block - 1) / v.block, cols = (p.seqlen_k + v.block - 1) / v.block;
    const bool broadcast = ci % 3 == 0;
    p.block_mask_row_stride = cols;
    p.block_mask_head_stride = broadcast ? 0 : int64_t(rows) * cols;
    p.block_mask_batch_stride = int64_t(broadcast ? 1 : p.heads_q) * rows * cols;
    hp.block_mask.resize(size_t(p.batch) * p.block_mask_batch_stride);
    std::bernoulli_distribution visible(0.5);
    for (auto &b : hp.block_mask)
      b = visible(gen) ? uint8_t(1 + gen() % 255) : 0;
  }
}

/// Whether query i of batch entry b, head h sees key j (the mask, then the block layout).
static bool ref_visible(const HostProblem &hp, int b, int h, int i, int j) {
  const VariantInfo &v = hp.variant;
  const int sq = hp.seq_q(b), sk = hp.seq_k(b);
  const bool top_left = v.mask == VMask::CausalTopLeft || v.mask == VMask::WindowTopLeft;
  const int off = top_left ? 0 : sk - sq;
  int left = -1, right = -1;
  if (v.mask == VMask::Causal || v.mask == VMask::CausalTopLeft)
    right = 0;
  if (v.mask == VMask::Window || v.mask == VMask::WindowTopLeft)
    left = hp.p.window_left, right = hp.p.window_right;
  if (right >= 0 && j > i + off + right)
    return false;
  if (left >= 0 && j < i + off - left)
    return false;
  if (v.sparse == VSparse::Runtime) {
    const fagen_fwd_params &p = hp.p;
    return hp.block_mask[b * p.block_mask_batch_stride + h * p.block_mask_head_stride +
                         (i / v.block) * p.block_mask_row_stride + j / v.block] != 0;
  }
  if (v.sparse == VSparse::Static) {
    const int r = i / v.block, c = j / v.block;
    return r < v.table_rows && c < v.table_cols && v.table[r * v.table_cols + c] != 0;
  }
  return true;
}

/// The reference forward of the variant (the semantics of docs/design/variants-and-backward.md):
/// Acc double = float64; Acc float with SamePrecision = fp32 scores and softmax, P rounded to
/// the input dtype before P@V, O rounded to it. O as dense [batch, heads_q, seqlen_q, hd_v], LSE
/// [batch, heads_q, seqlen_q] (varlen: rows past a sequence's end 0); rows that see no key:
/// O = 0, LSE = -inf.
template <class Acc, bool SamePrecision> static FwdResult reference_forward(const HostProblem &hp) {
  const fagen_fwd_params &P = hp.p;
  const int Sq = P.seqlen_q, Dq = hp.hd_qk, Dv = hp.hd_v;
  const VariantInfo &v = hp.variant;
  FwdResult R;
  R.O.assign(size_t(P.batch) * P.heads_q * Sq * Dv, 0.0);
  R.Lse.assign(size_t(P.batch) * P.heads_q * Sq, 0.0);
  const Acc Scale = Acc(P.softmax_scale);
  const Acc kInf = std::numeric_limits<Acc>::infinity();
  // Parallel over (batch, head, chunk of kRowsPerTask query rows): all cores even for 2 heads.
  const int kRowsPerTask = 64, chunks = (Sq + kRowsPerTask - 1) / kRowsPerTask;
  parallelForHeads(P.batch, P.heads_q * chunks, [&](int B, int HC) {
    const int H = HC / chunks, row_begin = HC % chunks * kRowsPerTask;
    const int Hk = H / P.group_size, sq = hp.seq_q(B), sk = hp.seq_k(B);
    if (row_begin >= sq)
      return;
    const int row_end = std::min(sq, row_begin + kRowsPerTask);
    auto ld = [&](const std::vector<uint16_t> &x, int64_t o) { return toFloat(x[o], hp.type); };
    std::vector<float> Q(size_t(sq) * Dq), K(size_t(sk) * Dq), V(size_t(sk) * Dv);
    for (int I = row_begin; I < row_end; ++I)
      for (int X = 0; X < Dq; ++X)
        Q[size_t(I) * Dq + X] =
            ld(hp.q, hp.offset(P.q_batch_stride, P.q_head_stride, P.q_row_stride, B, H, I, true) + X);
    for (int J = 0; J < sk; ++J) {
      for (int X = 0; X < Dq; ++X)
        K[size_t(J) * Dq + X] =
            ld(hp.k, hp.offset(P.k_batch_stride, P.k_head_stride, P.k_row_stride, B, Hk, J, false) + X);
      for (int X = 0; X < Dv; ++X)
        V[size_t(J) * Dv + X] =
            ld(hp.v, hp.offset(P.v_batch_stride, P.v_head_stride, P.v_row_stride, B, Hk, J, false) + X);
    }
    const Acc slope = v.score == VScore::Alibi ? Acc(hp.slopes[B * P.alibi_batch_stride + H]) : 0;
    std::vector<Acc> S(sk), OutRow(Dv);
    for (int I = row_begin; I < row_end; ++I) {
      const size_t RowIndex = (size_t(B) * P.heads_q + H) * Sq + I;
      Acc Max = -kInf;
      for (int J = 0; J < sk; ++J) {
        if (!ref_visible(hp, B, H, I, J)) {
          S[J] = -kInf;
          continue;
        }
        Acc Dot = 0;
        for (int X = 0; X < Dq; ++X)
          Dot += Acc(Q[size_t(I) * Dq + X]) * Acc(K[size_t(J) * Dq + X]);
        Acc L = Dot * Scale;
        if (v.score == VScore::Softcap)
          L = Acc(P.softcap) * std::tanh(L / Acc(P.softcap));
        else if (v.score == VScore::Alibi)
          L -= slope * Acc(std::abs(I + sk - sq - J));
        S[J] = L;
        Max = std::max(Max, S[J]);
      }
      if (Max == -kInf) { // no visible key
        R.Lse[RowIndex] = -std::numeric_limits<double>::infinity();
        continue;
      }
      Acc Sum = 0;
      for (int J = 0; J < sk; ++J) {
        S[J] = std::exp(S[J] - Max);
        Sum += S[J];
      }
      R.Lse[RowIndex] = double(Max) + std::log(double(Sum));
      std::fill(OutRow.begin(), OutRow.end(), Acc(0));
      for (int J = 0; J < sk; ++J) {
        Acc Pj = S[J] / Sum;
        if (SamePrecision)
          Pj = roundTo(float(Pj), hp.type);
        if (v.dropout)
          Pj = fagen::dropout_keep(P.dropout_seed, P.dropout_offset, P.dropout_threshold,
                                   uint32_t(B * P.heads_q + H), I, J)
                   ? Pj * Acc(P.dropout_rescale)
                   : Acc(0);
        if (Pj == 0)
          continue;
        for (int X = 0; X < Dv; ++X)
          OutRow[X] += Pj * Acc(V[size_t(J) * Dv + X]);
      }
      for (int X = 0; X < Dv; ++X)
        R.O[RowIndex * Dv + X] =
            SamePrecision ? double(roundTo(float(OutRow[X]), hp.type)) : double(OutRow[X]);
    }
  });
  return R;
}

/// Reads a kernel's output (O and LSE through the problem's strides and offsets) into the dense
/// FwdResult layout.
static FwdResult read_output(const HostProblem &hp, const uint16_t *O, const float *Lse) {
  const fagen_fwd_params &P = hp.p;
  const int Sq = P.seqlen_q, D = hp.hd_v;
  FwdResult R;
  R.O.assign(size_t(P.batch) * P.heads_q * Sq * D, 0.0);
  R.Lse.assign(size_t(P.batch) * P.heads_q * Sq, 0.0);
  for (int B = 0; B < P.batch; ++B)
    for (int H = 0; H < P.heads_q; ++H)
      for (int I = 0; I < hp.seq_q(B); ++I) {
        const size_t RowIndex = (size_t(B) * P.heads_q + H) * Sq + I;
        R.Lse[RowIndex] = Lse[hp.lse_offset(B, H, I)];
        const int64_t o = hp.offset(P.o_batch_stride, P.o_head_stride, P.o_row_stride, B, H, I, true);
        for (int X = 0; X < D; ++X)
          R.O[RowIndex * D + X] = toFloat(O[o + X], hp.type);
      }
  return R;
}

/// Overwrites head dim 0 of q and k with the trend of `family` (see Family). Dense layouts only.
static void add_trend(HostProblem &hp, const Case &c, int hd, Family family) {
  const fagen_fwd_params &p = hp.p;
  const ElementType type = hp.type;
  const float sqrt_hd = std::sqrt(float(hd)); // k[j][0] * softmax_scale = the logit's gain
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads_q; ++h)
      for (int i = 0; i < c.seqlen_q; ++i)
        hp.q[b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride] =
            fromFloat(1.f, type);
    for (int h = 0; h < c.heads_kv; ++h)
      for (int j = 0; j < c.seqlen_k; ++j) {
        float gain = 0.f;
        if (family == Family::SlowGrowth)
          gain = 0.02f * j;
        else if (family == Family::FastGrowth)
          gain = 0.1f * j;
        else if (j == 0)
          gain = 12.f * c.amp * c.amp;
        hp.k[b * p.k_batch_stride + h * p.k_head_stride + j * p.k_row_stride] =
            fromFloat(gain * sqrt_hd, type);
      }
  }
}

/// The shapes and run-time arguments of case ci for a kernel's variant, without inputs.
/// Varlen: batch entry b has seqlen_q (even b) or max(1, seqlen_q / 3) queries and
/// max(1, seqlen_k / 2 + 1) (even b) or seqlen_k keys, packed BSHD; dense BHSD layouts get an
/// LSE head stride padded by 5 rows.
static void init_problem(HostProblem &hp, const KernelInfo &k, const Case &c, int ci,
                         std::mt19937 &gen) {
  hp.variant = k.variant, hp.hd_qk = k.head_dim, hp.hd_v = k.variant.head_dim_v, hp.type = k.type;
  hp.p = make_params(c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, hp.hd_qk, hp.hd_v,
                     c.bshd);
  fagen_fwd_params &p = hp.p;
  if (hp.variant.varlen) {
    hp.cu_q.assign(1, 0), hp.cu_k.assign(1, 0);
    for (int b = 0; b < c.batch; ++b) {
      hp.cu_q.push_back(hp.cu_q.back() + (b % 2 ? std::max(1, c.seqlen_q / 3) : c.seqlen_q));
      hp.cu_k.push_back(hp.cu_k.back() + (b % 2 ? c.seqlen_k : std::max(1, c.seqlen_k / 2 + 1)));
    }
    int max_q = 0, max_k = 0;
    for (int b = 0; b < c.batch; ++b)
      max_q = std::max(max_q, hp.seq_q(b)), max_k = std::max(max_k, hp.seq_k(b));
    p.seqlen_q = max_q, p.seqlen_k = max_k;
    const int64_t tq = hp.cu_q.back();
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    p.q_row_stride = int64_t(c.heads_q) * hp.hd_qk, p.q_head_stride = hp.hd_qk;
    p.k_row_stride = int64_t(c.heads_kv) * hp.hd_qk, p.k_head_stride = hp.hd_qk;
    p.v_row_stride = int64_t(c.heads_kv) * hp.hd_v, p.v_head_stride = hp.hd_v;
    p.o_row_stride = int64_t(c.heads_q) * hp.hd_v, p.o_head_stride = hp.hd_v;
    p.lse_batch_stride = 0, p.lse_head_stride = tq;
    p.total_q = int32_t(tq), p.total_k = hp.cu_k.back(); // the rows the kernels clamp to
    hp.o_elems = size_t(tq) * c.heads_q * hp.hd_v;
    hp.lse_elems = size_t(tq) * c.heads_q;
  } else {
    if (!c.bshd)
      p.lse_head_stride = c.seqlen_q + 5, p.lse_batch_stride = int64_t(c.heads_q) * (c.seqlen_q + 5);
    hp.o_elems = size_t(c.batch) * c.heads_q * c.seqlen_q * hp.hd_v;
    hp.lse_elems = size_t(c.batch) * p.lse_batch_stride;
  }
  set_variant_args(hp, ci, gen);
}

/// Elements of q, k and v for the problem's layout.
static void problem_sizes(const HostProblem &hp, size_t &nq, size_t &nk, size_t &nv) {
  const fagen_fwd_params &p = hp.p;
  const size_t rows_q = hp.variant.varlen ? size_t(hp.cu_q.back()) : size_t(p.batch) * p.seqlen_q;
  const size_t rows_k = hp.variant.varlen ? size_t(hp.cu_k.back()) : size_t(p.batch) * p.seqlen_k;
  nq = rows_q * p.heads_q * hp.hd_qk;
  nk = rows_k * p.heads_kv * hp.hd_qk;
  nv = rows_k * p.heads_kv * hp.hd_v;
}

/// A name for the part of a kernel's variant that its reference depends on.
static std::string variant_key(const KernelInfo &k) {
  const VariantInfo &v = k.variant;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%d/%d/%d/%d/%d/%d/%d/%p/%d/%d", int(k.type), k.head_dim,
                v.head_dim_v, int(v.mask), int(v.score), int(v.dropout), int(v.sparse),
                (const void *)v.table, v.block, int(v.varlen));
  return buf;
}

/// The inputs and references of one case, built on first use and kept for the other kernels.
static const HostProblem &get_problem(const KernelInfo &k, int case_index, Family family) {
  static std::map<std::string, HostProblem *> cache;
  const std::string key = variant_key(k) + "/" + std::to_string(case_index) + "/" +
                          std::to_string(int(family));
  auto it = cache.find(key);
  if (it != cache.end())
    return *it->second;
  const Case &c = kCases[case_index];
  HostProblem *hp = new HostProblem;
  std::mt19937 gen(1000 * case_index + k.head_dim + 7 * int(k.type));
  init_problem(*hp, k, c, case_index, gen);
  std::normal_distribution<float> normal(0.f, c.amp);
  auto fill = [&](std::vector<uint16_t> &x, size_t n) {
    x.resize(n);
    for (auto &e : x)
      e = fromFloat(normal(gen), k.type);
  };
  size_t nq, nk, nv;
  problem_sizes(*hp, nq, nk, nv);
  fill(hp->q, nq);
  fill(hp->k, nk);
  fill(hp->v, nv);
  if (family != Family::Random)
    add_trend(*hp, c, k.head_dim, family);
  hp->ref64 = reference_forward<double, false>(*hp);
  hp->same = reference_forward<float, true>(*hp);
  hp->same_err = measureError(hp->ref64, hp->same);
  cache[key] = hp;
  return *hp;
}

/// Device buffers for q, k, v (2-byte elements), O and the LSE (fp32), freed at scope exit.
struct DeviceTensors {
  void *q, *k, *v, *o;
  float *lse;
  DeviceTensors(size_t q_bytes, size_t kv_bytes, size_t o_bytes, size_t lse_bytes)
      : DeviceTensors(q_bytes, kv_bytes, kv_bytes, o_bytes, lse_bytes) {}
  DeviceTensors(size_t q_bytes, size_t k_bytes, size_t v_bytes, size_t o_bytes, size_t lse_bytes) {
    CUDA_CHECK(cudaMalloc(&q, q_bytes));
    CUDA_CHECK(cudaMalloc(&k, k_bytes));
    CUDA_CHECK(cudaMalloc(&v, v_bytes));
    CUDA_CHECK(cudaMalloc(&o, o_bytes));
    CUDA_CHECK(cudaMalloc(&lse, lse_bytes));
  }
  DeviceTensors(const DeviceTensors &) = delete;
  DeviceTensors &operator=(const DeviceTensors &) = delete;
  ~DeviceTensors() {
    CUDA_CHECK(cudaFree(q));
    CUDA_CHECK(cudaFree(k));
    CUDA_CHECK(cudaFree(v));
    CUDA_CHECK(cudaFree(o));
    CUDA_CHECK(cudaFree(lse));
  }
  void bind(fagen_fwd_params &p) const { p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse; }
};

/// Device copies of a problem's variant arguments (slopes, block mask, cu_seqlens), bound into
/// params; freed at scope exit.
struct DeviceVariantArgs {
  std::vector<void *> owned;
  template <class T> const T *upload(const std::vector<T> &x) {
    if (x.empty())
      return nullptr;
    void *d;
    CUDA_CHECK(cudaMalloc(&d, x.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
    owned.push_back(d);
    return static_cast<const T *>(d);
  }
  DeviceVariantArgs(const HostProblem &hp, fagen_fwd_params &p) {
    p.alibi_slopes = upload(hp.slopes);
    p.block_mask = upload(hp.block_mask);
    p.cu_seqlens_q = upload(hp.cu_q);
    p.cu_seqlens_k = upload(hp.cu_k);
  }
  DeviceVariantArgs(const DeviceVariantArgs &) = delete;
  DeviceVariantArgs &operator=(const DeviceVariantArgs &) = delete;
  ~DeviceVariantArgs() {
    for (void *d : owned)
      CUDA_CHECK(cudaFree(d));
  }
};

// --- correctness -------------------------------------------------------------------------------
struct CaseResult {
  FwdError err;
  bool within;     // the tolerance rule against the fp64 reference
  bool guard_ok;   // nothing written past O or the LSE
  bool repeatable; // both runs bitwise equal
};

/// Runs kernel `k` twice on a problem into outputs poisoned with 0xff (NaN in fp16, bf16 and
/// fp32), each followed by kGuard poisoned elements; returns both runs' outputs.
static void run_poisoned(const KernelInfo &k, const HostProblem &hp, std::vector<uint16_t> (&out)[2],
                         std::vector<float> (&lse)[2]) {
  const size_t kGuard = 4096; // poisoned elements after O: an out-of-bounds write shows there
  fagen_fwd_params p = hp.p;
  DeviceTensors d(hp.q.size() * 2, hp.k.size() * 2, hp.v.size() * 2, (hp.o_elems + kGuard) * 2,
                  (hp.lse_elems + kGuard) * 4);
  CUDA_CHECK(cudaMemcpy(d.q, hp.q.data(), hp.q.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.k, hp.k.data(), hp.k.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.v, hp.v.data(), hp.v.size() * 2, cudaMemcpyHostToDevice));
  d.bind(p);
  DeviceVariantArgs args(hp, p);
  for (int rep = 0; rep < 2; ++rep) { // twice: the result must be bitwise repeatable
    CUDA_CHECK(cudaMemset(d.o, 0xff, (hp.o_elems + kGuard) * 2));
    CUDA_CHECK(cudaMemset(d.lse, 0xff, (hp.lse_elems + kGuard) * 4));
    launch(k, p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    out[rep].resize(hp.o_elems + kGuard);
    lse[rep].resize(hp.lse_elems + kGuard);
    CUDA_CHECK(cudaMemcpy(out[rep].data(), d.o, out[rep].size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse[rep].data(), d.lse, lse[rep].size() * 4, cudaMemcpyDeviceToHost));
  }
}

/// Runs kernel `k` on one case (run_poisoned) and measures the first run's error.
static CaseResult run_case(const KernelInfo &k, const HostProblem &hp) {
  std::vector<uint16_t> out[2];
  std::vector<float> lse[2];
  run_poisoned(k, hp, out, lse);
  CaseResult r;
  r.guard_ok = true;
  for (size_t i = hp.o_elems; i < out[0].size(); ++i)
    r.guard_ok &= out[0][i] == 0xffff;
  for (size_t i = hp.lse_elems; i < lse[0].size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lse[0][i], 4);
    r.guard_ok &= bits == 0xffffffffu;
  }
  r.repeatable = out[0] == out[1] &&
                 std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * 4) == 0;
  r.err = measureError(hp.ref64, read_output(hp, out[0].data(), lse[0].data()));
  r.within = withinTolerance(r.err, hp.same_err);
  return r;
}

/// Dropout's mask, read back through the kernel: q = 0 (every visible logit 0, so P is uniform
/// over a row's visible keys), seqlen_k = head_dim_v and v = the identity, so O[i][j] =
/// keep(i, j) / ((1 - p) * visible keys): nonzero exactly where key j is visible and kept.
/// Every element must match philox.h's rule (dropout_keep), and the keep rate over the visible
/// elements must be within 5 sigma of 1 - p. Dense layouts; no ALiBi (its bias would
/// change nothing but underflow far keys). Returns whether it passed.
static bool run_dropout_mask_test(const KernelInfo &k) {
  Case c{2, 4, 2, 577, k.variant.head_dim_v, true, 1.f};
  HostProblem hp;
  std::mt19937 gen(99);
  init_problem(hp, k, c, 2, gen);
  set_dropout(hp.p, 0.1f, 0xfeedbeefcafeull, 0x300000005ull);
  size_t nq, nk, nv;
  problem_sizes(hp, nq, nk, nv);
  hp.q.assign(nq, 0), hp.k.assign(nk, fromFloat(1.f, k.type)), hp.v.assign(nv, 0);
  const fagen_fwd_params &p = hp.p;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_kv; ++h)
      for (int j = 0; j < c.seqlen_k; ++j)
        hp.v[hp.offset(p.v_batch_stride, p.v_head_stride, p.v_row_stride, b, h, j, false) + j] =
            fromFloat(1.f, k.type);
  std::vector<uint16_t> out[2];
  std::vector<float> lse[2];
  run_poisoned(k, hp, out, lse);
  long long visible = 0, kept = 0, mismatches = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_q; ++h)
      for (int i = 0; i < c.seqlen_q; ++i) {
        const int64_t o = hp.offset(p.o_batch_stride, p.o_head_stride, p.o_row_stride, b, h, i, true);
        for (int j = 0; j < c.seqlen_k; ++j) {
          const bool vis = ref_visible(hp, b, h, i, j);
          const bool keep = vis && fagen::dropout_keep(p.dropout_seed, p.dropout_offset,
                                                       p.dropout_threshold,
                                                       uint32_t(b * p.heads_q + h), i, j);
          const float x = toFloat(out[0][o + j], k.type);
          visible += vis, kept += keep;
          mismatches += (x != 0.f) != keep || std::isnan(x);
        }
      }
  // The effective keep probability: p quantized to 1/256 (philox.h).
  const double rate = visible ? double(kept) / visible : 0,
               q = 1.0 - p.dropout_threshold / 256.0;
  const double sigma = std::sqrt(q * (1 - q) / std::max(1ll, visible));
  const bool ok = mismatches == 0 && visible > 0 && std::fabs(rate - q) <= 5 * sigma;
  std::printf("DROPOUT MASK %s: %lld visible, keep rate %.5f (1 - p = %.5f, 5 sigma %.5f), "
              "%lld elements differ from philox.h: %s\n",
              k.name, visible, rate, q, 5 * sigma, mismatches, ok ? "ok" : "FAIL");
  return ok;
}

/// Checks every selected kernel on every case (and, dense kernels, every family); prints one
/// line per run and returns the number of failures.
static int run_checks(const Options &opt) {
  int failures = 0, runs = 0;
  std::printf("%-56s %-28s %10s %10s %10s %10s %s\n", "kernel", "case (BxHq/Hkv,Sq,Sk)", "errO",
              "tolO", "errLSE", "tolLSE", "");
  for (const KernelInfo &k : kernels()) {
    if (!selected(k.name, opt.filter))
      continue;
    CUDA_CHECK(cudaFuncSetAttribute(k.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    k.smem_bytes));
    int beyond_tolerance = 0, kernel_runs = 0;
    bool kernel_ok = true;
    for (Family family : kFamilies)
    for (int ci = 0; ci < kNumCases; ++ci) {
      if ((opt.reduced || !is_dense(k)) && family != Family::Random)
        continue;
      if (opt.reduced && ci >= kReducedCases)
        continue;
      const HostProblem &hp = get_problem(k, ci, family);
      const CaseResult r = run_case(k, hp);
      // An expect_fail kernel must still write exactly its output, repeatably; whether it
      // missed the tolerance is judged over all its cases below.
      const bool ok = (r.within || k.expect_fail) && r.guard_ok && r.repeatable;
      char case_name[64];
      const Case &c = kCases[ci];
      std::snprintf(case_name, sizeof(case_name), "%dx%d/%d,%d,%d%s%s", c.batch, c.heads_q,
                    c.heads_kv, c.seqlen_q, c.seqlen_k, c.bshd ? ",bshd" : "", familyName(family));
      std::printf("%-56s %-28s %10.3g %10.3g %10.3g %10.3g %s%s%s\n", k.name, case_name,
                  r.err.MaxO, 2 * hp.same_err.MaxO + kEpsO, r.err.MaxLse,
                  2 * hp.same_err.MaxLse + kEpsLse,
                  !ok ? "FAIL" : r.within ? "ok" : "beyond tolerance (expected)",
                  r.guard_ok ? "" : " (guard overwritten)",
                  r.repeatable ? "" : " (not repeatable)");
      if (opt.ratio_csv)
        std::fprintf(opt.ratio_csv, "%s,%s,%.4g,%.4g\n", k.name, case_name,
                     r.err.MaxO / (2 * hp.same_err.MaxO + kEpsO),
                     r.err.MaxLse / (2 * hp.same_err.MaxLse + kEpsLse));
      beyond_tolerance += !r.within;
      ++kernel_runs;
      kernel_ok &= ok;
      failures += !ok;
      ++runs;
    }
    if (k.expect_fail) {
      // Proof that the rule can fail: this kernel must miss the tolerance somewhere.
      const bool missed = beyond_tolerance > 0;
      std::printf("EXPECTED FAIL %s: beyond tolerance in %d/%d cases: %s\n", k.name,
                  beyond_tolerance, kernel_runs, missed && kernel_ok ? "ok" : "FAIL");
      failures += !missed;
    }
    if (k.variant.dropout && !k.variant.varlen && k.variant.score != VScore::Alibi &&
        k.variant.head_dim_v <= 256 && !opt.reduced) {
      failures += !run_dropout_mask_test(k);
      ++runs;
    }
  }
  std::printf("CHECK SUMMARY: %d/%d passed\n", runs - failures, runs);
  return failures;
}

// --- timing ------------------------------------------------------------------------------------
/// Milliseconds of 30 launches after 5 warm-up launches, sorted.
static std::vector<float> time_kernel(const KernelInfo &k, const fagen_fwd_params &p,
                                      cudaEvent_t start, cudaEvent_t stop) {
  CUDA_CHECK(cudaFuncSetAttribute(k.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  k.smem_bytes));
  for (int i = 0; i < 5; ++i)
    launch(k, p);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 30; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    launch(k, p);
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return ms;
}

/// The FlashAttention-3 benchmark's problem at head dim hd and seqlen: 16k tokens (batch
/// max(1, 16384 / seqlen)), 2048 / hd heads, BHSD, random q, k and v on the device (seeds 1-3)
/// bound into p.
struct BenchProblem {
  int batch, heads;
  size_t elems; // of q, k, v and O each
  fagen_fwd_params p;
  DeviceTensors d;
  BenchProblem(int hd, int seqlen)
      : batch(std::max(1, 16384 / seqlen)), heads(2048 / hd),
        elems(size_t(batch) * heads * seqlen * hd),
        p(make_params(batch, heads, heads, seqlen, seqlen, hd, false)),
        d(elems * 2, elems * 2, elems * 2, size_t(batch) * heads * seqlen * 4) {
    fill_random<<<1024, 256>>>((uint16_t *)d.q, elems, 1);
    fill_random<<<1024, 256>>>((uint16_t *)d.k, elems, 2);
    fill_random<<<1024, 256>>>((uint16_t *)d.v, elems, 3);
    CUDA_CHECK(cudaGetLastError());
    d.bind(p);
  }
};

/// Times every selected bf16 kernel (expect_fail ones aside) on the FlashAttention-3 benchmark
/// shapes: 16k tokens a batch, 2048 / head_dim heads.
static void run_bench(const Options &opt) {
  FILE *csv = opt.csv ? std::fopen(opt.csv, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "head_dim,causal,seqlen,kernel,ms,tflops\n");
  struct Shape {
    int hd, seqlen;
  };
  const std::vector<Shape> all = {{64, 2048},  {64, 4096},   {64, 16384}, {128, 2048},
                                  {128, 4096}, {128, 16384}, {256, 2048}, {256, 4096},
                                  {256, 8192}, {256, 16384}};
  std::vector<Shape> shapes;
  for (const Shape &s : all) // --seqlens 2048,16384: only those
    if (!opt.seqlens || std::strstr(opt.seqlens, std::to_string(s.seqlen).c_str()))
      shapes.push_back(s);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (const Shape &s : shapes)
    for (fagen::Mask mask : {fagen::Mask::None, fagen::Mask::Causal}) {
      BenchProblem bp(s.hd, s.seqlen);
      const fagen_fwd_params &p = bp.p;
      const int batch = bp.batch, heads = bp.heads;
      const double flops = 4.0 * batch * heads * double(s.seqlen) * s.seqlen * s.hd *
                           (mask == fagen::Mask::Causal ? 0.5 : 1.0);
      for (const KernelInfo &k : kernels()) {
        if (k.head_dim != s.hd || k.mask != mask || k.type != ElementType::BF16 ||
            k.expect_fail || !is_dense(k) || !selected(k.name, opt.filter))
          continue;
        const std::vector<float> ms = time_kernel(k, p, start, stop);
        const float med = ms[ms.size() / 2];
        const double tflops = flops / (med * 1e-3) / 1e12;
        std::printf("BENCH hd=%d causal=%d seqlen=%5d %-46s %8.3f ms %7.1f TFLOP/s (min %.3f max %.3f)\n",
                    s.hd, mask == fagen::Mask::Causal, s.seqlen, k.name, med, tflops, ms.front(),
                    ms.back());
        if (csv)
          std::fprintf(csv, "%d,%d,%d,%s,%.4f,%.2f\n", s.hd, mask == fagen::Mask::Causal, s.seqlen,
                       k.name, med, tflops);
      }
    }
  if (csv)
    std::fclose(csv);
}

/// Times each selected variant kernel that names a dense kernel of its tile (bench_against)
/// side by side with it, on one FlashAttention-3 shape (bf16, 16k tokens, 2048 / head_dim
/// heads, --seqlens' first length or 16384, BHSD): a runtime block mask of 10 % density
/// (round(0.1 * blocks) random blocks per block row) and dropout p = 0.1. Prints the ratio.
static void run_variant_bench(const Options &opt) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const int seqlen = opt.seqlens ? std::max(128, std::atoi(opt.seqlens)) : 16384;
  for (const KernelInfo &k : kernels()) {
    const VariantInfo &v = k.variant;
    if (!v.bench_against || !selected(k.name, opt.filter))
      continue;
    const KernelInfo *dense = nullptr;
    for (const KernelInfo &d : kernels())
      if (!std::strcmp(d.name, v.bench_against))
        dense = &d;
    if (!dense) {
      std::printf("VBENCH %s: no kernel %s to time against\n", k.name, v.bench_against);
      continue;
    }
    const int hd = k.head_dim;
    BenchProblem bp(hd, seqlen);
    fagen_fwd_params &p = bp.p;
    const int batch = bp.batch, heads = bp.heads;
    HostProblem hp;
    hp.variant = v;
    double density = 1.0;
    if (v.sparse == VSparse::Runtime) {
      const int blocks = (seqlen + v.block - 1) / v.block;
      const int per_row = std::max(1, int(std::lround(0.1 * blocks)));
      p.block_mask_row_stride = blocks, p.block_mask_head_stride = int64_t(blocks) * blocks;
      p.block_mask_batch_stride = int64_t(heads) * blocks * blocks;
      hp.block_mask.assign(size_t(batch) * heads * blocks * blocks, 0);
      std::mt19937 gen(5);
      std::vector<int> cols(blocks);
      for (size_t row = 0; row < size_t(batch) * heads * blocks; ++row) {
        for (int c = 0; c < blocks; ++c)
          cols[c] = c;
        std::shuffle(cols.begin(), cols.end(), gen);
        for (int c = 0; c < per_row; ++c)
          hp.block_mask[row * blocks + cols[c]] = 1;
      }
      density = double(per_row) / blocks;
    }
    if (v.dropout)
      set_dropout(p, 0.1f, 1234, 0);
    DeviceVariantArgs args(hp, p);
    const std::vector<float> base = time_kernel(*dense, p, start, stop);
    const std::vector<float> ms = time_kernel(k, p, start, stop);
    const std::vector<float> base2 = time_kernel(*dense, p, start, stop);
    const float med = ms[ms.size() / 2];
    const float base_med = std::min(base[base.size() / 2], base2[base2.size() / 2]);
    std::printf("VBENCH hd=%d seqlen=%5d %-50s %8.3f ms vs %-46s %8.3f ms (again %.3f): ",
                hd, seqlen, k.name, med, dense->name, base[base.size() / 2],
                base2[base2.size() / 2]);
    if (v.sparse != VSparse::None)
      std::printf("density %.3f, %.2fx faster\n", density, base_med / med);
    else
      std::printf("%+.1f%% time\n", 100.0 * (med / base_med - 1.0));
  }
}

// --- main --------------------------------------------------------------------------------------
/// The harness's main: checks, then timings, of the registered kernels. Exit status 1 when a
/// check failed, 2 on a CUDA error.
static int harness_main(int argc, char **argv) {
  const Options opt = parse_args(argc, argv);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, cc %d.%d, smem/block optin %zu\n", prop.name,
              prop.multiProcessorCount, prop.major, prop.minor, prop.sharedMemPerBlockOptin);
  int failures = opt.check ? run_checks(opt) : 0;
  if (opt.ratio_csv)
    std::fclose(opt.ratio_csv);
  if (opt.bench) {
    run_bench(opt);
    run_variant_bench(opt);
  }
  return failures ? 1 : 0;
}

#endif // FAGEN_TESTS_GPU_HARNESS_COMMON_CUH
