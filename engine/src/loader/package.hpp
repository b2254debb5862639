// Plugin packages: a folder (or a .tar.gz of one) holding the plugin's .so, its LICENSE and a
// manifest.toml that describes the plugin and pins the .so by sha256, so the engine can list
// and verify a package without running its code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::engine {

struct Manifest {
  std::string name, kind, version, vendor, license, description;
  int64_t abi_major = -1, abi_minor = -1;
  std::string file;    // the .so, a plain file name inside the package folder
  std::string sha256;  // lowercase hex of the .so
};

// Reads a manifest.toml into `out`. Returns "" or a one-line reason: unreadable, a syntax
// error, a missing or mistyped key, a file name with a path in it, a malformed sha256.
// Fields read before the failure are left in `out` (to name the refused plugin).
std::string read_manifest(const std::filesystem::path& manifest, Manifest& out);
// The manifest as TOML text (what `loom pack` writes).
std::string manifest_toml(const Manifest& m);

// Lowercase hex SHA-256 of a file's bytes (OpenSSL EVP). Throws RunError when unreadable.
std::string sha256_of_file(const std::filesystem::path& file);

// One member of a .tar.gz: a directory, a regular file (from `source` on disk, or from
// `data` when source is empty), or a symbolic link (tests build hostile archives with it).
struct ArchiveEntry {
  std::string name;  // path inside the archive, '/'-separated; written as given
  enum Type { kFile, kDir, kSymlink } type = kFile;
  std::filesystem::path source;
  std::string data;
  std::string link_target;  // kSymlink
  unsigned mode = 0644;
};
// Writes a gzip-compressed POSIX tar archive (libarchive). Throws RunError on I/O failure.
void write_tar_gz(const std::filesystem::path& out, const std::vector<ArchiveEntry>& entries);

// `loom pack DIR [-o OUT]`: DIR holds exactly one plugin .so and a LICENSE (LICENSE.txt,
// LICENSE.md or COPYING). Writes <kind>-<name>-<version>.tar.gz (or `out`) with the folder
// <kind>-<name>-<version>/ holding the .so, manifest.toml and LICENSE. Returns the archive
// path. Throws UsageError with a one-line reason, also for an archive that exists (unless
// `overwrite`) or lies inside DIR (tool_output.hpp's rules).
std::filesystem::path pack_plugin(const std::filesystem::path& dir,
                                  const std::filesystem::path& out, bool overwrite);

struct InstallResult {
  std::filesystem::path folder;  // where the package now lives
  std::string kind, name, version;
  std::vector<std::string> replaced;  // "model/tiny 0.1.0 at <path>" for each replaced one
};
// `loom install PKG [--dir DIR]`: extracts into a temporary folder beside the target,
// verifies (one top folder; only plain files and folders; no absolute or '..' paths; a
// complete manifest of this host's ABI major; the .so's sha256; a LICENSE), then renames
// it into DIR/<kind>-<name>-<version>, replacing an installed package of the same
// kind/name. Throws UsageError with a one-line reason and leaves DIR as it was.
InstallResult install_package(const std::filesystem::path& pkg, const std::filesystem::path& dir);

// First entry of LOOM_PLUGIN_PATH, else ~/.local/lib/loom/plugins.
std::filesystem::path default_install_dir();
// ~/.local/lib/loom/plugins ("" when HOME is unset).
std::filesystem::path user_plugin_dir();

}  // namespace loom::engine
