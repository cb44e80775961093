// fagen: how the sm90ws forward splits its registers between the producer warpgroup and the
// consumer warpgroups (setmaxnreg), in one place for the template (sm90/fwd_config.cuh) and the
// planner's accumulator budget (compiler/plan/PlanSm90.cpp, sm90ConfigProblem). Plain C++, host and
// device.
#ifndef FAGEN_TEMPLATES_COMMON_WS_REGISTERS_H
#define FAGEN_TEMPLATES_COMMON_WS_REGISTERS_H

namespace fagen {

/// Registers a thread after setmaxnreg, 64 K per SM for one CTA: 2 consumer warpgroups 24 +
/// 2 x 240 (x 128 threads), 3 consumers 32 + 3 x 160, FlashAttention-3's split. Varlen with 2
/// consumers: 32 + 2 x 232, since the producer's row arithmetic (cu_seqlens) spilled 8 bytes at
/// 24 around its Q load (hd 128 causal varlen, nvcc 13.0). A paged cache's gather (every
/// producer thread, sm90/ws_paged_kv.cuh) with 2 consumers: 56 + 2 x 216; its tile walk spilled
/// 8 bytes at 48 + 2 x 224, 24-36 at 40 + 2 x 232 and 140-232 at 32 (hd 128 causal, 16- and
/// 128-token pages, nvcc 13.0); 216 leave S + O + P 184 (hd 256: 64-key tiles). With 3
/// consumers it would keep 32 (spilled 100 bytes at hd 64): the planner gives paged kernels 2.
constexpr int ws_producer_registers(int consumers, bool varlen, bool paged = false) {
  return consumers == 2 && paged ? 56 : consumers == 2 && !varlen ? 24 : 32;
}
constexpr int ws_consumer_registers(int consumers, bool varlen, bool paged = false) {
  return consumers == 2 ? (paged ? 216 : varlen ? 232 : 240) : 160;
}
/// The backward's split (sm90/bwd_ws_config.cuh, 2 consumer warpgroups): 24 + 2 x 240, or
/// 40 + 2 x 232 where a warp of the producer warpgroup is the deterministic kernels' dQ writer,
/// whose rank and semaphore arithmetic spilled 16-36 bytes at 32 (block-sparse, nvcc 13.0).
constexpr int ws_bwd_producer_registers(bool dq_writer) { return dq_writer ? 40 : 24; }
constexpr int ws_bwd_consumer_registers(bool dq_writer) { return dq_writer ? 232 : 240; }
/// Whether a split of `producer` + consumers x `consumer` registers a thread fits what a CTA of
/// a producer and `consumers` consumer warpgroups gets at launch: each thread a 64 K register
/// file's share, rounded down to 8. setmaxnreg only moves registers within that; asking for
/// more makes setmaxnreg.inc wait forever (an experiment with 64 + 2 x 224 over 384 x 168 hung
/// on the H200).
constexpr bool ws_split_fits(int consumers, int producer, int consumer) {
  return 128 * (producer + consumers * consumer) <=
         128 * (consumers + 1) * ((65536 / (128 * (consumers + 1))) / 8 * 8);
}
constexpr bool ws_registers_fit(int consumers, bool varlen, bool paged = false) {
  return ws_split_fits(consumers, ws_producer_registers(consumers, varlen, paged),
                       ws_consumer_registers(consumers, varlen, paged));
}
/// What a consumer thread has for its S, O and P accumulators: its share less 32 for addresses,
/// the softmax's state and loop variables.
constexpr int ws_accumulator_registers(int consumers, bool varlen, bool paged = false) {
  return ws_consumer_registers(consumers, varlen, paged) - 32;
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_WS_REGISTERS_H
