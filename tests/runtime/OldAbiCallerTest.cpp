//===- OldAbiCallerTest.cpp - a caller built against fagen.h of ABI 1 or 2 ----===//
//
// This file plays a program compiled against an older fagen.h: it does not include today's
// header but declares the structs and entry points as ABI 1 and ABI 2 had them (copied from
// those headers), and calls the library of today with them. Every call must end in
// FAGEN_ERROR_ABI_MISMATCH with a message, reading no byte past the old structs and writing
// none past the old plan (guard bytes around it; ASan would see the rest). No GPU needed: the
// header check comes before the driver.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

std::vector<uint8_t> fagenTestBundleBytes(); // tests/common/TestBundleBytes.cpp

namespace abi2 {
// fagen.h of ABI 2 (FAGEN_RUNTIME_ABI_VERSION 2), its structs verbatim (enums as int32_t).
struct fagen_fwd_problem {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
  int32_t dtype;
  int32_t causal;
  float softmax_scale;
  int64_t q_strides[3];
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t o_strides[3];
  int32_t mask;
  int32_t mask_align;
  int32_t window_left;
  int32_t window_right;
  int32_t score_mod;
  float softcap;
  float dropout_p;
  int32_t varlen;
  int64_t total_q, total_k;
  int32_t sparsity;
  int32_t sparse_block;
  uint32_t sparse_hash;
  int32_t reserved0;
  int64_t do_strides[3];
  int64_t dq_strides[3];
  int64_t dk_strides[3];
  int64_t dv_strides[3];
};
static_assert(sizeof(fagen_fwd_problem) == 296, "ABI 2's fagen_fwd_problem");

struct fagen_plan {
  const void *bundle;
  int32_t kernel_index;
  int32_t pass;
  int32_t grid[3];
  int32_t block[3];
  int32_t smem_bytes;
  int32_t pre_post_grid[3];
  int32_t pre_post_block[3];
  uint32_t run_args;
  void *function;
  void *pre_function;
  void *post_function;
  size_t workspace_bytes;
  uint64_t workspace_offsets[3];
  uint8_t params[1024];
};
static_assert(sizeof(fagen_plan) == 1152, "ABI 2's fagen_plan");
} // namespace abi2

namespace abi1 {
// ABI 1: the dense forward's fields only.
struct fagen_fwd_problem {
  int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim_qk, head_dim_v;
  int32_t dtype;
  int32_t causal;
  float softmax_scale;
  int64_t q_strides[3];
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t o_strides[3];
};
} // namespace abi1

// The entry points as the old callers declared them (the same symbols and argument order).
extern "C" {
int fagen_bundle_load_memory(const void *data, size_t size, void **out);
void fagen_bundle_destroy(void *bundle);
const char *fagen_last_error(void);
int fagen_abi_version(void);
int fagen_plan_forward(const void *bundle, const void *problem, void *plan);
int fagen_plan_backward(const void *bundle, const void *problem, int32_t deterministic,
                        void *plan);
int fagen_run_forward(const void *plan, const void *q, const void *k, const void *v, void *o,
                      float *lse, void *stream);
}

namespace {

constexpr int kAbiMismatch = 8; // FAGEN_ERROR_ABI_MISMATCH of ABI 3

/// A struct with guard bytes after it, checked untouched.
template <class T> struct Guarded {
  T value;
  unsigned char guard[4096];
  Guarded() {
    std::memset(&value, 0, sizeof value);
    std::memset(guard, 0xAB, sizeof guard);
  }
  bool guardIntact() const {
    for (unsigned char c : guard)
      if (c != 0xAB)
        return false;
    return true;
  }
};

template <class Problem> void fillDense(Problem &p) {
  p.batch = 2, p.heads_q = 16, p.heads_kv = 4, p.seqlen_q = 1000, p.seqlen_k = 577;
  p.head_dim_qk = p.head_dim_v = 128;
  p.causal = 1;
  for (int64_t *s : {p.q_strides, p.o_strides}) // BSHD
    s[0] = 1000 * 16 * 128, s[1] = 128, s[2] = 16 * 128;
  for (int64_t *s : {p.k_strides, p.v_strides})
    s[0] = 577 * 4 * 128, s[1] = 128, s[2] = 4 * 128;
}

struct OldAbiCallerTest : ::testing::Test {
  void SetUp() override {
    std::vector<uint8_t> bytes = fagenTestBundleBytes();
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), 0);
  }
  void TearDown() override { fagen_bundle_destroy(bundle); }
  void *bundle = nullptr;
};

} // namespace

TEST_F(OldAbiCallerTest, LibraryIsAbi3) { EXPECT_EQ(fagen_abi_version(), 3); }

TEST_F(OldAbiCallerTest, Abi2ProblemIsRefusedBeforeThePlanIsWritten) {
  abi2::fagen_fwd_problem p = {};
  fillDense(p);
  Guarded<abi2::fagen_plan> plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan.value), kAbiMismatch);
  const std::string error = fagen_last_error();
  EXPECT_NE(error.find("fagen_plan_forward: problem->struct_size is 2 and abi_tag 0x00000010; "
                       "this library (ABI 3) takes a fagen_fwd_problem of 304 bytes"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("built against an older fagen.h (ABI 1 or 2"), std::string::npos) << error;
  EXPECT_TRUE(plan.guardIntact());
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 0, &plan.value), kAbiMismatch);
  EXPECT_TRUE(plan.guardIntact());
}

TEST_F(OldAbiCallerTest, Abi1ProblemIsRefused) {
  abi1::fagen_fwd_problem p = {};
  fillDense(p);
  Guarded<abi2::fagen_plan> plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan.value), kAbiMismatch) << fagen_last_error();
  EXPECT_TRUE(plan.guardIntact());
}

TEST_F(OldAbiCallerTest, Abi2PlanIsRefusedByRun) {
  // An ABI 2 plan starts with its bundle pointer, where ABI 3 has struct_size and abi_tag.
  abi2::fagen_plan plan = {};
  plan.bundle = bundle;
  plan.function = &plan;
  alignas(16) static char buf[64];
  static float lse[4];
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, lse, nullptr), kAbiMismatch)
      << fagen_last_error();
  EXPECT_NE(std::string(fagen_last_error()).find("fagen_run_forward: plan->struct_size is"),
            std::string::npos)
      << fagen_last_error();
}
