// fagen GPU dev tool: where a work tile's time goes in the warp-specialized sm90 forward
// (templates/sm90/fwd_ws_kernel.cuh built with -DFAGEN_WS_TRACE). Each kernel is timed on the
// FlashAttention-3 benchmark shape (bf16, 16k tokens, 2048 / head_dim heads, non-causal), then
// launched once more with thread 0 of every warpgroup writing clock64() at a tile's events:
//   consumer: 0 tile start, 1 Q landed, 2 S_0 landed, 3 first softmax done, 4 main loop done,
//             5 last P V done, 6 O and LSE stored;  producer: 0 tile start, 1 Q slot free
//             (K_0's load issued before, then Q's after), 2 last V load issued;  per CTA: its
//             start clock and SM.
// Prints, per kernel and seqlen, a hash of O from one launch over a poisoned buffer (OHASH: the
// same for kernels whose outputs are bitwise equal), the mean cycles of
// each interval over every consumer tile, the cycles of one main-loop step, the gaps between
// consecutive tiles of an SM, and the tile's cost beyond its steps ("overhead", in steps);
// --csv-dir writes the raw events.
//   ws_trace [--seqlens 2048,16384] [--filter SUBSTRING] [--csv-dir DIR]
// Build: tests/gpu/run_sm90.sh trace-build (here); run on the H200 with .carry-ws carried.
#define FAGEN_WS_TRACE
#include "sm90/fwd_ws_kernel.cuh"
#include "config_options.cuh"

#include "harness_common.cuh"

#include <map>
#include <string>

// sm_90a dense non-causal configs (tau 8), by name: m<BM>n<BN>, _so = staged epilogue, _to = O
// stored with TMA (kTmaStoreO), _st = the slack CTAs started half a tile late (kStaggerSlack,
// as the planner's persistent kernels of full tiles have it; the others are built without it); each
// registered twice: one CTA per tile, and _pers (one CTA per SM, the static deal).
#define TRACE_KERNEL(HD, BM, BN, STAGED, SUFFIX, TMA_O, STG)                                       \
  using tcfg_##HD##_##BM##_##BN##SUFFIX =                                                          \
      fagen::sm90::WsFwdConfig<harness::Sm90WsFwd<fagen::bfloat16_t, HD, HD, BM, BN, 2,            \
                               fagen::Variant<fagen::NoMask>, true, 0, 3, STAGED, 8, false, TMA_O, \
                               STG>>;                                                              \
  extern "C" __global__ void __launch_bounds__(tcfg_##HD##_##BM##_##BN##SUFFIX::kThreads, 1)       \
      trace_hd##HD##_m##BM##n##BN##SUFFIX(const __grid_constant__ fagen_fwd_params params,         \
                                          const __grid_constant__ fagen_fwd_tma_maps maps) {       \
    fagen::sm90::fwd_ws_kernel<tcfg_##HD##_##BM##_##BN##SUFFIX>(params, maps);                     \
  }                                                                                                \
  static Register treg_##HD##_##BM##_##BN##SUFFIX(                                                 \
      {"hd" #HD "_m" #BM "n" #BN #SUFFIX, (const void *)trace_hd##HD##_m##BM##n##BN##SUFFIX,       \
       ElementType::BF16, HD, fagen::Mask::None, BM, tcfg_##HD##_##BM##_##BN##SUFFIX::kThreads,       \
       tcfg_##HD##_##BM##_##BN##SUFFIX::kSmemBytes, false, VariantInfo{}, BN, false, TMA_O});      \
  static Register tpreg_##HD##_##BM##_##BN##SUFFIX(                                                \
      {"hd" #HD "_m" #BM "n" #BN #SUFFIX "_pers", (const void *)trace_hd##HD##_m##BM##n##BN##SUFFIX, \
       ElementType::BF16, HD, fagen::Mask::None, BM, tcfg_##HD##_##BM##_##BN##SUFFIX::kThreads,       \
       tcfg_##HD##_##BM##_##BN##SUFFIX::kSmemBytes, false, VariantInfo{}, BN, true, TMA_O});

TRACE_KERNEL(128, 128, 128, false, , false, false)
TRACE_KERNEL(128, 128, 128, false, _to, true, false)
TRACE_KERNEL(128, 128, 128, true, _so, false, false)
TRACE_KERNEL(128, 192, 80, false, , false, false)
TRACE_KERNEL(128, 192, 80, false, _to, true, false)
TRACE_KERNEL(64, 192, 128, false, , false, false)
TRACE_KERNEL(64, 192, 128, false, _to, true, false)
TRACE_KERNEL(256, 128, 80, true, _so, false, false)
TRACE_KERNEL(256, 128, 80, false, , false, false)
TRACE_KERNEL(256, 128, 64, false, , false, false)
TRACE_KERNEL(256, 128, 64, false, _st, false, true)
TRACE_KERNEL(128, 192, 80, false, _to_st, true, true)

namespace {

constexpr int kTiles = fagen::sm90::kWsTraceTiles;
using u64 = unsigned long long;

struct Stats {
  double sum = 0;
  long n = 0;
  void add(double x) { sum += x, ++n; }
  double mean() const { return n ? sum / n : 0.0; }
};

/// Reads the events of one traced launch and prints the interval means.
void analyse(const KernelInfo &k, int seqlen, int grid, int block_n, const std::vector<u64> &ev,
             float ms, FILE *csv) {
  auto at = [&](int cta, int slot, int work, int e) {
    return ev[((size_t(cta) * 4 + slot) * kTiles + work) * 8 + e];
  };
  const int consumers = k.block_m / 64, steps = (seqlen + block_n - 1) / block_n;
  Stats q_wait, s0, soft0, loop, last_pv, epi, total, gap, start_gap, prod_q, prod_loads;
  std::map<u64, std::vector<std::pair<u64, u64>>> by_sm; // SM: (CTA start, CTA end)
  u64 lo = ~0ull, hi = 0;
  for (int b = 0; b < grid; ++b) {
    const u64 start = at(b, 0, 0, 7), sm = at(b, 0, 1, 7);
    u64 end = 0;
    for (int c = 1; c <= consumers; ++c)
      for (int w = 0; w < kTiles; ++w) {
        if (!at(b, c, w, 0) || !at(b, c, w, 6))
          continue;
        q_wait.add(double(at(b, c, w, 1) - at(b, c, w, 0)));
        s0.add(double(at(b, c, w, 2) - at(b, c, w, 1)));
        soft0.add(double(at(b, c, w, 3) - at(b, c, w, 2)));
        loop.add(double(at(b, c, w, 4) - at(b, c, w, 3)));
        last_pv.add(double(at(b, c, w, 5) - at(b, c, w, 4)));
        epi.add(double(at(b, c, w, 6) - at(b, c, w, 5)));
        total.add(double(at(b, c, w, 6) - at(b, c, w, 0)));
        if (w == 0)
          start_gap.add(double(at(b, c, 0, 0) - start));
        if (w + 1 < kTiles && at(b, c, w + 1, 0))
          gap.add(double(at(b, c, w + 1, 0) - at(b, c, w, 6)));
        end = std::max(end, at(b, c, w, 6));
        if (csv)
          std::fprintf(csv, "%s,%d,%d,%llu,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", k.name,
                       seqlen, b, sm, c, w, start, at(b, c, w, 0), at(b, c, w, 1), at(b, c, w, 2),
                       at(b, c, w, 3), at(b, c, w, 4), at(b, c, w, 5), at(b, c, w, 6));
      }
    for (int w = 0; w < kTiles; ++w)
      if (at(b, 0, w, 0)) {
        prod_q.add(double(at(b, 0, w, 1) - at(b, 0, w, 0)));
        prod_loads.add(double(at(b, 0, w, 2) - at(b, 0, w, 1)));
      }
    if (end) {
      by_sm[sm].push_back({start, end});
      lo = std::min(lo, start), hi = std::max(hi, end);
    }
  }
  // Between CTAs of one SM (one CTA a tile): the next CTA's start after the previous one's
  // last store.
  Stats cta_gap;
  double span = 0;
  for (auto &entry : by_sm) {
    std::vector<std::pair<u64, u64>> &v = entry.second;
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      cta_gap.add(double(v[i].first) - double(v[i - 1].second));
    span = std::max(span, double(v.back().second - v.front().first));
  }
  const double step = loop.mean() / std::max(1, steps - 1);
  const double per_tile = total.mean() + (k.persistent ? gap.mean() : cta_gap.mean() + start_gap.mean());
  std::printf("TRACE %-22s seqlen=%5d grid=%4d %.3f ms, clock ~%.2f GHz (busiest SM %.0f "
              "cycles) | cycles: q_wait %.0f s0 %.0f softmax0 %.0f step %.0f (x%d) last_pv %.0f "
              "epilogue %.0f | between tiles %.0f, CTA start->tile %.0f | tile %.0f = %.2f steps, "
              "overhead %.2f steps | producer: Q slot wait %.0f, loads %.0f\n",
              k.name, seqlen, grid, ms, span / (ms * 1e6), span, q_wait.mean(), s0.mean(),
              soft0.mean(), step, steps - 1, last_pv.mean(), epi.mean(),
              k.persistent ? gap.mean() : cta_gap.mean(), start_gap.mean(), per_tile,
              per_tile / step, per_tile / step - steps, prod_q.mean(), prod_loads.mean());
}

} // namespace

int main(int argc, char **argv) {
  std::string seqlens = "2048,16384", filter, csv_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seqlens" && i + 1 < argc)
      seqlens = argv[++i];
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--csv-dir" && i + 1 < argc)
      csv_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: ws_trace [--seqlens 2048,16384] [--filter S] [--csv-dir D]\n");
      return 2;
    }
  }
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  FILE *csv = nullptr;
  if (!csv_dir.empty()) {
    const std::string path = csv_dir + "/ws_trace.csv";
    csv = std::fopen(path.c_str(), "w");
    if (!csv) {
      std::fprintf(stderr, "ws_trace: cannot write %s\n", path.c_str());
      return 2;
    }
    std::fprintf(csv, "kernel,seqlen,cta,sm,consumer,tile,cta_start,e0,e1,e2,e3,e4,e5,e6\n");
  }
  size_t pos = 0;
  while (pos < seqlens.size()) {
    const size_t comma = seqlens.find(',', pos);
    const int seqlen = std::atoi(seqlens.substr(pos, comma - pos).c_str());
    pos = comma == std::string::npos ? seqlens.size() : comma + 1;
    for (const KernelInfo &k : kernels()) {
      if (!filter.empty() && std::string(k.name).find(filter) == std::string::npos)
        continue;
      const int hd = k.head_dim;
      const BenchProblem bp(hd, seqlen);
      const fagen_fwd_params &p = bp.p;
      const int batch = bp.batch, heads = bp.heads;
      const int tiles = (seqlen + k.block_m - 1) / k.block_m * heads * batch;
      const int grid = k.persistent ? std::min(tiles, sms) : tiles;
      u64 *buf = nullptr, *none = nullptr;
      const size_t words = size_t(grid) * 4 * kTiles * 8;
      CUDA_CHECK(cudaMalloc(&buf, words * sizeof(u64)));
      CUDA_CHECK(cudaMemcpyToSymbol(fagen::sm90::ws_trace_buf, &none, sizeof(none)));
      // O of one launch over a poisoned buffer (0xffff: a bf16 NaN), hashed: kernels expected
      // to be bitwise equal (the same tiles, a different schedule) print the same hash, and
      // `poisoned` counts the elements left unwritten.
      CUDA_CHECK(cudaFuncSetAttribute(k.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      k.smem_bytes));
      CUDA_CHECK(cudaMemset(bp.d.o, 0xff, bp.elems * 2));
      launch(k, p);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      {
        std::vector<uint16_t> o(bp.elems);
        CUDA_CHECK(cudaMemcpy(o.data(), bp.d.o, bp.elems * 2, cudaMemcpyDeviceToHost));
        unsigned long long hash = 1469598103934665603ull;
        long poisoned = 0;
        for (uint16_t x : o) {
          hash = (hash ^ x) * 1099511628211ull;
          poisoned += x == 0xffff;
        }
        std::printf("OHASH %-22s seqlen=%5d %016llx poisoned=%ld\n", k.name, seqlen, hash,
                    poisoned);
      }
      const std::vector<float> ms = time_kernel(k, p, start, stop); // untraced
      CUDA_CHECK(cudaMemset(buf, 0, words * sizeof(u64)));
      CUDA_CHECK(cudaMemcpyToSymbol(fagen::sm90::ws_trace_buf, &buf, sizeof(buf)));
      CUDA_CHECK(cudaEventRecord(start));
      launch(k, p);
      CUDA_CHECK(cudaEventRecord(stop));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaGetLastError());
      float traced_ms;
      CUDA_CHECK(cudaEventElapsedTime(&traced_ms, start, stop));
      CUDA_CHECK(cudaMemcpyToSymbol(fagen::sm90::ws_trace_buf, &none, sizeof(none)));
      std::vector<u64> ev(words);
      CUDA_CHECK(cudaMemcpy(ev.data(), buf, words * sizeof(u64), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(buf));
      const int block_n = k.tma_block_n;
      std::printf("TIME  %-22s seqlen=%5d untraced median %.3f ms (%.1f TFLOP/s), traced %.3f ms\n",
                  k.name, seqlen, ms[ms.size() / 2],
                  4.0 * batch * heads * double(seqlen) * seqlen * hd / (ms[ms.size() / 2] * 1e9),
                  traced_ms);
      analyse(k, seqlen, grid, block_n, ev, traced_ms, csv);
    }
  }
  if (csv)
    std::fclose(csv);
  return 0;
}
