//===- CheckInputs.cpp - `fagen check`: the host side of a case -----------===//
//
// Shapes, the problem of a kernel's variant, seeded inputs and run-time arguments, and the
// reference's problem for the same call. Needs no GPU (tests/unit/CheckTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"
#include "runtime/src/VariantAbi.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace fagen {

namespace {

namespace ref = reference;

/// The shapes of `grid` that a kernel tuned for max(seqlen_q, seqlen_k) in [lo, hi] serves;
/// where fewer than two are left, odd shapes at the bottom of the range are added (one with
/// Sq < Sk, one with Sq > Sk, so that causal rows that see no key are covered too, and unless
/// `quick` one of 387 queries in 4 heads over 2 KV heads: several query tiles a head that all
/// see the long rows, and several work tiles for each of a persistent kernel's 3-CTA launch,
/// at a float64 reference cost of about 4 x 387 x Sk x head dim).
std::vector<CheckShape> shapesInRange(const std::vector<CheckShape> &grid, int64_t lo,
                                      int64_t hi, bool quick) {
  std::vector<CheckShape> out;
  for (const CheckShape &s : grid) {
    int64_t seqlen = std::max(s.seqlenQ, s.seqlenK);
    if (seqlen >= lo && seqlen <= hi)
      out.push_back(s);
  }
  if (out.size() >= 2)
    return out;
  int top = int(std::min<int64_t>(std::max<int64_t>(lo, 1) + 3, hi));
  out.push_back({1, 2, 1, 17, top, false});
  out.push_back({2, 2, 2, top, 129 < top ? 129 : top, true});
  if (!quick)
    out.push_back({1, 4, 2, top < 387 ? top : 387, top, false, true});
  return out;
}

/// The grid. Odd sizes on purpose: 1, 17, 127, 577, 1000 are multiples of no tile size;
/// Sq != Sk exercises the bottom-right causal alignment and rows that see no key.
std::vector<CheckShape> shapeGrid(bool quick) {
  if (quick)
    return {{1, 2, 1, 17, 127, false}, {2, 2, 2, 130, 77, true}, {1, 1, 1, 1, 1, false}};
  return {
      {1, 1, 1, 1, 1, false},      {2, 3, 3, 17, 17, false},    {1, 2, 2, 127, 577, true},
      {2, 2, 2, 577, 127, false},  {1, 4, 1, 1000, 1000, true}, {1, 4, 2, 1, 1000, false},
      {3, 2, 2, 1000, 17, true},   {1, 6, 2, 257, 129, false},  {2, 2, 1, 64, 1000, false, true},
  };
}

std::vector<uint16_t> randomTensor(size_t n, ref::ElementType type, std::mt19937_64 &rng,
                                   float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t &x : out)
    x = ref::fromFloat(scale * dist(rng), type);
  return out;
}

/// The problem's variant fields for kernel `k` (shapes and strides are the caller's).
void setVariant(const KernelRecord &k, const CheckShape &s, fagen_fwd_problem &p) {
  p.causal = 0;
  p.mask = toAbi(k.mask);
  p.mask_align = toAbi(k.maskAlign);
  if (p.mask == FAGEN_MASK_WINDOW) {
    WindowSizes w = windowSizes(s);
    p.window_left = w.left;
    p.window_right = w.right;
  }
  p.score_mod = toAbi(k.scoreMod);
  if (p.score_mod == FAGEN_SCORE_MOD_SOFTCAP)
    p.softcap = kCheckSoftcap;
  p.dropout_p = k.dropout ? kCheckDropoutP : 0.0f;
  p.sparsity = toAbi(k.sparsity);
  p.sparse_block = p.sparsity == FAGEN_SPARSITY_NONE ? 0 : k.sparseBlock;
  if (p.sparsity == FAGEN_SPARSITY_STATIC)
    p.sparse_hash = uint32_t(std::strtoul(k.sparseHash.c_str(), nullptr, 16));
}

/// Packs the varlen sequences of `s` into `in` (cu_seqlens, totals, longest lengths).
void setVarlen(const CheckShape &s, CaseInputs &in) {
  VarlenLengths lengths = varlenLengths(s);
  in.cuSeqlensQ = {0};
  in.cuSeqlensK = {0};
  for (size_t b = 0; b < lengths.q.size(); ++b) {
    in.cuSeqlensQ.push_back(in.cuSeqlensQ.back() + lengths.q[b]);
    in.cuSeqlensK.push_back(in.cuSeqlensK.back() + lengths.k[b]);
  }
  fagen_fwd_problem &p = in.problem;
  p.varlen = 1;
  p.batch = int32_t(lengths.q.size());
  p.seqlen_q = *std::max_element(lengths.q.begin(), lengths.q.end());
  p.seqlen_k = *std::max_element(lengths.k.begin(), lengths.k.end());
  p.total_q = in.cuSeqlensQ.back();
  p.total_k = in.cuSeqlensK.back();
}

/// ALiBi slopes: the usual 2^(-8 (h + 1) / heads), varied per batch entry; BHSD shapes share
/// one slope per head across the batch (alibi_batch_stride 0).
void setAlibi(const CheckShape &s, CaseInputs &in) {
  const int heads = in.problem.heads_q, batches = s.bhsd ? 1 : in.problem.batch;
  in.alibiBatchStride = s.bhsd ? 0 : heads;
  for (int b = 0; b < batches; ++b)
    for (int h = 0; h < heads; ++h)
      in.alibiSlopes.push_back(std::exp2(-8.0f * float(h + 1) / float(heads)) *
                               (1.0f + 0.5f * float(b)));
}

/// A random runtime block mask with ~30% of the blocks computed. Every block row sees at least
/// one block, except these, which see none (their queries get O = 0, LSE = -inf, dQ = 0): the
/// last block row of (batch 0, head 0), and every row of the last (batch, head) when there is
/// more than one.
void setBlockMask(unsigned seed, CaseInputs &in) {
  const fagen_fwd_problem &p = in.problem;
  const int block = p.sparse_block;
  const int64_t rows = (p.seqlen_q + block - 1) / block, cols = (p.seqlen_k + block - 1) / block;
  in.blockMaskStrides[2] = cols;
  in.blockMaskStrides[1] = rows * cols;
  in.blockMaskStrides[0] = int64_t(p.heads_q) * rows * cols;
  in.blockMask.assign(size_t(p.batch) * p.heads_q * rows * cols, 0);
  std::mt19937_64 rng(seed ^ 0x6b5f3c1du);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int64_t r = 0; r < rows; ++r) {
        bool lastHead = b == p.batch - 1 && h == p.heads_q - 1 && p.batch * p.heads_q > 1;
        if ((b == 0 && h == 0 && r == rows - 1) || lastHead)
          continue;
        uint8_t *row = &in.blockMask[b * in.blockMaskStrides[0] + h * in.blockMaskStrides[1] +
                                     r * in.blockMaskStrides[2]];
        bool any = false;
        for (int64_t c = 0; c < cols; ++c)
          any |= (row[c] = uint8_t(rng() % 100 < kCheckBlockDensityPercent)) != 0;
        if (!any)
          row[rng() % cols] = 1;
      }
}

/// Scales key row j of every (batch, KV head) by 2^min(j / 48, 7) (CheckShape::risingKeys).
void riseKeys(CaseInputs &in) {
  const fagen_fwd_problem &p = in.problem;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_kv; ++h)
      for (int j = 0; j < p.seqlen_k; ++j) {
        const float factor = std::exp2(std::min(float(j) / 48.0f, 7.0f));
        uint16_t *row = &in.k[size_t(b * p.k_strides[0] + h * p.k_strides[1] + j * p.k_strides[2])];
        for (int d = 0; d < p.head_dim_qk; ++d)
          row[d] = ref::fromFloat(ref::toFloat(row[d], in.type) * factor, in.type);
      }
}

/// Draws the tensors: Q, K, V (and dO for a backward kernel) in that order from `seed`.
void drawTensors(const KernelRecord &k, const CheckShape &s, unsigned seed, CaseInputs &in) {
  const CaseSizes n = caseSizes(in.problem);
  const float qScale = k.scoreMod == ScoreMod::Softcap ? kCheckSoftcapQScale : 1.0f;
  std::mt19937_64 rng(seed);
  in.q = randomTensor(n.q, in.type, rng, qScale);
  in.k = randomTensor(n.k, in.type, rng);
  if (s.risingKeys && k.pass == Pass::Forward && !in.problem.varlen)
    riseKeys(in);
  in.v = randomTensor(n.v, in.type, rng);
  if (k.pass == Pass::Backward)
    in.dout = randomTensor(n.o, in.type, rng);
}

void copyStrides(const int64_t from[3], int64_t &batch, int64_t &head, int64_t &row) {
  batch = from[0];
  head = from[1];
  row = from[2];
}

} // namespace

std::vector<CheckShape> checkShapesFor(int64_t seqlenMin, int64_t seqlenMax, bool quick) {
  return shapesInRange(shapeGrid(quick), seqlenMin, seqlenMax, quick);
}

/// The shapes of a decode kernel serving up to `tokens` query tokens (each shape's tokens
/// capped there): one key; odd lengths and the lengths around page boundaries (255, 4097);
/// GQA 4:1 (packed rows of 4 heads), 7:1 (T = 5: 35 rows, three row blocks of 16) and MQA
/// 16:1; MHA; batches of 2 and 3; BSHD and BHSD; more query tokens than keys (rows that see no
/// key); the most tokens the kernel serves; keys rising across the splits (the combine of
/// very different LSEs); and one long call of many splits.
static std::vector<CheckShape> decodeShapes(int tokens, bool quick) {
  auto t = [tokens](int want) { return std::min(want, tokens); };
  if (quick)
    return {{1, 4, 1, 1, 1000, false}, {2, 7, 1, tokens, 257, true}, {1, 1, 1, 1, 1, false}};
  return {
      {1, 1, 1, 1, 1, false},           {1, 32, 8, 1, 1000, false},
      {2, 7, 1, 1, 4097, true},         {3, 8, 8, 1, 255, false},
      {1, 16, 1, 1, 2048, false, true}, {2, 4, 2, t(4), 577, false},
      {1, 8, 2, tokens, 129, true},     {1, 4, 4, t(3), 2, false},
      {1, 28, 4, t(5), 3000, false},    {1, 8, 1, 1, 16401, false},
  };
}

/// A paged decode kernel's shapes: batches whose sequences take the cache lengths of
/// pagedLengths (seqlen_k, page boundary + 1 sharing a page, empty, boundary - 1, one key, the
/// boundary, two pages + 1), one key, GQA 4:1 and 7:1, MQA, a long cache split many ways.
static std::vector<CheckShape> pagedShapes(int tokens, int page, bool quick) {
  auto t = [tokens](int want) { return std::min(want, tokens); };
  if (quick)
    return {{7, 32, 8, 1, 1000, false}, {2, 7, 1, tokens, 257, true}, {1, 1, 1, 1, 1, false}};
  return {
      {1, 1, 1, 1, 1, false},         {7, 32, 8, 1, 1000, false},
      {4, 7, 1, 1, 4097, true},       {3, 16, 1, t(2), 2048, false},
      {8, 8, 2, t(4), 577, false},    {2, 28, 4, t(5), 3000, false},
      {1, 8, 1, 1, 16401, false},     {9, 4, 4, t(3), 2, false},
      {5, 8, 8, tokens, page + 1, false}, {6, 8, 1, 1, 2 * page - 1, true},
  };
}

/// A paged forward's (chunked prefill) shapes, each run as shape.batch + 2 packed sequences of
/// uneven lengths (varlenLengths: one of 1 query token, one of 1 key): cache lengths at page
/// boundaries +-1, GQA 4:1 and 7:1, MQA, a long cache of many pages.
static std::vector<CheckShape> prefillShapes(int page, bool quick) {
  if (quick)
    return {{1, 8, 2, 64, page + 1, false}, {2, 32, 8, 200, 1000, false}};
  return {
      {1, 8, 2, 64, page + 1, false},      {2, 32, 8, 200, 1000, false},
      {1, 7, 1, 17, 2 * page, false},      {2, 4, 4, 128, 4 * page - 1, false},
      {1, 8, 1, 300, 3000, false},         {3, 16, 4, 129, 3 * page + 1, false},
  };
}

std::vector<CheckShape> checkShapesFor(const KernelRecord &k, bool quick) {
  if (k.isPaged() && !isDecodeKernel(k))
    return prefillShapes(k.pageSize, quick);
  if (k.isPaged())
    return pagedShapes(k.qTokens, k.pageSize, quick);
  if (isDecodeKernel(k))
    return decodeShapes(k.qTokens, quick);
  std::vector<CheckShape> shapes = checkShapesFor(k.seqlenMin, k.seqlenMax, quick);
  if (k.sparsity != Sparsity::Static)
    return shapes;
  const int coverQ = k.sparseRows * k.sparseBlock, coverK = k.sparseCols * k.sparseBlock;
  std::vector<CheckShape> out;
  for (const CheckShape &s : shapes)
    if (s.seqlenQ <= coverQ && s.seqlenK <= coverK)
      out.push_back(s);
  if (out.size() >= 2 || coverQ < 1 || coverK < 1)
    return out;
  out.push_back({2, 2, 1, std::min(coverQ, 129), std::min(coverK, 77), false});
  out.push_back({1, 2, 2, std::min(coverQ, 17), std::min(coverK, 200), true});
  return out;
}

fagen_fwd_problem forwardProblem(DType dtype, int headDimQK, int headDimV, bool causal,
                                 const CheckShape &s) {
  fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT;
  problem.batch = s.batch;
  problem.heads_q = s.headsQ;
  problem.heads_kv = s.headsKV;
  problem.seqlen_q = s.seqlenQ;
  problem.seqlen_k = s.seqlenK;
  problem.head_dim_qk = headDimQK;
  problem.head_dim_v = headDimV;
  problem.dtype = toAbi(dtype);
  problem.causal = causal;
  problem.softmax_scale = 0; // 1/sqrt(head_dim_qk)
  if (s.bhsd)
    fagen_fwd_problem_set_bhsd_strides(&problem);
  else
    fagen_fwd_problem_set_bshd_strides(&problem);
  return problem;
}

VarlenLengths varlenLengths(const CheckShape &s) {
  const int n = s.batch + 2;
  VarlenLengths l;
  for (int b = 0; b < n; ++b) {
    int q = s.seqlenQ, k = s.seqlenK; // b == 1: the longest
    if (b == 0)
      q = 1, k = (s.seqlenK + 1) / 2;
    else if (b == 2)
      q = std::max(1, s.seqlenQ / 3), k = 1;
    else if (b > 2)
      q = std::max(1, s.seqlenQ - 13 * (b - 2)), k = std::max(1, s.seqlenK - 29 * (b - 2));
    l.q.push_back(q);
    l.k.push_back(k);
  }
  return l;
}

WindowSizes windowSizes(const CheckShape &s) {
  if (!s.bhsd)
    return {37, 0};
  return s.seqlenQ <= s.seqlenK ? WindowSizes{-1, 11} : WindowSizes{23, -1};
}

CaseSizes caseSizes(const fagen_fwd_problem &p) {
  const size_t rowsQ = p.varlen ? size_t(p.total_q) : size_t(p.batch) * p.seqlen_q;
  const size_t rowsK = p.varlen ? size_t(p.total_k) : size_t(p.batch) * p.seqlen_k;
  return {rowsQ * p.heads_q * p.head_dim_qk, rowsK * p.heads_kv * p.head_dim_qk,
          rowsK * p.heads_kv * p.head_dim_v, rowsQ * p.heads_q * p.head_dim_v,
          rowsQ * p.heads_q};
}

bool isDenseKernel(const KernelRecord &k) {
  return k.mask != Mask::Window &&
         (k.mask == Mask::None || k.maskAlign == MaskAlign::BottomRight) &&
         k.scoreMod == ScoreMod::None && !k.dropout && !k.varlen && k.sparsity == Sparsity::None;
}

CaseInputs makeCaseInputs(const KernelRecord &k, const CheckShape &s, unsigned seed,
                          const std::vector<uint8_t> &staticTable) {
  CaseInputs in;
  in.type = k.dtype == DType::BF16 ? ref::ElementType::BF16 : ref::ElementType::F16;
  in.problem = forwardProblem(k.dtype, k.headDimQK, k.headDimV, false, s);
  fagen_fwd_problem &p = in.problem;
  setVariant(k, s, p);
  if (k.varlen)
    setVarlen(s, in);
  if (s.bhsd) // again: varlen changes the strides
    fagen_fwd_problem_set_bhsd_strides(&p);
  else
    fagen_fwd_problem_set_bshd_strides(&p);
  if (p.score_mod == FAGEN_SCORE_MOD_ALIBI)
    setAlibi(s, in);
  if (p.sparsity == FAGEN_SPARSITY_RUNTIME)
    setBlockMask(seed, in);
  if (p.sparsity == FAGEN_SPARSITY_STATIC)
    in.staticTable = staticTable;
  if (k.dropout) {
    in.dropoutSeed = 0x243f6a8885a308d3ull ^ seed;
    in.dropoutOffset = (uint64_t(seed % 7 + 1) << 32) | 977u;
  }
  drawTensors(k, s, seed, in);
  return in;
}

reference::FwdProblem referenceProblem(const KernelRecord &k, const CaseInputs &in) {
  const fagen_fwd_problem &p = in.problem;
  ref::FwdProblem pb;
  fagen_fwd_params &f = pb.Params;
  f = fagen_fwd_params{};
  f.q = in.q.data(), f.k = in.k.data(), f.v = in.v.data();
  copyStrides(p.q_strides, f.q_batch_stride, f.q_head_stride, f.q_row_stride);
  copyStrides(p.k_strides, f.k_batch_stride, f.k_head_stride, f.k_row_stride);
  copyStrides(p.v_strides, f.v_batch_stride, f.v_head_stride, f.v_row_stride);
  copyStrides(p.o_strides, f.o_batch_stride, f.o_head_stride, f.o_row_stride);
  f.batch = p.batch, f.heads_q = p.heads_q, f.heads_kv = p.heads_kv;
  f.seqlen_q = p.seqlen_q, f.seqlen_k = p.seqlen_k;
  f.group_size = p.heads_q / p.heads_kv;
  f.softmax_scale = float(1.0 / std::sqrt(double(p.head_dim_qk))); // as the runtime's
  f.scale_log2 = float(double(f.softmax_scale) * 1.4426950408889634);
  f.window_left = p.window_left, f.window_right = p.window_right;
  f.softcap = p.softcap;
  f.alibi_slopes = in.alibiSlopes.empty() ? nullptr : in.alibiSlopes.data();
  f.alibi_batch_stride = in.alibiBatchStride;
  f.block_mask = in.blockMask.empty() ? nullptr : in.blockMask.data();
  copyStrides(in.blockMaskStrides, f.block_mask_batch_stride, f.block_mask_head_stride,
              f.block_mask_row_stride);
  if (k.dropout) { // the effective p: the keep rule quantizes p to 1/256 (philox.h)
    f.dropout_threshold = dropout_threshold(p.dropout_p);
    f.dropout_rescale = dropout_rescale(f.dropout_threshold);
    f.dropout_p = float(f.dropout_threshold) / 256.0f;
    f.dropout_seed = in.dropoutSeed, f.dropout_offset = in.dropoutOffset;
  }
  f.cu_seqlens_q = in.cuSeqlensQ.empty() ? nullptr : in.cuSeqlensQ.data();
  f.cu_seqlens_k = in.cuSeqlensK.empty() ? nullptr : in.cuSeqlensK.data();
  f.total_q = p.varlen ? int32_t(p.total_q) : 0, f.total_k = p.varlen ? int32_t(p.total_k) : 0;

  pb.HeadDim = p.head_dim_qk;
  pb.HeadDimV = p.head_dim_v;
  pb.Type = in.type;
  pb.Mask = static_cast<fagen::Mask>(p.mask); // runtime/src/VariantAbi.h: the same values
  pb.Align = static_cast<fagen::MaskAlign>(p.mask_align);
  pb.ScoreMod = static_cast<fagen::ScoreMod>(p.score_mod);
  pb.Dropout = k.dropout;
  pb.Varlen = p.varlen != 0;
  pb.Sparsity = static_cast<fagen::Sparsity>(p.sparsity);
  pb.SparseBlock = p.sparse_block;
  pb.BlockTable = in.staticTable.empty() ? nullptr : in.staticTable.data();
  pb.BlockRows = k.sparseRows, pb.BlockCols = k.sparseCols;
  return pb;
}

fagen_run_args runArgsFor(const CaseInputs &in, const DeviceRunArgs &d) {
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<const void *>(uintptr_t(p)); };
  fagen_run_args a = FAGEN_RUN_ARGS_INIT;
  a.alibi_slopes = static_cast<const float *>(ptr(d.alibiSlopes));
  a.alibi_batch_stride = in.alibiBatchStride;
  a.block_mask = static_cast<const uint8_t *>(ptr(d.blockMask));
  a.block_mask_batch_stride = in.blockMaskStrides[0];
  a.block_mask_head_stride = in.blockMaskStrides[1];
  a.block_mask_row_stride = in.blockMaskStrides[2];
  a.cu_seqlens_q = static_cast<const int32_t *>(ptr(d.cuSeqlensQ));
  a.cu_seqlens_k = static_cast<const int32_t *>(ptr(d.cuSeqlensK));
  a.dropout_seed = in.dropoutSeed;
  a.dropout_offset = in.dropoutOffset;
  return a;
}

std::string checkShapeText(const CheckShape &s) {
  return llvm::formatv("{0}x{1}/{2} {3}x{4} {5}{6}", s.batch, s.headsQ, s.headsKV, s.seqlenQ,
                       s.seqlenK, s.bhsd ? "bhsd" : "bshd", s.risingKeys ? " rise" : "")
      .str();
}

} // namespace fagen
