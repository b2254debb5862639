// The empty folder a probed plugin's code runs in, and the Landlock ruleset that keeps its
// writes there (probe_room.hpp).
#include "loader/probe_room.hpp"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE  // Landlock ABI 3 (Linux 6.2); older headers lack it
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

// Every right that changes the file system, as far as this kernel's Landlock ABI knows them:
// handled (so denied) everywhere but where a rule gives them back. Reading and executing are
// not handled, so the dynamic loader still finds the library and everything it needs.
uint64_t write_rights(int abi) {
  uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
               LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
               LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
               LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
               LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
  return r;
}

// Gives `rights` back beneath `path` (a folder, or one file with the file rights only).
bool allow(int ruleset, const char* path, uint64_t rights) {
  const int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return false;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = rights;
  rule.parent_fd = fd;
  const long rc = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  ::close(fd);
  return rc == 0;
}

}  // namespace

int ProbeRoom::landlock_abi() {
  const long v =
      ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : static_cast<int>(v);
}

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
  // which only root can write (and which the ruleset below closes to root too).
  const char* where = dir_.empty() ? "/" : dir_.c_str();
  if (::chdir(where) != 0 && ::chdir("/") != 0) ::_exit(125);
  ::setenv("HOME", where, 1);
  ::setenv("TMPDIR", where, 1);
  ::setenv("PWD", where, 1);
  confine();
}

bool ProbeRoom::confine() const {
  const int abi = landlock_abi();
  if (abi < 1) return false;
  // Without privileges to gain, an unprivileged process may restrict itself; so may root.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  const uint64_t rights = write_rights(abi);
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = rights;
  const long ruleset = ::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (ruleset < 0) return false;
  const int fd = static_cast<int>(ruleset);
  bool ok = dir_.empty() || allow(fd, dir_.c_str(), rights);
  // The library's output goes to /dev/null (the child's stdout and stderr already do).
  const uint64_t file_rights =
      LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
  allow(fd, "/dev/null", file_rights);
  ok = ok && ::syscall(SYS_landlock_restrict_self, fd, 0) == 0;
  ::close(fd);
  return ok;
}

}  // namespace loom::engine
