// Where a plugin's code runs when `loom install` (and discovery) probe it in a child process
// (registry.cpp's probe_in_child): an empty temporary folder made for that probe, as the
// child's working folder, HOME and TMPDIR, removed with whatever the library left there.
// A constructor that writes "into the current folder" or "~/.something" writes there, not
// over the user's files. It is no sandbox: the child keeps the user's identity, so absolute
// paths stay writable (docs/writing-a-plugin.md says so: installing a package runs its code).
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
  void enter() const;

 private:
  std::filesystem::path dir_;
};

}  // namespace loom::engine
