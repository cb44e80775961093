//===- Report.cpp - the tuner's summary table and SVG plot ----------------===//

#include "tuner/Report.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

namespace fagen {

std::vector<TuningRecord> latestRecords(const std::vector<TuningRecord> &records) {
  std::vector<TuningRecord> out;
  std::map<std::tuple<std::string, std::string, TuneConfig>, size_t> index;
  for (const TuningRecord &r : records) {
    auto key = std::make_tuple(r.workload, r.bucket.name, r.config);
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(key, out.size());
      out.push_back(r);
    } else {
      out[it->second] = r;
    }
  }
  return out;
}

namespace {

/// Records grouped by workload, then bucket (buckets ordered by their seqlen range).
struct Grouped {
  std::vector<std::string> workloads;
  std::vector<ShapeBucket> buckets;
  std::map<std::pair<std::string, std::string>, std::vector<const TuningRecord *>> cells;
};

Grouped group(const std::vector<TuningRecord> &records) {
  Grouped g;
  std::set<std::string> workloads, bucketNames;
  for (const TuningRecord &r : records) {
    workloads.insert(r.workload);
    if (bucketNames.insert(r.bucket.name).second)
      g.buckets.push_back(r.bucket);
    g.cells[{r.workload, r.bucket.name}].push_back(&r);
  }
  g.workloads.assign(workloads.begin(), workloads.end());
  std::stable_sort(g.buckets.begin(), g.buckets.end(),
                   [](const ShapeBucket &a, const ShapeBucket &b) {
                     return a.seqlenMin < b.seqlenMin;
                   });
  return g;
}

const TuningRecord *fastest(const std::vector<const TuningRecord *> &cell) {
  const TuningRecord *best = nullptr;
  for (const TuningRecord *r : cell)
    if (r->status == RecordStatus::Ok && r->timings &&
        (!best || r->timings->medianMs < best->timings->medianMs))
      best = r;
  return best;
}

std::string rangeText(const ShapeBucket &b) {
  if (b.seqlenMax >= kSeqlenUnbounded)
    return llvm::formatv("{0}..", b.seqlenMin).str();
  return llvm::formatv("{0}..{1}", b.seqlenMin, b.seqlenMax).str();
}

std::string xmlEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    case '\'': out += "&apos;"; break;
    default: out += c;
    }
  }
  return out;
}

/// A round axis step giving about five ticks up to `max`.
double tickStep(double max) {
  double raw = std::max(max, 1.0) / 5;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p)
      return m * p;
  return 10 * p;
}

} // namespace

std::string formatSummary(const std::vector<TuningRecord> &records,
                          const std::map<std::string, TuneConfig> &defaults) {
  std::vector<TuningRecord> latest = latestRecords(records);
  Grouped g = group(latest);
  std::string out = llvm::formatv("{0,-36} {1,-9} {2,-14} {3,9}  {4,-26} {5,9} {6,7}  {7}\n",
                                  "workload", "bucket", "seqlens", "default", "winner",
                                  "TFLOP/s", "speedup", "candidates ok/all")
                        .str();
  for (const std::string &w : g.workloads)
    for (const ShapeBucket &b : g.buckets) {
      auto cell = g.cells.find({w, b.name});
      if (cell == g.cells.end())
        continue;
      const TuningRecord *best = fastest(cell->second);
      const TuningRecord *def = nullptr;
      unsigned ok = 0;
      for (const TuningRecord *r : cell->second) {
        ok += r->status == RecordStatus::Ok;
        auto d = defaults.find(w);
        if (d != defaults.end() && r->config == d->second && r->status == RecordStatus::Ok)
          def = r;
      }
      std::string defText = def ? llvm::formatv("{0:f1}", def->timings->tflops).str() : "-";
      std::string winText = best ? best->config.text() : "(none passed)";
      std::string bestText = best ? llvm::formatv("{0:f1}", best->timings->tflops).str() : "-";
      std::string ratio = best && def ? llvm::formatv("{0:f2}x", def->timings->medianMs /
                                                                     best->timings->medianMs)
                                            .str()
                                      : "-";
      out += llvm::formatv("{0,-36} {1,-9} {2,-14} {3,9}  {4,-26} {5,9} {6,7}  {7}/{8}\n", w,
                           b.name, rangeText(b), defText, winText, bestText, ratio, ok,
                           cell->second.size())
                 .str();
    }
  return out;
}

std::string renderSvgReport(const std::vector<TuningRecord> &records,
                            const std::map<std::string, TuneConfig> &defaults,
                            const std::string &title) {
  std::vector<TuningRecord> latest = latestRecords(records);
  Grouped g = group(latest);
  const int labelW = 190, barW = 260, valueW = 90, panelW = labelW + barW + valueW;
  const int rowH = 14, panelHead = 44, panelFoot = 40, margin = 20, top = 70;
  double maxTflops = 1;
  for (const TuningRecord &r : latest)
    if (r.status == RecordStatus::Ok && r.timings)
      maxTflops = std::max(maxTflops, r.timings->tflops);
  double step = tickStep(maxTflops);
  double axisMax = std::ceil(maxTflops / step) * step;

  std::vector<int> rowHeights;
  for (const std::string &w : g.workloads) {
    size_t most = 1;
    for (const ShapeBucket &b : g.buckets) {
      auto cell = g.cells.find({w, b.name});
      if (cell != g.cells.end())
        most = std::max(most, cell->second.size());
    }
    rowHeights.push_back(panelHead + int(most) * rowH + panelFoot);
  }
  int width = margin * 2 + int(std::max<size_t>(g.buckets.size(), 1)) * (panelW + margin);
  int height = top + margin;
  for (int h : rowHeights)
    height += h + margin;

  std::string s;
  s += llvm::formatv("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
                     "xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
                     "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"11\">\n",
                     width, height)
           .str();
  s += llvm::formatv("<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
                     width, height)
           .str();
  s += llvm::formatv("<text x=\"{0}\" y=\"28\" font-size=\"18\" font-weight=\"bold\">{1}</text>\n",
                     margin, xmlEscape(title))
           .str();
  s += llvm::formatv("<text x=\"{0}\" y=\"50\">TFLOP/s of every candidate per shape bucket "
                     "(median of timed runs; whisker: p10..p90). "
                     "<tspan fill=\"#e67e22\" font-weight=\"bold\">Orange: winner</tspan>; "
                     "blue: passed; grey text: pruned or failed (status).</text>\n",
                     margin)
           .str();

  int y0 = top;
  for (size_t wi = 0; wi < g.workloads.size(); ++wi) {
    const std::string &w = g.workloads[wi];
    auto def = defaults.find(w);
    for (size_t bi = 0; bi < g.buckets.size(); ++bi) {
      const ShapeBucket &b = g.buckets[bi];
      auto cellIt = g.cells.find({w, b.name});
      if (cellIt == g.cells.end())
        continue;
      int x0 = margin + int(bi) * (panelW + margin);
      std::vector<const TuningRecord *> cell = cellIt->second;
      std::stable_sort(cell.begin(), cell.end(), [](const TuningRecord *a, const TuningRecord *b) {
        double ta = a->timings && a->status == RecordStatus::Ok ? a->timings->tflops : -1;
        double tb = b->timings && b->status == RecordStatus::Ok ? b->timings->tflops : -1;
        return ta > tb;
      });
      const TuningRecord *best = fastest(cell);
      s += llvm::formatv("<g class=\"panel\" data-workload=\"{0}\" data-bucket=\"{1}\">\n",
                         xmlEscape(w), xmlEscape(b.name))
               .str();
      s += llvm::formatv("<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"none\" "
                         "stroke=\"#cccccc\"/>\n",
                         x0, y0, panelW, rowHeights[wi])
               .str();
      s += llvm::formatv("<text x=\"{0}\" y=\"{1}\" font-weight=\"bold\">{2}</text>\n", x0 + 6,
                         y0 + 16, xmlEscape(w))
               .str();
      s += llvm::formatv("<text x=\"{0}\" y=\"{1}\">bucket {2}: seqlen {3}, measured at "
                         "B={4} Hq={5} Hkv={6} S={7}</text>\n",
                         x0 + 6, y0 + 32, xmlEscape(b.name), rangeText(b), b.batch, b.headsQ,
                         b.headsKV, b.seqlenQ)
               .str();
      int barX = x0 + labelW;
      int plotTop = y0 + panelHead;
      int plotH = int(cell.size()) * rowH;
      auto xOf = [&](double t) { return barX + t / axisMax * barW; };
      // Axis with ticks and grid lines.
      for (double t = 0; t <= axisMax + 1e-9; t += step) {
        double x = xOf(t);
        s += llvm::formatv("<line x1=\"{0:f1}\" y1=\"{1}\" x2=\"{0:f1}\" y2=\"{2}\" "
                           "stroke=\"#eeeeee\"/>\n",
                           x, plotTop, plotTop + plotH)
                 .str();
        s += llvm::formatv("<text x=\"{0:f1}\" y=\"{1}\" text-anchor=\"middle\">{2}</text>\n", x,
                           plotTop + plotH + 14, int(t))
                 .str();
      }
      s += llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n",
                         barX, plotTop, plotTop + plotH)
               .str();
      s += llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n",
                         barX, plotTop + plotH, barX + barW)
               .str();
      s += llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">TFLOP/s</text>\n",
                         barX + barW / 2, plotTop + plotH + 30)
               .str();
      s += llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" "
                         "transform=\"rotate(-90 {0} {1})\">candidate (block m/n, warps, "
                         "stages, tau, emu)</text>\n",
                         x0 + 10, plotTop + plotH / 2)
               .str();
      for (size_t i = 0; i < cell.size(); ++i) {
        const TuningRecord &r = *cell[i];
        int y = plotTop + int(i) * rowH;
        bool isDefault = def != defaults.end() && r.config == def->second;
        bool isWinner = best == &r;
        std::string label = r.config.text() + (isDefault ? " (default)" : "");
        bool ok = r.status == RecordStatus::Ok && r.timings;
        s += llvm::formatv("<g class=\"candidate{0}\" data-kernel=\"{1}\">\n",
                           isWinner ? " winner" : "", xmlEscape(r.kernel))
                 .str();
        std::string tip = r.kernel + ": " + statusName(r.status);
        if (ok)
          tip += llvm::formatv(", {0:f1} TFLOP/s, median {1:f4} ms (p10 {2:f4}, p90 {3:f4}, {4} "
                               "runs)",
                               r.timings->tflops, r.timings->medianMs, r.timings->p10Ms,
                               r.timings->p90Ms, r.timings->runs)
                     .str();
        else if (!r.detail.empty())
          tip += ": " + r.detail.substr(0, 200);
        s += "<title>" + xmlEscape(tip) + "</title>\n";
        s += llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\" fill=\"{2}\"{3}>{4}</text>\n",
                           barX - 4, y + 10, ok ? "black" : "#999999",
                           isDefault ? " font-style=\"italic\"" : "", xmlEscape(label))
                 .str();
        if (ok) {
          double x = xOf(r.timings->tflops);
          s += llvm::formatv("<rect x=\"{0}\" y=\"{1}\" width=\"{2:f1}\" height=\"{3}\" "
                             "fill=\"{4}\"/>\n",
                             barX, y + 2, x - barX, rowH - 4, isWinner ? "#e67e22" : "#4a90d9")
                   .str();
          // p90 time is the slow end (low TFLOP/s), p10 the fast end.
          double flopsMs = r.timings->tflops * r.timings->medianMs;
          double lo = xOf(flopsMs / std::max(r.timings->p90Ms, 1e-9));
          double hi = xOf(flopsMs / std::max(r.timings->p10Ms, 1e-9));
          s += llvm::formatv("<line x1=\"{0:f1}\" y1=\"{1}\" x2=\"{2:f1}\" y2=\"{1}\" "
                             "stroke=\"black\"/>\n",
                             lo, y + rowH / 2, std::min(hi, double(barX + barW)))
                   .str();
          s += llvm::formatv("<text x=\"{0}\" y=\"{1}\"{2}>{3:f1}{4}</text>\n",
                             barX + barW + 4, y + 10, isWinner ? " font-weight=\"bold\"" : "",
                             r.timings->tflops, isWinner ? " winner" : "")
                   .str();
        } else {
          s += llvm::formatv("<text x=\"{0}\" y=\"{1}\" fill=\"#999999\">{2}</text>\n", barX + 4,
                             y + 10, statusName(r.status))
                   .str();
        }
        s += "</g>\n";
      }
      s += "</g>\n";
    }
    y0 += rowHeights[wi] + margin;
  }
  s += "</svg>\n";
  return s;
}

} // namespace fagen
