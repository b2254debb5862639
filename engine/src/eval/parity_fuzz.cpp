// `loom parity --fuzz N --seed S`: random layouts, drawn reproducibly (parity.hpp).
#include <spdlog/spdlog.h>

#include <random>
#include <set>

#include "eval/parity.hpp"

namespace loom::engine {

namespace {

// std::mt19937_64's sequence is fixed by the standard; the distributions are not, so the
// draws below use the raw numbers (a modulo's bias is of no matter here).
struct Draw {
  std::mt19937_64 rng;
  explicit Draw(uint64_t seed) : rng(seed) {}
  int pick(int k) { return (int)(rng() % (uint64_t)k); }
  bool chance(int in) { return pick(in) == 0; }  // 1 in `in`
};

// One token: the degrees a power of two each, their product 2 to max_ranks, drawn in a
// random order so that no dimension is favoured by coming first; then the flags each degree
// allows.
std::string draw_token(Draw& d, int max_ranks) {
  const char* dims[] = {"tp", "pp", "cp", "ep", "dp"};
  int degree[5] = {1, 1, 1, 1, 1};
  int order[5] = {0, 1, 2, 3, 4};
  for (int i = 4; i > 0; --i) std::swap(order[i], order[d.pick(i + 1)]);
  int budget = max_ranks;
  for (int i : order) {
    std::vector<int> choices;
    for (int p = 2; p <= budget; p *= 2) choices.push_back(p);
    if (choices.empty() || d.chance(2)) continue;
    degree[i] = choices[d.pick((int)choices.size())];
    budget /= degree[i];
  }
  const int tp = degree[0], pp = degree[1], cp = degree[2], ep = degree[3], dp = degree[4];
  if (tp * pp * cp * ep * dp < 2) return "";
  std::vector<std::string> parts;
  auto dim = [&](int i) { parts.push_back(std::string(dims[i]) + std::to_string(degree[i])); };
  if (tp > 1) {
    dim(0);
    if (d.chance(2)) parts.push_back("sp");
    if (ep > 1 && d.chance(2)) parts.push_back("etp");
  }
  if (pp > 1) {  // the schedule: 1F1B, interleaved, GPipe or a zero-bubble one
    dim(1);
    const char* schedules[] = {"", "", "vp2", "vp2", "gpipe", "zbh1", "zbv", "dualpipev"};
    const std::string s = schedules[d.pick(8)];
    if (s == "vp2")
      parts.back() += s;
    else if (!s.empty())
      parts.push_back(s);
  }
  if (cp > 1) {
    dim(2);
    if (d.chance(2)) parts.push_back("a2a");
  }
  if (ep > 1) dim(3);
  if (dp > 1) dim(4);
  if (dp * ep > 1) {
    const char* grads[] = {"", "zero1", "fsdp", "zero2"};
    if (const int g = d.pick(4); g > 0) parts.push_back(grads[g]);
    if (d.chance(3)) parts.push_back("overlap");
  }
  if (const int r = d.pick(3); r > 0) parts.push_back(r == 1 ? "recompute" : "selective");
  if (const int m = d.pick(3); m > 0) parts.push_back("mb" + std::to_string(m));
  std::string token;
  for (const std::string& p : parts) token += (token.empty() ? "" : "+") + p;
  return token;
}

}  // namespace

std::vector<std::string> draw_parity_layouts(
    int n, uint64_t seed, int max_ranks,
    const std::function<std::string(const std::string&)>& refusal) {
  Draw d(seed);
  std::vector<std::string> out;
  std::set<std::string> seen;
  const int attempts = std::max(200, 100 * n);
  for (int a = 0; a < attempts && (int)out.size() < n; ++a) {
    const std::string token = draw_token(d, max_ranks);
    if (token.empty() || !seen.insert(token).second) continue;
    const std::string why = refusal(token);
    if (why.empty())
      out.push_back(token);
    else
      spdlog::debug("parity: drawn layout {} refused: {}", token, why);
  }
  if ((int)out.size() < n)
    spdlog::warn("parity: only {} of {} layouts drawn the recipe's model and batch can take",
                 out.size(), n);
  return out;
}

}  // namespace loom::engine
