// fagen: epilogue pieces every forward shares.
#ifndef FAGEN_TEMPLATES_COMMON_EPILOGUE_CUH
#define FAGEN_TEMPLATES_COMMON_EPILOGUE_CUH

#include "common/ptx.cuh"
#include "common/types.cuh"

namespace fagen {

/// Output of query rows that see no key: O = 0, LSE = -inf, by kThreads threads numbered tid;
/// rows_valid <= kRows.
template <int kRows, int kHeadDim, int kThreads, class Element>
__device__ __forceinline__ void store_empty_rows(Element *o, int64_t row_stride, float *lse,
                                                 int rows_valid, int tid = threadIdx.x) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  const u32 zero[4] = {0u, 0u, 0u, 0u};
  for (int c = tid; c < kRows * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    if (row < rows_valid)
      st_global_v4(o + row * row_stride + chunk * 8, zero);
  }
  for (int row = tid; row < rows_valid; row += kThreads)
    lse[row] = -__int_as_float(0x7f800000);
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_EPILOGUE_CUH
