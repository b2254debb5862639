// Plugin packages: manifest I/O, sha256, and `loom pack` / `loom install` on .tar.gz files
// (libarchive). Installing never lets the archive choose where bytes land: every member is
// checked and written by this code under a fresh temporary folder, verified, then renamed.
#include "loader/package.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "base/tool_output.hpp"
#include "loader/registry.hpp"
#include "loader/schema.hpp"
#include "loom/common.h"
#include "loom/cpp/regular_file.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

const char* const kLicenseNames[] = {"LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING"};

std::string hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c));
         });
}

bool safe_token(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == '+';
  });
}

std::string quoted_toml(const std::string& s) {
  Value v;
  v.type = LOOM_PARAM_STRING;
  v.s = s;
  return toml_literal(v);
}

fs::path find_license(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : kLicenseNames)
    if (fs::is_regular_file(dir / name, ec)) return dir / name;
  return {};
}

std::string package_folder_name(const Manifest& m) {
  return m.kind + "-" + m.name + "-" + m.version;
}

// Removes a folder tree when it goes out of scope, unless released.
struct TempDir {
  fs::path path;
  ~TempDir() {
    if (path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct ArchiveReader {
  archive* a = archive_read_new();
  ~ArchiveReader() { archive_read_free(a); }
};
struct ArchiveWriter {
  archive* a = archive_write_new();
  ~ArchiveWriter() { archive_write_free(a); }
};
struct EntryPtr {
  archive_entry* e = archive_entry_new();
  ~EntryPtr() { archive_entry_free(e); }
};

// A member name the installer accepts: relative, no "..", no empty or odd components.
bool safe_member(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos) return false;
  fs::path p(name);
  for (const fs::path& part : p) {
    std::string s = part.string();
    if (s == "..") return false;
  }
  return true;
}

void extract(const fs::path& pkg, const fs::path& into) {
  ArchiveReader r;
  archive_read_support_filter_all(r.a);
  archive_read_support_format_tar(r.a);
  archive_read_support_format_gnutar(r.a);
  if (archive_read_open_filename(r.a, pkg.c_str(), 1 << 16) != ARCHIVE_OK)
    throw UsageError(
        "cannot read package " + pkg.string() + ": " +
        one_line(archive_error_string(r.a) ? archive_error_string(r.a) : "unknown error"));
  archive_entry* e = nullptr;
  int rc;
  while ((rc = archive_read_next_header(r.a, &e)) == ARCHIVE_OK) {
    const char* raw_name = archive_entry_pathname(e);
    std::string name = raw_name ? raw_name : "";
    if (!safe_member(name))
      throw UsageError("refusing package " + pkg.string() + ": unsafe path '" +
                       one_line(name, 100) + "' (absolute or with '..')");
    if (archive_entry_hardlink(e) != nullptr || archive_entry_symlink(e) != nullptr)
      throw UsageError("refusing package " + pkg.string() + ": '" + one_line(name, 100) +
                       "' is a link; packages hold only files and folders");
    fs::path dest = into / fs::path(name).lexically_normal();
    std::error_code ec;
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR) {
      fs::create_directories(dest, ec);
      if (ec) throw RunError("cannot create " + dest.string() + ": " + ec.message());
      continue;
    }
    if (type != AE_IFREG)
      throw UsageError("refusing package " + pkg.string() + ": '" + one_line(name, 100) +
                       "' is not a plain file or folder");
    fs::create_directories(dest.parent_path(), ec);
    mode_t mode = (archive_entry_perm(e) & 0100) ? 0755 : 0644;
    int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
      throw UsageError("refusing package " + pkg.string() + ": cannot write '" + name +
                       "' (listed twice?): " + std::strerror(errno));
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    int data_rc;
    while ((data_rc = archive_read_data_block(r.a, &buf, &size, &offset)) == ARCHIVE_OK) {
      if (::pwrite(fd, buf, size, offset) != static_cast<ssize_t>(size)) {
        ::close(fd);
        throw RunError("cannot write " + dest.string() + ": " + std::strerror(errno));
      }
    }
    ::close(fd);
    if (data_rc != ARCHIVE_EOF)
      throw UsageError(
          "cannot read package " + pkg.string() + ": " +
          one_line(archive_error_string(r.a) ? archive_error_string(r.a) : "corrupt data"));
  }
  if (rc != ARCHIVE_EOF)
    throw UsageError(
        "cannot read package " + pkg.string() + ": " +
        one_line(archive_error_string(r.a) ? archive_error_string(r.a) : "corrupt archive"));
}

}  // namespace

std::string sha256_of_file(const fs::path& file) {
  require_regular_file(file.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw RunError("cannot read " + file.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw RunError("sha256: cannot initialise OpenSSL");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw RunError("cannot read " + file.string());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  return hex(digest, len);
}

std::string read_manifest(const fs::path& manifest, Manifest& out) {
  toml::table t;
  if (std::string why = loom::not_regular_file(manifest.string()); !why.empty()) return why;
  try {
    t = toml::parse_file(manifest.string());
  } catch (const toml::parse_error& e) {
    return "manifest.toml:" + std::to_string(e.source().begin.line) + ": " +
           one_line(std::string(e.description()), 120);
  }
  std::string problem;
  auto str = [&](const char* key, std::string& into, bool required) {
    if (!problem.empty()) return;
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) problem = "manifest.toml has no '" + std::string(key) + "'";
      return;
    }
    if (!n->is_string()) {
      problem = "manifest.toml: '" + std::string(key) + "' must be a string";
      return;
    }
    into = *n->value<std::string>();
  };
  auto num = [&](const char* key, int64_t& into) {
    if (!problem.empty()) return;
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      problem = "manifest.toml has no '" + std::string(key) + "'";
    } else if (!n->is_integer()) {
      problem = "manifest.toml: '" + std::string(key) + "' must be an integer";
    } else {
      into = *n->value<int64_t>();
    }
  };
  str("kind", out.kind, true);
  str("name", out.name, true);
  num("abi_major", out.abi_major);
  num("abi_minor", out.abi_minor);
  str("version", out.version, true);
  str("vendor", out.vendor, true);
  str("license", out.license, true);
  str("description", out.description, false);
  str("file", out.file, true);
  str("sha256", out.sha256, true);
  if (!problem.empty()) return problem;
  if (!safe_token(out.kind) || !safe_token(out.name) || !safe_token(out.version))
    return "manifest.toml: kind, name and version may hold only letters, digits and . - _ +";
  try {  // the same rule as every listing Loom reads (checkpoint manifests, HF indexes)
    entry_in_folder(manifest.parent_path(), out.file, manifest);
  } catch (const UsageError& e) {
    return e.what();
  }
  if (!out.file.ends_with(".so"))
    return "manifest.toml: file must be the plain name of a .so in the package, got '" +
           one_line(out.file, 80) + "'";
  if (!is_sha256_hex(out.sha256)) return "manifest.toml: sha256 must be 64 hex digits";
  std::transform(out.sha256.begin(), out.sha256.end(), out.sha256.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (out.abi_major < 0 || out.abi_minor < 0) return "manifest.toml: ABI numbers must be >= 0";
  return "";
}

std::string manifest_toml(const Manifest& m) {
  std::string s = "# Loom plugin package manifest (written by `loom pack`).\n";
  s += "kind = " + quoted_toml(m.kind) + "\n";
  s += "name = " + quoted_toml(m.name) + "\n";
  s += "abi_major = " + std::to_string(m.abi_major) + "\n";
  s += "abi_minor = " + std::to_string(m.abi_minor) + "\n";
  s += "version = " + quoted_toml(m.version) + "\n";
  s += "vendor = " + quoted_toml(m.vendor) + "\n";
  s += "license = " + quoted_toml(m.license) + "\n";
  s += "description = " + quoted_toml(m.description) + "\n";
  s += "file = " + quoted_toml(m.file) + "\n";
  s += "sha256 = " + quoted_toml(m.sha256) + "\n";
  return s;
}

void write_tar_gz(const fs::path& out, const std::vector<ArchiveEntry>& entries) {
  ArchiveWriter w;
  auto fail = [&](const std::string& what) {
    const char* msg = archive_error_string(w.a);
    throw RunError("cannot write " + out.string() + ": " + what +
                   (msg ? ": " + std::string(msg) : ""));
  };
  if (archive_write_add_filter_gzip(w.a) != ARCHIVE_OK ||
      archive_write_set_format_pax_restricted(w.a) != ARCHIVE_OK)
    fail("libarchive setup");
  if (archive_write_open_filename(w.a, out.c_str()) != ARCHIVE_OK) fail("open");
  const time_t now = std::time(nullptr);
  for (const ArchiveEntry& item : entries) {
    EntryPtr e;
    archive_entry_set_pathname(e.e, item.name.c_str());
    archive_entry_set_mtime(e.e, now, 0);
    archive_entry_set_uid(e.e, 0);
    archive_entry_set_gid(e.e, 0);
    std::string data = item.data;
    if (item.type == ArchiveEntry::kDir) {
      archive_entry_set_filetype(e.e, AE_IFDIR);
      archive_entry_set_perm(e.e, 0755);
    } else if (item.type == ArchiveEntry::kSymlink) {
      archive_entry_set_filetype(e.e, AE_IFLNK);
      archive_entry_set_perm(e.e, 0777);
      archive_entry_set_symlink(e.e, item.link_target.c_str());
    } else {
      if (!item.source.empty()) {
        require_regular_file(item.source.string());
        std::ifstream in(item.source, std::ios::binary);
        if (!in) throw RunError("cannot read " + item.source.string());
        data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      archive_entry_set_filetype(e.e, AE_IFREG);
      archive_entry_set_perm(e.e, item.mode);
      archive_entry_set_size(e.e, static_cast<la_int64_t>(data.size()));
    }
    if (archive_write_header(w.a, e.e) != ARCHIVE_OK) fail(item.name);
    if (!data.empty() &&
        archive_write_data(w.a, data.data(), data.size()) != static_cast<la_ssize_t>(data.size()))
      fail(item.name);
  }
  if (archive_write_close(w.a) != ARCHIVE_OK) fail("close");
}

fs::path pack_plugin(const fs::path& dir, const fs::path& out, bool overwrite) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("'" + dir.string() + "' is not a directory");
  std::vector<fs::path> libs;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".so" && fs::is_regular_file(entry.path(), ec))
      libs.push_back(entry.path());
  std::sort(libs.begin(), libs.end());
  if (libs.empty()) throw UsageError(dir.string() + " holds no plugin .so file");
  if (libs.size() > 1)
    throw UsageError(dir.string() + " holds " + std::to_string(libs.size()) + " .so files (" +
                     libs[0].filename().string() + ", " + libs[1].filename().string() +
                     (libs.size() > 2 ? ", ..." : "") + "); a package holds exactly one");
  fs::path license = find_license(dir);
  if (license.empty())
    throw UsageError(dir.string() +
                     " has no LICENSE file (LICENSE, LICENSE.txt, LICENSE.md or COPYING)");
  PluginInfo info;
  std::string reason = probe_plugin(libs[0], info);
  if (!reason.empty()) throw UsageError("cannot pack " + libs[0].string() + ": " + reason);
  if (info.license.empty())
    throw UsageError("cannot pack " + libs[0].string() +
                     ": its descriptor names no license (an SPDX identifier such as MIT)");
  if (!safe_token(info.version))
    throw UsageError("cannot pack " + libs[0].string() + ": version '" + info.version +
                     "' must be non-empty letters, digits and . - _ +");

  Manifest m;
  m.kind = kind_name(info.kind);
  m.name = info.name;
  m.abi_major = info.abi_major;
  m.abi_minor = info.abi_minor;
  m.version = info.version;
  m.vendor = info.vendor;
  m.license = info.license;
  m.description = info.description;
  m.file = libs[0].filename().string();
  m.sha256 = sha256_of_file(libs[0]);

  const std::string top = package_folder_name(m);
  fs::path target = out.empty() ? fs::current_path() / (top + ".tar.gz") : out;
  check_output("loom pack", target, {dir}, overwrite);
  std::vector<ArchiveEntry> entries;
  entries.push_back({top + "/", ArchiveEntry::kDir, {}, {}, {}, 0755});
  entries.push_back({top + "/" + m.file, ArchiveEntry::kFile, libs[0], {}, {}, 0755});
  entries.push_back({top + "/manifest.toml", ArchiveEntry::kFile, {}, manifest_toml(m), {}, 0644});
  entries.push_back({top + "/LICENSE", ArchiveEntry::kFile, license, {}, {}, 0644});
  write_file_atomically(target, [&](const fs::path& tmp) { write_tar_gz(tmp, entries); });
  return target;
}

fs::path user_plugin_dir() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return {};
  return fs::path(home) / ".local" / "lib" / "loom" / "plugins";
}

fs::path default_install_dir() {
  if (const char* env = std::getenv("LOOM_PLUGIN_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start < s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) return s.substr(start, end - start);
      start = end + 1;
    }
  }
  fs::path user = user_plugin_dir();
  if (user.empty())
    throw UsageError("no folder to install into: set LOOM_PLUGIN_PATH or HOME, or pass --dir");
  return user;
}

InstallResult install_package(const fs::path& pkg, const fs::path& dir_arg) {
  std::error_code ec;
  require_regular_file(pkg.string(), "package: ");
  if (!fs::is_regular_file(pkg, ec)) throw UsageError("package '" + pkg.string() + "' not found");
  const fs::path dir = dir_arg.empty() ? default_install_dir() : dir_arg;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    throw UsageError("cannot create install folder " + dir.string() +
                     (ec ? ": " + ec.message() : ""));

  std::string pattern = (dir / ".loom-install-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw UsageError("cannot write to " + dir.string() + ": " + std::strerror(errno));
  TempDir tmp{pattern};
  const fs::path unpacked = tmp.path / "new";
  fs::create_directory(unpacked, ec);
  extract(pkg, unpacked);

  std::vector<fs::path> tops;
  for (const auto& entry : fs::directory_iterator(unpacked, ec)) tops.push_back(entry.path());
  if (tops.size() != 1 || !fs::is_directory(tops[0], ec) || fs::is_symlink(tops[0], ec))
    throw UsageError("refusing package " + pkg.string() + ": it must hold exactly one top folder");
  const fs::path folder = tops[0];
  auto refuse = [&](const std::string& why) {
    throw UsageError("refusing package " + pkg.string() + ": " + why);
  };

  Manifest m;
  if (!fs::is_regular_file(folder / "manifest.toml", ec)) refuse("it has no manifest.toml");
  std::string reason = read_manifest(folder / "manifest.toml", m);
  if (!reason.empty()) refuse(reason);
  if (!kind_from_name(m.kind)) refuse("unknown plugin kind '" + m.kind + "'");
  if (m.abi_major != LOOM_ABI_MAJOR)
    refuse(abi_mismatch((uint64_t)m.abi_major, (uint64_t)m.abi_minor));
  const fs::path so = folder / m.file;
  if (!fs::is_regular_file(so, ec))
    refuse("manifest names '" + m.file + "' but the package lacks it");
  std::string actual = sha256_of_file(so);
  if (actual != m.sha256)
    refuse("sha256 mismatch for " + m.file + ": manifest says " + m.sha256.substr(0, 16) +
           "..., file is " + actual.substr(0, 16) + "...");
  if (find_license(folder).empty()) refuse("it has no LICENSE file");
  // The library must be the plugin the manifest says: an ELF shared object with the entry
  // symbol and a valid descriptor of that kind/name. Probed in a child process, so that a
  // hostile or broken one runs none of its code here.
  PluginInfo probed;
  const std::string why = probe_plugin_isolated(so, probed);
  if (!why.empty()) refuse(m.file + " is not a loadable Loom plugin: " + why);
  if (kind_name(probed.kind) != m.kind || probed.name != m.name)
    refuse("manifest says " + m.kind + "/" + m.name + " but " + m.file + " is " +
           kind_name(probed.kind) + "/" + probed.name);

  InstallResult result;
  result.kind = m.kind;
  result.name = m.name;
  result.version = m.version;
  result.folder = dir / package_folder_name(m);

  // Installed packages of the same kind/name are replaced: moved aside now, deleted with
  // the temporary folder once the new one is in place, put back if that fails.
  std::vector<std::pair<fs::path, fs::path>> moved;
  std::vector<fs::path> existing;
  for (const auto& entry : fs::directory_iterator(dir, ec)) existing.push_back(entry.path());
  std::sort(existing.begin(), existing.end());
  for (const fs::path& other : existing) {
    if (other.filename().string().starts_with(".") || !fs::is_directory(other, ec)) continue;
    Manifest om;
    bool readable = fs::is_regular_file(other / "manifest.toml", ec) &&
                    read_manifest(other / "manifest.toml", om).empty();
    bool same = other == result.folder || (readable && om.kind == m.kind && om.name == m.name);
    if (!same) continue;
    fs::path aside = tmp.path / ("old-" + std::to_string(moved.size()));
    fs::rename(other, aside, ec);
    if (ec) throw UsageError("cannot replace " + other.string() + ": " + ec.message());
    moved.emplace_back(other, aside);
    result.replaced.push_back(!readable ? other.string()
                                        : om.kind + "/" + om.name + " " + om.version + " at " +
                                              other.string());
  }
  fs::rename(folder, result.folder, ec);
  if (ec) {
    std::error_code ignore;
    for (const auto& [from, aside] : moved) fs::rename(aside, from, ignore);
    throw UsageError("cannot install into " + result.folder.string() + ": " + ec.message());
  }
  return result;
}

}  // namespace loom::engine
