// fagen GPU dev harnesses: what the sm80 (fwd_harness.cu) and sm90 (sm90_harness.cu) harnesses
// share. Correctness of every registered kernel against compiler/Reference.h at odd shapes and
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

using namespace fagen::reference;

#define CUDA_CHECK(expr)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (expr);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                    \
                   cudaGetErrorString(err_));                                                      \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

// --- kernels -----------------------------------------------------------------------------------
/// One instantiated kernel and its launch geometry, the same for both templates: one CTA of
/// `threads` threads per `block_m` query rows, head and batch, with `smem_bytes` of dynamic
/// shared memory. The rest of the config is spelled in the name.
struct KernelInfo {
  const char *name;
  const void *func;
  ElementType type;
  int head_dim;
  MaskKind mask;
  int block_m, threads, smem_bytes;
  bool expect_fail; // built to miss the tolerance rule: proves that the check can fail
};
/// The registered kernels, in definition order (checks and timings run in this order).
static std::vector<KernelInfo> &kernels() {
  static std::vector<KernelInfo> k;
  return k;
}
struct Register {
  Register(KernelInfo info) { kernels().push_back(info); }
};

/// The mask kind of a template mask's name.
static constexpr MaskKind maskOf(const char *s) { return s[0] == 'C' ? MaskKind::Causal : MaskKind::None; }

static void launch(const KernelInfo &k, const fagen_fwd_params &p) {
  dim3 grid((p.seqlen_q + k.block_m - 1) / k.block_m, p.heads_q, p.batch);
  void *args[] = {const_cast<fagen_fwd_params *>(&p)};
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
/// ~110, where fp32 rounding of the LSE stays well inside kEpsLse.
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

/// One case's inputs on the host and the reference results they are checked against.
struct HostProblem {
  std::vector<uint16_t> q, k, v;
  FwdProblem pb;
  FwdResult ref64, same;
  FwdError same_err;
};

static void set_strides(fagen_fwd_params &p, int hd, bool bshd) {
  auto set = [&](int64_t &b, int64_t &h, int64_t &r, int heads, int seqlen) {
    if (bshd) {
      r = int64_t(heads) * hd, h = hd, b = int64_t(seqlen) * heads * hd;
    } else {
      r = hd, h = int64_t(seqlen) * hd, b = int64_t(heads) * seqlen * hd;
    }
  };
  set(p.q_batch_stride, p.q_head_stride, p.q_row_stride, p.heads_q, p.seqlen_q);
  set(p.k_batch_stride, p.k_head_stride, p.k_row_stride, p.heads_kv, p.seqlen_k);
  set(p.v_batch_stride, p.v_head_stride, p.v_row_stride, p.heads_kv, p.seqlen_k);
  set(p.o_batch_stride, p.o_head_stride, p.o_row_stride, p.heads_q, p.seqlen_q);
}

static fagen_fwd_params make_params(int b, int hq, int hk, int sq, int sk, int hd, bool bshd) {
  fagen_fwd_params p;
  std::memset(&p, 0, sizeof(p));
  p.batch = b, p.heads_q = hq, p.heads_kv = hk, p.seqlen_q = sq, p.seqlen_k = sk;
  p.group_size = hq / hk;
  p.softmax_scale = 1.f / std::sqrt(float(hd));
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  set_strides(p, hd, bshd);
  return p;
}

/// Overwrites head dim 0 of q and k with the trend of `family` (see Family).
static void add_trend(HostProblem &hp, const Case &c, int hd, Family family) {
  const fagen_fwd_params &p = hp.pb.Params;
  const ElementType type = hp.pb.Type;
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

/// The inputs and references of one case, built on first use and kept for the other kernels.
static const HostProblem &get_problem(ElementType type, int hd, MaskKind mask, int case_index,
                                      Family family) {
  static std::map<std::tuple<int, int, int, int, int>, HostProblem *> cache;
  auto key = std::make_tuple(int(type), hd, int(mask), case_index, int(family));
  auto it = cache.find(key);
  if (it != cache.end())
    return *it->second;
  const Case &c = kCases[case_index];
  HostProblem *hp = new HostProblem;
  hp->pb.Params = make_params(c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, hd, c.bshd);
  hp->pb.HeadDim = hd, hp->pb.Type = type, hp->pb.Mask = mask;
  std::mt19937 gen(1000 * case_index + hd + 7 * int(type));
  std::normal_distribution<float> normal(0.f, c.amp);
  auto fill = [&](std::vector<uint16_t> &x, size_t n) {
    x.resize(n);
    for (auto &e : x)
      e = fromFloat(normal(gen), type);
  };
  fill(hp->q, size_t(c.batch) * c.heads_q * c.seqlen_q * hd);
  fill(hp->k, size_t(c.batch) * c.heads_kv * c.seqlen_k * hd);
  fill(hp->v, size_t(c.batch) * c.heads_kv * c.seqlen_k * hd);
  if (family != Family::Random)
    add_trend(*hp, c, hd, family);
  hp->pb.Params.q = hp->q.data(), hp->pb.Params.k = hp->k.data(), hp->pb.Params.v = hp->v.data();
  hp->ref64 = forwardFloat64(hp->pb);
  hp->same = forwardSamePrecision(hp->pb);
  hp->same_err = measureError(hp->ref64, hp->same);
  cache[key] = hp;
  return *hp;
}

/// Device buffers for q, k, v (2-byte elements), O and the LSE (fp32), freed at scope exit.
struct DeviceTensors {
  void *q, *k, *v, *o;
  float *lse;
  DeviceTensors(size_t q_bytes, size_t kv_bytes, size_t o_bytes, size_t lse_bytes) {
    CUDA_CHECK(cudaMalloc(&q, q_bytes));
    CUDA_CHECK(cudaMalloc(&k, kv_bytes));
    CUDA_CHECK(cudaMalloc(&v, kv_bytes));
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

// --- correctness -------------------------------------------------------------------------------
struct CaseResult {
  FwdError err;
  bool within;     // the tolerance rule against the fp64 reference
  bool guard_ok;   // nothing written past O or the LSE
  bool repeatable; // both runs bitwise equal
};

/// Runs kernel `k` twice on one case into outputs poisoned with 0xff (NaN in fp16, bf16 and
/// fp32), each followed by kGuard poisoned elements, and measures the first run's error.
static CaseResult run_case(const KernelInfo &k, const HostProblem &hp) {
  const size_t kGuard = 4096; // poisoned elements after O: an out-of-bounds write shows there
  fagen_fwd_params p = hp.pb.Params;
  const size_t o_elems = size_t(p.batch) * p.heads_q * p.seqlen_q * k.head_dim;
  const size_t lse_elems = size_t(p.batch) * p.heads_q * p.seqlen_q;
  DeviceTensors d(hp.q.size() * 2, hp.k.size() * 2, (o_elems + kGuard) * 2,
                  (lse_elems + kGuard) * 4);
  CUDA_CHECK(cudaMemcpy(d.q, hp.q.data(), hp.q.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.k, hp.k.data(), hp.k.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.v, hp.v.data(), hp.v.size() * 2, cudaMemcpyHostToDevice));
  d.bind(p);
  std::vector<uint16_t> out[2];
  std::vector<float> lse[2];
  for (int rep = 0; rep < 2; ++rep) { // twice: the result must be bitwise repeatable
    CUDA_CHECK(cudaMemset(d.o, 0xff, (o_elems + kGuard) * 2));
    CUDA_CHECK(cudaMemset(d.lse, 0xff, (lse_elems + kGuard) * 4));
    launch(k, p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    out[rep].resize(o_elems + kGuard);
    lse[rep].resize(lse_elems + kGuard);
    CUDA_CHECK(cudaMemcpy(out[rep].data(), d.o, out[rep].size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse[rep].data(), d.lse, lse[rep].size() * 4, cudaMemcpyDeviceToHost));
  }
  CaseResult r;
  r.guard_ok = true;
  for (size_t i = o_elems; i < o_elems + kGuard; ++i)
    r.guard_ok &= out[0][i] == 0xffff;
  for (size_t i = lse_elems; i < lse_elems + kGuard; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &lse[0][i], 4);
    r.guard_ok &= bits == 0xffffffffu;
  }
  r.repeatable = out[0] == out[1] &&
                 std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * 4) == 0;
  r.err = measureError(hp.ref64, readKernelOutput(hp.pb, out[0].data(), lse[0].data()));
  r.within = withinTolerance(r.err, hp.same_err);
  return r;
}

/// Checks every selected kernel on every case and family; prints one line per run and returns
/// the number of failures.
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
      if (opt.reduced && (family != Family::Random || ci >= kReducedCases))
        continue;
      const HostProblem &hp = get_problem(k.type, k.head_dim, k.mask, ci, family);
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
  }
  std::printf("CHECK SUMMARY: %d/%d passed\n", runs - failures, runs);
  return failures;
}

// --- timing ------------------------------------------------------------------------------------
__global__ void fill_random(uint16_t *x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    float u = (h & 0xffffff) * (1.f / 16777216.f) * 2.f - 1.f; // uniform [-1, 1)
    x[i] = uint16_t(__float_as_uint(u * 1.7f) >> 16);           // bf16, truncated
  }
}

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

/// Times every selected bf16 kernel (expect_fail ones aside) on the FlashAttention-3 benchmark
/// shapes: 16k tokens a batch, 2048 / head_dim heads.
static void run_bench(const Options &opt) {
  FILE *csv = opt.csv ? std::fopen(opt.csv, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "head_dim,causal,seqlen,kernel,ms,tflops\n");
  struct Shape {
    int hd, seqlen;
  };
  const std::vector<Shape> all = {{64, 2048},  {64, 4096},  {64, 16384}, {128, 2048},
                                  {128, 4096}, {128, 16384}, {256, 8192}};
  std::vector<Shape> shapes;
  for (const Shape &s : all) // --seqlens 2048,16384: only those
    if (!opt.seqlens || std::strstr(opt.seqlens, std::to_string(s.seqlen).c_str()))
      shapes.push_back(s);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (const Shape &s : shapes)
    for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
      const int batch = 16384 / s.seqlen, heads = 2048 / s.hd;
      fagen_fwd_params p = make_params(batch, heads, heads, s.seqlen, s.seqlen, s.hd, false);
      const size_t elems = size_t(batch) * heads * s.seqlen * s.hd;
      DeviceTensors d(elems * 2, elems * 2, elems * 2, size_t(batch) * heads * s.seqlen * 4);
      fill_random<<<1024, 256>>>((uint16_t *)d.q, elems, 1);
      fill_random<<<1024, 256>>>((uint16_t *)d.k, elems, 2);
      fill_random<<<1024, 256>>>((uint16_t *)d.v, elems, 3);
      CUDA_CHECK(cudaGetLastError());
      d.bind(p);
      const double flops = 4.0 * batch * heads * double(s.seqlen) * s.seqlen * s.hd *
                           (mask == MaskKind::Causal ? 0.5 : 1.0);
      for (const KernelInfo &k : kernels()) {
        if (k.head_dim != s.hd || k.mask != mask || k.type != ElementType::BF16 ||
            k.expect_fail || !selected(k.name, opt.filter))
          continue;
        const std::vector<float> ms = time_kernel(k, p, start, stop);
        const float med = ms[ms.size() / 2];
        const double tflops = flops / (med * 1e-3) / 1e12;
        std::printf("BENCH hd=%d causal=%d seqlen=%5d %-46s %8.3f ms %7.1f TFLOP/s (min %.3f max %.3f)\n",
                    s.hd, mask == MaskKind::Causal, s.seqlen, k.name, med, tflops, ms.front(),
                    ms.back());
        if (csv)
          std::fprintf(csv, "%d,%d,%d,%s,%.4f,%.2f\n", s.hd, mask == MaskKind::Causal, s.seqlen,
                       k.name, med, tflops);
      }
    }
  if (csv)
    std::fclose(csv);
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
  if (opt.bench)
    run_bench(opt);
  return failures ? 1 : 0;
}

#endif // FAGEN_TESTS_GPU_HARNESS_COMMON_CUH
