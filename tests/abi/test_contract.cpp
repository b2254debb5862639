// ABI 2's contract tags (common.h): every table and callback struct of every public header
// lists each of its slots exactly once with a well-formed "thread, scope, progress" tag, and
// lists no slot it does not have. A slot added without saying which thread may call it,
// which ranks must call it together and whether it blocks fails here.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "contract_tags.hpp"

namespace {

const char* const kHeaders[] = {"attention.h", "backend.h", "comm.h",      "common.h",
                                "dataset.h",   "fp8.h",     "grad.h",      "graph.h",
                                "host.h",      "model.h",   "optimizer.h", "plugin.h",
                                "schedule.h",  "tensor.h",  "tokenizer.h"};

std::string header_path(const char* name) {
  return std::string(LOOM_SOURCE_DIR) + "/sdk/include/loom/" + name;
}

}  // namespace

TEST_CASE("every slot of every public table carries its contract tags, once") {
  size_t tables = 0, slots = 0;
  for (const char* h : kHeaders) {
    const std::string header = h;
    for (const loomtest::ContractTable& t : loomtest::contract_tables(header_path(h))) {
      CAPTURE(header);
      CAPTURE(t.name);
      ++tables;
      CHECK_MESSAGE(t.has_comment, "no \"Contract tags (common.h):\" comment before the struct");
      CHECK_MESSAGE(t.leftover.empty(),
                    "not a \"slot, ...: thread, scope, progress\" entry: \"" << t.leftover << "\"");
      CHECK_MESSAGE(t.duplicates.empty(), "listed twice: " << t.duplicates.front());
      for (const std::string& s : t.slots) {
        ++slots;
        CHECK_MESSAGE(t.tags.count(s) == 1, "slot " << s << " has no tag");
      }
      for (const auto& [name, tag] : t.tags) {
        bool is_slot = false;
        for (const std::string& s : t.slots) is_slot = is_slot || s == name;
        CHECK_MESSAGE(is_slot, "tagged " << name << ", which is not a slot of the struct");
      }
    }
  }
  // The headers hold 14 such structs (112 slots); fewer would mean the reader lost some.
  CHECK(tables >= 14);
  CHECK(slots >= 110);
}

TEST_CASE("the reader refuses what the rule refuses") {
  // A deliberately broken header: an untagged slot, a misspelt tag, a stale name.
  const std::string path = std::string(LOOM_BINARY_DIR) + "/contract_broken.h";
  {
    std::ofstream out(path);
    out << "/* Contract tags (common.h):\n"
           " *   create: owner, local, blocks\n"
           " *   run: owner, COLLECTIVE(data), waits\n"
           " *   gone: any, local, blocks */\n"
           "typedef struct broken_api {\n"
           "  size_t struct_size;\n"
           "  int (*create)(void);\n"
           "  int (*run)(void);\n"
           "  int (*step)(void);\n"
           "} broken_api;\n"
           "typedef struct untagged_api {\n"
           "  int (*f)(void);\n"
           "} untagged_api;\n";
  }
  const std::vector<loomtest::ContractTable> t = loomtest::contract_tables(path);
  REQUIRE(t.size() == 2);
  CHECK(t[0].has_comment);
  CHECK(t[0].tags.count("create") == 1);
  CHECK(t[0].tags.count("run") == 0);  // "waits" is not a progress tag
  CHECK(t[0].leftover.find("waits") != std::string::npos);
  CHECK(t[0].tags.count("step") == 0);
  CHECK(t[0].tags.count("gone") == 1);  // listed, but no such slot: the test above flags it
  CHECK_FALSE(t[1].has_comment);
}
