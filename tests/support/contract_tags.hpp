// The contract tags of the public headers (common.h): every table of loom/*.h opens with a
// "Contract tags" comment listing each slot as "slot, ...: thread, scope, progress". This
// reads them from the headers themselves, so that tests/abi/test_contract.cpp can hold every
// table to the rule and the conformance suites can check the tags they can observe against
// what the header promises, rather than against a copy of it.
#pragma once

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace loomtest {

struct ContractTag {
  std::string thread;    // "any" | "owner"
  std::string scope;     // "local" | "COLLECTIVE(g)" | "PAIR(g)"
  std::string progress;  // "blocks" | "stream" | "starts"
};

// One table of a header: its function-pointer slots in order, and the tags its contract
// comment gives (by slot name). `leftover` is whatever in the comment is not a well-formed
// "names: thread, scope, progress" entry; `duplicates` the slots listed twice.
struct ContractTable {
  std::string name;
  std::vector<std::string> slots;
  std::map<std::string, ContractTag> tags;
  std::vector<std::string> duplicates;
  std::string leftover;
  bool has_comment = false;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every struct of `header` (a path) that holds at least one function pointer.
inline std::vector<ContractTable> contract_tables(const std::string& header) {
  const std::string text = read_text(header);
  std::vector<ContractTable> out;
  static const std::regex open(R"(typedef struct (\w+) \{)");
  static const std::regex slot(R"(\(\*\s*(\w+)\)\s*\()");
  static const std::regex entry(
      R"(([a-z_]+(?:, [a-z_]+)*):\s+(any|owner),\s+(local|COLLECTIVE\([\w.-]+\)|PAIR\([\w.-]+\)),\s+(blocks|stream|starts)\b)");
  for (std::sregex_iterator it(text.begin(), text.end(), open), end; it != end; ++it) {
    ContractTable t;
    t.name = (*it)[1];
    const size_t body = static_cast<size_t>(it->position(0) + it->length(0));
    const size_t close = text.find("} " + t.name + ";", body);
    if (close == std::string::npos) continue;
    const std::string members = text.substr(body, close - body);
    for (std::sregex_iterator s(members.begin(), members.end(), slot); s != end; ++s)
      t.slots.push_back((*s)[1]);
    if (t.slots.empty()) continue;
    // The comment that ends right before the typedef, if it is the contract comment.
    const size_t before = static_cast<size_t>(it->position(0));
    const size_t cend = text.rfind("*/", before);
    const size_t cbeg = cend == std::string::npos ? cend : text.rfind("/*", cend);
    if (cend != std::string::npos && text.find_first_not_of(" \n", cend + 2) == before &&
        text.compare(cbeg, 22, "/* Contract tags (comm") == 0) {
      t.has_comment = true;
      std::string c = text.substr(cbeg + 2, cend - cbeg - 2);
      c = std::regex_replace(c, std::regex(R"(\n\s*\*)"), " ");
      c = std::regex_replace(c, std::regex(R"(^\s*Contract tags \(common\.h\):)"), "");
      c = std::regex_replace(c, std::regex(R"(,\s+)"), ", ");
      for (std::sregex_iterator e(c.begin(), c.end(), entry); e != end; ++e) {
        const ContractTag tag{(*e)[2], (*e)[3], (*e)[4]};
        std::stringstream names((*e)[1]);
        for (std::string n; std::getline(names, n, ',');) {
          n.erase(0, n.find_first_not_of(' '));
          if (!t.tags.emplace(n, tag).second) t.duplicates.push_back(n);
        }
      }
      t.leftover = std::regex_replace(c, entry, "");
      t.leftover.erase(0, t.leftover.find_first_not_of(" \n"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The tags of `table` in `header`; throws when the table or its comment is missing.
inline ContractTable contract_table(const std::string& header, const std::string& table) {
  for (ContractTable& t : contract_tables(header))
    if (t.name == table) {
      if (!t.has_comment) throw std::runtime_error(table + " has no contract tags in " + header);
      return t;
    }
  throw std::runtime_error("no table " + table + " in " + header);
}

}  // namespace loomtest
