// Engine-side errors: the two exit classes the CLI maps to codes, and the ABI error object.
#pragma once

#include <stdexcept>
#include <string>

#include "loom/common.h"

namespace loom::engine {

// Bad command line, recipe, or plugin selection: exit code 2, one line naming what is wrong.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure while running (I/O, a plugin error, a corrupt checkpoint): exit code 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Ends the command with `code` and prints nothing: the ranks of a job that all refuse the
// same thing, of which one (rank 0) says why.
struct QuietExit {
  int code;
};

// Throws RunError("<what>: <plugin message>") when a plugin call returned an error, and
// frees the error object.
void check(loom_error* err, const std::string& what);

// A host-made error object (what loom_host.error_new returns); free it with free_error.
loom_error* make_error(loom_status code, const std::string& message);
void free_error(loom_error* err);  // accepts NULL

// `text` on one line: newlines and tabs become spaces, runs of spaces collapse, and the
// result is cut to `max_len` characters with "...". For reasons shown to users.
std::string one_line(const std::string& text, size_t max_len = 300);

}  // namespace loom::engine

// The host's implementation of the opaque ABI error object.
struct loom_error {
  loom_status code;
  std::string message;
};
