// `loom parity`'s layout tokens ("tp2+pp2", "dp2+zero1") as recipe keys (parity.hpp).
#include <cctype>
#include <map>
#include <set>

#include "base/errors.hpp"
#include "eval/parity.hpp"

namespace loom::engine {

namespace {

const char* const kGrammar =
    "a layout is parts joined by '+': tpN (tensor), ppN (pipeline), ppNvpM (pipeline with M "
    "virtual stages, interleaved 1F1B), cpN (context), epN (expert), dpN (data), sp (sequence "
    "parallel, with tp), zero1 or dist (distributed optimizer), fsdp or fsdpN (FSDP, ZeRO-3; "
    "fsdpN = dpN+fsdp), zero2 or zero3 (FSDP's stage), etp (experts split over the tensor "
    "group), a2a (all-to-all context attention), gpipe (GPipe schedule), zbh1, zbv or "
    "dualpipev (zero-bubble schedules; the last two place two chunks a rank in a V), recompute "
    "(full "
    "activation recompute), selective (selective recompute), overlap (gradient reduce and "
    "parameter gather overlapped), mbN (N samples per micro-batch); each part at most once; "
    "e.g. tp2, pp2vp2, dp2+zero1, tp2+sp+pp2, dp2+overlap+mb1";

struct Part {
  std::string name;
  int n = 0, vp = 0;  // 0: no number given
};

Part split_part(const std::string& text, const std::string& token) {
  Part p;
  if (text == "a2a") return {"a2a"};  // a flag with a digit in its name
  size_t i = 0;
  while (i < text.size() && std::isalpha((unsigned char)text[i])) p.name += text[i++];
  auto number = [&](int& out) {
    size_t start = i;
    while (i < text.size() && std::isdigit((unsigned char)text[i])) ++i;
    if (i == start) return;
    if (i - start > 4) throw UsageError("loom parity: '" + token + "': " + text + " is too large");
    out = std::stoi(text.substr(start, i - start));
  };
  number(p.n);
  if (p.name == "pp" && text.compare(i, 2, "vp") == 0) {
    i += 2;
    number(p.vp);
    if (p.vp == 0) i = std::string::npos;  // "pp2vp": malformed
  }
  if (p.name.empty() || i != text.size())
    throw UsageError("loom parity: unknown layout part '" + text + "' in '" + token + "'; " +
                     kGrammar);
  return p;
}

}  // namespace

ParityLayout parse_parity_layout(const std::string& token) {
  auto fail = [&](const std::string& why) -> UsageError {
    return UsageError("loom parity: layout '" + token + "': " + why);
  };
  if (token.empty()) throw UsageError(std::string("loom parity: an empty layout; ") + kGrammar);
  std::map<std::string, int> degree;         // tp pp cp ep dp vp mb
  std::set<std::string> flags;               // sp etp a2a gpipe recompute selective overlap
  std::map<std::string, std::string> given;  // what each dimension or flag came from
  std::string grad, stage;                   // parallel.data, fsdp's zero_stage
  std::string schedule;                      // a zero-bubble schedule's plugin
  // Every dimension and flag once, whatever the values: "tp2+tp2" is as much a slip as
  // "tp2+tp4", and accepting one while refusing the other hides which part the user meant.
  auto once = [&](const std::string& what, const std::string& part) {
    auto [it, fresh] = given.emplace(what, part);
    if (!fresh)
      throw fail(what + " is given twice ('" + it->second + "' and '" + part +
                 "'); give each part once");
  };
  auto set_degree = [&](const std::string& what, int n, const std::string& part) {
    if (n < 1) throw fail(what + " needs a degree of 1 or more, as in " + what + "2");
    once(what, part);
    degree[what] = n;
  };
  auto set_grad = [&](const std::string& g, const std::string& part) {
    if (!grad.empty() && grad != g)
      throw fail("'" + part + "' and an earlier part choose different data-parallel strategies");
    grad = g;
  };
  size_t start = 0;
  while (start <= token.size()) {
    size_t plus = token.find('+', start);
    if (plus == std::string::npos) plus = token.size();
    const std::string text = token.substr(start, plus - start);
    start = plus + 1;
    const Part p = split_part(text, token);
    const bool flag = p.n == 0;
    if (p.name == "tp" || p.name == "pp" || p.name == "cp" || p.name == "ep" || p.name == "dp" ||
        p.name == "mb") {
      set_degree(p.name, p.n, text);
      if (p.vp) set_degree("vp", p.vp, text);
    } else if (flag && (p.name == "sp" || p.name == "etp" || p.name == "a2a" || p.name == "gpipe" ||
                        p.name == "recompute" || p.name == "selective" || p.name == "overlap")) {
      once(p.name, text);
      flags.insert(p.name);
    } else if ((p.name == "zbh" && p.n == 1) ||
               (flag && (p.name == "zbv" || p.name == "dualpipev"))) {
      once("the schedule", text);
      schedule = p.name == "zbh" ? "zb-h1" : p.name == "zbv" ? "zb-v" : "dualpipev";
    } else if ((p.name == "zero" && p.n == 1) || (p.name == "dist" && flag)) {
      once("the distributed optimizer", text);
      set_grad("distributed-optimizer", text);
    } else if (p.name == "zero" && (p.n == 2 || p.n == 3)) {
      once("the ZeRO stage", text);
      set_grad("fsdp", text);
      stage = std::to_string(p.n);
    } else if (p.name == "fsdp") {
      once("fsdp", text);
      set_grad("fsdp", text);
      if (!flag) set_degree("dp", p.n, text);
    } else {
      throw UsageError("loom parity: unknown layout part '" + text + "' in '" + token + "'; " +
                       kGrammar);
    }
  }
  auto deg = [&](const char* what) { return degree.count(what) ? degree[what] : 1; };
  auto has = [&](const char* what) { return flags.count(what) > 0; };
  const bool v_shape = schedule == "zb-v" || schedule == "dualpipev";
  if (!schedule.empty() && deg("pp") < 2) throw fail(schedule + " needs pp2 or more");
  if (!schedule.empty() && has("gpipe")) throw fail("give one schedule: gpipe or " + schedule);
  if (schedule == "zb-h1" && deg("vp") > 1)
    throw fail("zbh1 runs one chunk a rank (ppNvpM is interleaved 1F1B)");
  if (v_shape && degree.count("vp") && deg("vp") != 2)
    throw fail(schedule + " places two chunks a rank (vp2), not vp" + std::to_string(deg("vp")));
  const int tp = deg("tp"), pp = deg("pp"), cp = deg("cp"), ep = deg("ep"), dp = deg("dp"),
            vp = v_shape ? 2 : deg("vp");
  if (has("sp") && tp < 2) throw fail("sp (sequence parallelism) needs tp2 or more");
  if (has("etp") && tp < 2)
    throw fail("etp (experts split over the tensor group) needs tp2 or more");
  if (has("a2a") && cp < 2) throw fail("a2a (all-to-all context attention) needs cp2 or more");
  if (has("gpipe") && pp < 2) throw fail("gpipe needs pp2 or more");
  if (has("gpipe") && vp > 1)
    throw fail("gpipe has no virtual stages (ppNvpM is interleaved 1F1B)");
  if (has("recompute") && has("selective"))
    throw fail("recompute (full) and selective are two recompute granularities; give one");
  ParityLayout l;
  l.token = token;
  l.world = tp * pp * cp * ep * dp;
  l.data = ep * dp;
  l.grad = grad.empty() ? "ddp" : grad;
  auto key = [&](const std::string& k, const std::string& v) { l.sets.push_back(k + "=" + v); };
  key("parallel.tensor", std::to_string(tp));
  key("parallel.pipeline", std::to_string(pp));
  key("parallel.context", std::to_string(cp));
  key("parallel.expert", std::to_string(ep));
  key("parallel.expert_tensor", std::to_string(has("etp") ? tp : 1));
  key("parallel.virtual_stages", std::to_string(vp));
  key("parallel.sequence_parallel", has("sp") ? "true" : "false");
  key("parallel.cp_comm_type", has("a2a") ? "a2a" : "p2p");
  key("parallel.data", l.grad);
  if (vp > 1 && !v_shape) key("parallel.schedule", "interleaved-1f1b");
  if (has("gpipe")) key("parallel.schedule", "gpipe");
  if (!schedule.empty()) key("parallel.schedule", schedule);
  if (!stage.empty()) key("parallel.zero_stage", stage);
  // The grad plugin keeps the overlap keys it has (parity drops the others); the distributed
  // optimizer's parameter gather does not overlap a pipeline yet, so only without one.
  if (has("overlap")) key("parallel.overlap_grad_reduce", "true");
  if (has("overlap") && pp == 1) key("parallel.overlap_param_gather", "true");
  if (has("recompute")) key("train.recompute_granularity", "full");
  if (has("selective")) key("train.recompute_granularity", "selective");
  if (degree.count("mb")) {
    l.micro = degree["mb"];
    key("train.micro_batch_size", std::to_string(l.micro));
  }
  return l;
}

}  // namespace loom::engine
