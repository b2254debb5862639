// One run per checkpoint folder: an exclusive flock(2) on <folder>/.loom.lock, held by world
// rank 0 for the run's lifetime. Two runs saving into one folder would interleave their
// iterations (one run's iter_1 beside the other's iter_2..) and race on the tracker.
//
// flock is advisory and released by the kernel when the process ends, however it ends, so a
// killed run never leaves a stale lock. On NFS (Linux emulates flock with byte-range locks
// through the server's lock manager) and on Lustre mounted with -o flock it holds across
// hosts; a file system without locks is warned about, not refused.
#pragma once

#include <filesystem>
#include <string>

namespace loom::engine {

class FolderLock {
 public:
  // Takes the lock, creating the lock file, and writes "host <name> pid <n>" into it. Throws
  // UsageError (exit 2) naming `key` ("checkpoint.save"), the folder and the holder when
  // another process holds it.
  FolderLock(const std::filesystem::path& folder, const std::string& key);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

// The refusal FolderLock would throw for `folder` now, or "" when it is free (or has no lock
// file): for `loom validate`, which takes and drops the lock without writing anything.
std::string folder_lock_refusal(const std::filesystem::path& folder, const std::string& key);

}  // namespace loom::engine
