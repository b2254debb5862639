#include "data/blend.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "base/errors.hpp"

namespace loom::engine {

namespace {
bool parse_double(const std::string& s, double& out) {
  auto res = std::from_chars(s.data(), s.data() + s.size(), out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size();
}
}  // namespace

std::vector<BlendEntry> parse_blend(const std::string& text, const std::string& key) {
  std::vector<std::string> words;
  std::stringstream ss(text);
  for (std::string w; ss >> w;) words.push_back(w);
  std::vector<BlendEntry> out;
  double w = 0;
  if (words.size() == 1 && !parse_double(words[0], w)) return {{1.0, words[0]}};
  if (words.size() % 2 != 0)
    throw UsageError(key + " = \"" + text +
                     "\": expected pairs of weight and path, like \"0.3 data/a 0.7 data/b\"");
  for (size_t i = 0; i < words.size(); i += 2) {
    if (!parse_double(words[i], w) || !(w >= 0) || !std::isfinite(w))
      throw UsageError(key + " = \"" + text + "\": '" + words[i] +
                       "' is not a non-negative weight (expected \"w1 path1 w2 path2 ...\")");
    out.push_back({w, words[i + 1]});
  }
  double sum = 0;
  for (const auto& e : out) sum += e.weight;
  if (!out.empty() && !(sum > 0)) throw UsageError(key + " = \"" + text + "\": weights sum to 0");
  if (out.size() > 32767) throw UsageError(key + ": more than 32767 datasets");
  return out;
}

std::vector<double> normalise(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

std::vector<int64_t> blend_dataset_sizes(const std::vector<double>& normalised, int64_t size) {
  std::vector<int64_t> out;
  for (double w : normalised)
    out.push_back((int64_t)std::ceil(std::ceil((double)size * w) * 1.005));
  return out;
}

BlendIndex build_blend_index(const std::vector<double>& w, int64_t size) {
  BlendIndex b;
  b.dataset.resize((size_t)size);
  b.sample.resize((size_t)size);
  std::vector<int64_t> count(w.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    const double x = std::max<double>((double)s, 1.0);
    size_t best = 0;
    double best_err = w[0] * x - (double)count[0];
    for (size_t k = 1; k < w.size(); ++k) {
      double err = w[k] * x - (double)count[k];
      if (err > best_err) best = k, best_err = err;
    }
    b.dataset[(size_t)s] = (int16_t)best;
    b.sample[(size_t)s] = count[best]++;
  }
  return b;
}

}  // namespace loom::engine
