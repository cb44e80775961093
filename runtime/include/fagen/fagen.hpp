// fagen runtime, C++ wrapper: RAII and exceptions over the C ABI in fagen.h. Header-only.
//
//   fagen::Bundle bundle = fagen::Bundle::load("attention.fab");
//   fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT;  // then the shapes and the variant
//   fagen_fwd_problem_set_bshd_strides(&problem);
//   fagen::Plan plan = bundle.planForward(problem);   // throws fagen::Error with the reason
//   plan.run(q, k, v, o, lse, stream);
//
//   fagen::Plan backward = bundle.planBackward(problem);     // needs the do/dq/dk/dv strides
//   // workspace: backward.workspaceBytes() of device memory from the application
//   backward.runBackward(q, k, v, o, lse, dout, dq, dk, dv, workspace,
//                        backward.workspaceBytes(), nullptr, stream);
//
//   fagen_merge_problem merge = FAGEN_MERGE_PROBLEM_INIT;  // num_states, shapes, dtype, strides
//   bundle.planMergeStates(merge).runMergeStates(oStates, lseStates, o, lse, stream);
#ifndef FAGEN_RUNTIME_FAGEN_HPP
#define FAGEN_RUNTIME_FAGEN_HPP

#include "fagen/fagen.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace fagen {
// The wrapper's classes live in an inline namespace: user code names them fagen::Bundle etc.,
// while their symbols (fagen::abi3::Bundle) stay apart from the runtime's internal
// fagen::Bundle (compiler/bundle), which a program linking libfagen_rt_static.a also holds:
// with the same mangled names the linker would merge their inline functions (an ODR
// violation; ASan saw ~Bundle of the one destroy the other).
inline namespace abi3 {

/// A failed runtime call: the status and the runtime's message.
class Error : public std::runtime_error {
public:
  Error(fagen_status status, const std::string &message)
      : std::runtime_error(message), status_(status) {}
  fagen_status status() const { return status_; }

private:
  fagen_status status_;
};

/// Throws the last error of this thread unless `status` is FAGEN_OK.
inline void check(fagen_status status) {
  if (status != FAGEN_OK)
    throw Error(status, std::string(fagen_status_name(status)) + ": " + fagen_last_error());
}

/// A planned call. Valid while the Bundle it came from lives.
class Plan {
public:
  explicit Plan(const fagen_plan &plan) : plan_(plan) {}
  /// Launches the forward on `stream` (a cudaStream_t / CUstream; nullptr = default stream).
  void run(const void *q, const void *k, const void *v, void *o, float *lse,
           void *stream = nullptr) const {
    check(fagen_run_forward(&plan_, q, k, v, o, lse, stream));
  }
  /// The forward with the variant's run-time arguments (ALiBi slopes, block mask, cu_seqlens,
  /// dropout seed).
  void run(const void *q, const void *k, const void *v, void *o, float *lse,
           const fagen_run_args &args, void *stream = nullptr) const {
    check(fagen_run_forward_with_args(&plan_, q, k, v, o, lse, &args, stream));
  }
  /// The forward with a workspace of `workspaceBytes` (>= workspaceBytes()) bytes of device
  /// memory (when workspaceBytes() is above 0: a tile counter that the sm90ws kernels of uneven
  /// work tiles run faster with); `args` may be null for a dense variant.
  void run(const void *q, const void *k, const void *v, void *o, float *lse, void *workspace,
           size_t workspaceBytes, const fagen_run_args *args, void *stream = nullptr) const {
    check(fagen_run_forward_with_workspace(&plan_, q, k, v, o, lse, workspace, workspaceBytes,
                                           args, stream));
  }
  /// Launches the backward (a plan from Bundle::planBackward); `workspace` holds
  /// `workspaceBytes` (>= workspaceBytes()) bytes of device memory.
  void runBackward(const void *q, const void *k, const void *v, const void *o, const float *lse,
                   const void *dout, void *dq, void *dk, void *dv, void *workspace,
                   size_t workspaceBytes, const fagen_run_args *args = nullptr,
                   void *stream = nullptr) const {
    check(fagen_run_backward(&plan_, q, k, v, o, lse, dout, dq, dk, dv, workspace,
                             workspaceBytes, args, stream));
  }
  /// Merges attention states (a plan from Bundle::planMergeStates); `lse` may be null.
  void runMergeStates(const void *oStates, const float *lseStates, void *o, float *lse,
                      void *stream = nullptr) const {
    check(fagen_run_merge_states(&plan_, oStates, lseStates, o, lse, stream));
  }
  /// Decode over a paged KV cache (a plan from Bundle::planForwardPaged): the caches, the
  /// int32 block table and cache lengths on the device, and the plan's workspace.
  void runPaged(const void *q, const void *kCache, const void *vCache, void *o, float *lse,
                const int32_t *blockTable, const int32_t *sequsedK, void *workspace,
                size_t workspaceBytes, const fagen_run_args *args = nullptr,
                void *stream = nullptr) const {
    check(fagen_run_forward_paged(&plan_, q, kCache, vCache, o, lse, blockTable, sequsedK,
                                  workspace, workspaceBytes, args, stream));
  }
  /// runPaged with the call's new keys and values appended to the cache first (fagen.h
  /// fagen_run_forward_paged_append; `append` gives kNew's and vNew's strides).
  void runPagedAppend(const fagen_kv_append &append, const void *q, void *kCache, void *vCache,
                      const void *kNew, const void *vNew, void *o, float *lse,
                      const int32_t *blockTable, const int32_t *sequsedK, void *workspace,
                      size_t workspaceBytes, const fagen_run_args *args = nullptr,
                      void *stream = nullptr) const {
    check(fagen_run_forward_paged_append(&plan_, &append, q, kCache, vCache, kNew, vNew, o, lse,
                                         blockTable, sequsedK, workspace, workspaceBytes, args,
                                         stream));
  }
  /// A decode plan's split count instead of the planned one (1..128; fagen.h
  /// fagen_plan_set_decode_splits): then allocate workspaceBytes() anew.
  void setDecodeSplits(int numSplits) { check(fagen_plan_set_decode_splits(&plan_, numSplits)); }
  /// A decode plan's split count; 0 for another plan.
  int decodeSplits() const { return fagen_plan_decode_splits(&plan_); }
  /// After runPaged on `workspace`: synchronizes `stream`; throws fagen::Error naming the
  /// first bad block-table entry or cache length the kernel met.
  void checkPagedStatus(const void *workspace, void *stream = nullptr) const {
    check(fagen_paged_kv_status(&plan_, workspace, stream));
  }
  /// Scratch the caller allocates for the call (a forward: optional, see run with a workspace;
  /// a decode kernel's plan: the split partials, without which the call runs one split).
  size_t workspaceBytes() const { return plan_.workspace_bytes; }
  fagen_pass pass() const { return plan_.pass; }
  const fagen_plan &get() const { return plan_; }

private:
  fagen_plan plan_;
};

/// An owned, immutable bundle; movable, not copyable, shareable across threads by reference.
class Bundle {
public:
  static Bundle load(const std::string &path) {
    fagen_bundle *b = nullptr;
    check(fagen_bundle_load_file(path.c_str(), &b));
    return Bundle(b);
  }
  static Bundle fromMemory(const void *data, size_t size) {
    fagen_bundle *b = nullptr;
    check(fagen_bundle_load_memory(data, size, &b));
    return Bundle(b);
  }

  Bundle(Bundle &&other) noexcept : bundle_(std::exchange(other.bundle_, nullptr)) {}
  Bundle &operator=(Bundle &&other) noexcept {
    std::swap(bundle_, other.bundle_);
    return *this;
  }
  Bundle(const Bundle &) = delete;
  Bundle &operator=(const Bundle &) = delete;
  ~Bundle() { fagen_bundle_destroy(bundle_); }

  int kernelCount() const { return fagen_bundle_kernel_count(bundle_); }
  std::string kernelName(int index) const {
    const char *name = fagen_bundle_kernel_name(bundle_, index);
    if (name == nullptr)
      throw Error(FAGEN_ERROR_INVALID_ARGUMENT, fagen_last_error());
    return name;
  }
  Plan planForward(const fagen_fwd_problem &problem) const {
    fagen_plan plan;
    check(fagen_plan_forward(bundle_, &problem, &plan));
    return Plan(plan);
  }
  /// The backward of the forward call `problem` (its do/dq/dk/dv strides set).
  Plan planBackward(const fagen_fwd_problem &problem, bool deterministic = false) const {
    fagen_plan plan;
    check(fagen_plan_backward(bundle_, &problem, deterministic ? 1 : 0, &plan));
    return Plan(plan);
  }
  /// Decode over a paged KV cache (fagen_paged_kv); run it with Plan::runPaged.
  Plan planForwardPaged(const fagen_fwd_problem &problem, const fagen_paged_kv &paged) const {
    fagen_plan plan;
    check(fagen_plan_forward_paged(bundle_, &problem, &paged, &plan));
    return Plan(plan);
  }
  /// A merge of attention states by their LSE (a decode kernel's merge entry point).
  Plan planMergeStates(const fagen_merge_problem &problem) const {
    fagen_plan plan;
    check(fagen_plan_merge_states(bundle_, &problem, &plan));
    return Plan(plan);
  }
  const fagen_bundle *get() const { return bundle_; }

private:
  explicit Bundle(fagen_bundle *bundle) : bundle_(bundle) {}
  fagen_bundle *bundle_;
};

} // namespace abi3
} // namespace fagen

#endif // FAGEN_RUNTIME_FAGEN_HPP
