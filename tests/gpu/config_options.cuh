// fagen GPU harnesses: positional spellings of the template configs' options structs, so that a
// harness macro instantiates a kernel in one line. Generated kernels spell a KernelOptions
// struct instead (compiler/emit/Emit.cpp). Include after the template headers; each spelling exists
// where its config's header was included.
#ifndef FAGEN_TESTS_GPU_CONFIG_OPTIONS_CUH
#define FAGEN_TESTS_GPU_CONFIG_OPTIONS_CUH

namespace harness {

#ifdef FAGEN_TEMPLATES_SM80_FWD_CONFIG_CUH
template <class El, int HQK, int HV, int BM, int BN, int W, int S, class V, int Tau = 0,
          int Emu = 0, int Deg = 3>
struct Sm80Fwd : fagen::sm80::FwdOptions {
  using Element = El;
  using Variant = V;
  static constexpr int kHeadDimQK = HQK, kHeadDimV = HV, kBlockM = BM, kBlockN = BN, kWarps = W,
                       kStages = S, kRescaleTau = Tau, kExp2EmuPercent = Emu,
                       kExp2PolyDegree = Deg;
};
#endif

#ifdef FAGEN_TEMPLATES_SM80_BWD_CONFIG_CUH
template <class El, int HQK, int HV, int BM, int BN, int W, int S, class V, bool Det>
struct Sm80Bwd : fagen::sm80::BwdOptions {
  using Element = El;
  using Variant = V;
  static constexpr int kHeadDimQK = HQK, kHeadDimV = HV, kBlockM = BM, kBlockN = BN, kWarps = W,
                       kStages = S;
  static constexpr bool kDeterministic = Det;
};
#endif

#ifdef FAGEN_TEMPLATES_SM90_BWD_WS_CONFIG_CUH
template <class El, int HD, int BM, int BN, int S, class V, bool Det = false>
struct Sm90WsBwd : fagen::sm90::WsBwdOptions {
  using Element = El;
  using Variant = V;
  static constexpr int kHeadDimQK = HD, kHeadDimV = HD, kBlockM = BM, kBlockN = BN, kStages = S;
  static constexpr bool kDeterministic = Det;
  static constexpr bool kRotateQueryWalk = fagen::ws_bwd_rotates_query_walk(HD, Det);
  static constexpr bool kDqWriter = fagen::ws_bwd_dq_writer(
      HD, Det, fagen::VariantParts<V>::ScoreMod::kIdentity, V::kVarlen,
      std::is_same<typename V::Mask, fagen::NoMask>::value || V::Mask::kCausal,
      V::Sparsity::kSparse);
};
#endif

#ifdef FAGEN_TEMPLATES_SM90_FWD_CONFIG_CUH
template <class El, int HD, int BM, int BN, int S, class V, int Emu = 0, int Deg = 3,
          bool Refill = (HD == 256)>
struct Sm90Fwd : fagen::sm90::FwdOptions {
  using Element = El;
  using Variant = V;
  static constexpr int kHeadDim = HD, kBlockM = BM, kBlockN = BN, kStages = S,
                       kExp2EmuPercent = Emu, kExp2PolyDegree = Deg;
  static constexpr bool kRefillAfterIssue = Refill;
};

template <class El, int HQK, int HV, int BM, int BN, int S, class V, bool PingPong, int Emu = 0,
          int Deg = 3, bool Staged = false, int Tau = 0, bool Counter = false,
          bool TmaStoreO = false, bool Stagger = true>
struct Sm90WsFwd : fagen::sm90::WsFwdOptions {
  using Element = El;
  using Variant = V;
  static constexpr int kHeadDimQK = HQK, kHeadDimV = HV, kBlockM = BM, kBlockN = BN, kStages = S,
                       kExp2EmuPercent = Emu, kExp2PolyDegree = Deg, kRescaleTau = Tau;
  static constexpr bool kPingPong = PingPong, kStagedEpilogue = Staged, kTileCounter = Counter,
                        kTmaStoreO = TmaStoreO, kStaggerSlack = Stagger;
};
#endif

} // namespace harness

#endif // FAGEN_TESTS_GPU_CONFIG_OPTIONS_CUH
