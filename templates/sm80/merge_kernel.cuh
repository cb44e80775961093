// fagen sm80: the merge of attention states by their LSE (abi/decode_params.h,
// fagen_merge_params): the split-KV decode's combine step and fagen_merge_states. Memory-bound:
// one thread per 8 columns of an output row, 16-byte loads and stores, no shared memory.
#ifndef FAGEN_TEMPLATES_SM80_MERGE_KERNEL_CUH
#define FAGEN_TEMPLATES_SM80_MERGE_KERNEL_CUH

#include "abi/decode_params.h"
#include "common/ptx.cuh"
#include "common/softmax.cuh"
#include "sm80/mma.cuh"

namespace fagen {
namespace sm80 {

/// A merge of states of ElementIn (float, or the output's Element) into Element rows of
/// kHeadDim columns, kStateLanes threads a chunk of 8 columns (decode_params.h).
template <class ElementIn_, class Element_, int kHeadDim_, int kStateLanes_> struct MergeConfig {
  using ElementIn = ElementIn_;
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kStateLanes = kStateLanes_;
  static constexpr int kThreads = FAGEN_MERGE_THREADS;
  static_assert(kStateLanes >= 1 && kStateLanes <= 32 && 32 % kStateLanes == 0,
                "kStateLanes must divide a warp");
  static_assert(kHeadDim % 8 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "kHeadDim must be a multiple of 8 in [32, 256]");
  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
};

/// 8 consecutive elements at `ptr` (16-byte aligned) as loaded: packed pairs of a 16-bit type,
/// or floats.
template <class ElementIn> struct Raw8 {
  u32 w[4];
};
template <> struct Raw8<float> {
  u32 w[8];
};
__device__ __forceinline__ void load8(Raw8<float> &x, const float *ptr) {
  ld_global_v4(*reinterpret_cast<u32(*)[4]>(x.w), ptr);
  ld_global_v4(*reinterpret_cast<u32(*)[4]>(x.w + 4), ptr + 4);
}
template <class Element> __device__ __forceinline__ void load8(Raw8<Element> &x, const Element *ptr) {
  ld_global_v4(x.w, ptr);
}
/// A Raw8 as 8 floats.
__device__ __forceinline__ void unpack8(float (&x)[8], const Raw8<float> &r) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    x[i] = __uint_as_float(r.w[i]);
}
template <class Element> __device__ __forceinline__ void unpack8(float (&x)[8], const Raw8<Element> &r) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    unpack2<Element>(x[2 * i], x[2 * i + 1], r.w[i]);
}

/// 8 floats to `ptr` (16-byte aligned), rounded to Element or as floats.
template <class Element> __device__ __forceinline__ void store8(Element *ptr, const float (&x)[8]) {
  const u32 v[4] = {pack2<Element>(x[0], x[1]), pack2<Element>(x[2], x[3]),
                    pack2<Element>(x[4], x[5]), pack2<Element>(x[6], x[7])};
  st_global_v4(ptr, v);
}
__device__ __forceinline__ void store8(float *ptr, const float (&x)[8]) {
  const u32 a[4] = {__float_as_uint(x[0]), __float_as_uint(x[1]), __float_as_uint(x[2]),
                    __float_as_uint(x[3])};
  const u32 b[4] = {__float_as_uint(x[4]), __float_as_uint(x[5]), __float_as_uint(x[6]),
                    __float_as_uint(x[7])};
  st_global_v4(ptr, a);
  st_global_v4(ptr + 4, b);
}

/// Launch: grid fagen_merge_blocks(batch * heads * seqlen, kHeadDim, kStateLanes), block
/// kThreads. The kStateLanes adjacent threads of item i merge columns [8 c, 8 c + 8) of output
/// row i / (kHeadDim / 8), c = i % (kHeadDim / 8), thread g over states g, g + kStateLanes, ...:
///   M = max_s LSE_s, w_s = exp(LSE_s - M), O = sum_s w_s O_s / sum_s w_s, LSE = M + log sum w_s.
template <class Config> __device__ __forceinline__ void merge_states(const fagen_merge_params &p) {
  using ElementIn = typename Config::ElementIn;
  using Element = typename Config::Element;
  constexpr int kChunks = Config::kHeadDim / 8, kLanes = Config::kStateLanes;
  const float kNegInf = -__int_as_float(0x7f800000), kLog2e = 1.4426950408889634f,
              kLn2 = 0.693147180559945309f;
  const int64_t thread = int64_t(blockIdx.x) * Config::kThreads + threadIdx.x;
  const int64_t item = thread / kLanes, rows = int64_t(p.batch) * p.heads * p.seqlen;
  const int first = int(thread % kLanes);
  if (item >= rows * kChunks)
    return; // the item's kLanes threads together (a warp holds whole items)
  // The item's threads: the shuffles' mask.
  const unsigned group = (kLanes == 32 ? ~0u : (1u << kLanes) - 1)
                         << (threadIdx.x % 32 / kLanes * kLanes);
  const auto across = [group](auto x, auto op) { // op over the item's threads, in all of them
#pragma unroll
    for (int m = 1; m < kLanes; m *= 2)
      x = op(x, __shfl_xor_sync(group, x, m, kLanes));
    return x;
  };
  const auto add = [](float a, float b) { return a + b; };
  const int chunk = int(item % kChunks);
  const int64_t bh = item / kChunks / p.seqlen;
  const int row = int(item / kChunks % p.seqlen), head = int(bh % p.heads), batch = int(bh / p.heads);
  const float *lse_in = p.lse_states + batch * p.lse_states_strides[1] +
                        head * p.lse_states_strides[2] + row * p.lse_states_strides[3];
  const ElementIn *o_in = static_cast<const ElementIn *>(p.o_states) +
                          batch * p.o_states_strides[1] + head * p.o_states_strides[2] +
                          row * p.o_states_strides[3] + chunk * 8;

  // kBatch of the thread's states at a time, their LSE and O loads all issued before any is
  // used: the first batch before M is known, so that a merge of few states takes one round
  // trip (a load behind each state's -inf test went out one at a time). A state of LSE -inf
  // is loaded and ignored: a NaN there changes nothing.
  constexpr int kBatch = 4;
  float lse[kBatch];
  Raw8<ElementIn> raw[kBatch]; // packed until used: registers for more loads in flight
  const auto load_batch = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int s = s0 + i * kLanes;
      lse[i] = kNegInf;
      if (s < p.num_states) {
        lse[i] = lse_in[s * p.lse_states_strides[0]];
        load8(raw[i], o_in + s * p.o_states_strides[0]);
      }
    }
  };
  load_batch(first);

  // M, and whether a NaN LSE makes the row NaN (fmaxf would skip it).
  float max_lse = kNegInf;
  int nan = 0;
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    max_lse = fmaxf(max_lse, lse[i]);
    nan |= lse[i] != lse[i];
  }
#pragma unroll 4
  for (int s = first + kBatch * kLanes; s < p.num_states; s += kLanes) {
    const float x = lse_in[s * p.lse_states_strides[0]];
    max_lse = fmaxf(max_lse, x);
    nan |= x != x;
  }
  max_lse = across(max_lse, [](float a, float b) { return fmaxf(a, b); });
  nan = across(nan, [](int a, int b) { return a | b; });
  float acc[8] = {}, sum = 0.f;
  if (max_lse != kNegInf && !nan) {
    for (int s0 = first;;) {
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if (lse[i] == kNegInf)
          continue; // no key (or past the last state): nothing to add
        // M = +inf (an infinite logit) gives inf - inf = NaN here: NaN out, as the forward's.
        const float w = exp2_approx((lse[i] - max_lse) * kLog2e);
        float x[8];
        unpack8(x, raw[i]);
        sum += w;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          acc[j] = fmaf(w, x[j], acc[j]);
      }
      s0 += kBatch * kLanes;
      if (s0 >= p.num_states)
        break;
      load_batch(s0);
    }
  }
  sum = across(sum, add);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    acc[i] = across(acc[i], add);
  if (first != 0)
    return; // the item's first thread writes
  const float kNaN = __int_as_float(0x7fffffff);
  const bool empty = max_lse == kNegInf && !nan;
  const float inv = nan ? kNaN : empty ? 0.f : 1.f / sum;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    acc[i] *= inv;
  store8(static_cast<Element *>(p.o) + batch * p.o_strides[0] + head * p.o_strides[1] +
             row * p.o_strides[2] + chunk * 8,
         acc);
  if (p.lse != nullptr && chunk == 0)
    p.lse[batch * p.lse_strides[0] + head * p.lse_strides[1] + row * p.lse_strides[2]] =
        nan ? kNaN : empty ? kNegInf : max_lse + __log2f(sum) * kLn2;
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_MERGE_KERNEL_CUH
