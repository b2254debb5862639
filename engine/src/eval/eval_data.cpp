// The samples of `loom eval`, built as Megatron's zero-shot tasks build them.
#include <algorithm>
#include <regex>
#include <utility>

#include "base/strings.hpp"
#include "eval/eval.hpp"

namespace loom::engine {

namespace {

const char* const kSpace = " \t\n\r\f\v";

}  // namespace

std::string wikitext_detokenize(std::string s) {
  // contractions
  s = replace_all(std::move(s), "s '", "s'");
  s = std::regex_replace(s, std::regex("/' [0-9]/"),
                         "/'[0-9]/");  // (sic: a literal, as Megatron's)
  // number separators
  s = replace_all(std::move(s), " @-@ ", "-");
  s = replace_all(std::move(s), " @,@ ", ",");
  s = replace_all(std::move(s), " @.@ ", ".");
  // punctuation
  for (const char* p : {" : ", " ; ", " . ", " ! ", " ? ", " , "}) {
    const std::string from = p;
    s = replace_all(std::move(s), from, from.substr(1));
  }
  // double brackets
  s = std::regex_replace(s, std::regex(R"(\(\s*([^\)]*?)\s*\))"), "($1)");
  s = std::regex_replace(s, std::regex(R"(\[\s*([^\]]*?)\s*\])"), "[$1]");
  s = std::regex_replace(s, std::regex(R"(\{\s*([^}]*?)\s*\})"), "{$1}");
  s = std::regex_replace(s, std::regex(R"("\s*([^"]*?)\s*")"), "\"$1\"");
  s = std::regex_replace(s, std::regex(R"('\s*([^']*?)\s*')"), "'$1'");
  // miscellaneous
  s = replace_all(std::move(s), "= = = =", "====");
  s = replace_all(std::move(s), "= = =", "===");
  s = replace_all(std::move(s), "= =", "==");
  s = replace_all(std::move(s), " \xC2\xB0 ", "\xC2\xB0");  // chr(176), the degree sign
  s = replace_all(std::move(s), " \n", "\n");
  s = replace_all(std::move(s), "\n ", "\n");
  s = replace_all(std::move(s), " N ", " 1 ");
  s = replace_all(std::move(s), " 's", "'s");
  return s;
}

std::vector<EvalSample> lm_windows(const std::vector<int32_t>& tokens, int64_t seq_len,
                                   int64_t overlapping, int32_t pad) {
  const int64_t total_targets = (int64_t)tokens.size() - 1;
  const int64_t targets = std::max<int64_t>(total_targets - overlapping, 0);
  const int64_t n = std::max<int64_t>((targets + overlapping - 1) / overlapping + 1, 1);
  std::vector<EvalSample> out;
  for (int64_t idx = 0; idx < n; ++idx) {
    const int64_t start = idx * overlapping;
    const int64_t size = (int64_t)tokens.size();
    std::vector<int32_t> seg(tokens.begin() + std::min(start, size),
                             tokens.begin() + std::min(start + seq_len + 1, size));
    const int64_t real = (int64_t)seg.size();
    seg.resize(seq_len + 1, pad);
    EvalSample s;
    s.tokens.assign(seg.begin(), seg.begin() + seq_len);
    s.targets.assign(seq_len, -1);
    for (int64_t t = 0; t < seq_len; ++t) {
      bool scored = t + 1 < real;  // pad_mask[1:]
      if (overlapping != seq_len && idx != 0 && t < seq_len - overlapping) scored = false;
      if (scored) s.targets[t] = seg[t + 1];
    }
    out.push_back(std::move(s));
  }
  return out;
}

EvalSample cloze_sample(std::vector<int32_t> context, const std::vector<int32_t>& answer,
                        int64_t seq_len, int32_t pad) {
  const int64_t keep = seq_len + 1 - (int64_t)answer.size();  // context tokens that fit
  if ((int64_t)context.size() > keep) context.erase(context.begin(), context.end() - keep);
  std::vector<int32_t> all = context;
  all.insert(all.end(), answer.begin(), answer.end());
  const int64_t real = (int64_t)all.size();
  all.resize(seq_len + 1, pad);
  EvalSample s;
  s.tokens.assign(all.begin(), all.begin() + seq_len);
  s.targets.assign(seq_len, -1);
  for (int64_t t = std::max<int64_t>((int64_t)context.size() - 1, 0); t < real - 1; ++t)
    s.targets[t] = all[t + 1];
  return s;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t at = s.find_first_not_of(kSpace);
  while (at != std::string::npos) {
    const size_t end = s.find_first_of(kSpace, at);
    out.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? end : s.find_first_not_of(kSpace, end);
  }
  return out;
}

std::string strip(const std::string& s) {
  const size_t a = s.find_first_not_of(kSpace);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(kSpace) - a + 1);
}

}  // namespace loom::engine
