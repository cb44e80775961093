//===- FakePagedTest.cpp - paged KV cache decode plans and runs on a fake libcuda ---===//
//
// fagen_plan_forward_paged / fagen_run_forward_paged / fagen_paged_kv_status against
// tests/runtime/FakeCuda.cpp (132 SMs, compute capability 9.0; "device" memory is host memory):
// the kernel choice by page size, the paged fields of the parameter block, the workspace with
// its status record (zeroed before the launch), the argument checks, and the status read back.
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "FakeCuda.h"
#include "FakeBundleTest.h"
#include "templates/abi/decode_params.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>

using namespace fagen;

namespace {

using fagen::test::fake;

/// A paged decode call: batch B, 32 query heads over 8 kv heads, T tokens, fp16 hd 128 causal,
/// 16-token pages, a block table of `maxPages` columns, longest cache `seqlenK`.
struct PagedCall {
  fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT;
  fagen_paged_kv paged = FAGEN_PAGED_KV_INIT;
  PagedCall(int batch, int tokens, int seqlenK, int maxPages = 1024, int numPages = 4096) {
    problem.batch = batch;
    problem.heads_q = 32;
    problem.heads_kv = 8;
    problem.seqlen_q = tokens;
    problem.seqlen_k = seqlenK;
    problem.head_dim_qk = problem.head_dim_v = 128;
    problem.dtype = FAGEN_DTYPE_FP16;
    problem.causal = 1;
    paged.page_size = 16;
    paged.num_pages = numPages;
    paged.max_pages_per_seq = maxPages;
    paged.block_table_stride = maxPages;
    fagen_fwd_problem_set_paged_strides(&problem, &paged);
  }
};

template <class T> T paramsOf(const FakeLaunch &launch) {
  T out;
  EXPECT_EQ(launch.params.size(), sizeof out);
  std::memcpy(&out, launch.params.data(), std::min(sizeof out, launch.params.size()));
  return out;
}

struct FakePagedTest : fagen::test::FakeBundleTest {
  Bundle initial() const override { return fagen::test::makePagedDecodeBundle(); }
  alignas(256) static inline char q[64], k[64], v[64], o[64];
  alignas(256) static inline float lse[16];
  alignas(256) static inline int32_t table[64], used[4];
  alignas(256) static inline char workspace[1 << 20];
  alignas(16) static inline int32_t cuQ[4];

  /// Runs `plan`, a varlen paged forward (chunked prefill), with `args` (cu_seqlens_q: cuQ) on
  /// the fixture's tensors and workspace, the fake's logs cleared first.
  fagen_status runPrefill(const fagen_plan &plan, fagen_run_args &args) {
    args.cu_seqlens_q = cuQ;
    fake().launchLog.clear();
    fake().memsetLog.clear();
    fake().tensorMaps.clear();
    return fagen_run_forward_paged(&plan, q, k, v, o, lse, table, used, workspace,
                                   plan.workspace_bytes, &args, nullptr);
  }
};

const char *kPaged = "fagen_fwd_fp16_hd128_causal_paged16_sm80decode_m16n64w4s3";
const char *kContiguous = "fagen_fwd_fp16_hd128_causal_sm80decode_m16n64w4s3";
const char *kPrefill = "fagen_fwd_fp16_hd128_causal_varlen_paged16_sm80_m128n64w4s2";

} // namespace

TEST_F(FakePagedTest, StridesAreTheCachesPageHeadAndRowStrides) {
  PagedCall c(2, 1, 1000);
  // [num_pages, 16, 8, 128]: a page of 16 x 8 x 128, a head of 128, a row of 8 x 128.
  EXPECT_EQ(c.problem.k_strides[0], 16 * 8 * 128);
  EXPECT_EQ(c.problem.k_strides[1], 128);
  EXPECT_EQ(c.problem.k_strides[2], 8 * 128);
  EXPECT_EQ(c.problem.v_strides[0], c.problem.k_strides[0]);
  EXPECT_EQ(c.problem.q_strides[2], 32 * 128); // Q and O stay BSHD
}

TEST_F(FakePagedTest, APagedCallPlansThePagedKernelOfItsPageSize) {
  PagedCall c(1, 1, 131072, 8192, 8192);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kPaged);
  // The split rule of the contiguous decode over seqlen_k (the longest cache): 16 splits.
  EXPECT_EQ(plan.grid[0], 16);
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.num_splits, 16);
  EXPECT_EQ(dp.num_pages, 8192);
  EXPECT_EQ(dp.max_pages_per_seq, 8192);
  EXPECT_EQ(dp.block_table_batch_stride, 8192);
  EXPECT_EQ(dp.fwd.k_batch_stride, 16 * 8 * 128); // the page stride
  // Status records: one per CTA of the split kernel's grid (16 splits x 8 kv heads) and of
  // the append's (one token x 8 heads x 16 chunks: one block).
  const fagen_decode_workspace w =
      fagen_decode_workspace_layout(16, 1, 32, 1, 128, 16 * 8 + 1);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(plan.workspace_offsets[2], w.status_offset);

  // One split still has a workspace: the status records (64 x 8 CTAs of each kernel) and the
  // 64 lengths an append writes.
  PagedCall full(64, 1, 4096, 256);
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &full.problem, &full.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(plan.grid[0], 1);
  EXPECT_EQ(plan.workspace_bytes, (64u * 8 + 64) * 16 + 256);
  EXPECT_EQ(plan.workspace_offsets[2], 0u);

  // The same call without a paged cache takes the contiguous kernel, never the paged one.
  ASSERT_EQ(fagen_plan_forward(bundle, &c.problem, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kContiguous);
}

TEST_F(FakePagedTest, APageSizeTheBundleLacksIsNamed) {
  PagedCall c(1, 1, 1000);
  c.paged.page_size = 32;
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan),
            FAGEN_ERROR_NOT_SUPPORTED);
  const std::string error = fagen_last_error();
  EXPECT_NE(error.find("paged_kv 32"), std::string::npos) << error;
  EXPECT_NE(error.find("kv_cache paged, page_size 32 and passes [decode]"), std::string::npos)
      << error;
  // A pinned contiguous kernel does not serve a paged call.
  c.paged.page_size = 16;
  EXPECT_EQ(fagen_plan_forward_paged_kernel(bundle, &c.problem, &c.paged, 4, &plan),
            FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(fagen_plan_forward_paged_kernel(bundle, &c.problem, &c.paged, 6, &plan), FAGEN_OK)
      << fagen_last_error();
}

TEST_F(FakePagedTest, ThePagedCacheIsCheckedOnTheHost) {
  fagen_plan plan;
  struct Case {
    void (*edit)(PagedCall &);
    const char *message;
  };
  const Case cases[] = {
      {[](PagedCall &c) { c.paged.page_size = 48; },
       "paged->page_size (48) must be a power of two in 16..256"},
      {[](PagedCall &c) { c.paged.num_pages = 0; }, "paged->num_pages (0) and max_pages_per_seq"},
      {[](PagedCall &c) { c.paged.block_table_stride = 10; },
       "paged->block_table_stride (10) is less than max_pages_per_seq (1024)"},
      {[](PagedCall &c) { c.problem.seqlen_k = 1024 * 16 + 1; },
       "seqlen_k (16385) exceeds the block table's 16384 keys (max_pages_per_seq 1024 x "
       "page_size 16)"},
      {[](PagedCall &c) { c.paged.reserved0 = 3; }, "paged->reserved0 (3) must be 0"},
  };
  for (const Case &k : cases) {
    PagedCall c(2, 1, 1000);
    k.edit(c);
    EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan),
              FAGEN_ERROR_INVALID_ARGUMENT)
        << k.message;
    EXPECT_NE(std::string(fagen_last_error()).find(k.message), std::string::npos)
        << fagen_last_error();
  }
  PagedCall c(2, 1, 1000);
  c.paged.struct_size = 8;
  EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan),
            FAGEN_ERROR_ABI_MISMATCH);
  EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, nullptr, &plan),
            FAGEN_ERROR_INVALID_ARGUMENT);
}

TEST_F(FakePagedTest, RunPassesTheTableAndTheStatusRecords) {
  PagedCall c(1, 1, 131072, 8192, 8192);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  ASSERT_LE(plan.workspace_bytes, sizeof workspace);
  fake().launchLog.clear();
  fake().memsetLog.clear();
  const int launchesBefore = fake().launches.load();
  void *stream = reinterpret_cast<void *>(uintptr_t(0x7000));
  ASSERT_EQ(fagen_run_forward_paged(&plan, q, k, v, o, lse, table, used, workspace,
                                    plan.workspace_bytes, nullptr, stream),
            FAGEN_OK)
      << fagen_last_error();
  // The kernel's CTAs write their own status records: nothing zeroes them first.
  EXPECT_EQ(fake().memsetLog.size(), 0u);
  EXPECT_EQ(fake().launches.load(), launchesBefore + 2);
  ASSERT_EQ(fake().launchLog.size(), 2u); // the splits, then their combine
  const auto dp = paramsOf<fagen_decode_params>(fake().launchLog[0]);
  EXPECT_EQ(fake().launchLog[0].stream, stream);
  EXPECT_EQ(dp.block_table, table);
  EXPECT_EQ(dp.seqused_k, used);
  EXPECT_EQ(dp.kv_status, reinterpret_cast<int32_t *>(workspace + plan.workspace_offsets[2]));
  // No append: the kernel marks the append's records (after its grid's) OK too.
  EXPECT_EQ(dp.kv_status_stale, 1);
  EXPECT_EQ(dp.fwd.k, static_cast<const void *>(k));
  EXPECT_EQ(dp.o_partial, reinterpret_cast<float *>(workspace + plan.workspace_offsets[0]));
  EXPECT_FALSE(fake().launchLog[0].programmaticDependent); // no append: after the stream's work
  EXPECT_EQ(fake().launchLog[1].function, std::string(kPaged) + "_combine");
}

TEST_F(FakePagedTest, RunRefusesMissingArraysAndTheWrongEntryPoint) {
  PagedCall c(1, 1, 4096, 256);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  fake().launchLog.clear();
  auto run = [&](const int32_t *t, const int32_t *u, void *w, size_t bytes) {
    return fagen_run_forward_paged(&plan, q, k, v, o, lse, t, u, w, bytes, nullptr, nullptr);
  };
  EXPECT_EQ(run(nullptr, used, workspace, plan.workspace_bytes), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("block_table is null"), std::string::npos);
  EXPECT_EQ(run(table, nullptr, workspace, plan.workspace_bytes), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(run(table, used, nullptr, 0), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("a paged run needs its workspace"),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(run(table, used, workspace, plan.workspace_bytes - 1), FAGEN_ERROR_INVALID_ARGUMENT);
  // A paged plan through the contiguous entry points, and the reverse.
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace,
                                             plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("run it with fagen_run_forward_paged"),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(fake().launchLog.size(), 0u);
  fagen_plan contiguous;
  ASSERT_EQ(fagen_plan_forward(bundle, &c.problem, &contiguous), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_run_forward_paged(&contiguous, q, k, v, o, lse, table, used, workspace,
                                    sizeof workspace, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("fagen_plan_forward_paged"), std::string::npos);
}

TEST_F(FakePagedTest, AppendWritesTheNewRowsThenDecodesOverTheLongerCache) {
  // 3 sequences, 4 new tokens each (speculative verification), 32/8 heads, hd 128.
  PagedCall c(3, 4, 1000, 64, 512);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  const fagen_decode_workspace w =
      fagen_decode_workspace_layout(fagen_plan_decode_splits(&plan), 3, 32, 4, 128,
                                    int64_t(plan.grid[0]) * 8 * 3 + 4 * 3);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(w.total_bytes - w.lengths_offset, 256u); // int32 [batch], 256-byte aligned
  fagen_kv_append append = FAGEN_KV_APPEND_INIT;
  fagen_kv_append_set_bshd_strides(&append, &c.problem);
  EXPECT_EQ(append.k_strides[0], 4 * 8 * 128);
  EXPECT_EQ(append.k_strides[1], 8 * 128);
  EXPECT_EQ(append.k_strides[2], 128);
  alignas(16) static char kNew[64], vNew[64];
  fake().launchLog.clear();
  void *stream = reinterpret_cast<void *>(uintptr_t(0x7000));
  ASSERT_EQ(fagen_run_forward_paged_append(&plan, &append, q, k, v, kNew, vNew, o, lse, table,
                                           used, workspace, plan.workspace_bytes, nullptr,
                                           stream),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_GE(fake().launchLog.size(), 2u); // the append, the decode (and its combine)
  const FakeLaunch &first = fake().launchLog[0];
  EXPECT_EQ(first.function, std::string(kPaged) + "_append");
  EXPECT_EQ(first.stream, stream);
  // 4 tokens x 8 kv heads x 16 chunks of 8 columns = 512 threads: 4 blocks, one row a sequence.
  EXPECT_EQ(first.grid[0], 4u);
  EXPECT_EQ(first.grid[1], 3u);
  EXPECT_EQ(first.block[0], unsigned(FAGEN_APPEND_THREADS));
  const auto ap = paramsOf<fagen_kv_append_params>(first);
  EXPECT_EQ(ap.k_new, static_cast<const void *>(kNew));
  EXPECT_EQ(ap.v_new, static_cast<const void *>(vNew));
  EXPECT_EQ(ap.k_cache, static_cast<void *>(k));
  EXPECT_EQ(ap.v_cache, static_cast<void *>(v));
  EXPECT_EQ(ap.block_table, table);
  EXPECT_EQ(ap.seqused_k, used);
  EXPECT_EQ(ap.seqused_out, reinterpret_cast<int32_t *>(workspace + w.lengths_offset));
  // The append's status records follow the decode grid's (8 kv heads x 3 sequences).
  EXPECT_EQ(ap.kv_status, reinterpret_cast<int32_t *>(workspace + plan.workspace_offsets[2]) +
                              FAGEN_KV_STATUS_WORDS * plan.grid[0] * 8 * 3);
  EXPECT_EQ(ap.k_new_strides[1], 8 * 128);
  EXPECT_EQ(ap.k_cache_strides[0], 16 * 8 * 128); // page, head, row: the problem's
  EXPECT_EQ(ap.k_cache_strides[1], 128);
  EXPECT_EQ(ap.k_cache_strides[2], 8 * 128);
  EXPECT_EQ(ap.block_table_batch_stride, 64);
  EXPECT_EQ(ap.batch, 3);
  EXPECT_EQ(ap.tokens, 4);
  EXPECT_EQ(ap.heads_kv, 8);
  EXPECT_EQ(ap.num_pages, 512);
  EXPECT_EQ(ap.seqlen_k, 1000);
  // The decode reads the lengths the append wrote, not the caller's, after the append ends.
  const auto dp = paramsOf<fagen_decode_params>(fake().launchLog[1]);
  EXPECT_EQ(fake().launchLog[1].function, std::string(kPaged));
  EXPECT_FALSE(fake().launchLog[1].programmaticDependent);
  EXPECT_EQ(dp.seqused_k, ap.seqused_out);
  EXPECT_EQ(dp.block_table, table);
  EXPECT_EQ(dp.kv_status_stale, 0); // the append wrote its records

  // What the append met is read back as the decode's entries are, and before them.
  std::memset(workspace + plan.workspace_offsets[2], 0, w.lengths_offset - w.status_offset);
  const int32_t badPage[FAGEN_KV_STATUS_WORDS] = {FAGEN_KV_STATUS_PAGE_ID, 2, 5, -1};
  std::memcpy(dp.kv_status, badPage, sizeof badPage); // the decode's first CTA
  const int32_t noRoom[FAGEN_KV_STATUS_WORDS] = {FAGEN_KV_STATUS_APPEND_LENGTH, 1, 4, 998};
  std::memcpy(ap.kv_status + FAGEN_KV_STATUS_WORDS * 4, noRoom, sizeof noRoom); // sequence 1's
  EXPECT_EQ(fagen_paged_kv_status(&plan, workspace, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("seqused_k[1] = 998 leaves no room for the 4 new tokens (it must be in "
                      "[0, seqlen_k - 4 = 996])"),
            std::string::npos)
      << fagen_last_error();
}

TEST_F(FakePagedTest, AppendRefusesBadArgumentsBeforeLaunching) {
  PagedCall c(2, 1, 1000, 64, 512);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  alignas(16) static char kNew[64], vNew[64];
  fagen_kv_append append = FAGEN_KV_APPEND_INIT;
  fagen_kv_append_set_bshd_strides(&append, &c.problem);
  fake().launchLog.clear();
  auto run = [&](const fagen_plan &p, const fagen_kv_append *a, const void *kn, const void *vn) {
    return fagen_run_forward_paged_append(&p, a, q, k, v, kn, vn, o, lse, table, used, workspace,
                                          sizeof workspace, nullptr, nullptr);
  };
  auto expectError = [](fagen_status got, fagen_status want, const char *message) {
    EXPECT_EQ(got, want) << message;
    EXPECT_NE(std::string(fagen_last_error()).find(message), std::string::npos)
        << fagen_last_error();
  };
  expectError(run(plan, nullptr, kNew, vNew), FAGEN_ERROR_INVALID_ARGUMENT, "append is null");
  expectError(run(plan, &append, nullptr, vNew), FAGEN_ERROR_INVALID_ARGUMENT, "k_new is null");
  expectError(run(plan, &append, kNew + 4, vNew), FAGEN_ERROR_INVALID_ARGUMENT, "k_new");
  fagen_kv_append odd = append;
  odd.v_strides[1] = 1020;
  expectError(run(plan, &odd, kNew, vNew), FAGEN_ERROR_INVALID_ARGUMENT,
              "append->v_strides[1] = 1020 must be a non-negative multiple of 8");
  fagen_kv_append old = append;
  old.struct_size = 8;
  EXPECT_EQ(run(plan, &old, kNew, vNew), FAGEN_ERROR_ABI_MISMATCH);
  // A contiguous decode plan, and a chunked prefill's paged forward, take no append.
  fagen_plan contiguous;
  ASSERT_EQ(fagen_plan_forward(bundle, &c.problem, &contiguous), FAGEN_OK) << fagen_last_error();
  expectError(run(contiguous, &append, kNew, vNew), FAGEN_ERROR_INVALID_ARGUMENT,
              "is not a paged decode kernel: appending is served by paged decode plans");
  PagedCall prefill(3, 200, 1000);
  prefill.problem.varlen = 1;
  prefill.problem.total_q = 450;
  prefill.problem.total_k = 1000;
  fagen_plan prefillPlan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &prefill.problem, &prefill.paged, &prefillPlan),
            FAGEN_OK)
      << fagen_last_error();
  expectError(run(prefillPlan, &append, kNew, vNew), FAGEN_ERROR_INVALID_ARGUMENT,
              "write the chunk's keys and values into the cache first");
  EXPECT_EQ(fake().launchLog.size(), 0u);
}

TEST_F(FakePagedTest, StatusReadsTheRecordTheKernelLeft) {
  PagedCall c(4, 1, 1000, 64, 512);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  // One record per CTA of the decode grid (4 splits x 8 kv heads x 4 sequences) and of the
  // append's (4 sequences, one block each), all OK.
  ASSERT_EQ(plan.grid[0], 4);
  const size_t records = 4 * 8 * 4 + 4;
  auto *record = reinterpret_cast<int32_t *>(workspace + plan.workspace_offsets[2]);
  std::memset(record, 0, records * FAGEN_KV_STATUS_WORDS * sizeof(int32_t));
  EXPECT_EQ(fagen_paged_kv_status(&plan, workspace, nullptr), FAGEN_OK) << fagen_last_error();
  // A bad entry in the last CTA's record is found.
  const int32_t lastCta[FAGEN_KV_STATUS_WORDS] = {FAGEN_KV_STATUS_PAGE_ID, 3, 9, 600};
  std::memcpy(record + FAGEN_KV_STATUS_WORDS * 127, lastCta, sizeof lastCta);
  EXPECT_EQ(fagen_paged_kv_status(&plan, workspace, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("block_table[3][9] = 600 is not a page id in [0, 512)"),
            std::string::npos)
      << fagen_last_error();

  const int32_t badPage[FAGEN_KV_STATUS_WORDS] = {FAGEN_KV_STATUS_PAGE_ID, 3, 7, 9000};
  std::memcpy(record, badPage, sizeof badPage);
  EXPECT_EQ(fagen_paged_kv_status(&plan, workspace, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("block_table[3][7] = 9000 is not a page id in [0, 512)"),
            std::string::npos)
      << fagen_last_error();

  const int32_t badLength[FAGEN_KV_STATUS_WORDS] = {FAGEN_KV_STATUS_SEQUSED_K, 2, 0, -5};
  std::memcpy(record, badLength, sizeof badLength);
  EXPECT_EQ(fagen_paged_kv_status(&plan, workspace, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("seqused_k[2] = -5 is outside [0, seqlen_k = 1000]"),
            std::string::npos)
      << fagen_last_error();

  // Not a paged plan.
  fagen_plan contiguous;
  ASSERT_EQ(fagen_plan_forward(bundle, &c.problem, &contiguous), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_paged_kv_status(&contiguous, workspace, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
}

TEST_F(FakePagedTest, ValidateModeChecksTheTableOnTheHostFirst) {
  PagedCall c(3, 1, 100, 8, 40); // 100 keys: 7 pages of 16 a sequence at most
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  // Lengths 100, 17, 0: pages 0..6, 0..1 and none; every other entry is never read.
  std::memset(table, 0xff, sizeof table);
  used[0] = 100, used[1] = 17, used[2] = 0;
  for (int slot = 0; slot < 7; ++slot)
    table[slot] = 39 - slot;
  table[8] = 3, table[9] = 4;
  setenv("FAGEN_VALIDATE", "1", 1);
  auto run = [&] {
    return fagen_run_forward_paged(&plan, q, k, v, o, lse, table, used, workspace,
                                   plan.workspace_bytes, nullptr, nullptr);
  };
  const int before = fake().launches.load();
  EXPECT_EQ(run(), FAGEN_OK) << fagen_last_error();
  EXPECT_GT(fake().launches.load(), before);
  table[9] = 40;
  EXPECT_EQ(run(), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("FAGEN_VALIDATE: block_table[1][1] = 40 is not a page id in [0, 40)"),
            std::string::npos)
      << fagen_last_error();
  table[9] = 4;
  used[2] = 101;
  const int launches = fake().launches.load();
  EXPECT_EQ(run(), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("FAGEN_VALIDATE: seqused_k[2] = 101 is outside [0, seqlen_k = 100]"),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(fake().launches.load(), launches); // refused before any launch
  unsetenv("FAGEN_VALIDATE");
  EXPECT_EQ(run(), FAGEN_OK) << fagen_last_error(); // the kernel's own check then
}

TEST_F(FakePagedTest, ValidateModeChecksTheAppendsRoomAndPagesToo) {
  PagedCall c(2, 2, 100, 8, 40); // 2 new tokens a sequence, at most 100 keys after them
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  fagen_kv_append append = FAGEN_KV_APPEND_INIT;
  fagen_kv_append_set_bshd_strides(&append, &c.problem);
  alignas(16) static char kNew[64], vNew[64];
  // Lengths 16 and 98 before the append: the new keys 16-17 go to slot 1 of sequence 0.
  std::memset(table, 0xff, sizeof table);
  used[0] = 16, used[1] = 98;
  table[0] = 5;
  for (int slot = 0; slot < 7; ++slot)
    table[8 + slot] = 20 + slot;
  setenv("FAGEN_VALIDATE", "1", 1);
  auto run = [&] {
    return fagen_run_forward_paged_append(&plan, &append, q, k, v, kNew, vNew, o, lse, table,
                                          used, workspace, plan.workspace_bytes, nullptr,
                                          nullptr);
  };
  EXPECT_EQ(run(), FAGEN_ERROR_INVALID_ARGUMENT); // slot 1 of sequence 0 is -1
  EXPECT_NE(std::string(fagen_last_error())
                .find("FAGEN_VALIDATE: block_table[0][1] = -1 is not a page id in [0, 40)"),
            std::string::npos)
      << fagen_last_error();
  table[1] = 6;
  EXPECT_EQ(run(), FAGEN_OK) << fagen_last_error();
  used[1] = 99; // 99 + 2 new tokens > 100
  const int launches = fake().launches.load();
  EXPECT_EQ(run(), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("FAGEN_VALIDATE: seqused_k[1] = 99 is outside [0, seqlen_k - 2 new tokens "
                      "= 98]"),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(fake().launches.load(), launches); // refused before any launch
  unsetenv("FAGEN_VALIDATE");
}

TEST_F(FakePagedTest, ADecodeKernelOfAnEarlierLayoutIsRefused) {
  // A bundle of decode parameter layout 1004 (CTAs sharing one status record) is never
  // launched by today's runtime: it names the versions and the fix.
  Bundle old = fagen::test::makePagedDecodeBundle();
  for (KernelRecord &k : old.kernels)
    if (isDecodeKernel(k))
      k.paramsVersion = FAGEN_DECODE_PARAMS_VERSION - 1;
  load(old);
  PagedCall c(1, 1, 1000);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan),
            FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fagen_last_error())
                .find("takes parameter layout version 1004 but this runtime fills version 1005"),
            std::string::npos)
      << fagen_last_error();
}

// Chunked prefill: a varlen call (packed queries, cu_seqlens_q) over the pages takes the paged
// forward kernel: one launch over (query tiles, heads_q, batch), fagen_decode_params of one
// split, the status record in the workspace; cu_seqlens_k is not read.
TEST_F(FakePagedTest, AVarlenPagedCallRunsThePagedForward) {
  PagedCall c(3, 200, 1000);
  c.problem.varlen = 1;
  c.problem.total_q = 450;
  c.problem.total_k = 1000;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kPrefill);
  EXPECT_EQ(plan.grid[0], 2); // ceil(200 / 128) query tiles
  EXPECT_EQ(plan.grid[1], 32);
  EXPECT_EQ(plan.grid[2], 3);
  EXPECT_EQ(plan.workspace_bytes, 256u);
  EXPECT_EQ(plan.workspace_offsets[2], 0u);
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.num_splits, 1);
  EXPECT_EQ(dp.m_blocks, 2);
  EXPECT_EQ(dp.num_pages, 4096);
  EXPECT_EQ(dp.block_table_batch_stride, 1024);
  EXPECT_EQ(dp.fwd.total_q, 450);
  EXPECT_EQ(dp.fwd.k_batch_stride, 16 * 8 * 128); // the page stride

  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  ASSERT_EQ(runPrefill(plan, args), FAGEN_OK) << fagen_last_error();
  ASSERT_EQ(fake().memsetLog.size(), 1u); // the status record, before the launch
  EXPECT_EQ(fake().memsetLog[0].dst, reinterpret_cast<unsigned long long>(workspace));
  ASSERT_EQ(fake().launchLog.size(), 1u); // no combine
  EXPECT_EQ(fake().launchLog[0].function, std::string(kPrefill));
  const auto launched = paramsOf<fagen_decode_params>(fake().launchLog[0]);
  EXPECT_EQ(launched.fwd.cu_seqlens_q, cuQ);
  EXPECT_EQ(launched.fwd.cu_seqlens_k, nullptr);
  EXPECT_EQ(launched.block_table, table);
  EXPECT_EQ(launched.seqused_k, used);
  EXPECT_EQ(launched.kv_status, reinterpret_cast<int32_t *>(workspace));
  EXPECT_EQ(launched.o_partial, nullptr);

  // cu_seqlens_q is needed; the workspace too (the status record).
  args.cu_seqlens_q = nullptr;
  EXPECT_EQ(fagen_run_forward_paged(&plan, q, k, v, o, lse, table, used, workspace,
                                    plan.workspace_bytes, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("args->cu_seqlens_q is null"),
            std::string::npos)
      << fagen_last_error();
  args.cu_seqlens_q = cuQ;
  EXPECT_EQ(fagen_run_forward_paged(&plan, q, k, v, o, lse, table, used, nullptr, 0, &args,
                                    nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("a paged run needs its workspace"),
            std::string::npos)
      << fagen_last_error();
  // The contiguous run of a paged plan is refused.
  EXPECT_EQ(fagen_run_forward_with_args(&plan, q, k, v, o, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);

  // total_k is seqlen_k: no packed keys.
  c.problem.total_k = 2000;
  EXPECT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error())
                .find("total_k (2000) must equal seqlen_k (1000) in a varlen paged call"),
            std::string::npos)
      << fagen_last_error();
}

TEST_F(FakePagedTest, AVarlenPagedCallRunsTheSm90wsPagedForward) {
  // A sm90ws paged forward (sm_90a): a 1-D grid over its work tiles, the paged fields as the sm80
  // one's; Q's tensor map, and K's and V's over the caches' pages where the kernel loads them by
  // TMA (pages of 64 tokens or more: FAGEN_PAGED_TMA_BOX_ROWS), else zero (16-token pages: its
  // producer warpgroup gathers them).
  for (int pageSize : {16, 128}) {
    SCOPED_TRACE(pageSize);
    Bundle b = fagen::test::makePagedDecodeBundle();
    KernelRecord ws = fagen::test::testKernel(
        "fagen_fwd_bf16_hd128_causal_varlen_paged" + std::to_string(pageSize) +
            "_sm90ws_m128n128w8s2_r8",
        "sm_90a", "bf16", 128, "causal", 1);
    ws.templ = "sm90ws";
    ws.blockN = 128;
    ws.warps = 8;
    ws.threads = 384;
    ws.varlen = true;
    ws.pageSize = pageSize;
    ws.paramsVersion = FAGEN_DECODE_PARAMS_VERSION;
    b.kernels.push_back(ws);
    load(b);
    PagedCall c(3, 200, 1000, 64, 4096 * 16 / pageSize);
    c.problem.dtype = FAGEN_DTYPE_BF16;
    c.problem.varlen = 1;
    c.problem.total_q = 450;
    c.problem.total_k = 1000;
    c.paged.page_size = pageSize;
    fagen_fwd_problem_set_paged_strides(&c.problem, &c.paged);
    fagen_plan plan;
    ASSERT_EQ(fagen_plan_forward_paged(bundle, &c.problem, &c.paged, &plan), FAGEN_OK)
        << fagen_last_error();
    EXPECT_EQ(chosenKernel(plan), ws.name);
    EXPECT_EQ(plan.grid[0], 2 * 32 * 3); // one CTA per work tile: ceil(200 / 128) x heads x batch
    EXPECT_EQ(plan.grid[1], 1);
    EXPECT_EQ(plan.grid[2], 1);
    EXPECT_EQ(plan.block[0], 384);
    EXPECT_EQ(plan.workspace_bytes, 256u); // the status record

    fagen_run_args args = FAGEN_RUN_ARGS_INIT;
    ASSERT_EQ(runPrefill(plan, args), FAGEN_OK) << fagen_last_error();
    ASSERT_EQ(fake().memsetLog.size(), 1u); // the status record, before the launch
    const bool tmaPages = pageSize >= 64;
    ASSERT_EQ(fake().tensorMaps.size(), tmaPages ? 3u : 1u);
    const FakeTensorMap &mq = fake().tensorMaps[0];
    EXPECT_EQ(mq.address, q);
    // {head_dim, total_q, heads_q, 1}, boxes of 128 rows.
    EXPECT_EQ(std::vector<unsigned long long>(mq.dims, mq.dims + 4),
              (std::vector<unsigned long long>{128, 450, 32, 1}));
    EXPECT_EQ(mq.box[1], 128u);
    if (tmaPages) {
      // {head_dim, page rows, kv heads, pages}, strides of a row, a head and a page (bytes),
      // boxes of one 128-row page.
      const FakeTensorMap &mk = fake().tensorMaps[1], &mv = fake().tensorMaps[2];
      EXPECT_EQ(mk.address, k);
      EXPECT_EQ(mv.address, v);
      for (const FakeTensorMap *m : {&mk, &mv}) {
        EXPECT_EQ(std::vector<unsigned long long>(m->dims, m->dims + 4),
                  (std::vector<unsigned long long>{128, 128, 8, 512}));
        EXPECT_EQ(std::vector<unsigned long long>(m->strides, m->strides + 3),
                  (std::vector<unsigned long long>{8 * 128 * 2, 128 * 2, 128 * 8 * 128 * 2}));
        EXPECT_EQ(m->box[1], 128u);
      }
    }
    ASSERT_EQ(fake().launchLog.size(), 1u);
    const FakeLaunch &launch = fake().launchLog[0];
    EXPECT_EQ(launch.function, ws.name);
    EXPECT_EQ(launch.grid[0], 192u);
    const auto launched = paramsOf<fagen_decode_params>(launch);
    EXPECT_EQ(launched.fwd.cu_seqlens_q, cuQ);
    EXPECT_EQ(launched.fwd.cu_seqlens_k, nullptr);
    EXPECT_EQ(launched.fwd.k, k);
    EXPECT_EQ(launched.fwd.k_batch_stride, int64_t(pageSize) * 8 * 128); // the page stride
    EXPECT_EQ(launched.block_table, table);
    EXPECT_EQ(launched.seqused_k, used);
    EXPECT_EQ(launched.kv_status, reinterpret_cast<int32_t *>(workspace));
    EXPECT_EQ(launched.num_pages, 4096 * 16 / pageSize);
    // A page stride of 0 is refused at plan time where the kernel loads pages by TMA.
    if (tmaPages) {
      PagedCall bad = c;
      bad.problem.k_strides[0] = 0;
      fagen_plan refused;
      EXPECT_EQ(fagen_plan_forward_paged(bundle, &bad.problem, &bad.paged, &refused),
                FAGEN_ERROR_NOT_SUPPORTED);
      EXPECT_NE(std::string(fagen_last_error()).find("k_strides[0] (the page stride) is 0"),
                std::string::npos)
          << fagen_last_error();
    }
    // The maps: Q's (and K's, V's) encoded, the rest zero.
    ASSERT_EQ(launch.tmaMaps.size(), 4u * 128);
    const std::vector<unsigned char> zeros(128, 0);
    for (int m = 0; m < 4; ++m)
      EXPECT_EQ(std::vector<unsigned char>(launch.tmaMaps.begin() + 128 * m,
                                           launch.tmaMaps.begin() + 128 * (m + 1)) == zeros,
                m == 3 || (!tmaPages && m > 0))
          << m;
  }
}
