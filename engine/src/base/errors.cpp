// Engine-side errors: turning plugin error objects into exceptions.
#include "base/errors.hpp"

namespace loom::engine {

void check(loom_error* err, const std::string& what) {
  if (err == nullptr) return;
  std::string message = what + ": " + (err->message.empty() ? "error" : err->message);
  delete err;
  throw RunError(message);
}

loom_error* make_error(loom_status code, const std::string& message) {
  return new loom_error{code, message};
}

void free_error(loom_error* err) { delete err; }

std::string one_line(const std::string& text, size_t max_len) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (max_len >= 4 && out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

}  // namespace loom::engine
