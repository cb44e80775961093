// fagen sm90: the compile-time configuration of the warp-specialized backward (bwd_ws_kernel.cuh).
//
// One CTA per key tile of kBlockN keys (FlashAttention-3's backward): a producer warpgroup
// loads K and V once and then Q, dO, LSE and D of each query tile of kBlockM rows into a ring
// of kStages slots (in tiles of 256 columns dO into a ring of its own, kDoStages); kBlockN / 64
// consumer warpgroups each own 64 keys and keep their dK and dV in registers over every query
// tile (and every query head of a GQA group). S and dP are computed transposed (S^T = K Q^T,
// dP^T = V dO^T: rows are keys), so that P^T and dS^T come out of the accumulators in the
// A-operand layout of dV += P^T dO and dK += dS^T Q. dQ = dS K
// reads dS^T from shared memory: the (kBlockM, head dim) dQ tile is split into 64 x 64
// sub-blocks, one per consumer warpgroup, added to dq_accum by one bulk reduction each.
#ifndef FAGEN_TEMPLATES_SM90_BWD_WS_CONFIG_CUH
#define FAGEN_TEMPLATES_SM90_BWD_WS_CONFIG_CUH

#include <type_traits>

#include "abi/bwd_params.h"
#include "common/variants.cuh"
#include "common/ws_bwd_layout.h"
#include "common/ws_registers.h"

namespace fagen {
namespace sm90 {

/// Options: a struct (the generated kernel's KernelOptions) that derives from WsBwdOptions and
/// sets Element, Variant, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kStages, kRotateQueryWalk
/// and kDqWriter (the plan's; ws_bwd_rotates_query_walk and ws_bwd_dq_writer are the
/// defaults).
struct WsBwdOptions {
  static constexpr bool kDeterministic = false;
};

template <class Options> struct WsBwdConfig : VariantParts<typename Options::Variant> {
  using Variant = typename Options::Variant;
  using Element = typename Options::Element;
  static constexpr int kHeadDimQK = Options::kHeadDimQK;
  static constexpr int kHeadDimV = Options::kHeadDimV;
  /// The tiles' head dim (ws_bwd_dim: hd 96 in 128 columns, hd 192 and 192/128 in 256), Q, K,
  /// V and dO alike; dK and dQ store the first kHeadDimQK columns, dV the first kHeadDimV.
  static constexpr int kDim = ws_bwd_dim(kHeadDimQK);
  static constexpr int kDqAccumCols = kDim;
  /// The 64-column blocks of Q and K (kQkBlocks) and of V and dO (kVBlocks) that hold real
  /// columns (ws_bwd_real_blocks): TMA loads those, and every GEMM runs over those only; the
  /// blocks past them up to kDim / 64 (hd 192: one; V and dO of 192/128: two) are zeroed once
  /// at the start (bwd_ws_zero_padding).
  static constexpr int kQkBlocks = ws_bwd_real_blocks(kHeadDimQK);
  static constexpr int kVBlocks = ws_bwd_real_blocks(kHeadDimV);
  static constexpr bool kPaddingBlocks = kQkBlocks < kDim / 64 || kVBlocks < kDim / 64;
  static constexpr int kBlockM = Options::kBlockM;
  static constexpr int kBlockN = Options::kBlockN;
  static constexpr int kStages = Options::kStages;
  /// dO's slots (ws_bwd_do_stages): kStages, or in tiles of 256 columns one slot in a ring of
  /// its own (kSeparateDo: dO full / empty barriers apart from Q's), so that two Q slots fit.
  static constexpr int kDoStages = ws_bwd_do_stages(kDim, kStages);
  static constexpr bool kSeparateDo = kDoStages != kStages;
  /// Deterministic (bitwise-repeatable dQ): a query tile's dQ blocks go into dq_accum in one
  /// order of the key tiles, descending (sm80::dq_rank's order without kDqAscending), ordered
  /// by dq_semaphore (one count a key tile). The grid dispatches the key tiles last first, so a
  /// CTA waits only for CTAs dispatched before it. Each key tile walks its query tiles first
  /// first from the mask's first one, which grows with the key tile under causal masks (and
  /// windows bounded on the right), so key tile n + 1 reaches a query tile before key tile n:
  /// the order is the order of arrival. Without such a mask every key tile starts at query
  /// tile 0 and key tile n's first addition waits for the chain of those before it
  /// (FlashAttention-3's orders: causal descending, non-causal ascending). A warp of the
  /// producer warpgroup (the dQ writer) waits for the turn and adds both consumers' blocks, so
  /// the consumer warpgroups never wait for the semaphore or the addition, only for their
  /// staging block (bwd_ws_kernel.cuh, bwd_ws_write_dq).
  static constexpr bool kDeterministic = Options::kDeterministic;
  static constexpr bool kDqAscending = false;
  /// The grid interleaves the key tiles of 2^tile_group_log2 kv heads (abi/bwd_params.h,
  /// fagen_bwd_ws_groups_kv_heads: causal masks, not deterministic).
  static constexpr bool kGroupedGrid =
      fagen_bwd_ws_groups_kv_heads(Variant::Mask::kCausal, kDeterministic);
  /// A variant with a mask (causal, window): its tiles by the diagonal or the window's edges
  /// test it.
  static constexpr bool kMasked = !std::is_same<typename Variant::Mask, NoMask>::value;
  /// Without a mask or block sparsity, key tile n adds into dq_accum copy n % kDqSlots, the
  /// first of each copy's order storing (bwd_params.h): two chains a query tile, each half as
  /// long.
  static constexpr bool kUnmaskedDense = !kMasked && !Variant::Sparsity::kSparse;
  static constexpr int kDqSlots = fagen_bwd_dq_slots(kDeterministic, kUnmaskedDense);
  static constexpr bool kDqStoreFirst = kDeterministic && kUnmaskedDense;
  /// What sm80::bwd_preprocess (this template's _pre) reads: the whole kBlockM-row block of a
  /// query tile (dq_accum_offset spreads a tile's rows over it), zeroed unless kDqStoreFirst.
  static __device__ __forceinline__ bool dq_fragment_order(bool) { return true; }
  /// Each query tile owns a whole kBlockM-row block of dq_accum, padding rows included (the
  /// bulk reductions add whole 64 x 64 sub-blocks): varlen sequences start at
  /// fagen_bwd_dq_tile_row0 (abi/bwd_params.h), which the runtime sizes for.
  static constexpr bool kDqWholeTiles = true;

  /// A warp of the producer warpgroup adds the consumers' staged dQ blocks to dq_accum (bulk
  /// reductions; bwd_ws_write_dq), so that a consumer only stages its block; else each
  /// consumer adds its own (the plan's dQ strategy; ws_bwd_dq_writer, the default, says where
  /// each measured faster).
  static constexpr bool kDqWriter = Options::kDqWriter;
  static_assert(kDqWriter || !kDeterministic,
                "the deterministic mode's dQ order is the dQ writer's: kDqWriter must be true");
  /// kDqWriter kernels at hd 96 / 128: dK += dS^T Q issued after the dQ block, so that the
  /// tensor cores compute it while the block is staged (FlashAttention-3's order), with
  /// kOverlapP (ws_bwd_dq_writer's figures are with it). H100, bf16, 2k-16k, harness A/B of
  /// three rounds in one call, deterministic: causal 0.81-0.85x the time (the other order's
  /// causal kernel had its wgmma serialized by ptxas for want of registers, C7512),
  /// non-causal 0.88-0.94x (the other order: 0.82-0.95x). With the consumers adding their own
  /// dQ blocks it was slower: hd 128 causal 1.06-1.09x the time, hd 64 0.98-1.03x, and hd 64
  /// dropout spilled. (The fp16 causal dropout + block-sparse deterministic kernel spills 56
  /// bytes with it, 120 without; nvcc 13.0.)
  static constexpr bool kDqBeforeDk = kDqWriter && kDim == 128;
  /// Head dim 64, and kDqBeforeDk kernels, only (H100, bf16, 2k-16k, one process, two rounds
  /// each; docs/perf/sm90-bwd.md):
  /// P^T computed while dP^T is still in the tensor cores (kOverlapP), and each key tile's walk
  /// over the query tiles started at a different tile (kRotateQueryWalk, bwd_ws_kernel.cuh's
  /// WsQueryWalk), together: hd 64 +1-4 % at every length, causal or not; hd 128 -1-6 %. The
  /// walk is the plan's (common/ws_bwd_layout.h has its default), so that the tuner tries both.
  static constexpr bool kOverlapP = kDim == 64 || kDqBeforeDk;
  /// Tiles of 256 columns (kSplitS) under a mask: both dQ blocks issued with dV and dK (the second
  /// computed while the first is staged and added). H100, same A/B: causal 0.95-0.96x the
  /// time, deterministic 0.94-0.98x; without a mask 1.02-1.07x (not kept there).
  static constexpr bool kIssueDqAtOnce = kMasked;
  static constexpr bool kRotateQueryWalk = Options::kRotateQueryWalk;
  /// Under a mask, a query tile's work in two copies, with the mask (the tiles that need it,
  /// or lie past seqlen_k) and without it (bwd_ws_consume; bwd_ws_consume_split: P^T and dS^T
  /// only): with one copy ptxas predicates the test of the mask inside the loop, so every tile
  /// ran its comparisons (ncu, H100, hd 64 causal 16k: 1.55x the instructions a tile of the
  /// unmasked kernel ran). H100, bf16, 2k-16k, harness A/B of three rounds in one call, time
  /// against one copy: hd 64 causal 0.83-0.85x, hd 128 causal 0.73-0.89x, hd 128 causal
  /// dropout 0.93-1.09x, hd 256 causal 0.97-1.02x; without a mask (only the last key tile
  /// needs one) hd 64 1.01-1.04x, so not there. Not with a score mod, nor with dropout in the
  /// deterministic mode: there the two copies spilled (12-80 bytes over those and dropout at hd
  /// 64, nvcc 13.0, with the keep flags before dropout_keep_bits_transposed's byte permutes).
  /// Dropout at hd 64 has them since those flags (12 bytes spilled before, none now): H100,
  /// harness A/B of two rounds, hd 64 causal dropout 0.72-0.74x the time (2k-16k).
  static constexpr bool kMaskedTileCopy =
      kMasked && VariantParts<Variant>::ScoreMod::kIdentity &&
      !(Variant::Dropout::kEnabled && kDeterministic);
  static_assert(!(kRotateQueryWalk && kDeterministic),
                "kRotateQueryWalk: the deterministic mode's dQ order needs every key tile to walk "
                "its query tiles from the first");

  /// Tiles of 256 columns (ws_bwd_split_s; head dims 192 and 256): both consumer warpgroups hold
  /// all kBlockN = 64 keys; each computes S^T and dP^T for half the query columns (kSCols),
  /// writes its P^T and dS^T halves to shared memory, and accumulates half the dK / dV columns
  /// (kKvCols) from the whole tiles.
  static constexpr bool kSplitS = ws_bwd_split_s(kDim);
  static constexpr int kSCols = kSplitS ? kBlockM / 2 : kBlockM;
  static constexpr int kKvCols = kSplitS ? kDim / 2 : kDim;
  static constexpr int kConsumers = ws_bwd_consumers(kDim, kBlockN);
  static constexpr int kThreads = 128 * (kConsumers + 1);
  /// kDqWriter kernels: named barriers between consumer warpgroup c and the dQ writer warp
  /// (128 + 32 threads): its staging block full (kDqFullBarrier + c) and free again
  /// (kDqEmptyBarrier + c). (1 is the consumers' dS^T barrier, 2 + c a consumer's own.)
  static constexpr int kDqFullBarrier = 2 + kConsumers;
  static constexpr int kDqEmptyBarrier = kDqFullBarrier + kConsumers;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kPrePostThreads = 256;
  // Registers a thread after setmaxnreg (common/ws_registers.h): the forward's split, or one
  // with room for the dQ writer warp.
  static constexpr int kProducerRegs = ws_bwd_producer_registers(kDqWriter);
  static constexpr int kConsumerRegs = ws_bwd_consumer_registers(kDqWriter);
  static_assert(kConsumers == 2 && ws_split_fits(kConsumers, kProducerRegs, kConsumerRegs),
                "the warpgroups' registers after setmaxnreg exceed what the CTA was launched "
                "with (common/ws_registers.h)");

  /// dQ sub-blocks of 64 x 64: consumer c owns rows 64 (c % kRowBlocks) .., columns
  /// 64 (c / kRowBlocks) .. of the query tile's dQ; with kSplitS the kDqBlocks = 2 sub-blocks
  /// of its dK / dV columns.
  static constexpr int kRowBlocks = kBlockM / 64;
  static constexpr int kDqBlocks = kSplitS ? kKvCols / 64 : 1;
  /// Head dim 192 (and 192/128) in 256 columns: the second consumer's second dQ block lies past
  /// the head dim and is neither computed nor added (nor zeroed where the first key tile stores,
  /// kDqStoreFirst), and _post does not read it.
  static constexpr bool kDqPadBlock = kSplitS && kQkBlocks < kConsumers * kDqBlocks;
  static_assert(!kDqPadBlock || kQkBlocks == 3, "one dQ block of padding (hd 192)");
  /// Whether consumer c's dQ block b holds real columns.
  static __device__ __forceinline__ bool dq_block_real(int c, int b) {
    return !kDqPadBlock || c * kDqBlocks + b < kQkBlocks;
  }
  static constexpr int kSubBlockFloats = 64 * 64;
  /// Where dQ element (row, col) of a query tile lies in its block of dq_accum
  /// (common/ws_bwd_layout.h); bwd_ws_postprocess reads the block back by its inverse
  /// (ws_bwd_dq_accum_row / _col).
  static __host__ __device__ constexpr int dq_accum_offset(int row, int col) {
    return ws_bwd_dq_accum_offset(row, col, kBlockM);
  }

  // Shared memory (common/ws_bwd_layout.h, which the planner's budget reads too).
  static constexpr WsBwdLayout kLayout{kDim, kBlockM, kBlockN, kStages};
  static constexpr int kSmemKBytes = kLayout.k_bytes, kSmemQBytes = kLayout.q_bytes;
  static constexpr int kSmemDsBytes = kLayout.ds_bytes, kSmemDqBytes = kLayout.dq_bytes;
  static constexpr int kSmemStatsBytes = kLayout.stats_bytes;
  static constexpr int kVOffset = kLayout.v, kQOffset = kLayout.q, kDoOffset = kLayout.dout;
  static constexpr int kDsOffset = kLayout.ds, kPtOffset = kLayout.pt, kDqOffset = kLayout.dq;
  static constexpr int kStatsOffset = kLayout.stats, kBarrierOffset = kLayout.barriers;
  static constexpr int kSmemBytes = kLayout.bytes;
  static_assert(kSmemDqBytes == kSubBlockFloats * 4, "a dQ staging block holds one sub-block");

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static_assert((kHeadDimQK == kHeadDimV &&
                 (kHeadDimQK == 64 || kHeadDimQK == 96 || kHeadDimQK == 128 ||
                  kHeadDimQK == 192 || kHeadDimQK == 256)) ||
                    (kHeadDimQK == 192 && kHeadDimV == 128),
                "the sm90 backward serves head dims 64, 96, 128, 192 and 256 (Q/K and V equal), "
                "and 192/128");
  static_assert(kSplitS || kBlockN == 128,
                "kBlockN must be 128 (two consumer warpgroups of 64 keys)");
  static_assert(kSplitS || kBlockM == 64 || kBlockM == 128,
                "kBlockM must be 64 or 128 (the wgmma N of S^T)");
  static_assert(kSplitS || kRowBlocks * (kDim / 64) == kConsumers,
                "one 64 x 64 dQ sub-block per consumer warpgroup: kBlockM x head dim must be "
                "64 x 128 or 128 x 64");
  static_assert(!kSplitS || (kBlockN == 64 && kBlockM == 64),
                "tiles of 256 columns: kBlockN and kBlockM must be 64 (two consumer warpgroups "
                "splitting S^T by query columns)");
  static_assert(kStages >= 1 && kStages <= 3, "kStages must be in [1, 3]");
  static_assert(kDqEmptyBarrier + kConsumers <= 16, "named barriers 1..15");
  static_assert(kSmemBytes <= 227 * 1024, "kSmemBytes exceeds 227 KB: lower kStages");
  static_assert(SparseTilesCheck<typename Variant::Sparsity, kBlockM, kBlockN>::kOk, "");
};

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_CONFIG_CUH
