//===- CheckNonFinite.cpp - `fagen check --nonfinite`: NaN and Inf inputs -===//
//
// One NaN or +Inf in one input element, at a fixed position, and what each output element may
// then be (docs/numerics.md): a NaN in K makes NaN exactly the rows that see its key; a NaN in
// V makes NaN its column of those rows, and may reach that column of rows whose query tile
// multiplies the key's tile (0 * NaN in the P@V MMA); a NaN in dO reaches dQ of its row and dK, dV
// of the keys its row sees (and of the key tiles its query tile meets). Every other element
// must be finite and within the tolerance rule of the float64 reference on the same inputs.
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"
#include "check/CheckDevice.h"

#include "check/Reference.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace fagen {

namespace {

namespace ref = reference;
using Expect = NonFiniteExpect;

/// Rows and keys of batch entry `b` of `in`'s problem.
ref::Span caseSpan(const CaseInputs &in, int b) {
  const fagen_fwd_problem &p = in.problem;
  if (!p.varlen)
    return ref::Span{0, 0, p.seqlen_q, p.seqlen_k};
  return ref::Span{in.cuSeqlensQ[b], in.cuSeqlensK[b], in.cuSeqlensQ[b + 1] - in.cuSeqlensQ[b],
                   in.cuSeqlensK[b + 1] - in.cuSeqlensK[b]};
}

/// Whether some query of i's blockM tile sees some key of j's blockN tile: the kernel then
/// multiplies the pair's tiles, masked elements included.
bool tilesMeet(const ref::FwdProblem &pb, int b, int h, const ref::Span &s, int i, int j,
               int blockM, int blockN) {
  const int i0 = i / blockM * blockM, j0 = j / blockN * blockN;
  for (int r = i0; r < std::min(i0 + blockM, s.Sq); ++r)
    for (int c = j0; c < std::min(j0 + blockN, s.Sk); ++c)
      if (ref::isVisible(pb, b, h, r, c, s.Sq, s.Sk))
        return true;
  return false;
}

/// Keys that query i of (b, h) sees.
int visibleKeys(const ref::FwdProblem &pb, int b, int h, const ref::Span &s, int i) {
  int n = 0;
  for (int j = 0; j < s.Sk; ++j)
    n += ref::isVisible(pb, b, h, i, j, s.Sq, s.Sk);
  return n;
}

/// A K or V case: key Sk - 64 (of 577 keys: key 513, column 1 of a key tile of 64 or 128, which
/// an emulated exp2 takes) of the last batch entry and kv head where some query sees that key (a
/// runtime block mask can hide whole heads).
NonFiniteCase keyCase(const ref::FwdProblem &pb, NonFiniteKind kind, int dim) {
  const fagen_fwd_params &P = pb.Params;
  NonFiniteCase c{kind, 0, 0, 0, dim};
  for (int b = P.batch - 1; b >= 0; --b)
    for (int g = P.heads_kv - 1; g >= 0; --g) {
      const ref::Span s = ref::spanOf(pb, b);
      c = {kind, b, g, std::max(0, s.Sk - 64), dim};
      for (int h = g * P.group_size; h < (g + 1) * P.group_size; ++h)
        for (int i = 0; i < s.Sq; ++i)
          if (ref::isVisible(pb, b, h, i, c.row, s.Sq, s.Sk))
            return c;
    }
  return c;
}

/// A Q or dO case: query Sq * (part - 1) / part of the first (batch, head) that sees a key,
/// from the first pair or (`fromLast`) the last.
NonFiniteCase queryCase(const ref::FwdProblem &pb, NonFiniteKind kind, bool fromLast, int part,
                        int dim) {
  const fagen_fwd_params &P = pb.Params;
  const int pairs = P.batch * P.heads_q;
  NonFiniteCase c{kind, 0, 0, 0, dim};
  for (int t = 0; t < pairs; ++t) {
    const int at = fromLast ? pairs - 1 - t : t;
    const ref::Span s = ref::spanOf(pb, at / P.heads_q);
    c = {kind, at / P.heads_q, at % P.heads_q, s.Sq * (part - 1) / part, dim};
    if (visibleKeys(pb, c.batch, c.head, s, c.row) > 0)
      return c;
  }
  return c;
}

/// Sets elements [row * width + from, row * width + to) of `v` to `e`.
void setRow(std::vector<Expect> &v, size_t row, int width, Expect e, int from = 0, int to = -1) {
  for (int x = from; x < (to < 0 ? width : to); ++x)
    v[row * width + x] = e;
}

/// A NaN in K (kind NanInK) or V: the rows of the kv head's query heads that see the key.
void expectKeyOrValue(const ref::FwdProblem &pb, const NonFiniteCase &c, int blockM, int blockN,
                      NonFiniteExpectation &e) {
  const fagen_fwd_params &P = pb.Params;
  const int dv = pb.headDimV();
  const ref::Span s = ref::spanOf(pb, c.batch);
  for (int h = c.head * P.group_size; h < (c.head + 1) * P.group_size; ++h)
    for (int i = 0; i < s.Sq; ++i) {
      const size_t row = ref::resultRowQ(pb, c.batch, h, i);
      const bool sees = ref::isVisible(pb, c.batch, h, i, c.row, s.Sq, s.Sk);
      if (c.kind == NonFiniteKind::NanInK && sees) {
        setRow(e.O, row, dv, Expect::NaN);
        // Every visible logit NaN: the row max stays -inf, as for a row that sees no key.
        e.Lse[row] = visibleKeys(pb, c.batch, h, s, i) == 1 ? Expect::NotFinite : Expect::NaN;
      }
      if (c.kind == NonFiniteKind::NanInV &&
          (sees || tilesMeet(pb, c.batch, h, s, i, c.row, blockM, blockN)))
        e.O[row * dv + c.dim] = sees ? Expect::NaN : Expect::MayBeNaN;
    }
}

/// A NaN in Q: its row's logits are all NaN, so its max stays -inf (LSE -inf, O NaN * 0).
void expectQuery(const ref::FwdProblem &pb, const NonFiniteCase &c, NonFiniteExpectation &e) {
  const ref::Span s = ref::spanOf(pb, c.batch);
  if (visibleKeys(pb, c.batch, c.head, s, c.row) == 0)
    return;
  const size_t row = ref::resultRowQ(pb, c.batch, c.head, c.row);
  setRow(e.O, row, pb.headDimV(), Expect::NaN);
  e.Lse[row] = Expect::NotFinite;
}

/// +Inf in Q: no rule of its own, the reference's IEEE arithmetic (+-inf logits, inf - inf).
void expectFromReference(const ref::FwdResult &exact, NonFiniteExpectation &e) {
  for (size_t x = 0; x < e.O.size(); ++x)
    e.O[x] = std::isnan(exact.O[x]) ? Expect::NaN : Expect::Finite;
  for (size_t x = 0; x < e.Lse.size(); ++x)
    e.Lse[x] = std::isnan(exact.Lse[x]) ? Expect::NaN : Expect::Finite;
}

/// A NaN in dO of query i: D_i and row i of dP and dS are NaN (dS = P (dP - D) is NaN where P
/// is 0 too), so dQ_i, dK and column d of dV of the keys of every key tile that meets i's.
void expectDOut(const ref::FwdProblem &pb, const NonFiniteCase &c, int blockM, int blockN,
                NonFiniteExpectation &e) {
  const fagen_fwd_params &P = pb.Params;
  const int dqk = pb.HeadDim, dv = pb.headDimV(), hk = c.head / P.group_size;
  const ref::Span s = ref::spanOf(pb, c.batch);
  const bool any = visibleKeys(pb, c.batch, c.head, s, c.row) > 0;
  setRow(e.DQ, ref::resultRowQ(pb, c.batch, c.head, c.row), dqk,
         any ? Expect::NaN : Expect::MayBeNaN);
  for (int j = 0; j < s.Sk; ++j) {
    const bool sees = ref::isVisible(pb, c.batch, c.head, c.row, j, s.Sq, s.Sk);
    if (!sees && !tilesMeet(pb, c.batch, c.head, s, c.row, j, blockM, blockN))
      continue;
    const Expect x = sees ? Expect::NaN : Expect::MayBeNaN;
    const size_t row = ref::resultRowK(pb, c.batch, hk, j);
    setRow(e.DK, row, dqk, x);
    setRow(e.DV, row, dv, x, c.dim, c.dim + 1);
  }
}

/// Element (b, h, row, dim) of the case in a tensor of `in` with `strides` (batch, head, row);
/// `keys`: a K or V tensor (varlen: rows from the sequence's first key).
size_t elementIndex(const CaseInputs &in, const int64_t strides[3], const NonFiniteCase &c,
                    bool keys) {
  const ref::Span s = caseSpan(in, c.batch);
  const int64_t batch = in.problem.varlen ? 0 : c.batch * strides[0];
  return size_t(batch + c.head * strides[1] + ((keys ? s.K0 : s.Q0) + c.row) * strides[2] +
                c.dim);
}

} // namespace

CheckShape nonFiniteShape(const KernelRecord &k) {
  // A decode kernel: its most query tokens (up to 3) of 4 heads over 2 kv heads.
  if (isDecodeKernel(k))
    return {2, 4, 2, std::min(k.qTokens, 3), 577, false};
  const CheckShape preferred{2, 4, 2, 127, 577, false};
  const bool covered =
      k.sparsity != Sparsity::Static || (k.sparseRows * k.sparseBlock >= preferred.seqlenQ &&
                                         k.sparseCols * k.sparseBlock >= preferred.seqlenK);
  if (k.seqlenMin <= preferred.seqlenK && k.seqlenMax >= preferred.seqlenK && covered)
    return preferred;
  std::vector<CheckShape> shapes = checkShapesFor(k, false);
  if (shapes.empty())
    return preferred;
  return *std::max_element(shapes.begin(), shapes.end(),
                           [](const CheckShape &a, const CheckShape &b) {
                             return a.seqlenK < b.seqlenK;
                           });
}

std::vector<NonFiniteCase> nonFiniteCases(const KernelRecord &k, const CaseInputs &in) {
  const ref::FwdProblem pb = referenceProblem(k, in);
  const int dk = std::min(7, pb.HeadDim - 1), dv = std::min(3, pb.headDimV() - 1);
  if (k.pass == Pass::Backward)
    return {queryCase(pb, NonFiniteKind::NanInDOut, true, 4, dv)};
  return {keyCase(pb, NonFiniteKind::NanInK, dk), keyCase(pb, NonFiniteKind::NanInV, dv),
          queryCase(pb, NonFiniteKind::NanInQ, false, 2, std::min(5, pb.HeadDim - 1)),
          queryCase(pb, NonFiniteKind::InfInQ, false, 2, std::min(5, pb.HeadDim - 1))};
}

void injectNonFinite(CaseInputs &in, const NonFiniteCase &c) {
  const fagen_fwd_problem &p = in.problem;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  switch (c.kind) {
  case NonFiniteKind::NanInK:
    in.k[elementIndex(in, p.k_strides, c, true)] = ref::fromFloat(nan, in.type);
    return;
  case NonFiniteKind::NanInV:
    in.v[elementIndex(in, p.v_strides, c, true)] = ref::fromFloat(nan, in.type);
    return;
  case NonFiniteKind::NanInQ:
  case NonFiniteKind::InfInQ:
    in.q[elementIndex(in, p.q_strides, c, false)] =
        ref::fromFloat(c.kind == NonFiniteKind::NanInQ ? nan : inf, in.type);
    return;
  case NonFiniteKind::NanInDOut:
    in.dout[elementIndex(in, p.do_strides, c, false)] = ref::fromFloat(nan, in.type);
    return;
  }
}

NonFiniteExpectation expectNonFinite(const ref::FwdProblem &pb, const NonFiniteCase &c,
                                     int blockM, int blockN, const ref::FwdResult *exact) {
  const fagen_fwd_params &P = pb.Params;
  const size_t rowsQ = size_t(ref::rowsQ(pb)) * P.heads_q;
  const size_t rowsK = size_t(ref::rowsK(pb)) * P.heads_kv;
  NonFiniteExpectation e;
  if (c.kind == NonFiniteKind::NanInDOut) {
    e.DQ.assign(rowsQ * pb.HeadDim, Expect::Finite);
    e.DK.assign(rowsK * pb.HeadDim, Expect::Finite);
    e.DV.assign(rowsK * pb.headDimV(), Expect::Finite);
    expectDOut(pb, c, blockM, blockN, e);
    return e;
  }
  e.O.assign(rowsQ * pb.headDimV(), Expect::Finite);
  e.Lse.assign(rowsQ, Expect::Finite);
  if (c.kind == NonFiniteKind::NanInK || c.kind == NonFiniteKind::NanInV)
    expectKeyOrValue(pb, c, blockM, blockN, e);
  else if (c.kind == NonFiniteKind::NanInQ)
    expectQuery(pb, c, e);
  else if (exact)
    expectFromReference(*exact, e);
  return e;
}

NonFiniteCount judgeNonFinite(const std::vector<Expect> &expect, const std::vector<double> &exact,
                              const std::vector<double> &same, const std::vector<double> &got,
                              double eps) {
  NonFiniteCount n;
  double sameError = 0;
  for (size_t x = 0; x < expect.size(); ++x) {
    const Expect e = expect[x];
    if (e == Expect::NaN || e == Expect::NotFinite) {
      ++n.expectedNan;
      n.missing += e == Expect::NaN ? !std::isnan(got[x]) : std::isfinite(got[x]);
      n.negInf += e == Expect::NotFinite && got[x] == -std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isnan(got[x])) {
      e == Expect::MayBeNaN ? ++n.leaked : ++n.unexpected;
      continue;
    }
    if (std::isinf(got[x]) && got[x] != exact[x]) {
      ++n.unexpected;
      continue;
    }
    n.error = std::max(n.error, ref::absDiff(exact[x], got[x]));
    sameError = std::max(sameError, ref::absDiff(exact[x], same[x]));
  }
  n.limit = ref::toleranceBound(sameError, eps);
  return n;
}

//===--- On the GPU ---------------------------------------------------------===//

namespace {

using check::DeviceMemory;

/// Filled into outputs before a run: 0x7B bytes are finite in fp16, bf16 and fp32 (61280,
/// 1.3e36), so an element the kernel leaves unwritten is neither NaN nor within tolerance.
constexpr unsigned char kFinitePoison = 0x7B;

const char *kindText(NonFiniteKind kind) {
  switch (kind) {
  case NonFiniteKind::NanInK: return "NaN in K";
  case NonFiniteKind::NanInV: return "NaN in V";
  case NonFiniteKind::NanInQ: return "NaN in Q";
  case NonFiniteKind::InfInQ: return "+Inf in Q";
  case NonFiniteKind::NanInDOut: return "NaN in dO";
  }
  return "?";
}

/// "NaN in K b1 h1 row 513 dim 7", naming the head kind.
std::string caseText(const NonFiniteCase &c) {
  const bool kv = c.kind == NonFiniteKind::NanInK || c.kind == NonFiniteKind::NanInV;
  return llvm::formatv("{0} b{1} {2}{3} {4} {5} dim {6}", kindText(c.kind), c.batch,
                       kv ? "kvh" : "h", c.head, kv ? "key" : "query", c.row, c.dim);
}

/// One tensor's outcome, printed.
struct NamedCount {
  const char *name;
  NonFiniteCount count;
};

/// Runs the forward plan on `in` (outputs poisoned first) and reads O and LSE back as `got`.
llvm::Expected<std::string> runForwardOnce(DeviceMemory &memory, const fagen_plan &plan,
                                           const KernelRecord &k, const CaseInputs &in,
                                           const ref::FwdProblem &pb, ref::FwdResult &got) {
  check::DeviceCase d;
  if (llvm::Error e = check::uploadCase(memory, in, d))
    return e;
  const CaseSizes n = caseSizes(in.problem);
  if (llvm::Error e = memory.fill(d.o, kFinitePoison, n.o * 2))
    return e;
  if (llvm::Error e = memory.fill(d.lse, kFinitePoison, n.lse * 4))
    return e;
  CUdeviceptr workspace = 0; // the path a caller with a workspace takes
  if (plan.workspace_bytes > 0) {
    llvm::Expected<CUdeviceptr> w = memory.alloc(plan.workspace_bytes);
    if (!w)
      return w.takeError();
    workspace = *w;
  }
  fagen_status st = check::launchForward(plan, isDenseKernel(k), d, workspace);
  if (st != FAGEN_OK)
    return check::runtimeFailure("run", st);
  std::vector<uint16_t> o(n.o);
  std::vector<float> l(n.lse);
  if (llvm::Error e = memory.synchronize())
    return e;
  if (llvm::Error e = memory.download(o, d.o))
    return e;
  if (llvm::Error e = memory.download(l, d.lse))
    return e;
  got = ref::readKernelOutput(pb, o.data(), l.data());
  return std::string();
}

/// A forward case: the kernel's O and LSE against the expectation.
llvm::Expected<std::string> forwardCase(const DriverApi &api, const fagen_bundle *bundle,
                                        int index, const KernelRecord &k, const CaseInputs &in,
                                        const NonFiniteCase &c, std::vector<NamedCount> &out) {
  fagen_plan plan;
  if (fagen_status st = fagen_plan_forward_kernel(bundle, &in.problem, index, &plan);
      st != FAGEN_OK)
    return check::runtimeFailure("plan", st);
  DeviceMemory memory(api);
  const ref::FwdProblem pb = referenceProblem(k, in);
  ref::FwdResult got;
  llvm::Expected<std::string> run = runForwardOnce(memory, plan, k, in, pb, got);
  if (!run || !run->empty())
    return run;
  const ref::FwdResult exact = ref::forwardFloat64(pb);
  const ref::FwdResult same = ref::forwardSamePrecision(pb);
  const NonFiniteExpectation e = expectNonFinite(pb, c, k.blockM, k.blockN, &exact);
  out.push_back({"O", judgeNonFinite(e.O, exact.O, same.O, got.O, ref::kEpsO)});
  out.push_back({"LSE", judgeNonFinite(e.Lse, exact.Lse, same.Lse, got.Lse, ref::kEpsLse)});
  return std::string();
}

/// The float64 reference's O (rounded to the dtype, through the O strides) and LSE on the
/// device: the backward's inputs, finite whatever dO holds.
llvm::Error uploadReferenceForward(const DriverApi &api, const ref::FwdProblem &pb,
                                   const CaseInputs &in, const check::DeviceCase &d) {
  const fagen_fwd_params &P = pb.Params;
  const ref::FwdResult r = ref::forwardFloat64(pb);
  const CaseSizes n = caseSizes(in.problem);
  const int dv = pb.headDimV();
  std::vector<uint16_t> o(n.o, 0);
  for (int b = 0; b < P.batch; ++b) {
    const ref::Span s = ref::spanOf(pb, b);
    for (int h = 0; h < P.heads_q; ++h)
      for (int i = 0; i < s.Sq; ++i) {
        const int64_t at = (pb.Varlen ? 0 : b * P.o_batch_stride) + h * P.o_head_stride +
                           (s.Q0 + i) * P.o_row_stride;
        for (int x = 0; x < dv; ++x)
          o[at + x] = ref::fromFloat(float(r.O[ref::resultRowQ(pb, b, h, i) * dv + x]), pb.Type);
      }
  }
  std::vector<float> lse(r.Lse.begin(), r.Lse.end());
  if (llvm::Error e = check::cudaError(api, api.cuMemcpyHtoD(d.o, o.data(), n.o * 2),
                                       "cuMemcpyHtoD"))
    return e;
  return check::cudaError(api, api.cuMemcpyHtoD(d.lse, lse.data(), n.lse * 4), "cuMemcpyHtoD");
}

/// dQ, dK, dV (poisoned, then written by the backward plan) and their host copies.
struct Gradients {
  CUdeviceptr dq = 0, dk = 0, dv = 0;
  std::vector<uint16_t> hostDq, hostDk, hostDv;
};

/// Runs the backward plan on `in`, O and LSE from the float64 reference; reads the gradients.
llvm::Expected<std::string> runBackwardOnce(DeviceMemory &memory, const fagen_plan &plan,
                                            const CaseInputs &in, const ref::FwdProblem &pb,
                                            Gradients &g) {
  check::DeviceCase d;
  if (llvm::Error e = check::uploadCase(memory, in, d))
    return e;
  if (llvm::Error e = uploadReferenceForward(memory.api(), pb, in, d))
    return e;
  const CaseSizes n = caseSizes(in.problem);
  llvm::Expected<CUdeviceptr> dout = memory.upload(in.dout);
  llvm::Expected<CUdeviceptr> work = memory.alloc(plan.workspace_bytes);
  if (!dout || !work)
    return llvm::joinErrors(dout.takeError(), work.takeError());
  for (auto [ptr, host, elements] :
       {std::tuple<CUdeviceptr *, std::vector<uint16_t> *, size_t>{&g.dq, &g.hostDq, n.q},
        {&g.dk, &g.hostDk, n.k},
        {&g.dv, &g.hostDv, n.v}}) {
    llvm::Expected<CUdeviceptr> p = memory.alloc(elements * 2);
    if (!p)
      return p.takeError();
    *ptr = *p;
    host->resize(elements);
    if (llvm::Error e = memory.fill(*p, kFinitePoison, elements * 2))
      return e;
  }
  using check::devicePointer;
  fagen_status st = fagen_run_backward(
      &plan, devicePointer(d.q), devicePointer(d.k), devicePointer(d.v), devicePointer(d.o),
      static_cast<const float *>(devicePointer(d.lse)), devicePointer(*dout),
      devicePointer(g.dq), devicePointer(g.dk), devicePointer(g.dv),
      plan.workspace_bytes ? devicePointer(*work) : nullptr, plan.workspace_bytes, &d.args,
      nullptr);
  if (st != FAGEN_OK)
    return check::runtimeFailure("run", st);
  if (llvm::Error e = memory.synchronize())
    return e;
  for (auto [host, ptr] : {std::pair<std::vector<uint16_t> *, CUdeviceptr>{&g.hostDq, g.dq},
                           {&g.hostDk, g.dk},
                           {&g.hostDv, g.dv}})
    if (llvm::Error e = memory.download(*host, ptr))
      return e;
  return std::string();
}

/// A backward case: the kernel's dQ, dK, dV against the expectation.
llvm::Expected<std::string> backwardCase(const DriverApi &api, const fagen_bundle *bundle,
                                         int index, const KernelRecord &k, const CaseInputs &in,
                                         const NonFiniteCase &c, std::vector<NamedCount> &out) {
  fagen_plan plan;
  if (fagen_status st = fagen_plan_backward_kernel(bundle, &in.problem, k.deterministic ? 1 : 0,
                                                   index, &plan);
      st != FAGEN_OK)
    return check::runtimeFailure("plan", st);
  DeviceMemory memory(api);
  const fagen_fwd_problem &p = in.problem;
  ref::BwdProblem bp;
  bp.Fwd = referenceProblem(k, in);
  bp.DOut = {in.dout.data(), p.do_strides[0], p.do_strides[1], p.do_strides[2]};
  Gradients g;
  llvm::Expected<std::string> run = runBackwardOnce(memory, plan, in, bp.Fwd, g);
  if (!run || !run->empty())
    return run;
  auto strided = [](const std::vector<uint16_t> &t, const int64_t s[3]) {
    return ref::StridedTensor{t.data(), s[0], s[1], s[2]};
  };
  const ref::BwdResult got = ref::readKernelGradients(
      bp, strided(g.hostDq, p.dq_strides), strided(g.hostDk, p.dk_strides),
      strided(g.hostDv, p.dv_strides));
  const ref::BwdResult exact = ref::backwardFloat64(bp);
  const ref::BwdResult same = ref::backwardSamePrecision(bp);
  const NonFiniteExpectation e = expectNonFinite(bp.Fwd, c, k.blockM, k.blockN);
  out.push_back({"dQ", judgeNonFinite(e.DQ, exact.DQ, same.DQ, got.DQ, ref::kEpsGrad)});
  out.push_back({"dK", judgeNonFinite(e.DK, exact.DK, same.DK, got.DK, ref::kEpsGrad)});
  out.push_back({"dV", judgeNonFinite(e.DV, exact.DV, same.DV, got.DV, ref::kEpsGrad)});
  return std::string();
}

/// Prints a case's line; returns whether it passed.
bool printCase(const KernelRecord &k, const NonFiniteCase &c, const std::string &failure,
               const std::vector<NamedCount> &counts) {
  bool passed = failure.empty();
  std::string text;
  for (const NamedCount &n : counts) {
    const NonFiniteCount &x = n.count;
    passed &= x.passed();
    text += llvm::formatv("{0}: NaN {1}/{2}{3}, unexpected {4}, leaked {5}, err {6:e1} <= {7:e1}; ",
                          n.name, x.expectedNan - x.missing, x.expectedNan,
                          x.negInf ? llvm::formatv(" (-inf {0})", x.negInf).str() : "",
                          x.unexpected, x.leaked, x.error, x.limit);
  }
  llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-38} {3}{4}\n", k.name, k.arch, caseText(c),
                                failure.empty() ? text : failure + "; ",
                                passed ? "PASS" : "FAIL");
  return passed;
}

} // namespace

int checkNonFiniteKernel(const DriverApi &api, const fagen_bundle *bundle, int index,
                         const KernelRecord &k, const std::vector<uint8_t> &staticTable,
                         unsigned seed) {
  const CheckShape shape = nonFiniteShape(k);
  const CaseInputs clean = makeCaseInputs(k, shape, seed, staticTable);
  llvm::outs() << "  " << k.name << ": " << checkShapeText(shape) << ", tiles " << k.blockM
               << " x " << k.blockN << "\n";
  int failed = 0;
  for (const NonFiniteCase &c : nonFiniteCases(k, clean)) {
    CaseInputs in = clean;
    injectNonFinite(in, c);
    std::vector<NamedCount> counts;
    llvm::Expected<std::string> run = k.pass == Pass::Backward
                                          ? backwardCase(api, bundle, index, k, in, c, counts)
                                          : forwardCase(api, bundle, index, k, in, c, counts);
    if (!run) {
      llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-38} CUDA error: {3}\n", k.name, k.arch,
                                    caseText(c), llvm::toString(run.takeError()));
      return -1;
    }
    failed += !printCase(k, c, *run, counts);
  }
  return failed;
}

} // namespace fagen
