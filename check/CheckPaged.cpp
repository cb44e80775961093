//===- CheckPaged.cpp - `fagen check`: a paged kernel's case ---------------===//
//
// A paged decode kernel's case runs on a contiguous decode case's Q, K and V with K and V moved
// into a paged cache (Check.h PagedLayout; built on the host, unit-tested in
// tests/unit/DecodeTest.cpp), against per-sequence references, with bad entries and the
// contiguous twin (pagedCase). A paged forward's (chunked prefill) runs on a varlen case, each
// sequence's keys moved into its pages, against the varlen reference.
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"
#include "check/CheckDevice.h"

#include "check/Reference.h"
#include "templates/abi/decode_params.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <regex>

namespace fagen {

std::vector<int32_t> pagedLengths(int batch, int seqlenK, int pageSize) {
  const int64_t pattern[7] = {seqlenK, pageSize + 1, 0, pageSize - 1, 1, pageSize,
                              2 * pageSize + 1};
  std::vector<int32_t> out;
  for (int b = 0; b < batch; ++b) {
    const int64_t n = b % 7 != 0 ? pattern[b % 7] : seqlenK - b / 7;
    out.push_back(int32_t(std::clamp<int64_t>(n, 0, seqlenK)));
  }
  return out;
}

namespace {

/// Element (b, h, row, 0) of a dense K or V of `in` with these strides.
size_t elementAt(const int64_t strides[3], int b, int h, int row) {
  return size_t(b * strides[0] + h * strides[1] + row * strides[2]);
}

} // namespace

PagedLayout makePagedLayout(CaseInputs &in, int pageSize, unsigned seed, bool uniform) {
  const fagen_fwd_problem &p = in.problem;
  const int batch = p.batch, keys = p.seqlen_k, heads = p.heads_kv;
  const int dk = p.head_dim_qk, dv = p.head_dim_v;
  // Key `key` of sequence b in the case's K or V: dense, or varlen's packed rows (a paged
  // forward's case: its sequences keep their own cache lengths).
  auto at = [&](const int64_t strides[3], int b, int h, int key) {
    return p.varlen ? size_t((in.cuSeqlensK[b] + int64_t(key)) * strides[2] + h * strides[1])
                    : elementAt(strides, b, h, key);
  };
  PagedLayout l;
  l.pageSize = pageSize;
  if (p.varlen)
    for (int b = 0; b < batch; ++b)
      l.seqused.push_back(in.cuSeqlensK[b + 1] - in.cuSeqlensK[b]);
  else
    l.seqused = uniform ? std::vector<int32_t>(batch, keys) : pagedLengths(batch, keys, pageSize);
  l.maxPages = (keys + pageSize - 1) / pageSize + 1; // a column more than any sequence needs
  // Sequence 1's first page is sequence 0's (the same keys and values) where both fill it, or
  // where every sequence has seqlen_k rows (dense).
  const int shared = p.varlen ? pageSize : std::min(pageSize, keys);
  const bool share = !uniform && batch >= 2 && l.seqused[0] > 0 && l.seqused[1] > 0 &&
                     (!p.varlen || std::min(l.seqused[0], l.seqused[1]) >= pageSize);
  if (share)
    for (int h = 0; h < heads; ++h)
      for (int row = 0; row < shared; ++row) {
        std::copy_n(&in.k[at(p.k_strides, 0, h, row)], dk, &in.k[at(p.k_strides, 1, h, row)]);
        std::copy_n(&in.v[at(p.v_strides, 0, h, row)], dv, &in.v[at(p.v_strides, 1, h, row)]);
      }

  // Logical pages in sequence order, each filled from its owner (batch entry, page slot).
  std::vector<std::pair<int, int>> owners;
  std::vector<int> logical(size_t(batch) * l.maxPages, -1);
  for (int b = 0; b < batch; ++b)
    for (int slot = 0; slot * pageSize < l.seqused[b]; ++slot) {
      if (share && b == 1 && slot == 0) {
        logical[size_t(l.maxPages)] = logical[0];
        continue;
      }
      logical[size_t(b) * l.maxPages + slot] = int(owners.size());
      owners.push_back({b, slot});
    }
  l.numPages = int(owners.size()) + 2; // two spare pages, never referenced
  std::vector<int> physical(l.numPages);
  std::iota(physical.begin(), physical.end(), 0);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::shuffle(physical.begin(), physical.end(), rng);

  l.blockTable.assign(logical.size(), -1);
  for (size_t i = 0; i < logical.size(); ++i)
    if (logical[i] >= 0)
      l.blockTable[i] = physical[logical[i]];
  // NaN (0x7fff in fp16 and bf16) wherever no key of a sequence lies: a load past a length or
  // through a wrong page shows in the output.
  const size_t pageElems = size_t(pageSize) * heads;
  l.kCache.assign(size_t(l.numPages) * pageElems * dk, 0x7fff);
  l.vCache.assign(size_t(l.numPages) * pageElems * dv, 0x7fff);
  for (size_t i = 0; i < owners.size(); ++i) {
    const auto [b, slot] = owners[i];
    const size_t page = size_t(physical[i]);
    for (int row = 0; row < pageSize && slot * pageSize + row < l.seqused[b]; ++row)
      for (int h = 0; h < heads; ++h) {
        const int key = slot * pageSize + row;
        const size_t to = (page * pageSize + row) * heads + h;
        std::copy_n(&in.k[at(p.k_strides, b, h, key)], dk, &l.kCache[to * dk]);
        std::copy_n(&in.v[at(p.v_strides, b, h, key)], dv, &l.vCache[to * dv]);
      }
  }
  return l;
}

namespace ref = reference;

namespace {

/// The float64 and same-precision references of a paged case: each sequence against its own
/// cache length (an empty one: O = 0, LSE = -inf), in the dense result layout of `base`.
void pagedReferences(const ref::FwdProblem &base, const PagedLayout &l, ref::FwdResult &exact,
                     ref::FwdResult &same) {
  const fagen_fwd_params &f = base.Params;
  const size_t rows = size_t(f.heads_q) * f.seqlen_q, dv = size_t(base.headDimV());
  exact.O.assign(rows * dv * f.batch, 0.0);
  exact.Lse.assign(rows * f.batch, -std::numeric_limits<double>::infinity());
  same = exact;
  for (int b = 0; b < f.batch; ++b) {
    if (l.seqused[b] == 0)
      continue;
    ref::FwdProblem one = base;
    one.Params.batch = 1;
    one.Params.seqlen_k = l.seqused[b];
    one.Params.q = static_cast<const uint16_t *>(f.q) + b * f.q_batch_stride;
    one.Params.k = static_cast<const uint16_t *>(f.k) + b * f.k_batch_stride;
    one.Params.v = static_cast<const uint16_t *>(f.v) + b * f.v_batch_stride;
    for (auto [out, r] : {std::pair{&exact, ref::forwardFloat64(one)},
                          std::pair{&same, ref::forwardSamePrecision(one)}}) {
      std::copy(r.O.begin(), r.O.end(), out->O.begin() + b * rows * dv);
      std::copy(r.Lse.begin(), r.Lse.end(), out->Lse.begin() + b * rows);
    }
  }
}

/// A paged case's cache on the device, and the call.
struct DevicePaged {
  CUdeviceptr k = 0, v = 0, table = 0, seqused = 0, workspace = 0;
  fagen_fwd_problem problem;
  fagen_paged_kv paged = FAGEN_PAGED_KV_INIT;
};

llvm::Error uploadPaged(check::DeviceMemory &memory, const CaseInputs &in, const PagedLayout &l,
                        DevicePaged &out) {
  for (auto [dst, host] : {std::pair{&out.k, &l.kCache}, std::pair{&out.v, &l.vCache}}) {
    llvm::Expected<CUdeviceptr> p = memory.upload(*host);
    if (!p)
      return p.takeError();
    *dst = *p;
  }
  for (auto [dst, host] : {std::pair{&out.table, &l.blockTable}, std::pair{&out.seqused, &l.seqused}}) {
    llvm::Expected<CUdeviceptr> p = memory.upload(*host);
    if (!p)
      return p.takeError();
    *dst = *p;
  }
  out.paged.page_size = l.pageSize;
  out.paged.num_pages = l.numPages;
  out.paged.max_pages_per_seq = l.maxPages;
  out.paged.block_table_stride = l.maxPages;
  out.problem = in.problem; // Q and O as the dense case's; K and V: the caches
  fagen_fwd_problem_set_paged_strides(&out.problem, &out.paged);
  for (int i = 0; i < 3; ++i) {
    out.problem.q_strides[i] = in.problem.q_strides[i];
    out.problem.o_strides[i] = in.problem.o_strides[i];
  }
  if (out.problem.varlen) // chunked prefill: no packed keys (cu_seqlens_k is not read)
    out.problem.total_k = out.problem.seqlen_k;
  return llvm::Error::success();
}

/// Runs a paged plan (O, LSE and the workspace poisoned first) and reads its status back:
/// FAGEN_OK, or the status and fagen_last_error() of the run or of fagen_paged_kv_status.
fagen_status runPaged(check::DeviceMemory &memory, const fagen_plan &plan, const CaseInputs &in,
                      const check::DeviceCase &d, const DevicePaged &p, CUdeviceptr table,
                      CUdeviceptr seqused, llvm::Error &error) {
  const CaseSizes n = caseSizes(in.problem);
  for (auto [ptr, bytes] : {std::pair{d.o, n.o * 2}, std::pair{d.lse, n.lse * 4},
                            std::pair{p.workspace, size_t(plan.workspace_bytes)}})
    if (llvm::Error e = memory.fill(ptr, 0xFF, bytes)) {
      error = std::move(e);
      return FAGEN_ERROR_CUDA;
    }
  using check::devicePointer;
  if (fagen_status st = fagen_run_forward_paged(
          &plan, devicePointer(d.q), devicePointer(p.k), devicePointer(p.v), devicePointer(d.o),
          static_cast<float *>(devicePointer(d.lse)),
          static_cast<const int32_t *>(devicePointer(table)),
          static_cast<const int32_t *>(devicePointer(seqused)), devicePointer(p.workspace),
          plan.workspace_bytes, &d.args, nullptr);
      st != FAGEN_OK)
    return st;
  return fagen_paged_kv_status(&plan, devicePointer(p.workspace), nullptr);
}

} // namespace

/// A paged kernel's case: the planned splits (a paged forward: its query tiles) over the paged
/// cache of `l` against the per-sequence references (the status record must stay clean); then a bad page id, a length
/// past seqlen_k and a negative length, each of which the status must name; then, where the
/// bundle has the contiguous kernel of the variant (the name without _pagedN), both on the
/// same keys (every length seqlen_k, no shared page) must agree bit for bit.
llvm::Error check::pagedCase(check::DeviceMemory &memory, const fagen_bundle *bundle, int kernelIndex,
                      const KernelRecord &k, CaseInputs &in, unsigned seed,
                      CaseResult &result) {
  const PagedLayout l = makePagedLayout(in, k.pageSize, seed, /*uniform=*/false);
  check::DeviceCase d;
  if (llvm::Error e = check::uploadCase(memory, in, d))
    return e;
  DevicePaged p;
  if (llvm::Error e = uploadPaged(memory, in, l, p))
    return e;
  fagen_plan plan;
  if (fagen_status st =
          fagen_plan_forward_paged_kernel(bundle, &p.problem, &p.paged, kernelIndex, &plan);
      st != FAGEN_OK) {
    result.failure = check::runtimeFailure("plan", st);
    return llvm::Error::success();
  }
  llvm::Expected<CUdeviceptr> w = memory.alloc(plan.workspace_bytes);
  if (!w)
    return w.takeError();
  p.workspace = *w;
  llvm::Error error = llvm::Error::success();
  if (fagen_status st = runPaged(memory, plan, in, d, p, p.table, p.seqused, error);
      st != FAGEN_OK) {
    if (error)
      return error;
    result.failure = check::runtimeFailure("paged run", st);
    return llvm::Error::success();
  }
  const ref::FwdProblem pb = referenceProblem(k, in);
  ref::FwdResult exact, same;
  if (isDecodeKernel(k)) {
    pagedReferences(pb, l, exact, same);
  } else { // chunked prefill: the varlen case's own reference, on the same keys
    exact = ref::forwardFloat64(pb);
    same = ref::forwardSamePrecision(pb);
  }
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  const std::string label =
      isDecodeKernel(k) ? std::to_string(dp.num_splits) + " splits, paged: " : "paged prefill: ";
  if (llvm::Error e = check::measureCase(memory, in, d, pb, exact, same, label, result))
    return e;
  std::vector<float> outO(result.outputs[0].values), outLse(result.outputs[1].values);

  // Bad entries: reported, never loaded through (memcheck: tests/gpu/decode_check.sh).
  struct Bad {
    const char *what;
    bool table;
    size_t index;
    int32_t value;
    const char *message;
  };
  const int last = in.problem.batch - 1;
  const Bad bads[] = {
      {"a page id past the cache", true, 0, l.numPages + 5, "is not a page id in [0, "},
      {"a length past seqlen_k", false, 0, in.problem.seqlen_k + 1, "is outside [0, seqlen_k"},
      {"a negative length", false, size_t(last), -3, "is outside [0, seqlen_k"}};
  // A bad page id is reported where the kernel reaches it, and a mask may keep a page out of
  // reach (a window leaves the first pages of a long cache unread): every used page of the
  // longest sequence gets it.
  const int longest = int(std::max_element(l.seqused.begin(), l.seqused.end()) - l.seqused.begin());
  for (const Bad &bad : bads) {
    std::vector<int32_t> table = l.blockTable, seqused = l.seqused;
    if (bad.table)
      for (int slot = 0; slot * l.pageSize < l.seqused[longest]; ++slot)
        table[size_t(longest) * l.maxPages + slot] = bad.value;
    else
      seqused[bad.index] = bad.value;
    llvm::Expected<CUdeviceptr> t = memory.upload(table), s = memory.upload(seqused);
    if (!t || !s)
      return llvm::joinErrors(t.takeError(), s.takeError());
    const fagen_status st = runPaged(memory, plan, in, d, p, *t, *s, error);
    if (error)
      return error;
    // fagen_last_error() keeps the last failure's message: only a failing status has its own.
    const std::string message =
        st == FAGEN_OK ? std::string("the call and the status returned FAGEN_OK") : fagen_last_error();
    const bool named = st == FAGEN_ERROR_INVALID_ARGUMENT &&
                       message.find(bad.message) != std::string::npos;
    result.worst.push_back({std::string("bad entry (") + bad.what + "): " +
                                (named ? "reported" : "NOT reported: " + message),
                            !named});
    result.passed = result.passed && named;
  }

  // Paged and contiguous on the same keys: bitwise equal. The twin: the kernel named as this
  // one without _pagedN, up to the stage count (the K/V pipeline's depth changes no arithmetic;
  // the planner gives pages it gathers three stages), of the same arch (a description reads
  // "NAME (PASS ARCH ..."); only where exactly one kernel is (as fagen.runtime.contiguous_twin).
  static const std::regex kStages(R"((w\d+)s\d+)"), kPaged(R"(_paged\d+_)");
  const auto key = [](const std::string &name, const std::string &arch) {
    return std::regex_replace(std::regex_replace(name, kPaged, "_"), kStages, "$1") + " " + arch;
  };
  const std::string want = key(k.name, k.arch);
  int twinIndex = -1, twins = 0;
  for (int i = 0; i < fagen_bundle_kernel_count(bundle); ++i) {
    const std::string description = fagen_bundle_kernel_name(bundle, i);
    const std::string name = description.substr(0, description.find(' '));
    const size_t pass = description.find(" (") + 2, arch = description.find(' ', pass) + 1;
    if (name.find("_paged") == std::string::npos &&
        key(name, description.substr(arch, description.find(' ', arch) - arch)) == want) {
      twinIndex = i;
      ++twins;
    }
  }
  if (twins != 1)
    twinIndex = -1;
  if (twinIndex >= 0) {
    const PagedLayout u = makePagedLayout(in, k.pageSize, seed, /*uniform=*/true);
    DevicePaged up;
    if (llvm::Error e = uploadPaged(memory, in, u, up))
      return e;
    fagen_plan uplan, cplan;
    if (fagen_plan_forward_paged_kernel(bundle, &up.problem, &up.paged, kernelIndex, &uplan) !=
            FAGEN_OK ||
        fagen_plan_forward_kernel(bundle, &in.problem, twinIndex, &cplan) != FAGEN_OK) {
      result.failure = check::runtimeFailure("plan (paged vs contiguous)", FAGEN_ERROR_NOT_SUPPORTED);
      return llvm::Error::success();
    }
    llvm::Expected<CUdeviceptr> uw = memory.alloc(uplan.workspace_bytes);
    if (!uw)
      return uw.takeError();
    up.workspace = *uw;
    const CaseSizes n = caseSizes(in.problem);
    std::vector<uint16_t> o[2];
    std::vector<float> lse[2];
    for (int run = 0; run < 2; ++run) {
      if (run == 0) {
        if (fagen_status st = runPaged(memory, uplan, in, d, up, up.table, up.seqused, error);
            st != FAGEN_OK) {
          if (error)
            return error;
          result.failure = check::runtimeFailure("paged run (every length seqlen_k)", st);
          return llvm::Error::success();
        }
      } else {
        CUdeviceptr cw = 0;
        if (cplan.workspace_bytes > 0) {
          llvm::Expected<CUdeviceptr> a = memory.alloc(cplan.workspace_bytes);
          if (!a)
            return a.takeError();
          cw = *a;
        }
        if (fagen_status st = check::launchForward(cplan, isDenseKernel(k), d, cw);
            st != FAGEN_OK) {
          result.failure = check::runtimeFailure("contiguous twin run", st);
          return llvm::Error::success();
        }
      }
      if (llvm::Error e = memory.synchronize())
        return e;
      o[run].resize(n.o);
      lse[run].resize(n.lse);
      if (llvm::Error e = memory.download(o[run], d.o))
        return e;
      if (llvm::Error e = memory.download(lse[run], d.lse))
        return e;
    }
    size_t differ = 0;
    for (size_t i = 0; i < n.o; ++i)
      differ += o[0][i] != o[1][i];
    for (size_t i = 0; i < n.lse; ++i)
      differ += std::memcmp(&lse[0][i], &lse[1][i], 4) != 0;
    const std::string twinName = fagen_bundle_kernel_name(bundle, twinIndex);
    result.worst.push_back({"paged == " + twinName.substr(0, twinName.find(' ')) +
                                " on the same keys: " +
                                (differ ? std::to_string(differ) + " elements differ"
                                        : std::string("bitwise")),
                            differ != 0});
    result.passed = result.passed && differ == 0;
  }
  result.outputs = {{"O", std::move(outO)}, {"LSE", std::move(outLse)}};
  return llvm::Error::success();
}

} // namespace fagen
