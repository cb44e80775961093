//===- CheckTest.cpp - `fagen check`'s host side, without a GPU -----------===//
//
// What `fagen check` builds before it reaches the GPU: the shape grid (static layouts, varlen
// packing), the problem of every variant (accepted by the runtime's validation and matched to
// the kernel it is made for), the run-time arguments, the reference's problem, and the static
// block layout read back from a cubin. Plans stop before the driver: the test bundle's kernels
// take parameter version 99, so a problem that passes validation and variant matching ends in
// the runtime's version-mismatch message.
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"
#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"

#include "tests/common/TestBundles.h"

#include "gtest/gtest.h"

#include <elf.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace fagen;
namespace ref = fagen::reference;

namespace {

KernelRecord record(const std::string &pass, const std::string &mask) {
  KernelRecord k = pass == "bwd" ? test::testBackwardKernel("k_" + mask, "sm_90", "bf16", 64,
                                                            mask, 0)
                                 : test::testKernel("k_" + mask, "sm_90", "bf16", 64, mask, 0);
  k.paramsVersion = 99; // plans stop at the version check, before the driver
  return k;
}

/// One kernel per variant feature, forward or backward.
std::vector<KernelRecord> variantRecords(const std::string &pass) {
  std::vector<KernelRecord> out;
  out.push_back(record(pass, "none"));
  out.push_back(record(pass, "window"));
  out.push_back(record(pass, "causal"));
  out.back().maskAlign = MaskAlign::TopLeft;
  out.push_back(record(pass, "causal"));
  out.back().scoreMod = ScoreMod::Softcap;
  out.push_back(record(pass, "none"));
  out.back().scoreMod = ScoreMod::Alibi;
  out.push_back(record(pass, "causal"));
  out.back().dropout = true;
  out.push_back(record(pass, "causal"));
  out.back().varlen = true;
  out.push_back(record(pass, "none"));
  out.back().sparsity = Sparsity::Runtime, out.back().sparseBlock = 128;
  out.push_back(record(pass, "causal"));
  KernelRecord &s = out.back();
  s.sparsity = Sparsity::Static, s.sparseBlock = 64, s.sparseRows = 16, s.sparseCols = 16;
  s.sparseHash = "0badcafe";
  s.blockM = s.blockN = 64; // the tiles divide the block
  out.push_back(record(pass, "none"));
  out.back().headDimQK = 192, out.back().headDimV = 128;
  for (size_t i = 0; i < out.size(); ++i)
    out[i].name = "k" + std::to_string(i) + "_" + pass;
  return out;
}

/// Plans `k` (index `index` of `bundle`) pinned for `in`; the runtime's message.
std::string pinnedPlanMessage(const fagen_bundle *bundle, int index, const KernelRecord &k,
                              const CaseInputs &in) {
  fagen_plan plan;
  fagen_status st =
      k.pass == Pass::Backward
          ? fagen_plan_backward_kernel(bundle, &in.problem, k.deterministic, index, &plan)
          : fagen_plan_forward_kernel(bundle, &in.problem, index, &plan);
  EXPECT_EQ(st, FAGEN_ERROR_NOT_SUPPORTED);
  return fagen_last_error();
}

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST(CheckShapes, GridAndTunedRanges) {
  EXPECT_EQ(checkShapesFor(0, kSeqlenUnbounded, false).size(), 9u);
  EXPECT_EQ(checkShapesFor(0, kSeqlenUnbounded, true).size(), 3u);
  std::vector<CheckShape> tuned = checkShapesFor(2000, 4000, false);
  ASSERT_EQ(tuned.size(), 3u);
  for (const CheckShape &s : tuned)
    EXPECT_GE(std::max(s.seqlenQ, s.seqlenK), 2000);
}

TEST(CheckShapes, StaticLayoutsOnlyGetCoveredShapes) {
  KernelRecord k = record("fwd", "none");
  k.sparsity = Sparsity::Static, k.sparseBlock = 64, k.sparseRows = 2, k.sparseCols = 3;
  std::vector<CheckShape> shapes = checkShapesFor(k, false);
  ASSERT_GE(shapes.size(), 2u);
  for (const CheckShape &s : shapes) {
    EXPECT_LE(s.seqlenQ, 128) << checkShapeText(s);
    EXPECT_LE(s.seqlenK, 192) << checkShapeText(s);
  }
  k.sparseRows = k.sparseCols = 16; // 1024 tokens: the whole grid
  EXPECT_EQ(checkShapesFor(k, false).size(), 9u);
}

TEST(CheckShapes, VarlenPacksUnevenSequences) {
  for (bool quick : {false, true})
    for (const CheckShape &s : checkShapesFor(0, kSeqlenUnbounded, quick)) {
      VarlenLengths l = varlenLengths(s);
      ASSERT_EQ(l.q.size(), size_t(s.batch + 2));
      ASSERT_EQ(l.k.size(), l.q.size());
      EXPECT_EQ(*std::max_element(l.q.begin(), l.q.end()), s.seqlenQ);
      EXPECT_EQ(*std::max_element(l.k.begin(), l.k.end()), s.seqlenK);
      EXPECT_EQ(*std::min_element(l.q.begin(), l.q.end()), 1) << checkShapeText(s);
      EXPECT_EQ(*std::min_element(l.k.begin(), l.k.end()), 1) << checkShapeText(s);
    }
}

TEST(CheckInputs, EveryVariantIsAcceptedByItsKernel) {
  for (const std::string pass : {"fwd", "bwd"}) {
    std::vector<KernelRecord> kernels = variantRecords(pass);
    Bundle b = test::makeVariantBundle();
    b.kernels = kernels;
    std::vector<uint8_t> bytes = serializeBundle(b);
    fagen_bundle *bundle = nullptr;
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
        << fagen_last_error();
    std::vector<uint8_t> table(16 * 16, 1);
    for (size_t i = 0; i < kernels.size(); ++i)
      for (const CheckShape &s : checkShapesFor(kernels[i], false)) {
        CaseInputs in = makeCaseInputs(kernels[i], s, 7, table);
        EXPECT_TRUE(contains(pinnedPlanMessage(bundle, int(i), kernels[i], in),
                             "takes parameter layout version 99"))
            << kernels[i].name << " " << checkShapeText(s) << ": " << fagen_last_error();
        EXPECT_EQ(in.dout.empty(), pass == "fwd");
      }
    fagen_bundle_destroy(bundle);
  }
}

TEST(CheckInputs, VariantArguments) {
  std::vector<KernelRecord> k = variantRecords("bwd");
  const CheckShape bshd{2, 4, 2, 257, 129, false}, bhsd{2, 4, 2, 257, 577, true};
  CaseInputs window = makeCaseInputs(k[1], bshd, 1), windowOpen = makeCaseInputs(k[1], bhsd, 1);
  EXPECT_EQ(window.problem.mask, FAGEN_MASK_WINDOW);
  EXPECT_EQ(window.problem.window_left, 37);
  EXPECT_EQ(window.problem.window_right, 0);
  EXPECT_EQ(windowOpen.problem.window_left, -1);
  EXPECT_EQ(makeCaseInputs(k[2], bshd, 1).problem.mask_align, FAGEN_MASK_ALIGN_TOP_LEFT);
  CaseInputs softcap = makeCaseInputs(k[3], bshd, 1);
  EXPECT_EQ(softcap.problem.softcap, kCheckSoftcap);
  CaseInputs alibi = makeCaseInputs(k[4], bshd, 1), alibiShared = makeCaseInputs(k[4], bhsd, 1);
  EXPECT_EQ(alibi.alibiSlopes.size(), 8u);
  EXPECT_EQ(alibi.alibiBatchStride, 4);
  EXPECT_EQ(alibiShared.alibiSlopes.size(), 4u);
  EXPECT_EQ(alibiShared.alibiBatchStride, 0);
  CaseInputs dropout = makeCaseInputs(k[5], bshd, 1);
  EXPECT_EQ(dropout.problem.dropout_p, kCheckDropoutP);
  EXPECT_NE(dropout.dropoutOffset >> 32, 0u); // the offset's high word reaches the key
  CaseInputs varlen = makeCaseInputs(k[6], bshd, 1);
  EXPECT_EQ(varlen.problem.batch, 4);
  EXPECT_EQ(varlen.problem.total_q, varlen.cuSeqlensQ.back());
  EXPECT_EQ(varlen.problem.total_k, varlen.cuSeqlensK.back());
  EXPECT_EQ(varlen.q.size(), size_t(varlen.problem.total_q) * 4 * 64);
  CaseInputs stat = makeCaseInputs(k[8], bshd, 1, std::vector<uint8_t>(256, 1));
  EXPECT_EQ(stat.problem.sparse_hash, 0x0badcafeu);
  EXPECT_EQ(stat.staticTable.size(), 256u);
}

TEST(CheckInputs, SoftcapSaturatesTanh) {
  KernelRecord k = variantRecords("fwd")[3];
  CaseInputs in = makeCaseInputs(k, {1, 2, 2, 127, 577, true}, 3);
  ref::FwdProblem pb = referenceProblem(k, in);
  double most = 0; // the largest |scale * q.k| / softcap over some (query, key) pairs
  for (int i = 0; i < 127; i += 7)
    for (int j = 0; j < 577; j += 5) {
      double dot = 0;
      for (int x = 0; x < 64; ++x)
        dot += ref::loadElement(pb, ref::tensorQ(pb.Params), 0, 0, 0, i, x) *
               ref::loadElement(pb, ref::tensorK(pb.Params), 0, 0, 0, j, x);
      most = std::max(most, std::fabs(pb.Params.softmax_scale * dot / kCheckSoftcap));
    }
  EXPECT_GT(std::tanh(most), 0.9);
}

TEST(CheckInputs, RuntimeBlockMaskHasDensityAndEmptyRows) {
  KernelRecord k = variantRecords("fwd")[7];
  CaseInputs in = makeCaseInputs(k, {2, 3, 1, 1000, 1000, false}, 5);
  const int64_t rows = 8, cols = 8;
  ASSERT_EQ(in.blockMask.size(), size_t(2 * 3 * rows * cols));
  EXPECT_EQ(in.blockMaskStrides[2], cols);
  size_t on = 0;
  for (uint8_t x : in.blockMask)
    on += x != 0;
  EXPECT_GT(on, in.blockMask.size() / 5);
  EXPECT_LT(on, in.blockMask.size() / 2);
  auto rowOn = [&](int b, int h, int64_t r) {
    int64_t sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += in.blockMask[b * in.blockMaskStrides[0] + h * in.blockMaskStrides[1] +
                          r * in.blockMaskStrides[2] + c];
    return sum;
  };
  EXPECT_EQ(rowOn(0, 0, rows - 1), 0);
  EXPECT_GT(rowOn(0, 0, 0), 0);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(rowOn(1, 2, r), 0);
  // The reference reads the same mask: queries of the empty block row see no key.
  ref::FwdProblem pb = referenceProblem(k, in);
  ref::FwdResult r = ref::forwardFloat64(pb);
  EXPECT_TRUE(std::isinf(r.Lse[ref::resultRowQ(pb, 0, 0, 999)]));
  EXPECT_TRUE(std::isfinite(r.Lse[ref::resultRowQ(pb, 0, 0, 0)]));
}

TEST(CheckInputs, ReferenceProblemMatchesTheCall) {
  std::vector<KernelRecord> k = variantRecords("bwd");
  const CheckShape s{1, 2, 1, 64, 100, true};
  CaseInputs window = makeCaseInputs(k[1], s, 2);
  ref::FwdProblem pb = referenceProblem(k[1], window);
  EXPECT_EQ(pb.Mask, fagen::Mask::Window);
  EXPECT_EQ(pb.Params.window_left, window.problem.window_left);
  EXPECT_EQ(pb.Params.q_row_stride, window.problem.q_strides[2]);
  EXPECT_EQ(pb.Params.group_size, 2);
  EXPECT_FLOAT_EQ(pb.Params.softmax_scale, 0.125f);
  EXPECT_EQ(referenceProblem(k[2], makeCaseInputs(k[2], s, 2)).Align, fagen::MaskAlign::TopLeft);
  CaseInputs dropout = makeCaseInputs(k[5], s, 2);
  ref::FwdProblem dp = referenceProblem(k[5], dropout);
  EXPECT_EQ(dp.Params.dropout_threshold, 44u);
  EXPECT_FLOAT_EQ(dp.Params.dropout_p, 44.0f / 256); // the effective p of the keep rule
  EXPECT_EQ(dp.Params.dropout_seed, dropout.dropoutSeed);
  CaseInputs varlen = makeCaseInputs(k[6], s, 2);
  ref::FwdProblem vp = referenceProblem(k[6], varlen);
  EXPECT_TRUE(vp.Varlen);
  EXPECT_EQ(vp.Params.cu_seqlens_q, varlen.cuSeqlensQ.data());
  ref::FwdProblem mla = referenceProblem(k[9], makeCaseInputs(k[9], s, 2));
  EXPECT_EQ(mla.HeadDim, 192);
  EXPECT_EQ(mla.headDimV(), 128);
}

TEST(CheckInputs, RunArgsCarryDevicePointers) {
  std::vector<KernelRecord> k = variantRecords("fwd");
  CaseInputs in = makeCaseInputs(k[7], {1, 2, 2, 300, 300, false}, 4);
  in.dropoutSeed = 11, in.dropoutOffset = 12;
  DeviceRunArgs d;
  d.alibiSlopes = 0x1000, d.blockMask = 0x2000, d.cuSeqlensQ = 0x3000, d.cuSeqlensK = 0x4000;
  fagen_run_args a = runArgsFor(in, d);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.alibi_slopes), 0x1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.block_mask), 0x2000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.cu_seqlens_k), 0x4000u);
  EXPECT_EQ(a.block_mask_head_stride, in.blockMaskStrides[1]);
  EXPECT_EQ(a.dropout_seed, 11u);
  EXPECT_EQ(a.dropout_offset, 12u);
  EXPECT_EQ(runArgsFor(in, DeviceRunArgs{}).block_mask, nullptr);
}

TEST(CheckInputs, DenseForwardDrawsAsBefore) {
  KernelRecord fwd = record("fwd", "causal"), bwd = record("bwd", "causal");
  const CheckShape s{2, 2, 1, 33, 45, false};
  CaseInputs f = makeCaseInputs(fwd, s, 9), b = makeCaseInputs(bwd, s, 9);
  EXPECT_TRUE(isDenseKernel(fwd));
  EXPECT_EQ(f.q, b.q); // dO is drawn after Q, K, V
  EXPECT_EQ(f.v, b.v);
  EXPECT_EQ(f.problem.mask, FAGEN_MASK_CAUSAL);
  CaseSizes n = caseSizes(f.problem);
  EXPECT_EQ(n.q, size_t(2 * 2 * 33 * 64));
  EXPECT_EQ(n.lse, size_t(2 * 2 * 33));
  EXPECT_EQ(b.dout.size(), n.o);
}

TEST(CheckInputs, RisingKeysGrowAlongTheSequenceForForwardKernels) {
  std::vector<CheckShape> grid = checkShapesFor(0, kSeqlenUnbounded, false);
  EXPECT_EQ(std::count_if(grid.begin(), grid.end(), [](const CheckShape &s) { return s.risingKeys; }),
            1);
  for (const CheckShape &s : checkShapesFor(0, kSeqlenUnbounded, true))
    EXPECT_FALSE(s.risingKeys) << checkShapeText(s); // the sanitizers' grid stays plain
  std::vector<CheckShape> longRows = checkShapesFor(4097, kSeqlenUnbounded, false);
  ASSERT_EQ(longRows.size(), 3u);
  EXPECT_TRUE(longRows[2].risingKeys);
  EXPECT_TRUE(contains(checkShapeText(longRows[2]), " rise"));

  // Batch 2, 2 KV heads, both layouts: the scaled element of key j, head h, batch b is found
  // from the layout itself, not from the strides the code uses.
  KernelRecord fwd = record("fwd", "none"), bwd = record("bwd", "none");
  for (bool bhsd : {false, true}) {
    const CheckShape plain{2, 4, 2, 9, 300, bhsd}, rising{2, 4, 2, 9, 300, bhsd, true};
    CaseInputs a = makeCaseInputs(fwd, plain, 4), b = makeCaseInputs(fwd, rising, 4);
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.v, b.v);
    const ref::ElementType t = a.type;
    const int64_t sk = 300, hkv = 2, d = a.problem.head_dim_qk;
    for (int bb = 0; bb < 2; ++bb)
      for (int h = 0; h < 2; ++h)
        for (int j : {0, 47, 48, 200, 299}) {
          const int64_t row = bhsd ? (bb * hkv + h) * sk + j : (bb * sk + j) * hkv + h;
          const float factor = std::exp2(std::min(float(j) / 48.0f, 7.0f));
          for (int e = 0; e < d; ++e) {
            const float x = ref::toFloat(a.k[row * d + e], t);
            ASSERT_EQ(ref::toFloat(b.k[row * d + e], t), ref::toFloat(ref::fromFloat(x * factor, t), t))
                << (bhsd ? "bhsd" : "bshd") << " batch " << bb << " head " << h << " key " << j;
          }
        }
    // Backward kernels keep the plain keys.
    EXPECT_EQ(makeCaseInputs(bwd, rising, 4).k, makeCaseInputs(bwd, plain, 4).k);
  }
  // So do varlen kernels (packed sequences: no per-sequence row index here).
  KernelRecord varlen = record("fwd", "none");
  varlen.varlen = true;
  const CheckShape plain{2, 2, 1, 9, 300, false}, rising{2, 2, 1, 9, 300, false, true};
  EXPECT_EQ(makeCaseInputs(varlen, rising, 4).k, makeCaseInputs(varlen, plain, 4).k);
}

//===--- The static layout read back from a cubin --------------------------===//

namespace {

/// A minimal ELF64 file: [null, .shstrtab-less strtab, symtab, data] with `table` at offset 8
/// of the data section under the symbol fagen_block_table.
std::string elfWithTable(const std::vector<uint8_t> &table) {
  const std::string strtab = std::string("\0fagen_block_table\0", 19);
  std::string data(8, '\x7');
  data.append(table.begin(), table.end());
  Elf64_Sym syms[2] = {};
  syms[1].st_name = 1, syms[1].st_shndx = 3, syms[1].st_value = 8, syms[1].st_size = table.size();
  std::string body(reinterpret_cast<const char *>(syms), sizeof syms);
  const size_t strOff = sizeof(Elf64_Ehdr), symOff = strOff + strtab.size() + 5,
               dataOff = symOff + body.size(), shOff = dataOff + data.size();
  Elf64_Shdr sh[4] = {};
  sh[1].sh_type = SHT_STRTAB, sh[1].sh_offset = strOff, sh[1].sh_size = strtab.size();
  sh[2].sh_type = SHT_SYMTAB, sh[2].sh_offset = symOff, sh[2].sh_size = body.size();
  sh[2].sh_link = 1;
  sh[3].sh_type = SHT_PROGBITS, sh[3].sh_offset = dataOff, sh[3].sh_size = data.size();
  Elf64_Ehdr eh = {};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64, eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_shoff = shOff, eh.e_shentsize = sizeof(Elf64_Shdr), eh.e_shnum = 4;
  std::string out(reinterpret_cast<const char *>(&eh), sizeof eh);
  out += strtab + std::string(5, '\0') + body + data;
  out.append(reinterpret_cast<const char *>(sh), sizeof sh);
  return out;
}

} // namespace

TEST(CheckStaticLayout, ReadsAndVerifiesTheTable) {
  BlockSparseSpec spec;
  spec.block = 64, spec.layout = "local_global", spec.local = 2, spec.global = 1;
  spec.maxSeqlen = 300;
  BlockTable t = blockTable(spec);
  KernelRecord k = record("fwd", "causal");
  k.sparsity = Sparsity::Static, k.sparseBlock = 64, k.sparseRows = t.rows, k.sparseCols = t.cols;
  k.sparseHash = t.hash;
  llvm::Expected<std::vector<uint8_t>> got = staticBlockTable(k, elfWithTable(t.table));
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  EXPECT_EQ(*got, t.table);

  std::vector<uint8_t> other = t.table;
  other[1] ^= 1;
  llvm::Expected<std::vector<uint8_t>> wrong = staticBlockTable(k, elfWithTable(other));
  ASSERT_FALSE(bool(wrong));
  EXPECT_TRUE(contains(llvm::toString(wrong.takeError()), "manifest's sparse_hash is"));
  llvm::Expected<std::vector<uint8_t>> notElf = staticBlockTable(k, "not a cubin");
  ASSERT_FALSE(bool(notElf));
  EXPECT_TRUE(contains(llvm::toString(notElf.takeError()), "not an ELF file"));
  k.sparseRows += 1;
  llvm::Expected<std::vector<uint8_t>> size = staticBlockTable(k, elfWithTable(t.table));
  ASSERT_FALSE(bool(size));
  EXPECT_TRUE(contains(llvm::toString(size.takeError()), "the manifest says"));
}

//===--- Non-finite inputs: where a NaN may go ------------------------------===//

namespace {

using Expect = NonFiniteExpect;

/// A causal kernel's case `kind` on its non-finite shape, injected; `in` keeps the tensors.
NonFiniteCase injectCase(const KernelRecord &k, NonFiniteKind kind, CaseInputs &in) {
  in = makeCaseInputs(k, nonFiniteShape(k), 3);
  for (const NonFiniteCase &c : nonFiniteCases(k, in))
    if (c.kind == kind) {
      injectNonFinite(in, c);
      return c;
    }
  ADD_FAILURE() << "no case of this kind";
  return {};
}

int64_t countOf(const std::vector<Expect> &v, Expect e) {
  return std::count(v.begin(), v.end(), e);
}

} // namespace

TEST(CheckNonFinite, CasesSitAtOddPositions) {
  KernelRecord fwd = record("fwd", "causal"), bwd = record("bwd", "causal");
  const CheckShape s = nonFiniteShape(fwd);
  EXPECT_EQ(checkShapeText(s), "2x4/2 127x577 bshd");
  std::vector<NonFiniteCase> cases = nonFiniteCases(fwd, makeCaseInputs(fwd, s, 1));
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0].kind, NonFiniteKind::NanInK);
  EXPECT_EQ(cases[0].batch, 1);
  EXPECT_EQ(cases[0].head, 1);
  EXPECT_EQ(cases[0].row, 513); // column 1 of a key tile of 64 or 128: exp2_poly's columns
  std::vector<NonFiniteCase> back = nonFiniteCases(bwd, makeCaseInputs(bwd, s, 1));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].kind, NonFiniteKind::NanInDOut);
  EXPECT_EQ(back[0].row, 95);
  fwd.seqlenMin = 2000, fwd.seqlenMax = 4000; // tuned: a shape of its own range
  EXPECT_GE(nonFiniteShape(fwd).seqlenK, 2000);
}

TEST(CheckNonFinite, CasesAvoidHeadsABlockMaskHides) {
  KernelRecord k = variantRecords("fwd")[7]; // runtime block mask of 128
  CaseInputs in = makeCaseInputs(k, nonFiniteShape(k), 3);
  std::vector<NonFiniteCase> cases = nonFiniteCases(k, in);
  // 127 queries: one block row, and that of (batch 0, head 0) computes no block.
  EXPECT_EQ(cases[2].batch * 4 + cases[2].head, 1);
  for (const NonFiniteCase &c : cases) {
    CaseInputs poisoned = in;
    injectNonFinite(poisoned, c);
    const ref::FwdProblem pb = referenceProblem(k, poisoned);
    const ref::FwdResult r = ref::forwardFloat64(pb);
    const NonFiniteExpectation e = expectNonFinite(pb, c, k.blockM, k.blockN, &r);
    EXPECT_GT(countOf(e.O, Expect::NaN), 0) << int(c.kind);
  }
}

TEST(CheckNonFinite, InjectWritesTheElementTheReferenceReads) {
  KernelRecord k = record("fwd", "causal");
  k.varlen = true; // rows start at cu_seqlens: keys and queries from different offsets
  CaseInputs in;
  const NonFiniteCase c = injectCase(k, NonFiniteKind::NanInV, in);
  const ref::FwdProblem pb = referenceProblem(k, in);
  const ref::Span s = ref::spanOf(pb, c.batch);
  EXPECT_TRUE(std::isnan(ref::loadElement(pb, ref::tensorV(pb.Params), c.batch, c.head, s.K0,
                                          c.row, c.dim)));
  size_t nans = 0;
  for (uint16_t x : in.v)
    nans += std::isnan(ref::toFloat(x, in.type));
  EXPECT_EQ(nans, 1u);
  CaseInputs inf;
  const NonFiniteCase q = injectCase(k, NonFiniteKind::InfInQ, inf);
  const ref::FwdProblem qb = referenceProblem(k, inf);
  EXPECT_EQ(ref::loadElement(qb, ref::tensorQ(qb.Params), q.batch, q.head,
                             ref::spanOf(qb, q.batch).Q0, q.row, q.dim),
            std::numeric_limits<double>::infinity());
}

TEST(CheckNonFinite, KeyNaNReachesExactlyTheRowsThatSeeIt) {
  KernelRecord k = record("fwd", "causal");
  CaseInputs in;
  const NonFiniteCase c = injectCase(k, NonFiniteKind::NanInK, in);
  const ref::FwdProblem pb = referenceProblem(k, in);
  const NonFiniteExpectation e = expectNonFinite(pb, c, k.blockM, k.blockN);
  // Heads 2 and 3 (kv head 1) of batch entry 1; bottom-right causal 127 x 577: query i sees
  // key 513 iff i >= 63.
  EXPECT_EQ(countOf(e.Lse, Expect::NaN), 2 * 64);
  EXPECT_EQ(countOf(e.O, Expect::NaN), 2 * 64 * 64);
  EXPECT_EQ(e.Lse[ref::resultRowQ(pb, 1, 2, 63)], Expect::NaN);
  EXPECT_EQ(e.Lse[ref::resultRowQ(pb, 1, 2, 62)], Expect::Finite);
  EXPECT_EQ(e.Lse[ref::resultRowQ(pb, 1, 1, 100)], Expect::Finite); // kv head 0
  // The float64 reference on the same inputs agrees: NaN exactly there.
  const ref::FwdResult r = ref::forwardFloat64(pb);
  for (size_t row = 0; row < e.Lse.size(); ++row)
    ASSERT_EQ(std::isnan(r.Lse[row]), e.Lse[row] == Expect::NaN) << "row " << row;
}

TEST(CheckNonFinite, ValueNaNMayReachItsColumnWithinAQueryTile) {
  KernelRecord k = record("fwd", "causal");
  CaseInputs in;
  const NonFiniteCase c = injectCase(k, NonFiniteKind::NanInV, in);
  const ref::FwdProblem pb = referenceProblem(k, in);
  const int dv = 64;
  auto at = [&](const NonFiniteExpectation &e, int h, int i, int x) {
    return e.O[ref::resultRowQ(pb, 1, h, i) * dv + x];
  };
  const NonFiniteExpectation wide = expectNonFinite(pb, c, 128, 64);
  EXPECT_EQ(countOf(wide.O, Expect::NaN), 2 * 64); // column 3 of rows 63..126, heads 2, 3
  EXPECT_EQ(countOf(wide.O, Expect::MayBeNaN), 2 * 63); // rows 0..62 share query tile 0
  EXPECT_EQ(at(wide, 3, 63, c.dim), Expect::NaN);
  EXPECT_EQ(at(wide, 3, 63, c.dim + 1), Expect::Finite);
  EXPECT_EQ(countOf(wide.Lse, Expect::Finite), int64_t(wide.Lse.size()));
  // Query tiles of 32: tile 0 (rows 0..31) sees keys up to 481, not key tile 512..575.
  const NonFiniteExpectation narrow = expectNonFinite(pb, c, 32, 64);
  EXPECT_EQ(at(narrow, 2, 31, c.dim), Expect::Finite);
  EXPECT_EQ(at(narrow, 2, 32, c.dim), Expect::MayBeNaN);
  EXPECT_EQ(countOf(narrow.O, Expect::MayBeNaN), 2 * 31);
}

TEST(CheckNonFinite, QueryNaNAndInf) {
  KernelRecord k = record("fwd", "none");
  CaseInputs nan;
  const NonFiniteCase c = injectCase(k, NonFiniteKind::NanInQ, nan);
  const ref::FwdProblem pb = referenceProblem(k, nan);
  const NonFiniteExpectation e = expectNonFinite(pb, c, k.blockM, k.blockN);
  EXPECT_EQ(countOf(e.O, Expect::NaN), 64);
  EXPECT_EQ(e.Lse[ref::resultRowQ(pb, 0, 0, 63)], Expect::NotFinite);
  // +Inf: +-inf logits, inf - inf in the softmax: the reference's row is NaN.
  CaseInputs inf;
  const NonFiniteCase q = injectCase(k, NonFiniteKind::InfInQ, inf);
  const ref::FwdProblem qb = referenceProblem(k, inf);
  const ref::FwdResult r = ref::forwardFloat64(qb);
  const NonFiniteExpectation ei = expectNonFinite(qb, q, k.blockM, k.blockN, &r);
  EXPECT_EQ(countOf(ei.O, Expect::NaN), 64);
  EXPECT_EQ(ei.Lse[ref::resultRowQ(qb, 0, 0, 63)], Expect::NaN);
  EXPECT_EQ(countOf(ei.Lse, Expect::NaN), 1);
}

TEST(CheckNonFinite, DOutNaNReachesItsRowAndTheKeysItSees) {
  KernelRecord k = record("bwd", "causal"); // tiles 64 x 128
  CaseInputs in;
  const NonFiniteCase c = injectCase(k, NonFiniteKind::NanInDOut, in);
  ref::BwdProblem bp;
  bp.Fwd = referenceProblem(k, in);
  const int64_t *s = in.problem.do_strides;
  bp.DOut = {in.dout.data(), s[0], s[1], s[2]};
  const NonFiniteExpectation e = expectNonFinite(bp.Fwd, c, k.blockM, k.blockN);
  EXPECT_EQ(countOf(e.DQ, Expect::NaN), 64);
  // Query 95 sees keys 0..545; its tile (64..126) sees up to 576: keys 546..576 may be NaN.
  EXPECT_EQ(countOf(e.DK, Expect::NaN), 546 * 64);
  EXPECT_EQ(countOf(e.DK, Expect::MayBeNaN), 31 * 64);
  EXPECT_EQ(countOf(e.DV, Expect::NaN), 546);
  EXPECT_TRUE(e.O.empty());
  // The float64 reference agrees on what must be NaN, and is finite where nothing may be.
  const ref::BwdResult r = ref::backwardFloat64(bp);
  for (auto [want, got] : {std::pair{&e.DQ, &r.DQ}, {&e.DK, &r.DK}, {&e.DV, &r.DV}})
    for (size_t x = 0; x < want->size(); ++x) {
      if ((*want)[x] == Expect::NaN)
        ASSERT_TRUE(std::isnan((*got)[x])) << x;
      if ((*want)[x] == Expect::Finite)
        ASSERT_TRUE(std::isfinite((*got)[x])) << x;
    }
}

TEST(CheckNonFinite, JudgeCountsAndCompares) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Expect> expect = {Expect::NaN, Expect::NotFinite, Expect::MayBeNaN,
                                      Expect::MayBeNaN, Expect::Finite, Expect::Finite};
  const std::vector<double> exact = {nan, nan, 1.0, 2.0, 3.0, -inf};
  const std::vector<double> same = {nan, nan, 1.0, 2.0, 3.01, -inf};
  NonFiniteCount n =
      judgeNonFinite(expect, exact, same, {nan, -inf, nan, 2.0, 3.02, -inf}, 1e-9);
  EXPECT_EQ(n.expectedNan, 2);
  EXPECT_EQ(n.missing, 0);
  EXPECT_EQ(n.leaked, 1);
  EXPECT_EQ(n.unexpected, 0);
  EXPECT_EQ(n.negInf, 1);
  EXPECT_NEAR(n.error, 0.02, 1e-12);
  EXPECT_NEAR(n.limit, 0.02, 1e-8);
  EXPECT_TRUE(n.passed());
  n = judgeNonFinite(expect, exact, same, {1.0, 0.0, 1.0, 2.0, nan, inf}, 0);
  EXPECT_EQ(n.missing, 2);
  EXPECT_EQ(n.unexpected, 2);
  EXPECT_FALSE(n.passed());
}
