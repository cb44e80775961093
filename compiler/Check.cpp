//===- Check.cpp - `fagen check`: run a bundle's kernels against a reference =//

#include "Check.h"

#include "Reference.h"

#include "Bundle.h"
#include "Driver.h"
#include "fagen/fagen.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <random>
#include <variant>

namespace fagen {

namespace {

namespace ref = reference;

/// The shapes of `grid` that a kernel tuned for max(seqlen_q, seqlen_k) in [lo, hi] serves;
/// where fewer than two are left, odd shapes at the bottom of the range are added (one with
/// Sq < Sk, one with Sq > Sk, so that causal rows that see no key are covered too).
std::vector<CheckShape> shapesInRange(const std::vector<CheckShape> &grid, int64_t lo,
                                      int64_t hi) {
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
      {3, 2, 2, 1000, 17, true},   {1, 6, 2, 257, 129, false},  {2, 2, 1, 64, 1000, false},
  };
}

/// Host and device buffers of one case, freed on scope exit.
struct DeviceBuffers {
  const DriverApi &api;
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  explicit DeviceBuffers(const DriverApi &a) : api(a) {}
  ~DeviceBuffers() {
    for (CUdeviceptr p : {q, k, v, o, lse})
      if (p)
        api.cuMemFree(p);
  }
};

#define FAGEN_CU(call)                                                                             \
  do {                                                                                             \
    CUresult rc_ = (call);                                                                         \
    if (rc_ != CUDA_SUCCESS)                                                                       \
      return CudaFailure{cudaErrorText(api, rc_, #call)};                                          \
  } while (0)

std::vector<uint16_t> randomTensor(size_t n, ref::ElementType type, std::mt19937_64 &rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t &x : out)
    x = ref::fromFloat(dist(rng), type);
  return out;
}

} // namespace

std::vector<CheckShape> checkShapesFor(int64_t seqlenMin, int64_t seqlenMax, bool quick) {
  return shapesInRange(shapeGrid(quick), seqlenMin, seqlenMax);
}

fagen_fwd_problem forwardProblem(const std::string &dtype, int headDimQK, int headDimV,
                                 bool causal, const CheckShape &s) {
  fagen_fwd_problem problem{};
  problem.batch = s.batch;
  problem.heads_q = s.headsQ;
  problem.heads_kv = s.headsKV;
  problem.seqlen_q = s.seqlenQ;
  problem.seqlen_k = s.seqlenK;
  problem.head_dim_qk = headDimQK;
  problem.head_dim_v = headDimV;
  problem.dtype = dtype == "bf16" ? FAGEN_DTYPE_BF16 : FAGEN_DTYPE_FP16;
  problem.causal = causal;
  problem.softmax_scale = 0; // 1/sqrt(head_dim_qk)
  if (s.bhsd)
    fagen_fwd_problem_set_bhsd_strides(&problem);
  else
    fagen_fwd_problem_set_bshd_strides(&problem);
  return problem;
}

CaseOutcome checkKernelCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                            const KernelRecord &k, const CheckShape &s, unsigned seed) {
  const ref::ElementType type = k.dtype == "bf16" ? ref::ElementType::BF16 : ref::ElementType::F16;
  const int d = k.headDimQK;
  const fagen_fwd_problem problem = forwardProblem(k.dtype, d, k.headDimV, k.mask == "causal", s);

  const size_t nQ = size_t(s.batch) * s.headsQ * s.seqlenQ * d;
  const size_t nK = size_t(s.batch) * s.headsKV * s.seqlenK * d;
  const size_t nL = size_t(s.batch) * s.headsQ * s.seqlenQ;
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> q = randomTensor(nQ, type, rng), kk = randomTensor(nK, type, rng),
                        v = randomTensor(nK, type, rng);

  CaseResult result;
  fagen_plan plan;
  if (fagen_status st = fagen_plan_forward_kernel(bundle, &problem, kernelIndex, &plan);
      st != FAGEN_OK) {
    result.failure = std::string("plan: ") + fagen_status_name(st) + ": " + fagen_last_error();
    return result;
  }

  DeviceBuffers buf(api);
  FAGEN_CU(api.cuMemAlloc(&buf.q, nQ * 2));
  FAGEN_CU(api.cuMemAlloc(&buf.k, nK * 2));
  FAGEN_CU(api.cuMemAlloc(&buf.v, nK * 2));
  FAGEN_CU(api.cuMemAlloc(&buf.o, nQ * 2));
  FAGEN_CU(api.cuMemAlloc(&buf.lse, nL * 4));
  FAGEN_CU(api.cuMemcpyHtoD(buf.q, q.data(), nQ * 2));
  FAGEN_CU(api.cuMemcpyHtoD(buf.k, kk.data(), nK * 2));
  FAGEN_CU(api.cuMemcpyHtoD(buf.v, v.data(), nK * 2));
  // Poison: 0xFFFF is NaN in fp16 and bf16, 0xFFFFFFFF is NaN in fp32. An element the kernel
  // does not write fails the comparison.
  FAGEN_CU(api.cuMemsetD8(buf.o, 0xFF, nQ * 2));
  FAGEN_CU(api.cuMemsetD8(buf.lse, 0xFF, nL * 4));
  FAGEN_CU(api.cuCtxSynchronize());

  fagen_status st = fagen_run_forward(&plan, reinterpret_cast<void *>(buf.q),
                                      reinterpret_cast<void *>(buf.k),
                                      reinterpret_cast<void *>(buf.v),
                                      reinterpret_cast<void *>(buf.o),
                                      reinterpret_cast<float *>(buf.lse), nullptr);
  if (st != FAGEN_OK) {
    result.failure = std::string("run: ") + fagen_status_name(st) + ": " + fagen_last_error();
    return result;
  }
  FAGEN_CU(api.cuCtxSynchronize());
  std::vector<uint16_t> o(nQ);
  std::vector<float> lse(nL);
  FAGEN_CU(api.cuMemcpyDtoH(o.data(), buf.o, nQ * 2));
  FAGEN_CU(api.cuMemcpyDtoH(lse.data(), buf.lse, nL * 4));

  ref::FwdProblem pb;
  pb.Params = fagen_fwd_params{};
  pb.Params.q = q.data();
  pb.Params.k = kk.data();
  pb.Params.v = v.data();
  const int64_t *qs = problem.q_strides, *ks = problem.k_strides, *vs = problem.v_strides,
                *os = problem.o_strides;
  pb.Params.q_batch_stride = qs[0], pb.Params.q_head_stride = qs[1], pb.Params.q_row_stride = qs[2];
  pb.Params.k_batch_stride = ks[0], pb.Params.k_head_stride = ks[1], pb.Params.k_row_stride = ks[2];
  pb.Params.v_batch_stride = vs[0], pb.Params.v_head_stride = vs[1], pb.Params.v_row_stride = vs[2];
  pb.Params.o_batch_stride = os[0], pb.Params.o_head_stride = os[1], pb.Params.o_row_stride = os[2];
  pb.Params.batch = s.batch;
  pb.Params.heads_q = s.headsQ;
  pb.Params.heads_kv = s.headsKV;
  pb.Params.seqlen_q = s.seqlenQ;
  pb.Params.seqlen_k = s.seqlenK;
  pb.Params.group_size = s.headsQ / s.headsKV;
  pb.Params.softmax_scale = 1.0f / std::sqrt(float(d));
  pb.Params.scale_log2 = pb.Params.softmax_scale * 1.4426950408889634f;
  pb.HeadDim = d;
  pb.Type = type;
  pb.Mask = problem.causal ? ref::MaskKind::Causal : ref::MaskKind::None;

  ref::FwdResult exact = ref::forwardFloat64(pb);
  ref::FwdResult same = ref::forwardSamePrecision(pb);
  ref::FwdResult got = ref::readKernelOutput(pb, o.data(), lse.data());
  result.kernel = ref::measureError(exact, got);
  result.samePrecision = ref::measureError(exact, same);
  result.passed = ref::withinTolerance(result.kernel, result.samePrecision);
  result.outputO.assign(got.O.begin(), got.O.end());
  return result;
}

std::string checkShapeText(const CheckShape &s) {
  return llvm::formatv("{0}x{1}/{2} {3}x{4} {5}", s.batch, s.headsQ, s.headsKV, s.seqlenQ,
                       s.seqlenK, s.bhsd ? "bhsd" : "bshd")
      .str();
}

namespace {

/// Writes or compares the golden output of one kernel. Returns "" when fine, else the problem.
std::string checkGolden(const CheckOptions &opt, const KernelRecord &k,
                        const std::vector<float> &o) {
  std::string path = opt.goldenDir + "/" + k.name + "." + k.arch + ".golden";
  std::string header = llvm::formatv("fagen-golden 1 seed={0} elements={1}\n", opt.seed, o.size());
  std::string bytes(reinterpret_cast<const char *>(o.data()), o.size() * sizeof(float));
  if (opt.updateGolden) {
    llvm::sys::fs::create_directories(opt.goldenDir);
    std::error_code ec;
    llvm::raw_fd_ostream os(path + ".tmp", ec);
    if (ec)
      return "cannot write " + path + ": " + ec.message();
    os << header << bytes;
    os.close();
    if (std::error_code rc = llvm::sys::fs::rename(path + ".tmp", path))
      return "cannot write " + path + ": " + rc.message();
    return "";
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buffer)
    return "no golden file " + path + ": run with --update-golden to create it";
  llvm::StringRef stored = (*buffer)->getBuffer();
  if (!stored.starts_with(header) || stored.size() != header.size() + bytes.size())
    return "golden file " + path + " was made with another seed or shape: " +
           stored.split('\n').first.str();
  const float *want = reinterpret_cast<const float *>(stored.data() + header.size());
  size_t differ = 0;
  double maxDiff = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::memcmp(&want[i], &o[i], sizeof(float)) == 0)
      continue;
    ++differ;
    maxDiff = std::max(maxDiff, ref::absDiff(want[i], o[i]));
  }
  if (differ == 0)
    return "";
  return llvm::formatv("{0} of {1} elements differ from {2} (max |diff| {3:e})", differ, o.size(),
                       path, maxDiff)
      .str();
}

} // namespace

int runCheck(const CheckOptions &opt) {
  std::string error;
  const DriverApi *api = getDriver(error);
  if (!api) {
    llvm::errs() << "fagen check: " << error << "\n";
    return 4;
  }
  auto buffer = llvm::MemoryBuffer::getFile(opt.bundlePath, false, false);
  if (!buffer) {
    llvm::errs() << "fagen check: cannot read " << opt.bundlePath << ": "
                 << buffer.getError().message() << "\n";
    return 3;
  }
  Bundle records;
  if (!parseBundle(reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart()),
                   (*buffer)->getBufferSize(), records, error)) {
    llvm::errs() << "fagen check: " << opt.bundlePath << ": " << error << "\n";
    return 1;
  }
  fagen_bundle *bundle = nullptr;
  if (fagen_bundle_load_file(opt.bundlePath.c_str(), &bundle) != FAGEN_OK) {
    llvm::errs() << "fagen check: " << fagen_last_error() << "\n";
    return 1;
  }

  CUdevice device = 0;
  CUcontext ctx = nullptr;
  int major = 0, minor = 0;
  char name[256] = {0};
  if (api->cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      api->cuDevicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS ||
      api->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    llvm::errs() << "fagen check: cannot create a context on device 0\n";
    fagen_bundle_destroy(bundle);
    return 4;
  }
  api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  api->cuDeviceGetName(name, sizeof(name) - 1, device);
  llvm::outs() << llvm::formatv("fagen check: {0} on {1} (sm_{2}{3}), seed {4}\n",
                                opt.bundlePath, name, major, minor, opt.seed);

  llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-24} {3,10} {4,10} {5,10} {6,10}  {7}\n",
                                "kernel", "arch", "B x Hq/Hkv Sq x Sk layout", "err O",
                                "limit O", "err LSE", "limit LSE", "result");
  unsigned passed = 0, failed = 0, skipped = 0;
  for (size_t i = 0; i < records.kernels.size(); ++i) {
    const KernelRecord &k = records.kernels[i];
    std::vector<CheckShape> shapes = checkShapesFor(k.seqlenMin, k.seqlenMax, opt.quick);
    if (!opt.kernelFilter.empty() && k.name.find(opt.kernelFilter) == std::string::npos)
      continue;
    if (!archRunsOn(k.arch, major, minor)) {
      llvm::outs() << llvm::formatv("{0,-56} {1,-7} skipped: an {1} cubin does not run on "
                                    "sm_{2}{3} (compiled, not run here)\n",
                                    k.name, k.arch, major, minor);
      ++skipped;
      continue;
    }
    for (size_t si = 0; si < shapes.size(); ++si) {
      const CheckShape &s = shapes[si];
      unsigned seed = opt.seed * 1000003u + unsigned(si);
      CaseOutcome outcome = checkKernelCase(*api, bundle, int(i), k, s, seed);
      if (auto *cuda = std::get_if<CudaFailure>(&outcome)) {
        llvm::outs() << llvm::formatv("{0,-56} {1,-7} {2,-24} CUDA error: {3}\n", k.name, k.arch,
                                      checkShapeText(s), cuda->message);
        ++failed;
        fagen_bundle_destroy(bundle);
        llvm::outs() << llvm::formatv("{0} passed, {1} failed\n", passed, failed);
        return 1; // the context may be unusable after a kernel fault
      }
      CaseResult &r = std::get<CaseResult>(outcome);
      std::string verdict = r.failure.empty() ? (r.passed ? "ok" : "MISMATCH") : r.failure;
      llvm::outs() << llvm::formatv(
          "{0,-56} {1,-7} {2,-24} {3,10:e2} {4,10:e2} {5,10:e2} {6,10:e2}  {7}\n", k.name, k.arch,
          checkShapeText(s), r.kernel.MaxO, 2 * r.samePrecision.MaxO + ref::kEpsO, r.kernel.MaxLse,
          2 * r.samePrecision.MaxLse + ref::kEpsLse, verdict);
      bool ok = r.failure.empty() && r.passed;
      // Golden outputs: the first shape with Sq != Sk of the grid (index 2 / 1 in quick).
      if (ok && !opt.goldenDir.empty() && si == (opt.quick ? 0u : 2u)) {
        std::string golden = checkGolden(opt, k, r.outputO);
        if (!golden.empty()) {
          llvm::outs() << "  golden: " << golden << "\n";
          ok = false;
        }
      }
      ok ? ++passed : ++failed;
    }
  }
  fagen_bundle_destroy(bundle);
  llvm::outs() << llvm::formatv("{0} passed, {1} failed, {2} skipped\n", passed, failed, skipped);
  if (passed == 0 && failed == 0) {
    llvm::errs() << "fagen check: no kernel of " << opt.bundlePath << " runs on this GPU (sm_"
                 << major << minor << "): rebuild with --arch sm_" << major << minor << "\n";
    return 1;
  }
  return failed == 0 ? 0 : 1;
}

} // namespace fagen
