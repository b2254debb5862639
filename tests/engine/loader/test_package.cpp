// Plugin packages: pack -> install -> discovery, and every refusal on the way.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "loader/package.hpp"
#include "loader/probe_room.hpp"

using namespace loom::engine;
using namespace enginetest;

namespace {

const std::string kStubs = LOOM_TEST_STUB_DIR;
const fs::path kTinySo = fs::path(LOOM_TEST_TINY_DIR) / "loom-optimizer-tiny.so";

// A folder ready for `loom pack`: the tiny plugin and a licence.
fs::path pack_source(const TempDir& dir, const fs::path& so = kTinySo,
                     const std::string& license_name = "LICENSE") {
  fs::path src = dir / "src";
  fs::create_directories(src);
  fs::copy_file(so, src / so.filename(), fs::copy_options::overwrite_existing);
  write_file(src / license_name, "MIT License\n\nCopyright (c) Loom tests\n");
  return src;
}

// Non-hidden entries of a folder (an aborted install must leave none behind).
std::vector<std::string> visible(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string manifest_for(const std::string& sha,
                         const std::string& file = "loom-optimizer-tiny.so") {
  return "kind = \"optimizer\"\nname = \"tiny\"\nabi_major = 2\nabi_minor = 0\nversion = "
         "\"0.1.0\"\n"
         "vendor = \"x\"\nlicense = \"MIT\"\nfile = \"" +
         file + "\"\nsha256 = \"" + sha + "\"\n";
}

ArchiveEntry file_entry(const std::string& name, const std::string& data) {
  ArchiveEntry e;
  e.name = name;
  e.data = data;
  return e;
}
ArchiveEntry copy_entry(const std::string& name, const fs::path& source, unsigned mode) {
  ArchiveEntry e;
  e.name = name;
  e.source = source;
  e.mode = mode;
  return e;
}
ArchiveEntry dir_entry(const std::string& name) {
  ArchiveEntry e;
  e.name = name;
  e.type = ArchiveEntry::kDir;
  return e;
}
ArchiveEntry link_entry(const std::string& name, const std::string& target) {
  ArchiveEntry e;
  e.name = name;
  e.type = ArchiveEntry::kSymlink;
  e.link_target = target;
  return e;
}

// A hand-made package archive, for tampered and hostile variants.
fs::path make_archive(const TempDir& dir, const std::string& name,
                      const std::vector<ArchiveEntry>& entries) {
  fs::path out = dir / name;
  write_tar_gz(out, entries);
  return out;
}

// The whitespace-separated words of the first line of `text` that contains `needle`.
std::vector<std::string> words_of_line(const std::string& text, const std::string& needle) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find(needle) != std::string::npos) {
      std::istringstream in(line);
      std::vector<std::string> words;
      for (std::string w; in >> w;) words.push_back(w);
      return words;
    }
  return {};
}

}  // namespace

TEST_CASE("pack -> install -> plugins lists the package; validate loads it") {
  TempDir dir;
  fs::path src = pack_source(dir);
  Result r = run_loom("pack " + q(src.string()) + " -o " + q((dir / "tiny.tar.gz").string()));
  REQUIRE(r.code == 0);
  CHECK(r.out == "packed " + (dir / "tiny.tar.gz").string() + "\n");

  // Without -o the archive is named after the plugin, in the current folder.
  r = run_loom("pack " + q(src.string()), kStubs, dir.path().string());
  CHECK(r.code == 0);
  CHECK(fs::exists(dir / "optimizer-tiny-0.1.0.tar.gz"));
  // An archive that exists is replaced only with --overwrite; one inside DIR never.
  r = run_loom("pack " + q(src.string()) + " -o " + q((dir / "tiny.tar.gz").string()));
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err, "loom pack: the output " + (dir / "tiny.tar.gz").string() +
                                    " already exists; pass --overwrite"),
                r.err);
  r = run_loom("pack " + q(src.string()) + " -o " + q((dir / "tiny.tar.gz").string()) +
               " --overwrite");
  CHECK(r.code == 0);
  r = run_loom("pack " + q(src.string()) + " -o " + q((src / "x.tar.gz").string()));
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err, "lies inside the input"), r.err);

  fs::path inst = dir / "installed";
  r = run_loom("install " + q((dir / "tiny.tar.gz").string()) + " --dir " + q(inst.string()));
  REQUIRE(r.code == 0);
  fs::path folder = inst / "optimizer-tiny-0.1.0";
  CHECK(r.out == "installed optimizer/tiny 0.1.0 into " + folder.string() + "\n");
  CHECK(visible(inst) == std::vector<std::string>{"optimizer-tiny-0.1.0"});
  CHECK(visible(folder) ==
        std::vector<std::string>{"LICENSE", "loom-optimizer-tiny.so", "manifest.toml"});
  Manifest m;
  REQUIRE(read_manifest(folder / "manifest.toml", m) == "");
  CHECK(m.kind == "optimizer");
  CHECK(m.name == "tiny");
  CHECK(m.abi_major == 2);
  CHECK(m.abi_minor == 0);
  CHECK(m.version == "0.1.0");
  CHECK(m.vendor == "Loom tests");
  CHECK(m.license == "MIT");
  CHECK(m.description == "a tiny test optimizer");
  CHECK(m.file == "loom-optimizer-tiny.so");
  CHECK(m.sha256 == sha256_of_file(kTinySo));

  const std::string path = inst.string() + ":" + kStubs;
  r = run_loom("plugins", path);
  CHECK(r.code == 0);
  // the table's columns are as wide as their widest entry (the ABI column holds "2.10")
  CHECK(words_of_line(r.out, (folder / "loom-optimizer-tiny.so").string()) ==
        std::vector<std::string>{"optimizer", "tiny", "0.1.0", "2.0", "Loom", "tests",
                                 (folder / "loom-optimizer-tiny.so").string()});
  CHECK_FALSE(contains(r.out, "refused"));
  fs::path recipe = write_file(dir / "r.toml", "[optimizer]\nplugin = \"tiny\"\nbeta = 0.5\n");
  r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 0);
  r = run_loom("plugins describe optimizer/tiny", path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "beta  float  0.9"));

  // Installing again replaces the installed copy.
  r = run_loom("install " + q((dir / "tiny.tar.gz").string()) + " --dir " + q(inst.string()));
  CHECK(r.code == 0);
  CHECK(contains(r.out, "replaced optimizer/tiny 0.1.0 at " + folder.string()));
  CHECK(visible(inst) == std::vector<std::string>{"optimizer-tiny-0.1.0"});

  // The default folder is the first LOOM_PLUGIN_PATH entry.
  fs::path first = dir / "first";
  r = run_loom("install " + q((dir / "tiny.tar.gz").string()), first.string() + ":" + kStubs);
  CHECK(r.code == 0);
  CHECK(fs::exists(first / "optimizer-tiny-0.1.0/manifest.toml"));
}

TEST_CASE("a package modified after installing is refused at discovery (sha256)") {
  TempDir dir;
  fs::path src = pack_source(dir);
  REQUIRE(run_loom("pack " + q(src.string()) + " -o " + q((dir / "t.tar.gz").string())).code == 0);
  fs::path inst = dir / "inst";
  REQUIRE(
      run_loom("install " + q((dir / "t.tar.gz").string()) + " --dir " + q(inst.string())).code ==
      0);
  fs::path so = inst / "optimizer-tiny-0.1.0/loom-optimizer-tiny.so";
  { std::ofstream(so, std::ios::app) << "tampered"; }
  const std::string path = inst.string() + ":" + kStubs;
  Result r = run_loom("plugins", path);
  CHECK(r.code == 0);
  CHECK(contains(r.out, so.string() + ": sha256 mismatch: manifest says "));
  CHECK_FALSE(contains(r.out, "optimizer  tiny"));
  fs::path recipe = write_file(dir / "r.toml", "[optimizer]\nplugin = \"tiny\"\n");
  r = run_loom("validate " + q(recipe.string()), path);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "plugin optimizer/tiny refused: " + so.string() + ": sha256 mismatch"));
}

TEST_CASE("listing packages does not load them; --load does") {
  // A package whose .so is not a loadable library but whose manifest pins it correctly.
  TempDir dir;
  fs::path folder = dir / "plugins/optimizer-tiny-0.1.0";
  write_file(folder / "loom-optimizer-tiny.so", "not a library");
  write_file(folder / "LICENSE", "MIT\n");
  write_file(folder / "manifest.toml",
             manifest_for(sha256_of_file(folder / "loom-optimizer-tiny.so")));
  Result r = run_loom("plugins", (dir / "plugins").string());
  CHECK(r.code == 0);
  CHECK(contains(r.out, "optimizer  tiny"));
  CHECK_FALSE(contains(r.out, "refused"));
  r = run_loom("plugins --load", (dir / "plugins").string());
  CHECK(r.code == 0);
  CHECK(contains(r.out, "loom-optimizer-tiny.so: not a shared object (no ELF header)"));
  // A manifest missing a key is refused with the key's name.
  write_file(folder / "manifest.toml", "kind = \"optimizer\"\nname = \"tiny\"\n");
  r = run_loom("plugins", (dir / "plugins").string());
  CHECK(contains(r.out, ": manifest.toml has no 'abi_major'"));
}

TEST_CASE("install probes a package's code in an empty scratch folder, not the user's") {
  TempDir dir;
  const fs::path user = dir / "user", home = dir / "home", inst = dir / "inst";
  for (const fs::path& p : {user, home, inst}) fs::create_directories(p);
  const fs::path so = fs::path(LOOM_TEST_TOUCH_DIR) / "loom-optimizer-touch.so";
  const std::string top = "optimizer-touch-0.1.0/";
  std::string manifest = manifest_for(sha256_of_file(so), "loom-optimizer-touch.so");
  manifest.replace(manifest.find("\"tiny\""), 6, "\"touch\"");
  const fs::path pkg = make_archive(
      dir, "touch.tar.gz",
      {dir_entry(top), copy_entry(top + so.filename().string(), so, 0755),
       file_entry(top + "LICENSE", "MIT\n"), file_entry(top + "manifest.toml", manifest)});
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  ::setenv("HOME", home.c_str(), 1);
  // The constructor also writes into `user` by its absolute path, which only Landlock stops.
  ::setenv("TINY_TOUCH_ABSOLUTE", user.c_str(), 1);
  const Result r =
      run_loom("install " + q(pkg.string()) + " --dir " + q(inst.string()), kStubs, user.string());
  ::unsetenv("TINY_TOUCH_ABSOLUTE");
  if (old_home)
    ::setenv("HOME", saved.c_str(), 1);
  else
    ::unsetenv("HOME");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // The constructor ran (installing a package is running its code), but elsewhere.
  CHECK(visible(home).empty());
  CHECK(visible(inst) == std::vector<std::string>{"optimizer-touch-0.1.0"});
  if (loom::engine::ProbeRoom::landlock_abi() >= 1) {
    CHECK_MESSAGE(visible(user).empty(), "Landlock let the probe write by an absolute path");
    CHECK_FALSE(contains(r.err, "no Landlock"));
  } else {
    // Without Landlock the absolute write lands, and install says it could not stop it.
    MESSAGE("this kernel has no Landlock: the absolute-path write is not stopped");
    CHECK(visible(user) == std::vector<std::string>{"touched-by-plugin"});
    CHECK(contains(r.err, "no Landlock"));
  }
}

TEST_CASE("a confined process writes only beneath its probe folder") {
  if (loom::engine::ProbeRoom::landlock_abi() < 1) {
    MESSAGE("skipped: this kernel has no Landlock");
    return;
  }
  TempDir dir;
  const fs::path outside = dir / "outside";
  fs::create_directories(outside);
  const loom::engine::ProbeRoom room;  // made here, so that this process removes it
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child: enter the probe room, then try to write in and out of it
    room.enter();
    std::FILE* in = std::fopen("inside", "w");
    std::FILE* out = std::fopen((outside / "escaped").c_str(), "w");
    const bool removed = ::rmdir(outside.c_str()) == 0 || ::unlink(outside.c_str()) == 0;
    ::_exit(in != nullptr && out == nullptr && !removed ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(visible(outside).empty());
  CHECK(fs::is_directory(outside));
}

TEST_CASE("install refuses a tampered package and leaves the folder untouched") {
  TempDir dir;
  fs::path inst = dir / "inst";
  fs::create_directories(inst);
  const std::string top = "optimizer-tiny-0.1.0/";
  std::vector<ArchiveEntry> base = {
      dir_entry(top),
      copy_entry(top + "loom-optimizer-tiny.so", kTinySo, 0755),
      file_entry(top + "LICENSE", "MIT\n"),
  };
  auto install = [&](const fs::path& pkg) {
    return run_loom("install " + q(pkg.string()) + " --dir " + q(inst.string()));
  };
  auto with = [&](std::vector<ArchiveEntry> extra) {
    std::vector<ArchiveEntry> all = base;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };

  // sha256 of another file.
  std::string wrong(64, 'a');
  fs::path pkg = make_archive(dir, "sha.tar.gz",
                              with({file_entry(top + "manifest.toml", manifest_for(wrong))}));
  Result r = install(pkg);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err) == 1);
  CHECK(contains(r.err, "refusing package " + pkg.string() +
                            ": sha256 mismatch for loom-optimizer-tiny.so: manifest says aaaa"));
  CHECK(visible(inst).empty());
  CHECK(std::distance(fs::directory_iterator(inst), fs::directory_iterator()) ==
        0);  // no temp left

  const std::string good = sha256_of_file(kTinySo);
  // An incomplete manifest.
  pkg = make_archive(dir, "incomplete.tar.gz",
                     with({file_entry(top + "manifest.toml", "kind = \"optimizer\"\n")}));
  r = install(pkg);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "manifest.toml has no 'name'"));

  // A manifest's file outside the package folder: the rule of every listing Loom reads.
  pkg = make_archive(
      dir, "outside.tar.gz",
      with({file_entry(top + "manifest.toml", manifest_for(good, "../../usr/lib/evil.so"))}));
  r = install(pkg);
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err,
                         "manifest.toml: entry '../../usr/lib/evil.so' is a path, not a "
                         "plain file name"),
                r.err);

  // No manifest at all.
  r = install(make_archive(dir, "nomanifest.tar.gz", base));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "it has no manifest.toml"));

  // Paths that escape, links, two top folders.
  const ArchiveEntry manifest = file_entry(top + "manifest.toml", manifest_for(good));
  r = install(
      make_archive(dir, "dotdot.tar.gz", with({manifest, file_entry(top + "../../evil.so", "x")})));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "unsafe path 'optimizer-tiny-0.1.0/../../evil.so'"));
  CHECK_FALSE(fs::exists(dir / "evil.so"));
  r = install(
      make_archive(dir, "abs.tar.gz", with({manifest, file_entry("/tmp/loom-evil.so", "x")})));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "unsafe path '/tmp/loom-evil.so'"));
  r = install(
      make_archive(dir, "link.tar.gz", with({manifest, link_entry(top + "LINK", "/etc/passwd")})));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "'optimizer-tiny-0.1.0/LINK' is a link"));
  r = install(make_archive(dir, "two.tar.gz", with({manifest, dir_entry("other/")})));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "exactly one top folder"));

  // Another ABI major: an older one and a newer one.
  for (const char* major : {"1", "3"}) {
    std::string other = manifest_for(good);
    other.replace(other.find("abi_major = 2"), 13, std::string("abi_major = ") + major);
    r = install(make_archive(dir, std::string("abi") + major + ".tar.gz",
                             with({file_entry(top + "manifest.toml", other)})));
    CHECK(r.code == 2);
    CHECK(contains(r.err,
                   std::string("built for Loom ABI ") + major + ".0, this host is " + kHostAbi));
  }

  // Not an archive.
  r = install(write_file(dir / "junk.tar.gz", "junk"));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "cannot read package"));
  r = install(dir / "missing.tar.gz");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "not found"));

  CHECK(visible(inst).empty());
  CHECK(std::distance(fs::directory_iterator(inst), fs::directory_iterator()) == 0);

  // Issue 17, finding 5: a library the manifest pins correctly but that is no loadable
  // plugin, or another plugin than the manifest says, is refused before it is installed.
  const fs::path junk = write_file(dir / "junk.so", "not a library");
  const fs::path odd = LOOM_TEST_ODD_DIR;
  const std::vector<std::pair<fs::path, std::string>> not_plugins = {
      {junk, "not a shared object (no ELF header)"},
      {odd / "loom-model-noentry.so", "no loom_plugin_entry symbol (not a Loom plugin)"},
      {odd / "loom-optimizer-null.so", "loom_plugin_entry returned NULL"},
      {odd / "loom-optimizer-nullslot.so", "leaves mandatory slot 'step' NULL"},
      {fs::path(LOOM_TEST_WILD_DIR) / "loom-optimizer-wild.so", "crashed while loading (signal 11"},
      {fs::path(kStubs) / "loom-optimizer-adamw.so",
       "manifest says optimizer/tiny but loom-optimizer-tiny.so is optimizer/adamw"}};
  for (const auto& [lib, why] : not_plugins) {
    CAPTURE(lib);
    const std::vector<ArchiveEntry> entries = {
        dir_entry(top), copy_entry(top + "loom-optimizer-tiny.so", lib, 0755),
        file_entry(top + "LICENSE", "MIT\n"),
        file_entry(top + "manifest.toml", manifest_for(sha256_of_file(lib)))};
    r = install(make_archive(dir, "notplugin.tar.gz", entries));
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(contains(r.err, why));
    if (lib != fs::path(kStubs) / "loom-optimizer-adamw.so")
      CHECK(contains(r.err, "loom-optimizer-tiny.so is not a loadable Loom plugin: "));
    CHECK(visible(inst).empty());
  }

  // And the untampered archive installs.
  r = install(make_archive(dir, "good.tar.gz", with({manifest})));
  CHECK(r.code == 0);
}

TEST_CASE("pack refuses folders it cannot package") {
  TempDir dir;
  Result r = run_loom("pack " + q((dir / "nope").string()));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "is not a directory"));

  fs::create_directories(dir / "empty");
  r = run_loom("pack " + q((dir / "empty").string()));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "holds no plugin .so file"));

  fs::path src = dir / "nolicense";
  fs::create_directories(src);
  fs::copy_file(kTinySo, src / kTinySo.filename());
  r = run_loom("pack " + q(src.string()));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "has no LICENSE file"));

  fs::copy_file(fs::path(LOOM_TEST_STUB_DIR) / "loom-model-gpt.so", src / "loom-model-gpt.so");
  write_file(src / "COPYING", "GPL\n");
  r = run_loom("pack " + q(src.string()));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "holds 2 .so files"));

  TempDir dir2;
  fs::path src2 = pack_source(dir2, fs::path(LOOM_TEST_TINY_OTHER_DIR) / "loom-optimizer-tiny.so",
                              "LICENSE.txt");
  r = run_loom("pack " + q(src2.string()));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "built for Loom ABI 3.0, this host is " + kHostAbi));
}
