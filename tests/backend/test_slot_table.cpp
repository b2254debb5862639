// backend.slot_table: docs/kernels.md's table of loom_ops slots x backends against the
// backends themselves, with no device. The table is the promise that every model runs on
// every backend (issue 34: "backend/cuda implements every op slot backend/cpu does"); this
// test walks it:
//  - its rows name every slot of loom_ops, as the stored ABI dump lists them
//    (tests/abi/abi_v2.golden, which test_abi_layout holds to backend.h), and no other name;
//  - no cell of a backend column is empty or says "no";
//  - each backend column's plugin fills every slot of its table (a non-NULL function within
//    its struct_size), and lists every extension the table names (loom.gemm-epilogue/1 ...)
//    among its capabilities; every capability a backend lists is in the table;
//  - backend/meta (the memory walk-through, not a column: it computes nothing) fills every
//    slot too, so that `loom validate --memory` walks every model.
// The kinds within a slot (GELU erf, squared ReLU, ...) need a device to call on backend/cuda;
// gpu.ops_vs_cpu runs each of them against backend/cpu there.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_host.hpp"

namespace {

struct Table {
  std::vector<std::string> backends;  // "cpu", "cuda": the columns' plugins
  std::set<std::string> slots;        // the slots the rows name
  std::set<std::string> extensions;   // loom.*/N named in the first column
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> cells(const std::string& line) {  // "| a | b |" -> {a, b}
  std::vector<std::string> out;
  std::stringstream in(line.substr(1));
  for (std::string c; std::getline(in, c, '|');) out.push_back(trim(c));
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// "norm_forward/backward + loom.norm-gate/1 (LayerNorm, RMSNorm)" -> norm_forward,
// norm_backward; the extension ids go to `exts`.
std::vector<std::string> slot_names(std::string cell, std::set<std::string>& exts) {
  static const std::regex ext_re(R"(loom\.[a-z0-9-]+/[0-9]+)");
  for (std::sregex_iterator it(cell.begin(), cell.end(), ext_re), end; it != end; ++it)
    exts.insert(it->str());
  cell = std::regex_replace(cell, std::regex(R"(\([^()]*\))"), " ");
  cell = std::regex_replace(cell, ext_re, " ");
  static const std::regex name_re(R"(\b([a-z][a-z0-9_]*)(/([a-z][a-z0-9_]*))?)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(cell.begin(), cell.end(), name_re), end; it != end; ++it) {
    const std::string first = (*it)[1], second = (*it)[3];
    out.push_back(first);
    if (!second.empty()) out.push_back(first.substr(0, first.rfind('_') + 1) + second);
  }
  return out;
}

Table read_table(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  Table t;
  bool inside = false;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!inside) {
      if (line.rfind("| slot (kinds) |", 0) != 0) continue;
      for (const std::string& c : cells(line)) {
        if (c.rfind("backend/", 0) == 0) t.backends.push_back(c.substr(8));
      }
      inside = true;
      continue;
    }
    if (line.rfind("|", 0) != 0) break;
    if (line.rfind("|---", 0) == 0) continue;
    const std::vector<std::string> row = cells(line);
    INFO(path << ":" << line_no << ": " << line);
    REQUIRE(row.size() == t.backends.size() + 1);
    for (size_t b = 1; b < row.size(); ++b) {
      CHECK_MESSAGE(!row[b].empty(), "an empty cell for backend/" << t.backends[b - 1]);
      CHECK_MESSAGE(!std::regex_search(row[b], std::regex(R"(^(no\b|No\b|-|—))")),
                    "a gap: backend/" << t.backends[b - 1] << " says \"" << row[b] << "\"");
    }
    for (const std::string& slot : slot_names(row[0], t.extensions)) t.slots.insert(slot);
  }
  REQUIRE_MESSAGE(inside, path << " has no table headed \"| slot (kinds) |\"");
  return t;
}

// loom_ops's slots and their offsets, from the stored ABI dump ("loom_ops gemm 8 8").
std::map<std::string, size_t> ops_fields() {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/abi/abi_v2.golden";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::map<std::string, size_t> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string type, name;
    size_t offset = 0, size = 0;
    if (!(w >> type >> name >> offset >> size) || type != "loom_ops" || name == "struct_size" ||
        name[0] == '(')  // "(sizeof)", "(fields)"
      continue;
    out[name] = offset;
  }
  REQUIRE_MESSAGE(out.size() >= 20, "no loom_ops fields in " << path);
  return out;
}

// The slots `backend` leaves NULL (or past its table's struct_size).
std::vector<std::string> empty_slots(const loom_plugin_descriptor* d,
                                     const std::map<std::string, size_t>& fields) {
  const loom_ops* ops = static_cast<const loom_backend_api*>(d->api)->ops;
  REQUIRE(ops != nullptr);
  std::vector<std::string> out;
  for (const auto& [name, offset] : fields) {
    void* fn = nullptr;
    if (offset + sizeof fn <= ops->struct_size)
      std::memcpy(&fn, reinterpret_cast<const char*>(ops) + offset, sizeof fn);
    if (fn == nullptr) out.push_back(name);
  }
  return out;
}

std::set<std::string> capabilities(const loom_plugin_descriptor* d) {
  std::set<std::string> out;
  for (const char* const* c = d->capabilities; c && *c; ++c) out.insert(*c);
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool built(const std::string& name) {
  return std::ifstream(loomtest::plugin_path("backend", name)).good();
}

}  // namespace

TEST_CASE("docs/kernels.md's slot table names every loom_ops slot, and every backend fills it") {
  const Table t = read_table(std::string(LOOM_SOURCE_DIR) + "/docs/kernels.md");
  const std::map<std::string, size_t> fields = ops_fields();
  REQUIRE(t.backends == std::vector<std::string>{"cpu", "cuda"});

  for (const auto& [name, offset] : fields)
    CHECK_MESSAGE(t.slots.count(name), "loom_ops." << name << " has no row in the table");
  for (const std::string& name : t.slots)
    CHECK_MESSAGE(fields.count(name), "the table names \"" << name << "\", not a loom_ops slot");

  for (const std::string& b : t.backends) {
    if (!built(b)) {  // backend/cuda where the CUDA toolkit is missing: nothing to hold
      MESSAGE("backend/" << b << " is not built here: its column is not checked");
      continue;
    }
    INFO("backend/" << b);
    const loom_plugin_descriptor* d = loomtest::load_descriptor("backend", b);
    const std::vector<std::string> empty = empty_slots(d, fields);
    CHECK_MESSAGE(empty.empty(), "NULL slots: " << join(empty));
    const std::set<std::string> caps = capabilities(d);
    for (const std::string& e : t.extensions)
      CHECK_MESSAGE(caps.count(e), "the table names " << e << ", which it does not list");
    for (const std::string& c : caps)
      CHECK_MESSAGE(t.extensions.count(c), "it lists " << c << ", which the table lacks");
  }

  REQUIRE(built("meta"));
  const std::vector<std::string> meta_empty =
      empty_slots(loomtest::load_descriptor("backend", "meta"), fields);
  CHECK_MESSAGE(meta_empty.empty(), "backend/meta's NULL slots: " << join(meta_empty));
}

TEST_CASE("the table's first column: slot pairs and extensions") {
  std::set<std::string> exts;
  CHECK(slot_names("norm_forward/backward + loom.norm-gate/1 (LayerNorm, RMSNorm)", exts) ==
        std::vector<std::string>{"norm_forward", "norm_backward"});
  CHECK(exts == std::set<std::string>{"loom.norm-gate/1"});
  CHECK(slot_names("fill, copy, add, axpby, sum_squares", exts) ==
        std::vector<std::string>{"fill", "copy", "add", "axpby", "sum_squares"});
  CHECK(slot_names("copy_strided (ABI 2.21: MLA's head slices)", exts) ==
        std::vector<std::string>{"copy_strided"});
}
