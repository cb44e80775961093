//===- TmaMaps.h - tensor maps of the TMA forward kernels -------------------===//
//
// Encodes fagen_fwd_tma_maps (templates/abi/tma_params.h) for one forward call from the
// call's fagen_fwd_params, through the driver's cuTensorMapEncodeTiled passed in as a plain
// function pointer (no CUDA headers). Header-only: the runtime and the GPU dev harnesses share
// it.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_RUNTIME_TMAMAPS_H
#define FAGEN_RUNTIME_TMAMAPS_H

#include <cstdint>
#include <string>

#include "templates/abi/bwd_params.h"
#include "templates/abi/fwd_params.h"
#include "templates/abi/tma_params.h"

namespace fagen {

/// cuTensorMapEncodeTiled (cuda.h, CUDA >= 12.0), its enums as int.
using TensorMapEncodeTiledFn = int (*)(void *map, int dataType, unsigned rank, void *address,
                                       const uint64_t *dims, const uint64_t *strides,
                                       const uint32_t *box, const uint32_t *elementStrides,
                                       int interleave, int swizzle, int l2Promotion, int oobFill);

// Enum values from cuda.h (CUDA 13.0).
constexpr int kTensorMapDataTypeUint16 = 1;  // CU_TENSOR_MAP_DATA_TYPE_UINT16
constexpr int kTensorMapInterleaveNone = 0;  // CU_TENSOR_MAP_INTERLEAVE_NONE
constexpr int kTensorMapSwizzle128B = 3;     // CU_TENSOR_MAP_SWIZZLE_128B
constexpr int kTensorMapL2Promotion256B = 3; // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
constexpr int kTensorMapOobFillZero = 0;     // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE

/// Encodes one rank-4 map {headDim, seqlen, heads, batch} with box {64, boxRows, 1, 1}.
/// Returns the driver's result (0 = success) and names the tensor in `what` on failure.
inline int encodeTensorMap(TensorMapEncodeTiledFn encode, fagen_tensor_map &map,
                           const void *address, int64_t headDim, int64_t seqlen, int64_t heads,
                           int64_t batch, int64_t rowStride, int64_t headStride,
                           int64_t batchStride, int boxRows) {
  const uint64_t dims[4] = {uint64_t(headDim), uint64_t(seqlen), uint64_t(heads), uint64_t(batch)};
  // A dimension of extent 1 is never stepped over; its stride must still be a nonzero
  // multiple of 16 bytes (the runtime refuses 0 where the extent is larger, and strides of
  // 2^39 elements or more: tmaLayoutProblem).
  auto bytes = [](int64_t stride, int64_t extent) {
    return extent == 1 && stride == 0 ? uint64_t(16) : uint64_t(stride) * 2;
  };
  const uint64_t strides[3] = {bytes(rowStride, seqlen), bytes(headStride, heads),
                               bytes(batchStride, batch)};
  const uint32_t box[4] = {64, uint32_t(boxRows), 1, 1};
  const uint32_t elementStrides[4] = {1, 1, 1, 1};
  return encode(&map, kTensorMapDataTypeUint16, 4, const_cast<void *>(address), dims, strides, box,
                elementStrides, kTensorMapInterleaveNone, kTensorMapSwizzle128B,
                kTensorMapL2Promotion256B, kTensorMapOobFillZero);
}

/// One tensor of a call as a rank-4 map: where its map goes, its name (for errors) and shape.
struct TmaTensor {
  const char *name;
  fagen_tensor_map &map;
  const void *address;
  int64_t headDim, seqlen, heads, rowStride, headStride, batchStride;
  int boxRows;
};

/// Encodes the first `count` of `tensors` with `batch` batch entries. Returns 0, or the first
/// failing driver result with the tensor's name in `what`.
inline int encodeTmaTensors(TensorMapEncodeTiledFn encode, const TmaTensor *tensors, int count,
                            int64_t batch, std::string &what) {
  for (int i = 0; i < count; ++i) {
    const TmaTensor &t = tensors[i];
    if (int r = encodeTensorMap(encode, t.map, t.address, t.headDim, t.seqlen, t.heads, batch,
                                t.rowStride, t.headStride, t.batchStride, t.boxRows)) {
      what = t.name;
      return r;
    }
  }
  return 0;
}

/// A call's Q, K and V as TMA tensors (boxes of blockM rows for Q, blockN for K and V), and the
/// batch entries to encode them with. Varlen (totalQ > 0): the packed tensors, totalQ and
/// totalK rows, batch 1 (the kernel adds each sequence's first row), batch strides unused.
struct TmaCall {
  const fagen_fwd_params &p;
  bool varlen;
  int64_t batch, rowsQ, rowsK;
  TmaCall(const fagen_fwd_params &params, int64_t totalQ, int64_t totalK)
      : p(params), varlen(totalQ > 0), batch(varlen ? 1 : params.batch),
        rowsQ(varlen ? totalQ : params.seqlen_q), rowsK(varlen ? totalK : params.seqlen_k) {}
  int64_t batchStride(int64_t stride) const { return varlen ? 0 : stride; }
  TmaTensor q(fagen_tensor_map &map, int headDim, int boxRows) const {
    return {"q", map, p.q, headDim, rowsQ, p.heads_q, p.q_row_stride, p.q_head_stride,
            batchStride(p.q_batch_stride), boxRows};
  }
  TmaTensor k(fagen_tensor_map &map, int headDim, int boxRows) const {
    return {"k", map, p.k, headDim, rowsK, p.heads_kv, p.k_row_stride, p.k_head_stride,
            batchStride(p.k_batch_stride), boxRows};
  }
  TmaTensor v(fagen_tensor_map &map, int headDim, int boxRows) const {
    return {"v", map, p.v, headDim, rowsK, p.heads_kv, p.v_row_stride, p.v_head_stride,
            batchStride(p.v_batch_stride), boxRows};
  }
};

/// Fills `maps` for a forward call of a kernel with tiles blockM x blockN and head dims
/// headDimQK (Q, K) and headDimV (V, O); O's map only for a kernel that stores through it
/// (storeO: O must then meet TMA's layout rules too), zeros otherwise. Varlen (totalQ > 0): as
/// TmaCall. Returns 0, or the first failing driver result with the tensor's name in `what`.
inline int encodeFwdTmaMaps(TensorMapEncodeTiledFn encode, const fagen_fwd_params &p,
                            int headDimQK, int headDimV, int blockM, int blockN,
                            fagen_fwd_tma_maps &maps, std::string &what, int64_t totalQ = 0,
                            int64_t totalK = 0, bool storeO = false) {
  const TmaCall call(p, totalQ, totalK);
  const TmaTensor tensors[4] = {
      call.q(maps.q, headDimQK, blockM), call.k(maps.k, headDimQK, blockN),
      call.v(maps.v, headDimV, blockN),
      {"o", maps.o, p.o, headDimV, call.rowsQ, p.heads_q, p.o_row_stride, p.o_head_stride,
       call.batchStride(p.o_batch_stride), 64}};
  maps.o = fagen_tensor_map{};
  return encodeTmaTensors(encode, tensors, storeO ? 4 : 3, call.batch, what); // O last
}

/// Fills `maps` for a paged forward call (sm90ws chunked prefill, varlen over totalQ packed query
/// rows): Q's map as encodeFwdTmaMaps makes it; K's and V's over the caches' numPages pages of
/// pageSize rows ({head dim, page rows, kv heads, pages}, the caches' row, head and page strides,
/// boxes of kvBoxRows rows: abi/tma_params.h), or zero where kvBoxRows is 0 (the kernel gathers
/// K and V with cp.async); O's zero. Returns as encodeFwdTmaMaps.
inline int encodePagedFwdTmaMaps(TensorMapEncodeTiledFn encode, const fagen_fwd_params &p,
                                 int headDimQK, int headDimV, int blockM, int pageSize,
                                 int64_t numPages, int kvBoxRows, fagen_fwd_tma_maps &maps,
                                 std::string &what, int64_t totalQ) {
  const TmaCall call(p, totalQ, p.seqlen_k);
  const TmaTensor q[1] = {call.q(maps.q, headDimQK, blockM)};
  maps.k = maps.v = maps.o = fagen_tensor_map{};
  if (int r = encodeTmaTensors(encode, q, 1, call.batch, what))
    return r;
  if (kvBoxRows == 0)
    return 0;
  const TmaTensor kv[2] = {{"k", maps.k, p.k, headDimQK, pageSize, p.heads_kv, p.k_row_stride,
                            p.k_head_stride, p.k_batch_stride, kvBoxRows},
                           {"v", maps.v, p.v, headDimV, pageSize, p.heads_kv, p.v_row_stride,
                            p.v_head_stride, p.v_batch_stride, kvBoxRows}};
  return encodeTmaTensors(encode, kv, 2, numPages, what);
}

/// Fills `maps` for a backward call (fagen_bwd_tma_maps): Q and dO with boxes of blockM rows,
/// K and V of blockN, from the call's fagen_bwd_params. Varlen (totalQ > 0): as TmaCall.
/// Returns 0, or the first failing driver result with the tensor's name in `what`.
inline int encodeBwdTmaMaps(TensorMapEncodeTiledFn encode, const fagen_bwd_params &b,
                            int headDimQK, int headDimV, int blockM, int blockN,
                            fagen_bwd_tma_maps &maps, std::string &what, int64_t totalQ = 0,
                            int64_t totalK = 0) {
  const TmaCall call(b.fwd, totalQ, totalK);
  const TmaTensor tensors[4] = {
      call.q(maps.q, headDimQK, blockM), call.k(maps.k, headDimQK, blockN),
      call.v(maps.v, headDimV, blockN),
      {"dout", maps.dout, b.dout, headDimV, call.rowsQ, b.fwd.heads_q, b.do_row_stride,
       b.do_head_stride, call.batchStride(b.do_batch_stride), blockM}};
  return encodeTmaTensors(encode, tensors, 4, call.batch, what);
}

} // namespace fagen

#endif // FAGEN_RUNTIME_TMAMAPS_H
