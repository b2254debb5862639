// `loom parity`'s layout tokens ("tp2+pp2", "dp2+zero1") as recipe keys (parity.hpp).
#include <cctype>
#include <map>

#include "errors.hpp"
#include "parity.hpp"

namespace loom::engine {

namespace {

const char* const kGrammar =
    "a layout is parts joined by '+': tpN (tensor), ppN (pipeline), ppNvpM (pipeline with M "
    "virtual stages, interleaved 1F1B), cpN (context), epN (expert), dpN (data), sp (sequence "
    "parallel, with tp), zero1 or dist (distributed optimizer), fsdp or fsdpN (FSDP, ZeRO-3; "
    "fsdpN = dpN+fsdp), zero2 or zero3 (FSDP's stage), etp (experts split over the tensor "
    "group), a2a (all-to-all context attention), gpipe (GPipe schedule); e.g. tp2, pp2vp2, "
    "dp2+zero1, tp2+sp+pp2";

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
  std::map<std::string, int> degree;  // tp pp cp ep dp vp
  bool sp = false, etp = false, a2a = false, gpipe = false;
  std::string grad, stage;  // parallel.data, fsdp's zero_stage
  auto set_degree = [&](const std::string& what, int n) {
    if (n < 1) throw fail(what + " needs a degree of 1 or more, as in " + what + "2");
    if (degree.count(what) && degree[what] != n) throw fail(what + " is given twice");
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
    if (p.name == "tp" || p.name == "pp" || p.name == "cp" || p.name == "ep" || p.name == "dp") {
      set_degree(p.name, p.n);
      if (p.vp) set_degree("vp", p.vp);
    } else if (p.name == "sp" && flag) {
      sp = true;
    } else if (p.name == "etp" && flag) {
      etp = true;
    } else if (p.name == "a2a" && flag) {
      a2a = true;
    } else if (p.name == "gpipe" && flag) {
      gpipe = true;
    } else if ((p.name == "zero" && p.n == 1) || (p.name == "dist" && flag)) {
      set_grad("distributed-optimizer", text);
    } else if (p.name == "zero" && (p.n == 2 || p.n == 3)) {
      set_grad("fsdp", text);
      if (!stage.empty() && stage != std::to_string(p.n)) throw fail("zero2 and zero3 both given");
      stage = std::to_string(p.n);
    } else if (p.name == "fsdp") {
      set_grad("fsdp", text);
      if (!flag) set_degree("dp", p.n);
    } else {
      throw UsageError("loom parity: unknown layout part '" + text + "' in '" + token + "'; " +
                       kGrammar);
    }
  }
  auto deg = [&](const char* what) { return degree.count(what) ? degree[what] : 1; };
  const int tp = deg("tp"), pp = deg("pp"), cp = deg("cp"), ep = deg("ep"), dp = deg("dp"),
            vp = deg("vp");
  if (sp && tp < 2) throw fail("sp (sequence parallelism) needs tp2 or more");
  if (etp && tp < 2) throw fail("etp (experts split over the tensor group) needs tp2 or more");
  if (a2a && cp < 2) throw fail("a2a (all-to-all context attention) needs cp2 or more");
  if (gpipe && pp < 2) throw fail("gpipe needs pp2 or more");
  if (gpipe && vp > 1) throw fail("gpipe has no virtual stages (ppNvpM is interleaved 1F1B)");
  ParityLayout l;
  l.token = token;
  l.world = tp * pp * cp * ep * dp;
  l.data = ep * dp;
  l.grad = grad.empty() ? "ddp" : grad;
  auto key = [&](const std::string& k, const std::string& v) {
    l.sets.push_back("parallel." + k + "=" + v);
  };
  key("tensor", std::to_string(tp));
  key("pipeline", std::to_string(pp));
  key("context", std::to_string(cp));
  key("expert", std::to_string(ep));
  key("expert_tensor", std::to_string(etp ? tp : 1));
  key("virtual_stages", std::to_string(vp));
  key("sequence_parallel", sp ? "true" : "false");
  key("cp_comm_type", a2a ? "a2a" : "p2p");
  key("data", l.grad);
  if (vp > 1) key("schedule", "interleaved-1f1b");
  if (gpipe) key("schedule", "gpipe");
  if (!stage.empty()) key("zero_stage", stage);
  return l;
}

}  // namespace loom::engine
