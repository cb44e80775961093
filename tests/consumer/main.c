/* A program outside the fagen tree: finds the runtime with find_package(fagen) (or
 * pkg-config), loads the bundle that fagen_add_bundle built, plans and launches the dense
 * forward. CI runs it against the fake libcuda of tests/runtime (FAGEN_LIBCUDA, FAKE_CUDA_CC=80),
 * so the launch goes nowhere; the point is that the package links and works. */
#include "fagen/fagen.h"

#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s BUNDLE\n", argv[0]);
    return 2;
  }
  if (fagen_abi_version() != FAGEN_RUNTIME_ABI_VERSION) {
    fprintf(stderr, "runtime ABI %d, header ABI %d\n", fagen_abi_version(),
            FAGEN_RUNTIME_ABI_VERSION);
    return 1;
  }
  fagen_bundle *bundle = NULL;
  if (fagen_bundle_load_file(argv[1], &bundle) != FAGEN_OK) {
    fprintf(stderr, "load: %s\n", fagen_last_error());
    return 1;
  }
  fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT;
  problem.batch = 2;
  problem.heads_q = 12;
  problem.heads_kv = 12;
  problem.seqlen_q = 300;
  problem.seqlen_k = 300;
  problem.head_dim_qk = 64;
  problem.head_dim_v = 64;
  problem.dtype = FAGEN_DTYPE_FP16;
  fagen_fwd_problem_set_bshd_strides(&problem);
  fagen_plan plan;
  fagen_status status = fagen_plan_forward(bundle, &problem, &plan);
  if (status != FAGEN_OK) {
    fprintf(stderr, "plan: %s: %s\n", fagen_status_name(status), fagen_last_error());
    fagen_bundle_destroy(bundle);
    return 1;
  }
  /* Fake device addresses, 16-byte aligned: the fake driver records the launch only. */
  void *q = (void *)(uintptr_t)0x100000, *k = (void *)(uintptr_t)0x200000;
  void *v = (void *)(uintptr_t)0x300000, *o = (void *)(uintptr_t)0x400000;
  float *lse = (float *)(uintptr_t)0x500000;
  status = fagen_run_forward(&plan, q, k, v, o, lse, NULL);
  if (status != FAGEN_OK) {
    fprintf(stderr, "run: %s: %s\n", fagen_status_name(status), fagen_last_error());
    fagen_bundle_destroy(bundle);
    return 1;
  }
  printf("consumer: ABI %d, %d kernels, ran %s\n", fagen_abi_version(),
         fagen_bundle_kernel_count(bundle), fagen_bundle_kernel_name(bundle, plan.kernel_index));
  fagen_bundle_destroy(bundle);
  return 0;
}
