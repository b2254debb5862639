// One run per checkpoint folder (folder_lock.hpp).
#include "base/folder_lock.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/errors.hpp"

namespace loom::engine {
namespace fs = std::filesystem;
namespace {

const char* const kLockName = ".loom.lock";

// Who holds the lock, as its holder wrote it ("host h pid n"), or a placeholder while the
// holder has not written yet.
std::string holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, (size_t)n) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "a process that has not written its host and pid yet" : text;
}

std::string refusal(const fs::path& folder, const std::string& key, int fd) {
  return key + " = \"" + folder.string() + "\" is in use by another run (" + holder(fd) +
         ", holding " + (folder / kLockName).string() +
         "): two runs saving into one folder would write over each other's checkpoints. Wait "
         "for it to end, or save elsewhere";
}

// Whether flock failed because the file system has no locks (Lustre without -o flock).
bool no_locks(int err) { return err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP; }

void warn_no_locks(const fs::path& folder, int err) {
  spdlog::warn(
      "{}: the file system takes no locks ({}); nothing stops a second run saving into this "
      "folder (on Lustre, mount with -o flock)",
      folder.string(), std::strerror(err));
}

}  // namespace

FolderLock::FolderLock(const fs::path& folder, const std::string& key) {
  const fs::path file = folder / kLockName;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0)
    throw UsageError(key + " = \"" + folder.string() + "\": cannot create the lock file " +
                     file.string() + " (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (no_locks(err)) {
      warn_no_locks(folder, err);
      return;
    }
    const std::string why = err == EWOULDBLOCK
                                ? refusal(folder, key, fd_)
                                : key + " = \"" + folder.string() + "\": cannot lock " +
                                      file.string() + " (" + std::strerror(err) + ")";
    ::close(fd_);
    fd_ = -1;
    throw UsageError(why);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string text =
      "host " + std::string(host) + " pid " + std::to_string(::getpid()) + "\n";
  // Best effort: the lock, not the text, is what keeps a second run out.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) < 0)
    spdlog::warn("{}: cannot write the holder into the lock file", file.string());
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

std::string folder_lock_refusal(const fs::path& folder, const std::string& key) {
  const fs::path file = folder / kLockName;
  // Read-write where allowed: on NFS flock is a byte-range write lock, which a read-only
  // descriptor cannot take (EBADF), and the check would pass a locked folder.
  int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "";
  std::string why;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) why = refusal(folder, key, fd);
  ::close(fd);  // a lock taken here goes with the descriptor
  return why;
}

}  // namespace loom::engine
