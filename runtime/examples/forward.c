/* The fagen runtime from C: load a bundle, plan a causal bf16 forward, run it on a stream.
 *
 *   cc forward.c -I runtime/include -L build -lfagen_rt -lcuda -o forward
 *   ./forward attn.fab
 *
 * Device buffers come from the application (here cuMemAlloc from the driver API, declared
 * below so that this example needs no CUDA headers). Without a GPU it stops at the plan with
 * the runtime's message, which is what CI checks. */
#include "fagen/fagen.h"

#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s BUNDLE\n", argv[0]);
    return 2;
  }
  fagen_bundle *bundle = NULL;
  if (fagen_bundle_load_file(argv[1], &bundle) != FAGEN_OK) {
    fprintf(stderr, "load: %s\n", fagen_last_error());
    return 1;
  }
  printf("%s: %d kernels\n", argv[1], fagen_bundle_kernel_count(bundle));

  fagen_fwd_problem problem = FAGEN_FWD_PROBLEM_INIT; /* struct_size and abi_tag, rest 0 */
  problem.batch = 2;
  problem.heads_q = 32;
  problem.heads_kv = 8; /* GQA 4:1 */
  problem.seqlen_q = 1000;
  problem.seqlen_k = 1000;
  problem.head_dim_qk = 128;
  problem.head_dim_v = 128;
  problem.dtype = FAGEN_DTYPE_BF16;
  problem.causal = 1;
  problem.softmax_scale = 0; /* 1/sqrt(head_dim) */
  fagen_fwd_problem_set_bshd_strides(&problem);

  fagen_plan plan;
  fagen_status status = fagen_plan_forward(bundle, &problem, &plan);
  if (status != FAGEN_OK) {
    fprintf(stderr, "plan: %s: %s\n", fagen_status_name(status), fagen_last_error());
    fagen_bundle_destroy(bundle);
    return status == FAGEN_ERROR_NO_DRIVER ? 3 : 1;
  }
  printf("kernel %s, grid %d x %d x %d\n", fagen_bundle_kernel_name(bundle, plan.kernel_index),
         plan.grid[0], plan.grid[1], plan.grid[2]);
  /* With device pointers q, k, v, o (bf16) and lse (float) from the application:
   *   fagen_run_forward(&plan, q, k, v, o, lse, stream);   -- no allocation, no sync
   *
   * A plan with plan.workspace_bytes > 0 (a sm90ws kernel of uneven tiles: causal, window,
   * varlen) runs faster with that much scratch, a tile counter the runtime zeroes itself:
   *   fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, fwd_workspace,
   *                                    plan.workspace_bytes, NULL, stream);
   *
   * Other variants set more fields of the problem (a zero field keeps the default), e.g. a
   * sliding window with dropout, whose seed the run-time arguments carry:
   *   problem.causal = 0; problem.mask = FAGEN_MASK_WINDOW;
   *   problem.window_left = 256; problem.window_right = 0; problem.dropout_p = 0.1f;
   *   fagen_run_args args = FAGEN_RUN_ARGS_INIT;
   *   args.dropout_seed = seed; args.dropout_offset = step;
   *   fagen_run_forward_with_args(&plan, q, k, v, o, lse, &args, stream);
   *
   * The backward (a bundle built with passes: [fwd, bwd]) repeats the forward's problem, whose
   * do/dq/dk/dv strides the stride helper filled, and takes a caller-allocated workspace:
   *   fagen_plan backward;
   *   fagen_plan_backward(bundle, &problem, 0, &backward);    -- 1: deterministic gradients
   *   cuMemAlloc(&workspace, backward.workspace_bytes);
   *   fagen_run_backward(&backward, q, k, v, o, lse, dout, dq, dk, dv, workspace,
   *                      backward.workspace_bytes, &args, stream);  -- three kernels, no sync
   * A workspace belongs to one stream at a time. */
  fagen_bundle_destroy(bundle);
  return 0;
}
