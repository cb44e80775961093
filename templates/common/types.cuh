// fagen: element tags for the input/output dtypes of every template.
//
// Storage only: 16 bits, no arithmetic. Conversions happen in registers through the arch
// layer's cvt packs (sm80/mma.cuh), so no template needs cuda_fp16.h / cuda_bf16.h, which
// would add about a second of nvcc front-end time per kernel.
#ifndef FAGEN_TEMPLATES_COMMON_TYPES_CUH
#define FAGEN_TEMPLATES_COMMON_TYPES_CUH

namespace fagen {

typedef unsigned int u32;

/// IEEE binary16.
struct alignas(2) half_t {
  unsigned short bits;
};

/// bfloat16 (the upper half of an IEEE binary32).
struct alignas(2) bfloat16_t {
  unsigned short bits;
};

template <class T> struct is_element {
  static constexpr bool value = false;
};
template <> struct is_element<half_t> {
  static constexpr bool value = true;
};
template <> struct is_element<bfloat16_t> {
  static constexpr bool value = true;
};

/// a + b - 1 stays below 2^31 for every call the runtime lets through: sequences of at most
/// 2^30 - 1024 rows, tiles of at most 256 (runtime/src/RuntimeInternal.h kMaxSeqlen).
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_TYPES_CUH
