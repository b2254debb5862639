// The empty folder a probed plugin's code runs in (probe_room.hpp).
#include "probe_room.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fs = std::filesystem;

namespace loom::engine {

ProbeRoom::ProbeRoom() {
  std::error_code ec;
  std::string tmpl = (fs::temp_directory_path(ec) / "loom-probe-XXXXXX").string();
  if (!ec && ::mkdtemp(tmpl.data())) dir_ = tmpl;
}

ProbeRoom::~ProbeRoom() {
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

void ProbeRoom::enter() const {
  // Nowhere to go: the library must not run in the user's folder, so fall back to "/",
  // which only root can write.
  const char* where = dir_.empty() ? "/" : dir_.c_str();
  if (::chdir(where) != 0 && ::chdir("/") != 0) ::_exit(125);
  ::setenv("HOME", where, 1);
  ::setenv("TMPDIR", where, 1);
  ::setenv("PWD", where, 1);
}

}  // namespace loom::engine
