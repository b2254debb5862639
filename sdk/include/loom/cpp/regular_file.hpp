// Loom SDK C++ helpers (header-only, engine and plugins): every file Loom reads by name must
// be a regular file. A FIFO blocks a reader forever, /dev/zero never ends, a directory opens
// and then fails oddly; each is refused up front, naming the path and what it is.
//
// The check opens with O_NONBLOCK (so that opening a FIFO with no writer returns at once)
// and fstat()s the descriptor it opened, so that the file checked is the file read.
//
// Needs C++17 and POSIX. Thread-safe (no state).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace loom {

// What a file of mode `mode` is, for a message: "a FIFO", "a character device", ...
inline const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading if it is a regular file and returns the descriptor (blocking,
// close-on-exec; the caller closes it). Otherwise returns -1 and sets `why` to
// "<path>: cannot open: <reason>" or "<path> is a FIFO (named pipe), not a regular file".
inline int open_regular_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (fd < 0) {
    const int err = errno;
    // A socket cannot be opened at all (ENXIO): name it rather than the errno.
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      why = path + " is " + file_kind(st.st_mode) + ", not a regular file";
    else
      why = path + ": cannot open: " + std::strerror(err);
    return -1;
  }
  const bool stated = ::fstat(fd, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    why = stated ? path + " is " + file_kind(st.st_mode) + ", not a regular file"
                 : path + ": cannot stat: " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// "" when `path` is a regular file, or cannot be opened at all (missing, no permission: the
// caller's own open reports that as it always has); otherwise why it is refused. For readers
// that open by name themselves (std::ifstream, a library's Load(path)): call it just before.
inline std::string not_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  std::string why;
  const int fd = open_regular_file(path, why);
  if (fd >= 0) ::close(fd);
  return fd >= 0 || S_ISREG(st.st_mode) ? std::string() : why;
}

}  // namespace loom
