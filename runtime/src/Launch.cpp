//===- Launch.cpp - the C ABI: run a plan -----------------------------------===//
#include "runtime/src/RuntimeInternal.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

//===--- Run ---------------------------------------------------------------===//

/// Null and alignment checks of a run call's pointers; the message ("FUNCTION: PREFIXname is
/// null") is built only on failure, so the run path does no string work.
fagen_status checkPointers(const char *function, const char *prefix,
                           std::initializer_list<Pointer> pointers) {
  for (Pointer p : pointers) {
    if (p.ptr == nullptr)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": " + prefix + p.name + " is null");
    if (reinterpret_cast<uintptr_t>(p.ptr) % p.align != 0)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + prefix + p.name +
                                                    " is not " + str(int64_t(p.align)) +
                                                    "-byte aligned");
  }
  return FAGEN_OK;
}

fagen_status checkPlan(const char *function, const fagen_plan *plan, fagen_pass pass) {
  if (plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": plan is null");
  const char *planner = pass == FAGEN_PASS_BACKWARD ? "fagen_plan_backward"
                        : pass == FAGEN_PASS_MERGE  ? "fagen_plan_merge_states"
                                                    : "fagen_plan_forward";
  auto passName = [](fagen_pass p) {
    return p == FAGEN_PASS_BACKWARD ? "backward" : p == FAGEN_PASS_MERGE ? "merge" : "forward";
  };
  // A plan that no planner filled (zeroed, or failed) has struct_size 0; one of another ABI
  // another size or tag.
  if (plan->struct_size == 0 && plan->abi_tag == 0)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": the plan was not filled by a successful " +
                                                  planner);
  if (fagen_status s = checkAbiHeader(function, "plan", "fagen_plan", plan->struct_size,
                                      plan->abi_tag, sizeof(fagen_plan), "a planner");
      s != FAGEN_OK)
    return s;
  if (plan->bundle == nullptr || plan->function == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": the plan was not filled by a successful " +
                                                  planner);

  if (plan->pass != pass)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan is a " + passName(plan->pass) +
                    " plan; make it with " + planner);
  if (pass == FAGEN_PASS_BACKWARD &&
      (plan->pre_function == nullptr || plan->post_function == nullptr))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": the plan was not filled by a successful " +
                                                  planner);
  return FAGEN_OK;
}

/// Whether the plan's bundle is still loaded (checked in the registry, never through the
/// pointer, which may be freed).
fagen_status checkBundleLive(const char *function, const fagen_plan &plan) {
  if (bundleIsLive(plan.bundle, plan.bundle_id))
    return FAGEN_OK;
  return fail(FAGEN_ERROR_INVALID_ARGUMENT,
              std::string(function) + ": the plan's bundle was destroyed (fagen_bundle_destroy): "
                                      "a plan lives only as long as its bundle; load the bundle "
                                      "again and plan again");
}

/// Whether the calling thread's current context is the one the plan's functions belong to;
/// otherwise a message naming both devices (a plan is made for the device current at plan
/// time, and its CUfunctions exist only in that context).
fagen_status checkContext(const char *function, const DriverApi &api, const fagen_plan &plan) {
  CUcontext current = nullptr;
  if (CUresult r = api.cuCtxGetCurrent(&current); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA,
                std::string(function) + ": " + cudaErrorText(api, r, "cuCtxGetCurrent"));
  const uint64_t planId = plan.context_id;
  if (current == plan.context && (planId == 0 || contextId(api, current) == planId))
    return FAGEN_OK;
  const std::string planned = "the plan was made on device " + str(plan.device);
  if (current == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " + planned +
                    " and this thread has no current CUDA context: make device " +
                    str(plan.device) + "'s context current (cudaSetDevice(" + str(plan.device) +
                    ")) before the run");
  CUdevice device = -1;
  if (api.cuCtxGetDevice(&device) != CUDA_SUCCESS || device == plan.device)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " + planned +
                    " in a context that is not current (or no longer exists; a device reset "
                    "destroys it): plan again in the current context");
  return fail(FAGEN_ERROR_INVALID_ARGUMENT,
              std::string(function) + ": " + planned + " but device " + str(device) +
                  " is current: make device " + str(plan.device) +
                  "'s context current (cudaSetDevice(" + str(plan.device) +
                  ")), or plan again with device " + str(device) + " current");
}

/// What every run checks before it launches: the driver, the plan's bundle still loaded, and
/// the plan's context current. On success `api` is the driver.
fagen_status checkRunTarget(const char *function, const fagen_plan &plan, const DriverApi *&api) {
  std::string error;
  api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);
  if (fagen_status s = checkBundleLive(function, plan); s != FAGEN_OK)
    return s;
  return checkContext(function, *api, plan);
}

/// Checks the run-time arguments the plan's variant reads and stores them in `fp`.
fagen_status applyRunArgs(const char *function, const fagen_plan &plan,
                          const fagen_run_args *args, bool argsAccepted, fagen_fwd_params &fp,
                          bool paged = false) {
  if (args != nullptr)
    if (fagen_status s = checkAbiHeader(function, "args", "fagen_run_args", args->struct_size,
                                        args->abi_tag, sizeof(fagen_run_args),
                                        "FAGEN_RUN_ARGS_INIT");
        s != FAGEN_OK)
      return s;
  const uint32_t needed = plan.run_args;
  if (needed == 0)
    return FAGEN_OK;
  // Error texts only: built when a check fails.
  auto names = [needed] {
    std::string out;
    for (auto [bit, name] :
         {std::pair<uint32_t, const char *>{FAGEN_RUN_ARG_ALIBI_SLOPES, "alibi_slopes"},
          {FAGEN_RUN_ARG_BLOCK_MASK, "block_mask"},
          {FAGEN_RUN_ARG_CU_SEQLENS, "cu_seqlens_q/_k"},
          {FAGEN_RUN_ARG_DROPOUT_SEED, "dropout_seed/_offset"}})
      if (needed & bit)
        out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
  };
  auto fn = [function] { return std::string(function) + ": args->"; };
  if (!argsAccepted)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan's variant reads run-time arguments (" +
                    names() + "): call fagen_run_forward_with_args with a fagen_run_args");
  if (args == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": args is null but the plan's variant reads " +
                                                  names());
  if (needed & FAGEN_RUN_ARG_ALIBI_SLOPES) {
    if (fagen_status s =
            checkPointers(function, "args->", {{"alibi_slopes", args->alibi_slopes, 4}});
        s != FAGEN_OK)
      return s;
    if (args->alibi_batch_stride < 0)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT, fn() + "alibi_batch_stride (" +
                                                    str(args->alibi_batch_stride) +
                                                    ") must be >= 0 (0: one slope per head)");
    fp.alibi_slopes = args->alibi_slopes;
    fp.alibi_batch_stride = args->alibi_batch_stride;
  }
  if (needed & FAGEN_RUN_ARG_BLOCK_MASK) {
    if (fagen_status s = checkPointers(function, "args->", {{"block_mask", args->block_mask, 1}});
        s != FAGEN_OK)
      return s;
    for (auto [name, v] : {std::pair<const char *, int64_t>{"block_mask_batch_stride",
                                                            args->block_mask_batch_stride},
                           {"block_mask_head_stride", args->block_mask_head_stride},
                           {"block_mask_row_stride", args->block_mask_row_stride}})
      if (v < 0)
        return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                    fn() + name + " (" + str(v) + ") must be >= 0 (0 broadcasts)");
    fp.block_mask = args->block_mask;
    fp.block_mask_batch_stride = args->block_mask_batch_stride;
    fp.block_mask_head_stride = args->block_mask_head_stride;
    fp.block_mask_row_stride = args->block_mask_row_stride;
  }
  if (needed & FAGEN_RUN_ARG_CU_SEQLENS) {
    // A paged forward's keys are its sequences' pages: it reads cu_seqlens_q only.
    if (fagen_status s =
            checkPointers(function, "args->", {{"cu_seqlens_q", args->cu_seqlens_q, 4}});
        s != FAGEN_OK)
      return s;
    if (!paged)
      if (fagen_status s =
              checkPointers(function, "args->", {{"cu_seqlens_k", args->cu_seqlens_k, 4}});
          s != FAGEN_OK)
        return s;
    fp.cu_seqlens_q = args->cu_seqlens_q;
    fp.cu_seqlens_k = paged ? nullptr : args->cu_seqlens_k;
  }
  if (needed & FAGEN_RUN_ARG_DROPOUT_SEED) {
    fp.dropout_seed = args->dropout_seed;
    fp.dropout_offset = args->dropout_offset;
  }
  return FAGEN_OK;
}

/// FAGEN_VALIDATE=1 (read at each call that has cu_seqlens): the arrays are copied to the host
/// and checked before the launch. Synchronizes `stream` first, so it is a debugging mode, not
/// one for graph capture; without it the kernels' clamps keep a bad array inside the tensors.
bool validateMode() {
  const char *v = std::getenv("FAGEN_VALIDATE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

/// The first bad entry of `cu` (batch + 1 offsets of a packed tensor of `total` rows whose
/// longest sequence is `longest`), or "".
std::string cuSeqlensProblem(const std::vector<int32_t> &cu, const char *name, int64_t total,
                             const char *totalName, int32_t longest, const char *longestName) {
  const std::string n = name;
  if (cu[0] != 0)
    return n + "[0] is " + str(cu[0]) + ", not 0";
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const std::string at = n + "[" + str(int64_t(b + 1)) + "] (" + str(cu[b + 1]) + ")";
    if (cu[b + 1] < cu[b])
      return at + " is less than " + n + "[" + str(int64_t(b)) + "] (" + str(cu[b]) +
             "): the offsets must ascend";
    if (cu[b + 1] > total)
      return at + " is past " + totalName + " (" + str(total) + ")";
    if (cu[b + 1] - cu[b] > longest)
      return "sequence " + str(int64_t(b)) + " has " + str(int64_t(cu[b + 1]) - cu[b]) +
             " rows (" + at + " - " + n + "[" + str(int64_t(b)) + "]), more than " +
             longestName + " (" + str(longest) + "), the longest the call declared";
  }
  if (cu.back() != total)
    return n + "[batch] (" + str(cu.back()) + ") is not " + totalName + " (" + str(total) + ")";
  return "";
}

fagen_status validateCuSeqlens(const char *function, const DriverApi &api,
                               const fagen_fwd_params &fp, void *stream) {
  if (CUresult r = api.cuStreamSynchronize(static_cast<CUstream>(stream)); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, std::string(function) + ": FAGEN_VALIDATE: " +
                                      cudaErrorText(api, r, "cuStreamSynchronize"));
  struct Array {
    const char *name;
    const int32_t *device;
    int64_t total;
    const char *totalName;
    int32_t longest;
    const char *longestName;
  };
  for (const Array &a : {Array{"args->cu_seqlens_q", fp.cu_seqlens_q, fp.total_q, "total_q",
                               fp.seqlen_q, "seqlen_q"},
                         Array{"args->cu_seqlens_k", fp.cu_seqlens_k, fp.total_k, "total_k",
                               fp.seqlen_k, "seqlen_k"}}) {
    if (a.device == nullptr) // a paged forward's: its keys come through the block table
      continue;
    std::vector<int32_t> cu(size_t(fp.batch) + 1);
    if (CUresult r = api.cuMemcpyDtoH(cu.data(), reinterpret_cast<CUdeviceptr>(a.device),
                                      cu.size() * sizeof(int32_t));
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": FAGEN_VALIDATE: " +
                      cudaErrorText(api, r, "cuMemcpyDtoH") + " reading " + a.name + " (" +
                      str(fp.batch + 1) + " int32 of device memory)");
    if (std::string why = cuSeqlensProblem(cu, a.name, a.total, a.totalName, a.longest,
                                           a.longestName);
        !why.empty())
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": FAGEN_VALIDATE: " + why);
  }
  return FAGEN_OK;
}

/// Encodes the tensor maps of a TMA kernel's call from its parameter block.
fagen_status encodeTmaMaps(const char *function, const DriverApi &api, const fagen_plan &plan,
                           const KernelRecord &k, const fagen_fwd_params &params,
                           fagen_fwd_tma_maps &maps, int64_t numPages) {
  if (api.cuTensorMapEncodeTiled == nullptr)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                std::string(function) + ": kernel " + k.name +
                    " loads through TMA, and the CUDA driver (" + api.path +
                    ") has no cuTensorMapEncodeTiled: install a driver for CUDA 12.0 or newer, "
                    "or build the bundle for sm_90 instead of sm_90a");
  std::string what;
  // Varlen: the packed tensors' rows are the maps' row extents, so TMA itself never reads or
  // writes past them (the kernels clamp their row coordinates as well).
  if (int r = k.isPaged() // K and V by pages (or gathered), not as rows of a tensor
                  ? encodePagedFwdTmaMaps(api.cuTensorMapEncodeTiled, params, k.headDimQK,
                                          k.headDimV, k.blockM, k.pageSize, numPages,
                                          FAGEN_PAGED_TMA_BOX_ROWS(k.pageSize, k.blockN), maps,
                                          what, params.total_q)
                  : encodeFwdTmaMaps(api.cuTensorMapEncodeTiled, params, k.headDimQK,
                                     k.headDimV, k.blockM, k.blockN, maps, what, params.total_q,
                                     params.total_k, k.tmaStoreO))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " +
                    cudaErrorText(api, r, "cuTensorMapEncodeTiled") + " for tensor " + what +
                    " of kernel " + k.name +
                    ": TMA needs 16-byte aligned pointers and strides that are multiples of 8 "
                    "elements, below 2^39 elements");
  return FAGEN_OK;
}

const std::string &kernelName(const fagen_plan &plan) {
  return plan.bundle->bundle.kernels[plan.kernel_index].name;
}

fagen_status launch(const DriverApi &api, const fagen_plan &plan, void *function,
                    const int32_t grid[3], const int32_t block[3], int32_t smem, void *params,
                    void *stream, const char *suffix, void *tmaMaps, LaunchOrder order) {
  void *args[] = {params, tmaMaps};
  if (order == LaunchOrder::kProgrammaticDependent && api.cuLaunchKernelEx != nullptr &&
      archComputeCapability(plan.bundle->bundle.kernels[plan.kernel_index].arch) >= 90) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    const CUlaunchConfig config{unsigned(grid[0]),  unsigned(grid[1]),  unsigned(grid[2]),
                                unsigned(block[0]), unsigned(block[1]), unsigned(block[2]),
                                unsigned(smem),     static_cast<CUstream>(stream),
                                &attr,              1};
    if (CUresult r = api.cuLaunchKernelEx(&config, static_cast<CUfunction>(function), args,
                                          nullptr);
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuLaunchKernelEx") + " for kernel " +
                                        kernelName(plan) + suffix);
    return FAGEN_OK;
  }
  CUresult r = api.cuLaunchKernel(static_cast<CUfunction>(function), unsigned(grid[0]),
                                  unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
                                  unsigned(block[1]), unsigned(block[2]), unsigned(smem),
                                  static_cast<CUstream>(stream), args, nullptr);
  if (r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuLaunchKernel") + " for kernel " +
                                      kernelName(plan) + suffix);
  return FAGEN_OK;
}

fagen_status runForward(const char *function, const fagen_plan *plan, const void *q,
                        const void *k, const void *v, void *o, float *lse, void *workspace,
                        size_t workspaceBytes, const fagen_run_args *args, bool argsAccepted,
                        void *stream, const PagedKvArrays *paged) {
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_FORWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s =
          checkPointers(function, "",
                        {{"q", q, 16}, {"k", k, 16}, {"v", v, 16}, {"o", o, 16}, {"lse", lse, 4}});
      s != FAGEN_OK)
    return s;
  fagen_fwd_params params;
  std::memcpy(&params, plan->params, sizeof params);
  if (fagen_status s = applyRunArgs(function, *plan, args, argsAccepted, params, paged != nullptr);
      s != FAGEN_OK)
    return s;
  const DriverApi *api = nullptr;
  if (fagen_status s = checkRunTarget(function, *plan, api); s != FAGEN_OK)
    return s;
  if ((plan->run_args & FAGEN_RUN_ARG_CU_SEQLENS) && validateMode())
    if (fagen_status s = validateCuSeqlens(function, *api, params, stream); s != FAGEN_OK)
      return s;
  params.q = q;
  params.k = k;
  params.v = v;
  params.o = o;
  params.lse = lse;
  const KernelRecord &kernel = plan->bundle->bundle.kernels[plan->kernel_index];
  if (kernel.isPaged() != (paged != nullptr))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan's kernel " + kernel.name +
                    (kernel.isPaged() ? " reads a paged KV cache: run it with "
                                        "fagen_run_forward_paged"
                                      : " reads contiguous K and V: plan the call with "
                                        "fagen_plan_forward_paged for a paged KV cache"));
  if (isDecodeKernel(kernel) || kernel.isPaged()) // a paged forward: one split of runDecode
    return runDecode(function, *api, *plan, params, paged, workspace, workspaceBytes, stream);
  if (!takesTmaMaps(kernel))
    return launch(*api, *plan, plan->function, plan->grid, plan->block, plan->smem_bytes,
                  &params, stream, "");
  fagen_fwd_tma_maps maps;
  if (fagen_status s = encodeTmaMaps(function, *api, *plan, kernel, params, maps); s != FAGEN_OK)
    return s;
  int32_t grid[3] = {plan->grid[0], plan->grid[1], plan->grid[2]};
  if (kernel.tileCounter && workspace != nullptr) {
    // The tiles come from the workspace's counter, which starts each launch at 0.
    if (fagen_status s = checkPointers(function, "", {{"workspace", workspace, 4}}); s != FAGEN_OK)
      return s;
    if (fagen_status s =
            checkWorkspaceBytes(function, workspaceBytes, *plan,
                                "allocate the plan's workspace_bytes, or pass no workspace");
        s != FAGEN_OK)
      return s;
    params.tile_counter = static_cast<int32_t *>(workspace);
    if (CUresult r = api->cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(workspace), 0, 1,
                                           static_cast<CUstream>(stream));
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, std::string(function) + ": " +
                                        cudaErrorText(*api, r, "cuMemsetD32Async") +
                                        " zeroing the tile counter in the workspace of kernel " +
                                        kernel.name);
  } else if (kernel.tileCounter && !kernel.persistent) {
    // No workspace: one CTA per work tile (the static deal of a grid that size).
    grid[0] = params.work_tiles;
  }
  return launch(*api, *plan, plan->function, grid, plan->block, plan->smem_bytes, &params,
                stream, "", &maps);
}

} // namespace fagen::rt

extern "C" {

fagen_status fagen_run_forward(const fagen_plan *plan, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *stream) {
  return runForward("fagen_run_forward", plan, q, k, v, o, lse, nullptr, 0, nullptr, false,
                    stream);
}

fagen_status fagen_run_forward_with_args(const fagen_plan *plan, const void *q, const void *k,
                                         const void *v, void *o, float *lse,
                                         const fagen_run_args *args, void *stream) {
  return runForward("fagen_run_forward_with_args", plan, q, k, v, o, lse, nullptr, 0, args, true,
                    stream);
}

fagen_status fagen_run_forward_with_workspace(const fagen_plan *plan, const void *q,
                                              const void *k, const void *v, void *o, float *lse,
                                              void *workspace, size_t workspace_bytes,
                                              const fagen_run_args *args, void *stream) {
  return runForward("fagen_run_forward_with_workspace", plan, q, k, v, o, lse, workspace,
                    workspace_bytes, args, true, stream);
}

fagen_status fagen_run_backward(const fagen_plan *plan, const void *q, const void *k,
                                const void *v, const void *o, const float *lse,
                                const void *dout, void *dq, void *dk, void *dv, void *workspace,
                                size_t workspace_bytes, const fagen_run_args *args,
                                void *stream) {
  const char *function = "fagen_run_backward";
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_BACKWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkPointers(function, "",
                                     {{"q", q, 16},
                                      {"k", k, 16},
                                      {"v", v, 16},
                                      {"o", o, 16},
                                      {"lse", lse, 4},
                                      {"dout", dout, 16},
                                      {"dq", dq, 16},
                                      {"dk", dk, 16},
                                      {"dv", dv, 16}});
      s != FAGEN_OK)
    return s;
  if (plan->workspace_bytes > 0) {
    if (fagen_status s =
            checkPointers(function, "", {{"workspace", workspace, 256}});
        s != FAGEN_OK)
      return fail(s, fagen_last_error() + std::string(" (it must hold plan->workspace_bytes = ") +
                         str(int64_t(plan->workspace_bytes)) + " bytes of device memory)");
    if (fagen_status s = checkWorkspaceBytes(
            function, workspace_bytes, *plan,
            "the backward would write past the workspace; allocate the plan's workspace_bytes "
            "(it grows with batch, heads and seqlen_q)");
        s != FAGEN_OK)
      return s;
  }
  fagen_bwd_params params;
  std::memcpy(&params, plan->params, sizeof params);
  if (fagen_status s = applyRunArgs(function, *plan, args, true, params.fwd); s != FAGEN_OK)
    return s;
  const DriverApi *api = nullptr;
  if (fagen_status s = checkRunTarget(function, *plan, api); s != FAGEN_OK)
    return s;
  if ((plan->run_args & FAGEN_RUN_ARG_CU_SEQLENS) && validateMode())
    if (fagen_status s = validateCuSeqlens(function, *api, params.fwd, stream); s != FAGEN_OK)
      return s;
  params.fwd.q = q;
  params.fwd.k = k;
  params.fwd.v = v;
  params.fwd.o = const_cast<void *>(o);       // read by the backward
  params.fwd.lse = const_cast<float *>(lse);  // read by the backward
  params.dout = dout;
  params.dq = dq;
  params.dk = dk;
  params.dv = dv;
  auto *base = static_cast<uint8_t *>(workspace);
  params.dq_accum = reinterpret_cast<float *>(base + plan->workspace_offsets[0]);
  params.d = reinterpret_cast<float *>(base + plan->workspace_offsets[1]);
  // The semaphores exist only for a deterministic kernel (fagen_bwd_workspace_layout).
  const bool deterministic = plan->workspace_bytes > plan->workspace_offsets[2];
  params.dq_semaphore =
      deterministic ? reinterpret_cast<int32_t *>(base + plan->workspace_offsets[2]) : nullptr;
  // The main kernel's tensor maps before any launch: a call they refuse launches nothing.
  const KernelRecord &kernel = plan->bundle->bundle.kernels[plan->kernel_index];
  fagen_bwd_tma_maps maps;
  if (takesTmaMaps(kernel)) {
    std::string what;
    // Varlen: the maps span the packed tensors (total_q / total_k rows), as the forward's.
    if (int r = encodeBwdTmaMaps(api->cuTensorMapEncodeTiled, params, kernel.headDimQK,
                                 kernel.headDimV, kernel.blockM, kernel.blockN, maps, what,
                                 params.fwd.total_q, params.fwd.total_k))
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": " +
                      cudaErrorText(*api, r, "cuTensorMapEncodeTiled") + " for tensor " + what +
                      " of kernel " + kernel.name +
                      ": TMA needs 16-byte aligned pointers and strides that are multiples of 8 "
                      "elements, below 2^39 elements");
  }
  if (fagen_status s = launch(*api, *plan, plan->pre_function, plan->pre_post_grid,
                              plan->pre_post_block, 0, &params, stream, "_pre");
      s != FAGEN_OK)
    return s;
  if (fagen_status s = launch(*api, *plan, plan->function, plan->grid, plan->block,
                              plan->smem_bytes, &params, stream, "",
                              takesTmaMaps(kernel) ? &maps : nullptr);
      s != FAGEN_OK)
    return s;
  return launch(*api, *plan, plan->post_function, plan->pre_post_grid, plan->pre_post_block, 0,
                &params, stream, "_post");
}

} // extern "C"
