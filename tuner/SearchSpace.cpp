//===- SearchSpace.cpp - what `fagen tune` measures: candidates and buckets -===//

#include "tuner/SearchSpace.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace fagen {

namespace {

/// Adds `config` to `out` unless present or refused by the planner's checks.
void addCandidate(const KernelPlan &base, const TuneConfig &config, const char *stage,
                  std::vector<Candidate> &out, unsigned &pruned) {
  for (const Candidate &c : out)
    if (c.config == config)
      return;
  llvm::Expected<KernelPlan> plan = applyConfig(base, config);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    ++pruned;
    return;
  }
  out.push_back({config, std::move(*plan), stage});
}

/// `config` as stage 1 times it: the exact softmax (tau 0, no emulation), the base's epilogue.
TuneConfig stageOnePoint(TuneConfig config, const KernelPlan &base, const SearchSpace &space) {
  config.rescaleTau = 0;
  config.exp2EmuPercent = 0;
  config.exp2PolyDegree = space.exp2PolyDegree;
  config.stagedEpilogue = base.stagedEpilogue;
  return config;
}

} // namespace

SearchSpace searchSpaceFor(const KernelPlan &base) {
  SearchSpace space;
  if (isDecodePlan(base)) {
    // The tile stays the planner's (its stages fill the shared memory of two CTAs an SM); the
    // split rule around the header's default (templates/common/decode_split.h: 1 x 4).
    space.blockM = {base.blockM};
    space.blockN = {base.blockN};
    space.warps = {base.warps};
    space.stages = {base.stages};
    space.rescaleTau = {0};
    space.exp2EmuPercent = {0};
    space.stagedEpilogue = {false};
    space.decodeCtasPerSm = {1, 2};
    space.decodeMinTiles = {1, 2, 4, 8, 16};
    return space;
  }
  if (base.pass == Pass::Backward) {
    // The grid is wider than either template takes: the planner's checks (the templates'
    // static_asserts and shared memory) prune it, so no fact is restated here.
    space.blockM = {64, 128};
    space.blockN = {64, 128};
    space.warps = {4, 8};
    space.stages = {1, 2, 3};
    space.rescaleTau = {0};
    space.exp2EmuPercent = {0};
    space.stagedEpilogue = {false};
    if (base.templ == "sm90ws") {
      space.rotateQueryWalk = {false, true};
      space.dqWriter = {false, true};
    }
    return space;
  }
  if (base.templ != "sm90ws")
    return space;
  space.blockM = {128, 192};
  space.blockN = {64, 80, 96, 112, 128, 176};
  space.warps = {8, 12};
  space.stages = {2};
  space.rescaleTau = {0, 8};
  space.exp2EmuPercent = {0, 25};
  space.stagedEpilogue = {false, true};
  return space;
}

std::vector<Candidate> tileCandidates(const KernelPlan &base, const SearchSpace &space,
                                      unsigned *pruned) {
  std::vector<Candidate> out;
  unsigned refused = 0;
  const TuneConfig exact = stageOnePoint(configOf(base), base, space);
  const char *stage = isDecodePlan(base) ? "split" : "tile";
  addCandidate(base, exact, stage, out, refused);
  refused = 0; // the default is not part of the grid's count
  for (int m : space.blockM)
    for (int n : space.blockN)
      for (int w : space.warps)
        for (int s : space.stages)
          for (bool rotate : space.rotateQueryWalk)
            for (std::optional<bool> writer : space.dqWriter)
              for (int perSm : space.decodeCtasPerSm)
                for (int minTiles : space.decodeMinTiles) {
                  TuneConfig c = exact;
                  c.blockM = m;
                  c.blockN = n;
                  c.warps = w;
                  c.stages = s;
                  c.rotateQueryWalk = rotate;
                  c.dqWriter = writer;
                  if (perSm != 0)
                    c.decodeCtasPerSm = perSm;
                  if (minTiles != 0)
                    c.decodeMinTiles = minTiles;
                  addCandidate(base, c, stage, out, refused);
                }
  if (pruned)
    *pruned = refused;
  return out;
}

std::vector<Candidate> softmaxCandidates(const KernelPlan &base, const SearchSpace &space,
                                         const std::vector<TuneConfig> &tiles,
                                         unsigned *pruned) {
  std::vector<Candidate> out;
  unsigned refused = 0;
  for (const TuneConfig &tile : tiles)
    for (int tau : space.rescaleTau)
      for (int emu : space.exp2EmuPercent)
        for (bool staged : space.stagedEpilogue) {
          TuneConfig c = tile;
          c.rescaleTau = tau;
          c.exp2EmuPercent = emu;
          c.exp2PolyDegree = space.exp2PolyDegree;
          c.stagedEpilogue = staged;
          if (c == stageOnePoint(tile, base, space))
            continue; // measured in stage 1
          addCandidate(base, c, "softmax", out, refused);
        }
  // The planner's own config, whatever tiles won stage 1: the tuner's "default" column and its
  // speed-up are measured against it, and a winner is never one that lost to it. Stage 1 ran
  // it only where it is its own stage-1 point (tau 0, no emulation).
  const TuneConfig own = configOf(base);
  if (own != stageOnePoint(own, base, space))
    addCandidate(base, own, "softmax", out, refused);
  if (pruned)
    *pruned = refused;
  return out;
}

std::vector<TuneConfig> bestTiles(const std::vector<const TuningRecord *> &records, unsigned n) {
  std::vector<const TuningRecord *> ok;
  for (const TuningRecord *r : records)
    if (r->status == RecordStatus::Ok && r->timings)
      ok.push_back(r);
  std::stable_sort(ok.begin(), ok.end(), [](const TuningRecord *a, const TuningRecord *b) {
    return a->timings->medianMs < b->timings->medianMs;
  });
  std::vector<TuneConfig> tiles;
  for (const TuningRecord *r : ok) {
    TuneConfig t = r->config;
    t.rescaleTau = 0;
    t.exp2EmuPercent = 0;
    t.stagedEpilogue = false;
    if (std::find(tiles.begin(), tiles.end(), t) != tiles.end())
      continue;
    if (tiles.size() == n)
      break;
    tiles.push_back(t);
  }
  return tiles;
}

const std::vector<int> &defaultBucketSeqlens() {
  static const std::vector<int> seqlens = {512, 2048, 8192};
  return seqlens;
}

std::vector<ShapeBucket> makeBuckets(std::vector<int> seqlens, int headDim, int groupSize) {
  std::sort(seqlens.begin(), seqlens.end());
  seqlens.erase(std::unique(seqlens.begin(), seqlens.end()), seqlens.end());
  std::vector<ShapeBucket> out;
  for (size_t i = 0; i < seqlens.size(); ++i) {
    int s = seqlens[i];
    ShapeBucket b;
    b.name = "s" + std::to_string(s);
    b.seqlenMin = i == 0 ? 1 : out.back().seqlenMax + 1;
    b.seqlenMax = i + 1 == seqlens.size()
                      ? kSeqlenUnbounded
                      : int64_t(std::floor(std::sqrt(double(s) * double(seqlens[i + 1]))));
    b.batch = std::max(1, 16384 / s);
    b.headsQ = std::max(1, 2048 / headDim);
    int group = std::max(1, groupSize);
    b.headsKV = b.headsQ % group == 0 ? std::max(1, b.headsQ / group) : b.headsQ;
    b.seqlenQ = s;
    b.seqlenK = s;
    out.push_back(b);
  }
  return out;
}

std::vector<ShapeBucket> decodeBuckets(std::vector<int> contexts, int groupSize) {
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  std::vector<ShapeBucket> out;
  for (int batch : {1, 4, 16})
    for (int context : contexts) {
      ShapeBucket b;
      b.name = "b" + std::to_string(batch) + "k" + std::to_string(context);
      b.seqlenMin = 1;
      b.seqlenMax = kSeqlenUnbounded;
      b.batch = batch;
      b.headsKV = 8;
      b.headsQ = 8 * std::max(1, groupSize);
      b.seqlenQ = 1;
      b.seqlenK = context;
      out.push_back(b);
    }
  return out;
}

const std::vector<int> &defaultDecodeContexts() {
  static const std::vector<int> contexts = {2048, 16384, 65536};
  return contexts;
}

llvm::Expected<std::vector<int>> parseSeqlenList(const std::string &text,
                                                 const std::string &option,
                                                 const std::string &example) {
  std::vector<int> out;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::StringRef(text).split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    int value = 0;
    if (part.trim().getAsInteger(10, value) || value < 1 || value > (1 << 20))
      return llvm::createStringError(std::errc::invalid_argument,
                                     "%s: '%s' is not a sequence length in 1..1048576 "
                                     "(expected a list like %s)",
                                     option.c_str(), part.str().c_str(), example.c_str());
    out.push_back(value);
  }
  if (out.empty())
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s needs at least one sequence length, e.g. %s",
                                   option.c_str(), example.c_str());
  return out;
}

int groupSizeOf(const KernelPlan &plan, const AttentionSpec &spec) {
  llvm::SmallVector<llvm::StringRef, 4> names;
  llvm::StringRef(plan.variant).split(names, ',');
  for (llvm::StringRef name : names)
    for (const VariantSpec &v : spec.variants)
      if (v.name == name && v.headsQ > 0 && v.headsKV > 0)
        return v.headsQ / v.headsKV;
  return 1;
}

double forwardFlops(const ShapeBucket &b, int headDim, bool causal) {
  double flops = 4.0 * b.batch * b.headsQ * double(b.seqlenQ) * double(b.seqlenK) * headDim;
  return causal ? flops / 2 : flops;
}

double passFlops(Pass pass, const ShapeBucket &b, int headDim, bool causal) {
  double flops = forwardFlops(b, headDim, causal);
  return pass == Pass::Backward ? 2.5 * flops : flops;
}

} // namespace fagen
