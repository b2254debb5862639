// The ABI gate: the public structs' layout must match tests/abi/abi_v<MAJOR>.golden unless
// the ABI version changes with it; within a major version, layouts may only grow at the end.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "abi_layout.hpp"
#include "loom/loom.h"

extern "C" const size_t loom_abi_c11_sizes[];
extern "C" const size_t loom_abi_c11_count;
extern "C" const size_t loom_abi_cxx17_sizes[];
extern "C" const size_t loom_abi_cxx17_count;
extern "C" size_t loom_abi_c11_f32_bytes(void);

namespace {

struct Golden {
  int major = -1, minor = -1;
  std::vector<loomabi::Row> rows;
};

Golden read_golden(const std::string& path) {
  Golden g;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string a, b;
    ss >> a;
    if (a == "abi") {
      ss >> b;
      size_t dot = b.find('.');
      g.major = std::stoi(b.substr(0, dot));
      g.minor = std::stoi(b.substr(dot + 1));
      continue;
    }
    loomabi::Row r;
    r.type = a;
    ss >> r.field >> r.offset >> r.size;
    g.rows.push_back(r);
  }
  return g;
}

using Key = std::pair<std::string, std::string>;
std::map<Key, loomabi::Row> by_key(const std::vector<loomabi::Row>& rows) {
  std::map<Key, loomabi::Row> m;
  for (const auto& r : rows) m[{r.type, r.field}] = r;
  return m;
}

std::string describe(const loomabi::Row* r) {
  if (r == nullptr) return "absent";
  return "offset " + std::to_string(r->offset) + " size " + std::to_string(r->size);
}

// Per type, what differs between golden and current ("" when equal). With `append_only`,
// new fields, a larger sizeof and more fields are allowed.
std::map<std::string, std::string> differences(const std::vector<loomabi::Row>& golden,
                                               const std::vector<loomabi::Row>& now,
                                               bool append_only) {
  auto g = by_key(golden), n = by_key(now);
  std::set<Key> keys;
  for (auto& [k, v] : g) keys.insert(k);
  for (auto& [k, v] : n) keys.insert(k);
  std::map<std::string, std::string> diffs;
  for (const Key& k : keys) {
    const loomabi::Row* a = g.count(k) ? &g[k] : nullptr;
    const loomabi::Row* b = n.count(k) ? &n[k] : nullptr;
    if (a && b && a->offset == b->offset && a->size == b->size) continue;
    if (append_only) {
      if (!a) continue;  // a new field or struct
      if (b && (k.second == "(sizeof)" || k.second == "(fields)") && b->size >= a->size) continue;
    }
    std::string& d = diffs[k.first];
    d += (d.empty() ? "" : "; ") + k.second + ": golden " + describe(a) + ", now " + describe(b);
  }
  return diffs;
}

}  // namespace

TEST_CASE("the field listing covers every field the compiler counts") {
  CHECK_MESSAGE(loomabi::listing_problems() == "", loomabi::listing_problems());
}

TEST_CASE("every Loom struct starts with size_t struct_size, an extension with its loom_ext") {
  std::set<std::string> types;
  for (const auto& r : loomabi::layout())
    if (r.type.rfind("loom_", 0) == 0 && r.field == "(fields)") types.insert(r.type);
  REQUIRE(types.size() > 20);
  auto rows = by_key(loomabi::layout());
  for (const std::string& t : types) {
    if (t.size() > 4 && t.compare(t.size() - 4, 4, "_ref") == 0) continue;
    CAPTURE(t);
    if (rows.count({t, "base"}) == 1) {  // an extension: the loom_ext header comes first
      CHECK(rows[{t, "base"}].offset == 0);
      CHECK(rows[{t, "base"}].size == sizeof(loom_ext));
      continue;
    }
    REQUIRE(rows.count({t, "struct_size"}) == 1);
    CHECK(rows[{t, "struct_size"}].offset == 0);
    CHECK(rows[{t, "struct_size"}].size == sizeof(size_t));
  }
}

TEST_CASE("C11 and C++17 see the same struct sizes") {
  REQUIRE(loom_abi_c11_count == loom_abi_cxx17_count);
  for (size_t i = 0; i < loom_abi_c11_count; ++i) {
    CAPTURE(i);
    CHECK(loom_abi_c11_sizes[i] == loom_abi_cxx17_sizes[i]);
  }
  CHECK(loom_abi_c11_f32_bytes() == 4);
}

TEST_CASE("public struct layouts match the golden table of this ABI version") {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/abi/abi_v" +
                           std::to_string(LOOM_ABI_MAJOR) + ".golden";
  const std::string regen =
      "build/bin/loom-abi-dump > tests/abi/abi_v" + std::to_string(LOOM_ABI_MAJOR) + ".golden";
  Golden g = read_golden(path);
  REQUIRE_MESSAGE(g.major == LOOM_ABI_MAJOR,
                  ("no golden layout for ABI major " + std::to_string(LOOM_ABI_MAJOR) + " (" +
                   path + "); record it with " + regen));
  const auto now = loomabi::layout();
  const std::string version = std::to_string(LOOM_ABI_MAJOR) + "." + std::to_string(LOOM_ABI_MINOR);
  const std::string golden_version = std::to_string(g.major) + "." + std::to_string(g.minor);
  if (g.minor == LOOM_ABI_MINOR) {
    for (const auto& [type, what] : differences(g.rows, now, false))
      FAIL_CHECK("layout of " << type << " changed without an ABI version bump (ABI " << version
                              << "): " << what);
  } else if (g.minor < LOOM_ABI_MINOR) {
    for (const auto& [type, what] : differences(g.rows, now, true))
      FAIL_CHECK("layout of " << type << " changed incompatibly: ABI " << version
                              << " may only append to " << golden_version << ": " << what);
    FAIL_CHECK("ABI is now " << version << " but the golden layout is " << golden_version
                             << ": record the new layout with " << regen);
  } else {
    FAIL_CHECK("the golden layout is for ABI " << golden_version << " but the headers say "
                                               << version);
  }
}

TEST_CASE("the comparison catches a moved field, a new field and a removed one") {
  auto now = loomabi::layout();
  auto moved = now;
  for (auto& r : moved)
    if (r.type == "loom_ops" && r.field == "gemm") r.offset += 8;
  auto d = differences(moved, now, false);
  REQUIRE(d.count("loom_ops") == 1);
  CHECK(d["loom_ops"] == "gemm: golden offset 16 size 8, now offset 8 size 8");
  CHECK(differences(moved, now, true).count("loom_ops") == 1);  // not an append

  auto older = now;  // as if loom_ops had one slot less at the previous minor
  std::erase_if(older, [](const loomabi::Row& r) {
    return r.type == "loom_ops" && r.field == "vocab_ce_backward";
  });
  for (auto& r : older)
    if (r.type == "loom_ops" && (r.field == "(sizeof)" || r.field == "(fields)"))
      r.size -= r.field == "(sizeof)" ? 8 : 1;
  CHECK(differences(older, now, false).count("loom_ops") == 1);
  CHECK(differences(older, now, true).empty());  // appending is fine across a minor bump
  CHECK(differences(now, older, true).count("loom_ops") == 1);  // removing is not
}
