// `loom schedule show` (schedule_show.hpp).
#include "train/schedule_show.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "base/errors.hpp"
#include "loader/registry.hpp"
#include "session/host.hpp"

namespace loom::engine {
namespace {

void log_none(loom_host_context*, loom_log_level, const char*) noexcept {}

struct Drawn {
  std::vector<std::vector<loom_schedule_step>> steps;
  std::vector<int32_t> stages;
  int chunks = 1;
  loom::schedule::Timeline t;
};

// The plugin's orders for o's pipeline and the timeline they make.
Drawn draw(Registry& registry, const ScheduleShow& o) {
  const PluginInfo& info = registry.get(LOOM_KIND_SCHEDULE, o.schedule);
  const auto* ox = reinterpret_cast<const loom_schedule_order_ext*>(
      loom_ext_find(info.desc->ext, LOOM_EXT_SCHEDULE_ORDER));
  if (ox == nullptr || ox->base.struct_size < LOOM_SCHEDULE_ORDER_EXT_SIZE_V1)
    throw UsageError("schedule/" + o.schedule + " does not state its orders (" +
                     LOOM_EXT_SCHEDULE_ORDER + "): it cannot be drawn");
  if (o.pipeline < 1 || o.virtual_stages < 1 || o.microbatches < 1)
    throw UsageError(
        "loom schedule show: --pipeline, --virtual-stages and --microbatches "
        "must be at least 1");
  loom_schedule_order_args a{};
  a.struct_size = LOOM_SCHEDULE_ORDER_ARGS_SIZE_V2_19;
  a.pipeline = o.pipeline;
  a.virtual_stages = o.virtual_stages;
  a.num_microbatches = o.microbatches;
  const loom_host host = host_abi::common_table(nullptr, log_none);
  if (loom_error* e = ox->order(&host, &a)) {
    const std::string why = host_abi::error_message(e);
    host_abi::error_free(e);
    throw UsageError(why);
  }
  Drawn d;
  d.chunks = a.chunks;
  d.stages.assign(a.stages, a.stages + size_t(o.pipeline) * a.chunks);
  for (int r = 0; r < o.pipeline; ++r)
    d.steps.emplace_back(a.steps[r], a.steps[r] + a.num_steps[r]);
  try {
    d.t = loom::schedule::timeline(d.steps, d.stages, d.chunks, o.microbatches, o.costs);
  } catch (const std::logic_error& e) {
    throw RunError("schedule/" + o.schedule + ": " + e.what());
  }
  return d;
}

// F, B (whole backward), b (input half), W (weight half); the micro-batch, and the chunk
// after a dot where a rank has several.
std::string label(const loom::schedule::Slot& s, int chunks) {
  static const char kPhase[] = {'F', 'B', 'b', 'W'};
  std::string l(1, kPhase[s.phase & 3]);
  l += std::to_string(s.mb);
  if (chunks > 1) {  // (piecewise: "." + to_string trips GCC 12's -Wrestrict)
    l += '.';
    l += std::to_string(s.chunk);
  }
  return l;
}

std::string text(const ScheduleShow& o, const Drawn& d) {
  const double unit = std::min({o.costs.f, o.costs.b, o.costs.w});
  // columns per unit of time: by default room for "F12" (one chunk) or "F12.1"
  const int scale = o.scale > 0 ? o.scale : (d.chunks > 1 ? 5 : 3);
  const double per = scale / (unit > 0 ? unit : 1.0);
  std::ostringstream out;
  for (size_t r = 0; r < d.t.ranks.size(); ++r) {
    std::string line(size_t(std::lround(d.t.makespan * per)), '.');
    for (const loom::schedule::Slot& s : d.t.ranks[r]) {
      const size_t a = size_t(std::lround(s.start * per)), b = size_t(std::lround(s.end * per));
      const std::string l = label(s, d.chunks);
      for (size_t i = a; i < b && i < line.size(); ++i)
        line[i] = i - a < l.size() && i + 1 < b ? l[i - a] : (i + 1 == b ? ' ' : '-');
    }
    out << "rank " << r << (r < 10 ? "  |" : " |") << line << "|\n";
  }
  return out.str();
}

void write_svg(const std::string& path, const ScheduleShow& o, const Drawn& d) {
  const double px = 24, row = 22, left = 64, top = 28;
  const double width = left + d.t.makespan * px / std::max(1e-9, o.costs.f) + 16;
  const double height = top + row * double(d.t.ranks.size()) + 40;
  static const char* kFill[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f"};
  std::ofstream f(path);
  if (!f) throw UsageError("loom schedule show: cannot write --svg " + path);
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"10\">\n"
    << "<text x=\"4\" y=\"16\" font-size=\"12\">schedule/" << o.schedule << ": pipeline "
    << o.pipeline << ", " << o.microbatches << " micro-batches, bubble "
    << std::lround(d.t.bubble() * 1000) / 10.0 << " %</text>\n";
  const double scale = px / std::max(1e-9, o.costs.f);
  for (size_t r = 0; r < d.t.ranks.size(); ++r) {
    const double y = top + row * double(r);
    f << "<text x=\"4\" y=\"" << y + 14 << "\">rank " << r << "</text>\n";
    for (const loom::schedule::Slot& s : d.t.ranks[r]) {
      const double x = left + s.start * scale, w = (s.end - s.start) * scale;
      f << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row - 4
        << "\" fill=\"" << kFill[s.phase & 3] << "\" stroke=\"white\"/>"
        << "<text x=\"" << x + 2 << "\" y=\"" << y + 13 << "\" fill=\"white\">"
        << label(s, d.chunks) << "</text>\n";
    }
  }
  f << "<text x=\"4\" y=\"" << height - 8
    << "\">F forward, B backward, b input gradients, W weight gradients (.c: chunk c)</text>\n"
    << "</svg>\n";
}

}  // namespace

std::string show_schedule(Registry& registry, const ScheduleShow& o) {
  const Drawn d = draw(registry, o);
  std::ostringstream out;
  out << "schedule/" << o.schedule << ": pipeline " << o.pipeline << ", " << d.chunks << " chunk"
      << (d.chunks == 1 ? "" : "s") << " per rank, " << o.microbatches << " micro-batches; F "
      << o.costs.f << ", b " << o.costs.b << ", W " << o.costs.w << " (B = b + W)\n"
      << text(o, d);
  const double f1b = double(o.pipeline - 1) / double(o.microbatches + o.pipeline - 1);
  char line[160];
  std::snprintf(line, sizeof line,
                "bubble: %.1f %% of the step (idle over ranks x %.4g); 1F1B's (p-1)/(m+p-1) = "
                "%.1f %%\n",
                100 * d.t.bubble(), d.t.makespan, 100 * f1b);
  out << line
      << "activations held at most per rank, (chunk, micro-batch) pairs from F to its "
         "b or B / to its W or B:";
  for (size_t r = 0; r < d.t.ranks.size(); ++r)
    out << " " << d.t.peak_held(r, false) << "/" << d.t.peak_held(r, true);
  out << "\n";
  if (!o.svg.empty()) {
    write_svg(o.svg, o, d);
    out << "wrote " << o.svg << "\n";
  }
  return out.str();
}

namespace {

// The <trace>.<rank> files of a traced step: the measured slots per rank (times from the
// earliest start), and the header's schedule, layout and micro-batches into o.
Drawn read_trace(ScheduleShow& o) {
  Drawn d;
  double t0 = 1e300;
  for (int r = 0;; ++r) {
    const std::string file = o.trace + "." + std::to_string(r);
    std::ifstream in(file);
    if (!in) {
      if (r == 0) throw UsageError("loom schedule show --trace: no " + file);
      break;
    }
    std::string line;
    if (!std::getline(in, line)) throw UsageError(file + ": empty, not a schedule trace");
    const nlohmann::json head = nlohmann::json::parse(line, nullptr, false);
    if (head.is_discarded() || !head.contains("schedule") || !head.contains("stages"))
      throw UsageError(file + ": line 1 is not a schedule trace's header");
    o.schedule = head["schedule"];
    o.pipeline = head["pipeline"];
    o.virtual_stages = head["virtual_stages"];
    o.microbatches = head["microbatches"];
    const std::vector<int32_t> stages = head["stages"];
    d.chunks = (int)stages.size();
    d.t.ranks.emplace_back();
    for (int n = 2; std::getline(in, line); ++n) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("phase") || !j.contains("start") || !j.contains("end"))
        throw UsageError(file + ":" + std::to_string(n) + ": not a traced computation");
      const int32_t chunk = j["chunk"];
      if (chunk < 0 || chunk >= d.chunks)
        throw UsageError(file + ":" + std::to_string(n) + ": chunk " + std::to_string(chunk));
      loom::schedule::Slot s{j["phase"], chunk, stages[chunk], j["mb"], j["start"], j["end"]};
      t0 = std::min(t0, s.start);
      d.t.ranks.back().push_back(s);
    }
  }
  if ((int)d.t.ranks.size() != o.pipeline)
    throw UsageError("loom schedule show --trace: " + std::to_string(d.t.ranks.size()) +
                     " rank files for pipeline " + std::to_string(o.pipeline));
  for (auto& rank : d.t.ranks)
    for (loom::schedule::Slot& s : rank) {
      s.start -= t0;
      s.end -= t0;
      d.t.makespan = std::max(d.t.makespan, s.end);
    }
  return d;
}

// Mean measured time of each phase; a whole backward's halves taken as equal where no split
// backward ran.
loom::schedule::Costs measured_costs(const Drawn& d) {
  double sum[4] = {0, 0, 0, 0}, n[4] = {0, 0, 0, 0};
  for (const auto& rank : d.t.ranks)
    for (const loom::schedule::Slot& s : rank) {
      sum[s.phase & 3] += s.end - s.start;
      n[s.phase & 3] += 1;
    }
  auto mean = [&](int p) { return n[p] > 0 ? sum[p] / n[p] : 0.0; };
  loom::schedule::Costs c;
  c.f = mean(LOOM_PHASE_FORWARD);
  c.b = n[LOOM_PHASE_BACKWARD_INPUT] > 0 ? mean(LOOM_PHASE_BACKWARD_INPUT)
                                         : mean(LOOM_PHASE_BACKWARD) / 2;
  c.w = n[LOOM_PHASE_BACKWARD_WEIGHT] > 0 ? mean(LOOM_PHASE_BACKWARD_WEIGHT)
                                          : mean(LOOM_PHASE_BACKWARD) / 2;
  return c;
}

}  // namespace

std::string show_trace(Registry& registry, ScheduleShow o) {
  const Drawn measured = read_trace(o);
  o.costs = measured_costs(measured);
  if (o.costs.f <= 0 || o.costs.b <= 0 || o.costs.w <= 0)
    throw UsageError("loom schedule show --trace " + o.trace + ": no forward or backward timed");
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof line,
                "schedule/%s as it ran: pipeline %d, %lld micro-batches; mean F %.3g s, b %.3g "
                "s, W %.3g s\n",
                o.schedule.c_str(), o.pipeline, (long long)o.microbatches, o.costs.f, o.costs.b,
                o.costs.w);
  out << line << text(o, measured);
  const double mb = measured.t.bubble();
  const Drawn own = draw(registry, o);
  std::snprintf(line, sizeof line,
                "bubble measured: %.1f %% of the step (%.3g s); the schedule's own timeline "
                "with these times: %.1f %% (%.3g s); difference %.1f %% of the step\n",
                100 * mb, measured.t.makespan, 100 * own.t.bubble(), own.t.makespan,
                100 * std::abs(mb - own.t.bubble()));
  out << line;
  if (!o.svg.empty()) {
    write_svg(o.svg, o, measured);
    out << "wrote " << o.svg << "\n";
  }
  return out.str();
}

}  // namespace loom::engine