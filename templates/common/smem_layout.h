// fagen: the portable (sm80) templates' shared-memory layout arithmetic, in one place for the
// templates (sm80/tile_ops.cuh's SmemRow, sm80/fwd_config.cuh, bwd_config.cuh and
// decode_config.cuh) and the planner's shared-memory budget (compiler/plan/PlanSm80.cpp). Plain
// C++, host and device.
#ifndef FAGEN_TEMPLATES_COMMON_SMEM_LAYOUT_H
#define FAGEN_TEMPLATES_COMMON_SMEM_LAYOUT_H

namespace fagen {

/// The forward's rows swizzle from head dim 192 (at hd 64 and 128 the swizzle's per-lane chunk
/// offsets cost registers that its 255-register default tiles do not have, hd 128 spilled 40-64
/// bytes, nvcc 13.0).
constexpr int kFwdSwizzleFrom = 192;

/// The backward's rows swizzle from 64, varlen kernels' from 192 (their partial query tiles
/// choose between two dq_accum orders per address, and with the swizzle's lane offsets hd 128
/// spilled; sm80/bwd_config.cuh).
constexpr int bwd_swizzle_from(bool varlen) { return varlen ? 192 : 64; }

/// Whether a shared-memory row of `head_dim` (already padded to 16) 2-byte elements is
/// unpadded and swizzled: head dims that are multiples of 64, from `swizzle_from` on.
constexpr bool smem_row_swizzled(int head_dim, int swizzle_from) {
  return head_dim % 64 == 0 && head_dim >= swizzle_from;
}

/// Bytes a shared-memory row of `head_dim` (already padded to 16) 2-byte elements takes:
/// swizzled rows unpadded, others padded by 16 bytes so that ldmatrix is bank-conflict free.
constexpr int smem_row_bytes(int head_dim, int swizzle_from) {
  return smem_row_swizzled(head_dim, swizzle_from) ? head_dim * 2 : head_dim * 2 + 16;
}

/// The sm80 forward's shared memory: a Q tile, then `stages` x (K tile + V tile). The O
/// epilogue reuses the Q tile, whose rows are therefore as wide as the wider of the two. Head
/// dims already padded to 16.
constexpr int sm80_fwd_smem_bytes(int head_dim_qk, int head_dim_v, int block_m, int block_n,
                                  int stages) {
  return block_m * (smem_row_bytes(head_dim_qk, kFwdSwizzleFrom) >
                            smem_row_bytes(head_dim_v, kFwdSwizzleFrom)
                        ? smem_row_bytes(head_dim_qk, kFwdSwizzleFrom)
                        : smem_row_bytes(head_dim_v, kFwdSwizzleFrom)) +
         stages * block_n *
             (smem_row_bytes(head_dim_qk, kFwdSwizzleFrom) +
              smem_row_bytes(head_dim_v, kFwdSwizzleFrom));
}

/// The fp32 scratch at the end of the sm80 decode kernel: each warp's O rows (head_dim_v + 8
/// floats apart: 8 banks, so that a warp's fragment stores fall in distinct banks), then each
/// warp's row maxima and row sums. Head dims already padded to 16.
constexpr int sm80_decode_reduce_bytes(int head_dim_v, int block_m, int warps) {
  return warps * block_m * (head_dim_v + 8) * 4 + 2 * warps * block_m * 4;
}

/// The sm80 decode kernel's shared memory: a Q tile, then `stages` x (K tile + V tile), whose
/// space the end reuses for the warps' partial O (sm80_decode_reduce_bytes). Head dims already
/// padded to 16.
constexpr int sm80_decode_smem_bytes(int head_dim_qk, int head_dim_v, int block_m, int block_n,
                                     int stages, int warps) {
  return block_m * smem_row_bytes(head_dim_qk, kFwdSwizzleFrom) +
         (stages * block_n *
                      (smem_row_bytes(head_dim_qk, kFwdSwizzleFrom) +
                       smem_row_bytes(head_dim_v, kFwdSwizzleFrom)) >
                  sm80_decode_reduce_bytes(head_dim_v, block_m, warps)
              ? stages * block_n *
                    (smem_row_bytes(head_dim_qk, kFwdSwizzleFrom) +
                     smem_row_bytes(head_dim_v, kFwdSwizzleFrom))
              : sm80_decode_reduce_bytes(head_dim_v, block_m, warps));
}

/// Bytes of a row of the sm80 backward's P and dS tiles (block_n 2-byte elements, padded by 16).
constexpr int sm80_bwd_p_row_bytes(int block_n) { return block_n * 2 + 16; }

/// The sm80 backward's shared memory: K and V tiles, `stages` x (Q + dO tiles), and the P and
/// dS tiles in the input dtype. Head dims already padded to 16.
constexpr int sm80_bwd_smem_bytes(int head_dim_qk, int head_dim_v, int block_m, int block_n,
                                  int stages, bool varlen) {
  return block_n * (smem_row_bytes(head_dim_qk, bwd_swizzle_from(varlen)) +
                    smem_row_bytes(head_dim_v, bwd_swizzle_from(varlen))) +
         stages * block_m *
             (smem_row_bytes(head_dim_qk, bwd_swizzle_from(varlen)) +
              smem_row_bytes(head_dim_v, bwd_swizzle_from(varlen))) +
         2 * block_m * sm80_bwd_p_row_bytes(block_n);
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_SMEM_LAYOUT_H
