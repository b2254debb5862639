// Where a plugin's code runs when `loom install` (and discovery) probe it in a child process
// (plugin_load.cpp's probe_in_child): an empty temporary folder made for that probe, as the
// child's working folder, HOME and TMPDIR, removed with whatever the library left there.
// A constructor that writes "into the current folder" or "~/.something" writes there, not
// over the user's files. Where the kernel has Landlock (Linux 5.13 and later, when enabled),
// the child also restricts itself before it loads the library: that folder (and /dev/null)
// is the only place it may create, write, remove or rename anything, absolute paths
// included, whatever its user (root too). Reading stays open, so the loader still works.
// Without Landlock, absolute paths stay writable by the child's user, and `loom install`
// says so (docs/writing-a-plugin.md).
#pragma once

#include <filesystem>

namespace loom::engine {

class ProbeRoom {
 public:
  ProbeRoom();  // makes the folder (none when the temporary folder cannot hold one)
  ~ProbeRoom();
  ProbeRoom(const ProbeRoom&) = delete;
  ProbeRoom& operator=(const ProbeRoom&) = delete;
  // In the child, after fork: moves in (working folder, HOME, TMPDIR). Async-signal-unsafe
  // calls are fine there: the child is single-threaded until it loads the library.
  // Then confine(). Exits the child (125) when it cannot move in.
  void enter() const;
  // The Landlock ruleset above, on this process for good; false when the kernel has no
  // Landlock or refused it (the probe then runs unconfined).
  bool confine() const;
  // The kernel's Landlock ABI version, 0 when it has none.
  static int landlock_abi();

 private:
  std::filesystem::path dir_;
};

}  // namespace loom::engine
