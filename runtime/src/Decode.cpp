//===- Decode.cpp - the C ABI: split-KV decode plans and state merging --------===//
//
// A decode kernel (template sm80decode, templates/abi/decode_params.h) serves forward calls of
// few query tokens: its plan chooses the split count (templates/common/decode_split.h), and a
// run launches NAME over the splits and NAME_combine over their partials in the caller's
// workspace, or NAME over one split without a workspace. fagen_plan_merge_states /
// fagen_run_merge_states launch a decode cubin's NAME_merge on the caller's states. A paged
// decode kernel reads K and V through a block table (fagen_plan_forward_paged,
// fagen_run_forward_paged) and reports bad entries in its workspace's status records
// (fagen_paged_kv_status).
//
//===----------------------------------------------------------------------===//
#include "runtime/src/RuntimeInternal.h"
#include "templates/common/decode_split.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

namespace {

/// The key tiles of blockN keys that any of the call's seqlen_q query tokens sees: what the
/// kernel splits (its Mask::n_block_begin / n_block_end for query tile 0, mirrored; `fp`'s
/// window bounds capped as the kernel gets them).
int visibleKeyTiles(const KernelRecord &k, const fagen_fwd_params &fp) {
  const int64_t tokens = fp.seqlen_q, keys = fp.seqlen_k;
  const int64_t off = k.maskAlign == MaskAlign::TopLeft ? 0 : keys - tokens;
  const int64_t left = k.mask == Mask::Window ? fp.window_left : -1;
  const int64_t right = k.mask == Mask::Causal ? 0 : k.mask == Mask::Window ? fp.window_right : -1;
  const int64_t first = left < 0 ? 0 : std::max<int64_t>(0, off - left) / k.blockN;
  const int64_t keyEnd = right < 0 ? keys : std::min(keys, tokens - 1 + off + right + 1);
  const int64_t end = keyEnd <= 0 ? 0 : ceilDiv(keyEnd, k.blockN);
  return int(std::max<int64_t>(0, end - first));
}

/// The status records of a paged call (abi/decode_params.h kv_status): a decode kernel's, one
/// per CTA of NAME's grid (`own`, at the workspace's status_offset) and of NAME_append's
/// (`append`, right after); a paged forward's one record. None for a contiguous cache.
struct StatusRecords {
  int64_t own = 0, append = 0;
};
StatusRecords statusRecords(const KernelRecord &k, const fagen_decode_params &dp) {
  if (!k.isPaged())
    return {};
  if (!isDecodeKernel(k))
    return {1, 0};
  const fagen_fwd_params &f = dp.fwd;
  return {int64_t(dp.m_blocks) * dp.num_splits * f.heads_kv * f.batch,
          fagen_append_blocks(f.seqlen_q, f.heads_kv, k.headDimQK, k.headDimV) * f.batch};
}

/// A decode plan's workspace layout: its split count, and the status records and append
/// lengths of a paged kernel (one truth for setDecodeSplits and runDecode).
fagen_decode_workspace decodeWorkspace(const KernelRecord &k, const fagen_decode_params &dp) {
  const StatusRecords records = statusRecords(k, dp);
  return fagen_decode_workspace_layout(dp.num_splits, dp.fwd.batch, dp.fwd.heads_q,
                                       dp.fwd.seqlen_q, k.headDimV,
                                       records.own + records.append);
}

/// NAME_append's block for a paged run: the decode block `dp` (pointers, caches' strides and
/// the status records filled; the append's records follow NAME's), the new rows and their
/// strides, the lengths in the workspace.
fagen_kv_append_params appendParams(const KernelRecord &k, const fagen_decode_params &dp,
                                    const PagedKvArrays &paged, void *workspace,
                                    const StatusRecords &records) {
  fagen_kv_append_params ap;
  std::memset(&ap, 0, sizeof ap);
  ap.k_new = paged.kNew;
  ap.v_new = paged.vNew;
  ap.k_cache = const_cast<void *>(dp.fwd.k);
  ap.v_cache = const_cast<void *>(dp.fwd.v);
  ap.block_table = dp.block_table;
  ap.seqused_k = dp.seqused_k;
  ap.seqused_out = reinterpret_cast<int32_t *>(static_cast<uint8_t *>(workspace) +
                                               decodeWorkspace(k, dp).lengths_offset);
  ap.kv_status = dp.kv_status + FAGEN_KV_STATUS_WORDS * records.own;
  const int64_t kCache[3] = {dp.fwd.k_batch_stride, dp.fwd.k_head_stride,
                             dp.fwd.k_row_stride}; // page, head, row
  const int64_t vCache[3] = {dp.fwd.v_batch_stride, dp.fwd.v_head_stride, dp.fwd.v_row_stride};
  for (int i = 0; i < 3; ++i) {
    ap.k_new_strides[i] = paged.appendLayout->k_strides[i];
    ap.v_new_strides[i] = paged.appendLayout->v_strides[i];
    ap.k_cache_strides[i] = kCache[i];
    ap.v_cache_strides[i] = vCache[i];
  }
  ap.block_table_batch_stride = dp.block_table_batch_stride;
  ap.batch = dp.fwd.batch;
  ap.tokens = dp.fwd.seqlen_q;
  ap.heads_kv = dp.fwd.heads_kv;
  ap.num_pages = dp.num_pages;
  ap.seqlen_k = dp.fwd.seqlen_k;
  return ap;
}

/// The combine's (or merge's) block for states laid out as a decode call's partials:
/// [num_splits, batch, heads_q, seqlen_q, head_dim_v] float32 and LSE without the head dim.
fagen_merge_params combineParams(const fagen_fwd_problem &p, int32_t splits) {
  fagen_merge_params mp;
  std::memset(&mp, 0, sizeof mp);
  const int64_t row = p.head_dim_v, head = int64_t(p.seqlen_q) * row,
                batch = int64_t(p.heads_q) * head, state = int64_t(p.batch) * batch;
  const int64_t oStates[4] = {state, batch, head, row};
  for (int i = 0; i < 4; ++i) {
    mp.o_states_strides[i] = oStates[i];
    mp.lse_states_strides[i] = oStates[i] / p.head_dim_v;
  }
  for (int i = 0; i < 3; ++i)
    mp.o_strides[i] = p.o_strides[i];
  // LSE [batch, heads_q, seqlen_q] contiguous (fillForwardParams).
  mp.lse_strides[0] = int64_t(p.heads_q) * p.seqlen_q;
  mp.lse_strides[1] = p.seqlen_q;
  mp.lse_strides[2] = 1;
  mp.num_states = splits;
  mp.batch = p.batch;
  mp.heads = p.heads_q;
  mp.seqlen = p.seqlen_q;
  return mp;
}

/// FAGEN_VALIDATE=1: a paged call's lengths and the block-table entries they reach, read back
/// from the device (synchronizing `stream`) and checked as the kernel checks them; the first bad
/// one is refused with the kernel's message, before anything is launched.
fagen_status validatePagedArrays(const char *function, const DriverApi &api,
                                 const fagen_decode_params &dp, int pageSize,
                                 const PagedKvArrays &paged, void *stream) {
  // An append run's lengths grow by its tokens: the new keys must fit, their pages be valid.
  const int32_t added = paged.appendLayout != nullptr ? dp.fwd.seqlen_q : 0;
  const std::string prefix = std::string(function) + ": FAGEN_VALIDATE: ";
  if (CUresult r = api.cuStreamSynchronize(static_cast<CUstream>(stream)); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, prefix + cudaErrorText(api, r, "cuStreamSynchronize"));
  const int64_t batch = dp.fwd.batch, stride = dp.block_table_batch_stride;
  std::vector<int32_t> used(static_cast<size_t>(batch));
  std::vector<int32_t> table(static_cast<size_t>((batch - 1) * stride + dp.max_pages_per_seq));
  for (auto [host, device, name] : {std::tuple{&used, paged.sequsedK, "seqused_k"},
                                    std::tuple{&table, paged.blockTable, "block_table"}})
    if (CUresult r = api.cuMemcpyDtoH(host->data(), reinterpret_cast<CUdeviceptr>(device),
                                      host->size() * sizeof(int32_t));
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT, prefix + cudaErrorText(api, r, "cuMemcpyDtoH") +
                                                    " reading " + name + " (" +
                                                    str(int64_t(host->size())) +
                                                    " int32 of device memory)");
  for (int64_t b = 0; b < batch; ++b) {
    if (used[b] < 0 || used[b] > dp.fwd.seqlen_k - added)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  prefix + "seqused_k[" + str(b) + "] = " + str(used[b]) + " is outside [0, " +
                      "seqlen_k" + (added ? " - " + str(added) + " new tokens" : "") + " = " +
                      str(dp.fwd.seqlen_k - added) + "]");
    for (int64_t slot = 0; slot * pageSize < used[b] + added; ++slot)
      if (const int32_t page = table[size_t(b * stride + slot)];
          page < 0 || page >= dp.num_pages)
        return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                    prefix + "block_table[" + str(b) + "][" + str(slot) + "] = " + str(page) +
                        " is not a page id in [0, " + str(dp.num_pages) + ")");
  }
  return FAGEN_OK;
}

/// A paged run's workspace: given, large enough and aligned; a paged forward's status record
/// zeroed on `stream` before the launch (a decode kernel's CTAs write their own records).
fagen_status checkPagedWorkspace(const char *function, const DriverApi &api,
                                 const fagen_plan &plan, void *workspace, size_t workspaceBytes,
                                 void *stream) {
  if (workspace == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": workspace is null; a paged run needs its " +
                    "workspace (plan->workspace_bytes, " + str(int64_t(plan.workspace_bytes)) +
                    " bytes): the kernel records bad block-table entries there");
  if (fagen_status s = checkPointers(function, "", {{"workspace", workspace, 16}}); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkWorkspaceBytes(function, workspaceBytes, plan,
                                           "allocate the plan's workspace_bytes for a paged run");
      s != FAGEN_OK)
    return s;
  if (isDecodeKernel(plan.bundle->bundle.kernels[plan.kernel_index]))
    return FAGEN_OK;
  const auto status = reinterpret_cast<CUdeviceptr>(static_cast<uint8_t *>(workspace) +
                                                    plan.workspace_offsets[2]);
  if (CUresult r = api.cuMemsetD32Async(status, 0, FAGEN_KV_STATUS_WORDS,
                                        static_cast<CUstream>(stream));
      r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, std::string(function) + ": " +
                                      cudaErrorText(api, r, "cuMemsetD32Async") +
                                      " zeroing the paged KV status in the workspace");
  return FAGEN_OK;
}

} // namespace

void fillPagedForwardPlan(const fagen_fwd_problem &p, const fagen_paged_kv &paged, int sms,
                          const KernelRecord &k, fagen_plan &plan) {
  fagen_decode_params dp;
  std::memset(&dp, 0, sizeof dp);
  fillForwardParams(p, dp.fwd);
  dp.block_table_batch_stride = paged.block_table_stride;
  dp.num_pages = paged.num_pages;
  dp.max_pages_per_seq = paged.max_pages_per_seq;
  dp.num_splits = 1; // runDecode launches NAME alone, over m_blocks query tiles
  dp.m_blocks = int32_t(ceilDiv(p.seqlen_q, k.blockM));
  std::memcpy(plan.params, &dp, sizeof dp);
  if (takesTmaMaps(k)) // sm90ws: a 1-D grid over the work tiles (runDecode launches it)
    setGrid(plan.grid, wsGridSize(k, int64_t(dp.m_blocks) * p.heads_q * p.batch, sms, false), 1,
            1);
  else
    setGrid(plan.grid, dp.m_blocks, p.heads_q, p.batch);
  const fagen_decode_workspace w = decodeWorkspace(k, dp);
  plan.workspace_bytes = size_t(w.lengths_offset); // the status record alone (no append)
  plan.workspace_offsets[2] = w.status_offset;
}

void fillDecodePlan(const fagen_fwd_problem &p, const fagen_paged_kv *paged,
                    const KernelRecord &k, int sms, fagen_plan &plan) {
  fagen_decode_params dp;
  std::memset(&dp, 0, sizeof dp);
  fillForwardParams(p, dp.fwd);
  if (paged != nullptr) {
    dp.block_table_batch_stride = paged->block_table_stride;
    dp.num_pages = paged->num_pages;
    dp.max_pages_per_seq = paged->max_pages_per_seq;
  }
  // The packed rows of a kv head (its group of query heads x the tokens), in row blocks.
  const int64_t rows = int64_t(p.heads_q / p.heads_kv) * p.seqlen_q;
  const int32_t mBlocks = int32_t(ceilDiv(rows, k.blockM));
  dp.m_blocks = mBlocks;
  const fagen_merge_params mp = combineParams(p, 1);
  std::memcpy(plan.params, &dp, sizeof dp);
  std::memcpy(plan.params + kDecodeMergeParamsOffset, &mp, sizeof mp);
  setGrid(plan.grid, mBlocks, p.heads_kv, p.batch);
  setGrid(plan.pre_post_grid,
          fagen_merge_blocks(int64_t(p.batch) * p.heads_q * p.seqlen_q, p.head_dim_v,
                             FAGEN_COMBINE_STATE_LANES),
          1, 1);
  setGrid(plan.pre_post_block, k.prePostThreads, 1, 1);
  setDecodeSplits(plan, k,
                  decode_num_splits(int64_t(p.batch) * p.heads_kv * mBlocks,
                                    visibleKeyTiles(k, dp.fwd), sms, k.decodeCtasPerSm,
                                    k.decodeMinTiles));
}

void setDecodeSplits(fagen_plan &plan, const KernelRecord &k, int splits) {
  fagen_decode_params dp;
  fagen_merge_params mp;
  std::memcpy(&dp, plan.params, sizeof dp);
  std::memcpy(&mp, plan.params + kDecodeMergeParamsOffset, sizeof mp);
  dp.num_splits = mp.num_states = splits;
  std::memcpy(plan.params, &dp, sizeof dp);
  std::memcpy(plan.params + kDecodeMergeParamsOffset, &mp, sizeof mp);
  plan.grid[0] = dp.m_blocks * splits;
  const bool paged = k.isPaged();
  // One split of a contiguous cache: the kernel writes O and LSE itself, no workspace.
  const fagen_decode_workspace w =
      splits == 1 && !paged ? fagen_decode_workspace{} : decodeWorkspace(k, dp);
  plan.workspace_bytes = size_t(w.total_bytes);
  plan.workspace_offsets[0] = w.o_offset;
  plan.workspace_offsets[1] = w.lse_offset;
  plan.workspace_offsets[2] = w.status_offset;
}

fagen_status checkPagedKv(const char *function, const fagen_fwd_problem &p,
                          const fagen_paged_kv *paged) {
  auto invalid = [function](const std::string &why) {
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + why);
  };
  if (paged == nullptr)
    return invalid("paged is null");
  if (fagen_status s = checkAbiHeader(function, "paged", "fagen_paged_kv", paged->struct_size,
                                      paged->abi_tag, sizeof(fagen_paged_kv),
                                      "FAGEN_PAGED_KV_INIT");
      s != FAGEN_OK)
    return s;
  const fagen_paged_kv &g = *paged;
  if (!FAGEN_PAGE_SIZE_VALID(g.page_size))
    return invalid("paged->page_size (" + str(g.page_size) + ") must be a power of two in " +
                   str(FAGEN_PAGE_SIZE_MIN) + ".." + str(FAGEN_PAGE_SIZE_MAX) +
                   ": the tokens of a page, as the spec's page_size");
  if (g.num_pages < 1 || g.max_pages_per_seq < 1)
    return invalid("paged->num_pages (" + str(g.num_pages) + ") and max_pages_per_seq (" +
                   str(g.max_pages_per_seq) + ") must be >= 1");
  if (g.reserved0 != 0)
    return invalid("paged->reserved0 (" + str(g.reserved0) +
                   ") must be 0: initialize it with FAGEN_PAGED_KV_INIT");
  if (g.block_table_stride < g.max_pages_per_seq)
    return invalid("paged->block_table_stride (" + str(g.block_table_stride) +
                   ") is less than max_pages_per_seq (" + str(g.max_pages_per_seq) +
                   "): the block table's rows would overlap");
  const int64_t capacity = int64_t(g.max_pages_per_seq) * g.page_size;
  if (p.seqlen_k > capacity)
    return invalid("seqlen_k (" + str(p.seqlen_k) + ") exceeds the block table's " +
                   str(capacity) + " keys (max_pages_per_seq " + str(g.max_pages_per_seq) +
                   " x page_size " + str(g.page_size) +
                   "): seqlen_k is the longest cache length of the call");
  // Varlen: chunked prefill (a paged forward kernel): packed queries (cu_seqlens_q), the keys
  // still the block table's pages.
  if (p.varlen && p.total_k != p.seqlen_k)
    return invalid("total_k (" + str(p.total_k) + ") must equal seqlen_k (" + str(p.seqlen_k) +
                   ") in a varlen paged call: its keys are the block table's pages, not packed "
                   "rows (cu_seqlens_k is not read)");
  return FAGEN_OK;
}

fagen_status runDecode(const char *function, const DriverApi &api, const fagen_plan &plan,
                       const fagen_fwd_params &params, const PagedKvArrays *paged,
                       void *workspace, size_t workspaceBytes, void *stream) {
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  dp.fwd = params;
  int32_t grid[3] = {plan.grid[0], plan.grid[1], plan.grid[2]};
  if (paged != nullptr) {
    if (validateMode())
      if (fagen_status s = validatePagedArrays(
              function, api, dp, plan.bundle->bundle.kernels[plan.kernel_index].pageSize, *paged,
              stream);
          s != FAGEN_OK)
        return s;
    if (fagen_status s = checkPagedWorkspace(function, api, plan, workspace, workspaceBytes,
                                             stream);
        s != FAGEN_OK)
      return s;
    dp.block_table = paged->blockTable;
    dp.seqused_k = paged->sequsedK;
    dp.kv_status =
        reinterpret_cast<int32_t *>(static_cast<uint8_t *>(workspace) + plan.workspace_offsets[2]);
    const KernelRecord &k = plan.bundle->bundle.kernels[plan.kernel_index];
    const StatusRecords records = statusRecords(k, dp);
    // Without an append NAME marks NAME_append's records OK too (an earlier call's may be there).
    dp.kv_status_stale = int32_t(records.append);
    if (paged->appendLayout != nullptr) {
      dp.kv_status_stale = 0;
      // NAME_append writes the new rows and each sequence's new length, which NAME reads; one
      // status record per block (records.append).
      fagen_kv_append_params ap = appendParams(k, dp, *paged, workspace, records);
      int32_t appendGrid[3] = {int32_t(records.append / ap.batch), ap.batch, 1};
      int32_t appendBlock[3] = {FAGEN_APPEND_THREADS, 1, 1};
      if (fagen_status s = launch(api, plan, plan.pre_function, appendGrid, appendBlock, 0, &ap,
                                  stream, "_append");
          s != FAGEN_OK)
        return s;
      dp.seqused_k = ap.seqused_out;
    }
  }
  if (const KernelRecord &k = plan.bundle->bundle.kernels[plan.kernel_index]; takesTmaMaps(k)) {
    // A paged sm90ws forward: one launch over its work tiles, Q by TMA.
    fagen_fwd_tma_maps maps;
    if (fagen_status s = encodeTmaMaps(function, api, plan, k, dp.fwd, maps, dp.num_pages); s != FAGEN_OK)
      return s;
    return launch(api, plan, plan.function, plan.grid, plan.block, plan.smem_bytes, &dp, stream,
                  "", &maps);
  }
  const bool split = dp.num_splits > 1 && workspace != nullptr;
  if (!split) { // one split: NAME writes O and LSE
    dp.num_splits = 1;
    grid[0] = dp.m_blocks;
    return launch(api, plan, plan.function, grid, plan.block, plan.smem_bytes, &dp, stream, "");
  }
  if (fagen_status s = checkPointers(function, "", {{"workspace", workspace, 16}}); s != FAGEN_OK)
    return s;
  const std::string fix = "the decode's " + str(dp.num_splits) +
                          " splits would write past it; allocate the plan's workspace_bytes, "
                          "or pass no workspace (one split)";
  if (fagen_status s = checkWorkspaceBytes(function, workspaceBytes, plan, fix.c_str());
      s != FAGEN_OK)
    return s;
  auto *base = static_cast<uint8_t *>(workspace);
  dp.o_partial = reinterpret_cast<float *>(base + plan.workspace_offsets[0]);
  dp.lse_partial = reinterpret_cast<float *>(base + plan.workspace_offsets[1]);
  if (fagen_status s =
          launch(api, plan, plan.function, grid, plan.block, plan.smem_bytes, &dp, stream, "");
      s != FAGEN_OK)
    return s;
  fagen_merge_params mp;
  std::memcpy(&mp, plan.params + kDecodeMergeParamsOffset, sizeof mp);
  mp.o_states = dp.o_partial;
  mp.lse_states = dp.lse_partial;
  mp.o = params.o;
  mp.lse = params.lse;
  // The combine waits for the splits' grid itself (FAGEN_DECODE_PARAMS_VERSION 1003), so its
  // launch and start overlap their end.
  return launch(api, plan, plan.post_function, plan.pre_post_grid, plan.pre_post_block, 0, &mp,
                stream, "_combine", nullptr, LaunchOrder::kProgrammaticDependent);
}

namespace {

/// The merge problem's shapes and strides (host only), or why not.
bool validateMergeProblem(const fagen_merge_problem &p, std::string &error) {
  const int32_t dtype = raw(p.dtype);
  if (p.num_states < 1 || p.batch < 1 || p.heads < 1 || p.seqlen < 1) {
    error = "num_states, batch, heads and seqlen must be >= 1, got " + str(p.num_states) + ", " +
            str(p.batch) + ", " + str(p.heads) + ", " + str(p.seqlen);
    return false;
  }
  if (p.head_dim % 8 != 0 || p.head_dim < 32 || p.head_dim > 256) {
    error = "head_dim must be a multiple of 8 in 32..256, got " + str(p.head_dim);
    return false;
  }
  if (dtype != FAGEN_DTYPE_FP16 && dtype != FAGEN_DTYPE_BF16) {
    error = "dtype must be FAGEN_DTYPE_FP16 or FAGEN_DTYPE_BF16, got " + str(dtype);
    return false;
  }
  // One thread per 8 columns of a row, in a 1-D grid below 2^31 blocks.
  const int64_t rows = int64_t(p.batch) * p.heads * p.seqlen;
  if (fagen_merge_blocks(rows, p.head_dim, FAGEN_MERGE_STATE_LANES) >= (int64_t(1) << 31)) {
    error = "batch x heads x seqlen (" + str(rows) + " rows) is too large for one launch (at "
            "most " + str((int64_t(1) << 31) * FAGEN_MERGE_THREADS / (p.head_dim / 8) - 1) +
            " rows at this head dim): merge in parts";
    return false;
  }
  static const char *kDims[4] = {"state", "batch", "head", "row"};
  for (int i = 0; i < 4; ++i) {
    if (p.o_states_strides[i] < 0 || p.lse_states_strides[i] < 0) {
      error = std::string(p.o_states_strides[i] < 0 ? "o_states" : "lse_states") + "_strides[" +
              str(i) + "] (" + kDims[i] + ") is negative: strides must be >= 0";
      return false;
    }
    if (p.o_states_strides[i] % 8 != 0) {
      error = "o_states_strides[" + str(i) + "] (" + kDims[i] + ") is " +
              str(p.o_states_strides[i]) +
              " elements, not a multiple of 8: every row must start 16-byte aligned";
      return false;
    }
  }
  const int64_t extents[4] = {p.batch, p.heads, p.seqlen, p.head_dim};
  if (!checkStrides("o", p.o_strides, extents, /*isOutput=*/true, /*varlen=*/false, error))
    return false;
  const int64_t lseExtents[4] = {p.batch, p.heads, p.seqlen, 1};
  for (int i = 0; i < 3; ++i)
    if (p.lse_strides[i] < 0 || (p.lse_strides[i] == 0 && lseExtents[i] > 1)) {
      error = "lse_strides[" + str(i) + "] (" + kDims[i + 1] + ") is " + str(p.lse_strides[i]) +
              ": an output's strides must be > 0 where the extent is above 1";
      return false;
    }
  return checkNoOverlap("lse", p.lse_strides, lseExtents, /*varlen=*/false, error);
}

} // namespace

} // namespace fagen::rt

extern "C" {

void fagen_merge_problem_init(fagen_merge_problem *problem) {
  if (problem == nullptr)
    return;
  *problem = fagen_merge_problem FAGEN_MERGE_PROBLEM_INIT;
}

void fagen_merge_problem_set_bshd_strides(fagen_merge_problem *p) {
  if (p == nullptr)
    return;
  const int64_t d = p->head_dim, h = p->heads, s = p->seqlen, b = p->batch;
  const int64_t o[4] = {b * s * h * d, s * h * d, d, h * d};
  const int64_t lse[4] = {b * h * s, h * s, s, 1};
  for (int i = 0; i < 4; ++i) {
    p->o_states_strides[i] = o[i];
    p->lse_states_strides[i] = lse[i];
  }
  for (int i = 0; i < 3; ++i) {
    p->o_strides[i] = o[i + 1];
    p->lse_strides[i] = lse[i + 1];
  }
}

fagen_status fagen_plan_merge_states(const fagen_bundle *bundle,
                                     const fagen_merge_problem *problem, fagen_plan *plan) {
  const char *function = "fagen_plan_merge_states";
  if (fagen_status s = checkPlanCall(function, bundle, problem, plan, "fagen_merge_problem",
                                     "FAGEN_MERGE_PROBLEM_INIT");
      s != FAGEN_OK)
    return s;
  std::string error;
  if (!validateMergeProblem(*problem, error))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + error);
  const DType dtype = raw(problem->dtype) == FAGEN_DTYPE_BF16 ? DType::BF16 : DType::FP16;
  std::vector<int> candidates;
  const std::vector<KernelRecord> &kernels = bundle->bundle.kernels;
  for (size_t i = 0; i < kernels.size(); ++i)
    if (isDecodeKernel(kernels[i]) && kernels[i].dtype == dtype &&
        kernels[i].headDimV == problem->head_dim &&
        kernels[i].paramsVersion == FAGEN_DECODE_PARAMS_VERSION)
      candidates.push_back(int(i));
  if (candidates.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                std::string(function) + ": the bundle has no merge kernel for " + toText(dtype) +
                    " states of head dim " + str(problem->head_dim) +
                    ": the merge comes with a decode kernel; add a variant with dtype " +
                    toText(dtype) + ", head_dim " + str(problem->head_dim) +
                    " (head_dim_v) and passes [decode] to the spec and rebuild");
  const DriverApi *api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);
  Device device;
  if (fagen_status s = currentDevice(*api, device); s != FAGEN_OK)
    return s;
  int chosen = -1;
  if (fagen_status s = chooseKernel(bundle->bundle, candidates, device, chosen); s != FAGEN_OK)
    return s;
  CUfunction merge = nullptr;
  if (fagen_status s = loadFunction(*api, const_cast<fagen_bundle &>(*bundle), device, chosen,
                                    Part::kMerge, merge);
      s != FAGEN_OK)
    return s;
  const KernelRecord &k = kernels[chosen];
  const fagen_merge_problem &p = *problem;
  fagen_merge_params mp;
  std::memset(&mp, 0, sizeof mp);
  for (int i = 0; i < 4; ++i) {
    mp.o_states_strides[i] = p.o_states_strides[i];
    mp.lse_states_strides[i] = p.lse_states_strides[i];
  }
  for (int i = 0; i < 3; ++i) {
    mp.o_strides[i] = p.o_strides[i];
    mp.lse_strides[i] = p.lse_strides[i];
  }
  mp.num_states = p.num_states;
  mp.batch = p.batch;
  mp.heads = p.heads;
  mp.seqlen = p.seqlen;
  plan->struct_size = sizeof(fagen_plan);
  plan->abi_tag = FAGEN_ABI_TAG;
  plan->bundle = bundle;
  plan->bundle_id = bundle->id;
  plan->context = device.context;
  plan->context_id = device.contextId;
  plan->device = device.device;
  plan->kernel_index = chosen;
  plan->pass = FAGEN_PASS_MERGE;
  setGrid(plan->grid,
          fagen_merge_blocks(int64_t(p.batch) * p.heads * p.seqlen, p.head_dim,
                             FAGEN_MERGE_STATE_LANES),
          1, 1);
  setGrid(plan->block, k.prePostThreads, 1, 1);
  plan->function = merge;
  std::memcpy(plan->params, &mp, sizeof mp);
  return FAGEN_OK;
}

fagen_status fagen_run_merge_states(const fagen_plan *plan, const void *o_states,
                                    const float *lse_states, void *o, float *lse, void *stream) {
  const char *function = "fagen_run_merge_states";
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_MERGE); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkPointers(
          function, "", {{"o_states", o_states, 16}, {"lse_states", lse_states, 4}, {"o", o, 16}});
      s != FAGEN_OK)
    return s;
  if (lse != nullptr && reinterpret_cast<uintptr_t>(lse) % 4 != 0)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": lse is not 4-byte aligned");
  const DriverApi *api = nullptr;
  if (fagen_status s = checkRunTarget(function, *plan, api); s != FAGEN_OK)
    return s;
  fagen_merge_params mp;
  std::memcpy(&mp, plan->params, sizeof mp);
  mp.o_states = o_states;
  mp.lse_states = lse_states;
  mp.o = o;
  mp.lse = lse;
  return launch(*api, *plan, plan->function, plan->grid, plan->block, 0, &mp, stream, "_merge");
}

void fagen_paged_kv_init(fagen_paged_kv *paged) {
  if (paged == nullptr)
    return;
  *paged = fagen_paged_kv FAGEN_PAGED_KV_INIT;
}

void fagen_fwd_problem_set_paged_strides(fagen_fwd_problem *p, const fagen_paged_kv *paged) {
  if (p == nullptr || paged == nullptr)
    return;
  fagen_fwd_problem_set_bshd_strides(p);
  // [num_pages, page_size, heads_kv, head_dim]: (page, head, row).
  const int64_t row = p->heads_kv, page = int64_t(paged->page_size) * row;
  const int64_t k[3] = {page * p->head_dim_qk, p->head_dim_qk, row * p->head_dim_qk};
  const int64_t v[3] = {page * p->head_dim_v, p->head_dim_v, row * p->head_dim_v};
  for (int i = 0; i < 3; ++i) {
    p->k_strides[i] = k[i];
    p->v_strides[i] = v[i];
  }
}

fagen_status fagen_plan_set_decode_splits(fagen_plan *plan, int32_t num_splits) {
  const char *function = "fagen_plan_set_decode_splits";
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_FORWARD); s != FAGEN_OK)
    return s;
  const KernelRecord &k = plan->bundle->bundle.kernels[plan->kernel_index];
  if (!isDecodeKernel(k))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan's kernel " + k.name +
                    " is not a split-KV decode kernel (template sm80decode): only a decode "
                    "plan has a split count");
  if (num_splits < 1 || num_splits > kDecodeMaxSplits)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": num_splits (" + str(num_splits) + ") must be in 1.." +
                    str(kDecodeMaxSplits));
  setDecodeSplits(*plan, k, num_splits);
  return FAGEN_OK;
}

int32_t fagen_plan_decode_splits(const fagen_plan *plan) {
  if (plan == nullptr ||
      checkPlan("fagen_plan_decode_splits", plan, FAGEN_PASS_FORWARD) != FAGEN_OK ||
      !isDecodeKernel(plan->bundle->bundle.kernels[plan->kernel_index]))
    return 0;
  fagen_decode_params dp;
  std::memcpy(&dp, plan->params, sizeof dp);
  return dp.num_splits;
}

fagen_status fagen_plan_forward_paged(const fagen_bundle *bundle,
                                      const fagen_fwd_problem *problem,
                                      const fagen_paged_kv *paged, fagen_plan *plan) {
  const char *function = "fagen_plan_forward_paged";
  if (paged == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": paged is null");
  return planCall(function, bundle, problem, FAGEN_PASS_FORWARD, 0, false, 0, plan, paged);
}

fagen_status fagen_plan_forward_paged_kernel(const fagen_bundle *bundle,
                                             const fagen_fwd_problem *problem,
                                             const fagen_paged_kv *paged, int kernel_index,
                                             fagen_plan *plan) {
  const char *function = "fagen_plan_forward_paged_kernel";
  if (paged == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": paged is null");
  return planCall(function, bundle, problem, FAGEN_PASS_FORWARD, 0, true, kernel_index, plan,
                  paged);
}

fagen_status fagen_run_forward_paged(const fagen_plan *plan, const void *q, const void *k_cache,
                                     const void *v_cache, void *o, float *lse,
                                     const int32_t *block_table, const int32_t *seqused_k,
                                     void *workspace, size_t workspace_bytes,
                                     const fagen_run_args *args, void *stream) {
  const char *function = "fagen_run_forward_paged";
  if (fagen_status s = checkPointers(function, "", {{"block_table", block_table, 4},
                                                    {"seqused_k", seqused_k, 4}});
      s != FAGEN_OK)
    return s;
  const PagedKvArrays arrays{block_table, seqused_k};
  return runForward(function, plan, q, k_cache, v_cache, o, lse, workspace, workspace_bytes, args,
                    true, stream, &arrays);
}

void fagen_kv_append_init(fagen_kv_append *append) {
  if (append == nullptr)
    return;
  *append = fagen_kv_append FAGEN_KV_APPEND_INIT;
}

void fagen_kv_append_set_bshd_strides(fagen_kv_append *append, const fagen_fwd_problem *p) {
  if (append == nullptr || p == nullptr)
    return;
  // [batch, seqlen_q, heads_kv, head_dim]: (batch, token, head).
  const int64_t k[3] = {int64_t(p->seqlen_q) * p->heads_kv * p->head_dim_qk,
                        int64_t(p->heads_kv) * p->head_dim_qk, p->head_dim_qk};
  const int64_t v[3] = {int64_t(p->seqlen_q) * p->heads_kv * p->head_dim_v,
                        int64_t(p->heads_kv) * p->head_dim_v, p->head_dim_v};
  for (int i = 0; i < 3; ++i) {
    append->k_strides[i] = k[i];
    append->v_strides[i] = v[i];
  }
}

fagen_status fagen_run_forward_paged_append(const fagen_plan *plan,
                                            const fagen_kv_append *append, const void *q,
                                            void *k_cache, void *v_cache, const void *k_new,
                                            const void *v_new, void *o, float *lse,
                                            const int32_t *block_table,
                                            const int32_t *seqused_k, void *workspace,
                                            size_t workspace_bytes, const fagen_run_args *args,
                                            void *stream) {
  const char *function = "fagen_run_forward_paged_append";
  auto invalid = [function](const std::string &why) {
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + why);
  };
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_FORWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkBundleLive(function, *plan); s != FAGEN_OK)
    return s;
  if (append == nullptr)
    return invalid("append is null");
  if (fagen_status s = checkAbiHeader(function, "append", "fagen_kv_append", append->struct_size,
                                      append->abi_tag, sizeof(fagen_kv_append),
                                      "FAGEN_KV_APPEND_INIT");
      s != FAGEN_OK)
    return s;
  if (fagen_status s = checkPointers(function, "", {{"k_new", k_new, 16},
                                                    {"v_new", v_new, 16},
                                                    {"block_table", block_table, 4},
                                                    {"seqused_k", seqused_k, 4}});
      s != FAGEN_OK)
    return s;
  const KernelRecord &k = plan->bundle->bundle.kernels[plan->kernel_index];
  if (!isDecodeKernel(k) || !k.isPaged())
    return invalid("the plan's kernel " + k.name +
                   " is not a paged decode kernel: appending is served by paged decode plans "
                   "(1-16 query tokens, fagen_plan_forward_paged); for chunked prefill, write "
                   "the chunk's keys and values into the cache first and run "
                   "fagen_run_forward_paged");
  for (auto [name, strides] : {std::pair{"k_strides", append->k_strides},
                               std::pair{"v_strides", append->v_strides}})
    for (int i = 0; i < 3; ++i)
      if (strides[i] < 0 || strides[i] % 8 != 0)
        return invalid(std::string("append->") + name + "[" + str(i) + "] = " +
                       str(strides[i]) +
                       " must be a non-negative multiple of 8 elements (16-byte rows; batch, "
                       "token, head; the head dim contiguous)");
  PagedKvArrays arrays{block_table, seqused_k};
  arrays.appendLayout = append;
  arrays.kNew = k_new;
  arrays.vNew = v_new;
  return runForward(function, plan, q, k_cache, v_cache, o, lse, workspace, workspace_bytes, args,
                    true, stream, &arrays);
}

fagen_status fagen_paged_kv_status(const fagen_plan *plan, const void *workspace, void *stream) {
  const char *function = "fagen_paged_kv_status";
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_FORWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkBundleLive(function, *plan); s != FAGEN_OK)
    return s;
  if (!plan->bundle->bundle.kernels[plan->kernel_index].isPaged())
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan is not of a paged KV cache "
                                        "(fagen_plan_forward_paged makes one)");
  if (fagen_status s = checkPointers(function, "", {{"workspace", workspace, 16}}); s != FAGEN_OK)
    return s;
  const DriverApi *api = nullptr;
  if (fagen_status s = checkRunTarget(function, *plan, api); s != FAGEN_OK)
    return s;
  fagen_decode_params dp;
  std::memcpy(&dp, plan->params, sizeof dp);
  const StatusRecords records = statusRecords(plan->bundle->bundle.kernels[plan->kernel_index], dp);
  std::vector<int32_t> words(size_t(records.own + records.append) * FAGEN_KV_STATUS_WORDS);
  const auto status = reinterpret_cast<CUdeviceptr>(static_cast<const uint8_t *>(workspace) +
                                                    plan->workspace_offsets[2]);
  if (CUresult r = api->cuStreamSynchronize(static_cast<CUstream>(stream)); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA,
                std::string(function) + ": " + cudaErrorText(*api, r, "cuStreamSynchronize"));
  if (CUresult r = api->cuMemcpyDtoH(words.data(), status, words.size() * sizeof(int32_t));
      r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA,
                std::string(function) + ": " + cudaErrorText(*api, r, "cuMemcpyDtoH"));
  // The first bad record: NAME_append's (it ran first), then NAME's CTAs in order.
  const int32_t *record = words.data();
  const size_t appendFirst = size_t(records.own) * FAGEN_KV_STATUS_WORDS;
  for (size_t i = 0; i < words.size(); i += FAGEN_KV_STATUS_WORDS) {
    const size_t at = (appendFirst + i) % words.size();
    if (words[at] != FAGEN_KV_STATUS_OK) {
      record = words.data() + at;
      break;
    }
  }
  const std::string batch = str(record[1]), value = str(record[3]);
  switch (record[0]) {
  case FAGEN_KV_STATUS_OK:
    return FAGEN_OK;
  case FAGEN_KV_STATUS_PAGE_ID:
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": block_table[" + batch + "][" + str(record[2]) +
                    "] = " + value + " is not a page id in [0, " + str(dp.num_pages) +
                    "): the kernel read zeros for that page's keys, so sequence " + batch +
                    "'s output is wrong; fix the block table");
  case FAGEN_KV_STATUS_SEQUSED_K:
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": seqused_k[" + batch + "] = " + value +
                    " is outside [0, seqlen_k = " + str(dp.fwd.seqlen_k) +
                    "]: the kernel clamped it, so sequence " + batch +
                    "'s output is wrong; pass the cache lengths, and their maximum as seqlen_k");
  case FAGEN_KV_STATUS_APPEND_LENGTH:
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": seqused_k[" + batch + "] = " + value +
                    " leaves no room for the " + str(record[2]) +
                    " new tokens (it must be in [0, seqlen_k - " + str(record[2]) + " = " +
                    str(dp.fwd.seqlen_k - record[2]) + "]): nothing was appended to sequence " +
                    batch + " and its output is wrong; pass the cache lengths before the "
                    "append, and seqlen_k at least their maximum + the new tokens");
  default:
    return fail(FAGEN_ERROR_CUDA, std::string(function) + ": the status record holds code " +
                                      str(record[0]) + ", which no kernel writes: the " +
                                      "workspace was overwritten after the run");
  }
}

} // extern "C"
