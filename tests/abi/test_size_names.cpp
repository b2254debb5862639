// ABI 2's size macro names (docs/abi2.md, "ABI style"): a LOOM_<X>_SIZE_V... macro is named
// for the minor that brought its struct's last field: _V2 for 2.0, _V2_<minor> for fields
// appended (or a struct added) in 2.<minor>, _V1 only for an extension's first layout (a
// struct whose first member is `loom_ext base`). Another name may stay as an alias of a
// well-named macro, marked as kept for source compatibility. The rule is read from the C
// headers themselves, as test_contract reads the contract tags.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text with comments blanked (string and character literals kept).
std::string strip_comments(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"' || s[i] == '\'') {
      const char q = s[i];
      out += s[i];
      for (++i; i < s.size() && s[i] != q; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) out += s[i++];
        out += s[i];
      }
      if (i < s.size()) out += s[i];
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? s.size() : end + 1;
      out += ' ';
    } else if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
      out += '\n';
    } else {
      out += s[i];
    }
  }
  return out;
}

struct StructInfo {
  bool extension = false;           // first member is `loom_ext base`
  std::vector<std::string> fields;  // in declaration order
};

// `typedef struct name { ... } name;` in comment-free text: whether the first member is a
// loom_ext header, and the member names (a function pointer's is the one after "(*").
std::map<std::string, StructInfo> structs_of(const std::string& text) {
  std::map<std::string, StructInfo> out;
  static const std::regex head(R"(typedef\s+struct\s+(\w+)\s*\{)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), head); it != std::sregex_iterator();
       ++it) {
    size_t i = (size_t)(it->position(0) + it->length(0));
    const size_t body_start = i;
    int depth = 1;
    for (; i < text.size() && depth > 0; ++i) depth += text[i] == '{' ? 1 : text[i] == '}' ? -1 : 0;
    const std::string body = text.substr(body_start, i - 1 - body_start);
    StructInfo info;
    std::string decl;
    int parens = 0;
    for (char c : body) {
      parens += c == '(' ? 1 : c == ')' ? -1 : 0;
      if (c != ';' || parens != 0) {
        decl += c;
        continue;
      }
      static const std::regex fn(R"(\(\s*\*\s*(\w+)\s*\))");
      static const std::regex last_ident(R"((\w+)\s*(\[[^\]]*\]\s*)*$)");
      std::smatch m;
      if (std::regex_search(decl, m, fn)) {
        info.fields.push_back(m[1]);
      } else {
        std::stringstream parts(decl);
        std::string part;
        while (std::getline(parts, part, ','))
          if (std::regex_search(part, m, last_ident)) info.fields.push_back(m[1]);
      }
      if (info.fields.size() == 1)
        info.extension = std::regex_match(decl, std::regex(R"(\s*loom_ext\s+base\s*)"));
      decl.clear();
    }
    out[(*it)[1]] = info;
  }
  return out;
}

struct SizeMacro {
  std::string name;               // LOOM_MODEL_CREATE_ARGS_SIZE_V2_13
  std::string prefix;             // MODEL_CREATE_ARGS
  std::string version;            // "2_13"
  std::string type;               // loom_model_create_args ("" for an alias)
  std::string last;               // the last field it covers ("" for sizeof(type) and aliases)
  std::string alias_of;           // the macro it stands for, or ""
  bool documented_alias = false;  // the comment above says it stays for source compatibility
  std::string body;
};

// Every `#define LOOM_<X>_SIZE_V<...>` of a header, with its body (continuation lines
// joined) and the comment right above it.
std::vector<SizeMacro> size_macros_of(const std::string& text) {
  std::vector<SizeMacro> out;
  std::vector<std::string> lines;
  {
    std::stringstream ss(text);
    std::string l;
    while (std::getline(ss, l)) lines.push_back(l);
  }
  static const std::regex def(R"(^\s*#\s*define\s+(LOOM_(\w+?)_SIZE_V(\w+))\s*(.*)$)");
  static const std::regex struct_size(R"(^LOOM_STRUCT_SIZE\(\s*(\w+)\s*,\s*(\w+)\s*\)$)");
  static const std::regex size_of(R"(^sizeof\(\s*(\w+)\s*\)$)");
  static const std::regex alias(R"(^(LOOM_\w+_SIZE_V\w+)$)");
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, def)) continue;
    SizeMacro s;
    s.name = m[1];
    s.prefix = m[2];
    s.version = m[3];
    std::string body = m[4];
    for (size_t j = i; j + 1 < lines.size() && !body.empty() && body.back() == '\\'; ++j)
      body = body.substr(0, body.size() - 1) + " " + lines[j + 1];
    body = std::regex_replace(body, std::regex(R"(^\s+|\s+$)"), "");
    body = std::regex_replace(body, std::regex(R"(\s+)"), " ");
    s.body = body;
    std::smatch b;
    if (std::regex_match(body, b, struct_size)) {
      s.type = b[1];
      s.last = b[2];
    } else if (std::regex_match(body, b, size_of)) {
      s.type = b[1];
    } else if (std::regex_match(body, b, alias)) {
      s.alias_of = b[1];
      std::string comment;  // the comment lines right above the #define
      for (size_t j = i; j > 0; --j) {
        const std::string l = std::regex_replace(lines[j - 1], std::regex(R"(^\s+)"), "");
        const bool opens = l.rfind("/*", 0) == 0 || l.rfind("//", 0) == 0;
        if (!opens && l.rfind("*", 0) != 0) break;
        comment = l + "\n" + comment;
        if (opens) break;
      }
      // One line of words, as the comment may wrap anywhere.
      comment = std::regex_replace(comment, std::regex(R"((/\*|\*/|//|\n\s*\*)+)"), " ");
      comment = std::regex_replace(comment, std::regex(R"(\s+)"), " ");
      s.documented_alias = comment.find("source compatibility") != std::string::npos;
    }
    out.push_back(s);
  }
  return out;
}

std::string upper_name(const std::string& type) {  // loom_model_create_args -> MODEL_CREATE_ARGS
  std::string u = type.rfind("loom_", 0) == 0 ? type.substr(5) : type;
  for (char& c : u) c = (char)std::toupper((unsigned char)c);
  return u;
}

// What breaks the rule in these headers' texts, one line each ("" when nothing).
std::string naming_problems(const std::vector<std::string>& texts, long abi_minor) {
  std::map<std::string, StructInfo> structs;
  std::vector<SizeMacro> macros;
  for (const std::string& t : texts) {
    for (auto& [k, v] : structs_of(strip_comments(t))) structs[k] = v;
    for (SizeMacro& m : size_macros_of(t)) macros.push_back(m);
  }
  std::map<std::string, const SizeMacro*> by_name;
  for (const SizeMacro& m : macros) by_name[m.name] = &m;
  std::string problems;
  auto fail = [&](const SizeMacro& m, const std::string& why) {
    problems += m.name + ": " + why + "\n";
  };
  // A well-formed version: "1", "2" or "2_<m>" with 1 <= m <= LOOM_ABI_MINOR.
  auto version_problem = [&](const SizeMacro& m) -> std::string {
    std::smatch v;
    const std::regex minor(R"(^2_([1-9][0-9]*)$)");
    if (m.version == "1" || m.version == "2") return {};
    if (!std::regex_match(m.version, v, minor))
      return "suffix _V" + m.version + " is neither _V1, _V2 nor _V2_<minor>";
    if (std::stol(v[1]) > abi_minor)
      return "names ABI 2." + std::string(v[1]) + ", after LOOM_ABI_MINOR " +
             std::to_string(abi_minor);
    return {};
  };
  // Suffix against the struct: _V1 only for an extension, _V2 never for one.
  auto kind_problem = [&](const SizeMacro& m, const StructInfo& s) -> std::string {
    if (m.version == "1" && !s.extension)
      return "_V1 on " + m.type +
             ", which is not an extension (first member not `loom_ext base`): name it for "
             "the minor that added it, _V2 or _V2_<minor>";
    if (m.version == "2" && s.extension)
      return "_V2 on the extension " + m.type + ": its first layout is _V1";
    return {};
  };
  for (const SizeMacro& m : macros) {
    if (!m.alias_of.empty()) {
      const auto target = by_name.find(m.alias_of);
      if (target == by_name.end() || !target->second->alias_of.empty()) {
        fail(m, "an alias of " + m.alias_of + ", which is not a size macro of its own");
        continue;
      }
      const SizeMacro& t = *target->second;
      if (t.prefix != m.prefix) fail(m, "an alias of " + t.name + ", another struct's size");
      SizeMacro as = m;  // judged as if it measured the target's struct itself
      as.type = t.type;
      const bool well_named =
          version_problem(as).empty() &&
          (structs.count(t.type) == 0 || kind_problem(as, structs[t.type]).empty());
      if (!well_named && !m.documented_alias)
        fail(m, "breaks the naming rule and is an alias of " + t.name +
                    " without a comment that it stays for source compatibility");
      continue;
    }
    if (m.type.empty()) {
      fail(m, "cannot tell its struct: \"" + m.body +
                  "\" is not LOOM_STRUCT_SIZE(type, field), sizeof(type) or another size macro");
      continue;
    }
    if (upper_name(m.type) != m.prefix)
      fail(m, "measures " + m.type + ", whose macros are LOOM_" + upper_name(m.type) + "_SIZE_*");
    if (const std::string v = version_problem(m); !v.empty()) fail(m, v);
    const auto s = structs.find(m.type);
    if (s == structs.end()) {
      fail(m, "measures " + m.type + ", which no header defines");
      continue;
    }
    if (const std::string k = kind_problem(m, s->second); !k.empty()) fail(m, k);
    if (!m.last.empty()) {
      const auto& f = s->second.fields;
      if (std::find(f.begin(), f.end(), m.last) == f.end())
        fail(m, m.type + " has no field " + m.last);
    }
  }
  // Per struct, a later minor's size ends on a later field: _V2 < _V2_3 < _V2_10.
  std::map<std::string, std::vector<std::pair<long, const SizeMacro*>>> per_type;
  for (const SizeMacro& m : macros) {
    if (m.last.empty() || structs.count(m.type) == 0 || upper_name(m.type) != m.prefix) continue;
    if (!version_problem(m).empty()) continue;  // already refused
    const long minor = m.version == "1" || m.version == "2" ? 0 : std::atol(m.version.c_str() + 2);
    per_type[m.type].push_back({minor, &m});
  }
  for (const auto& [type, list] : per_type) {
    const std::vector<std::string>& f = structs[type].fields;
    auto index = [&](const SizeMacro* m) {
      return std::find(f.begin(), f.end(), m->last) - f.begin();
    };
    for (const auto& [earlier_minor, earlier] : list)
      for (const auto& [later_minor, later] : list)
        if (earlier_minor < later_minor && index(later) <= index(earlier))
          fail(*later, "ends no further than " + earlier->name +
                           ": a later minor's size must end on a later field");
  }
  return problems;
}

// The SDK's C headers, sdk/include/loom/*.h (the C++ helpers in cpp/ define no sizes).
std::vector<std::string> sdk_headers() {
  std::vector<std::string> texts;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/sdk/include/loom"))
    if (e.is_regular_file() && e.path().extension() == ".h") texts.push_back(read(e.path()));
  return texts;
}

}  // namespace

TEST_CASE("size macros are named after the ABI minor that brought their last field") {
  const std::vector<std::string> texts = sdk_headers();
  REQUIRE(texts.size() >= 13);
  size_t count = 0, extensions = 0;
  for (const std::string& t : texts) {
    count += size_macros_of(t).size();
    for (const auto& [name, s] : structs_of(strip_comments(t))) extensions += s.extension;
  }
  // About 95 macros and 11 extension structs today; far fewer means the reader lost them.
  CHECK(count >= 90);
  CHECK(extensions >= 10);
  const std::string problems = naming_problems(texts, LOOM_ABI_MINOR);
  CHECK_MESSAGE(problems.empty(), "size macros that break the rule (docs/abi2.md, ABI style):\n"
                                      << problems);
}

TEST_CASE("the naming rule refuses what it should") {
  const std::string header = R"(
typedef struct loom_good_args { size_t struct_size; int a; const loom_ext* ext; int b; } loom_good_args;
#define LOOM_GOOD_ARGS_SIZE_V2 LOOM_STRUCT_SIZE(loom_good_args, ext)
#define LOOM_GOOD_ARGS_SIZE_V2_3 LOOM_STRUCT_SIZE(loom_good_args, b)
typedef struct loom_thing_ext {
  loom_ext base; /* an extension */
  int x;
  void (*f)(int a, int b);
} loom_thing_ext;
#define LOOM_THING_EXT_SIZE_V1 LOOM_STRUCT_SIZE(loom_thing_ext, x)
#define LOOM_THING_EXT_SIZE_V2_4 LOOM_STRUCT_SIZE(loom_thing_ext, f)
typedef struct loom_slot_args { size_t struct_size; const loom_ext* ext; } loom_slot_args;
#define LOOM_SLOT_ARGS_SIZE_V1 LOOM_STRUCT_SIZE(loom_slot_args, ext)
#define LOOM_SLOT_ARGS_SIZE_V2_99 LOOM_STRUCT_SIZE(loom_slot_args, ext)
#define LOOM_SLOT_ARGS_SIZE_V3 LOOM_STRUCT_SIZE(loom_slot_args, ext)
#define LOOM_THING_EXT_SIZE_V2 LOOM_STRUCT_SIZE(loom_thing_ext, x)
#define LOOM_GOOD_ARGS_SIZE_V2_2 LOOM_STRUCT_SIZE(loom_good_args, a)
#define LOOM_OTHER_SIZE_V2 LOOM_STRUCT_SIZE(loom_good_args, a)
typedef struct loom_old_args { size_t struct_size; const loom_ext* ext; } loom_old_args;
#define LOOM_OLD_ARGS_SIZE_V2_5 LOOM_STRUCT_SIZE(loom_old_args, ext)
/* The old name: kept for source compatibility. */
#define LOOM_OLD_ARGS_SIZE_V1 LOOM_OLD_ARGS_SIZE_V2_5
#define LOOM_OLD_ARGS_SIZE_V1X LOOM_OLD_ARGS_SIZE_V2_5
)";
  const auto structs = structs_of(strip_comments(header));
  REQUIRE(structs.count("loom_thing_ext") == 1);
  CHECK(structs.at("loom_thing_ext").extension);
  CHECK_FALSE(structs.at("loom_good_args").extension);
  CHECK(structs.at("loom_thing_ext").fields == std::vector<std::string>{"base", "x", "f"});

  const std::string p = naming_problems({header}, 17);
  CAPTURE(p);
  auto flagged = [&](const std::string& name) {
    return ("\n" + p).find("\n" + name + ":") != std::string::npos;
  };
  CHECK_FALSE(flagged("LOOM_GOOD_ARGS_SIZE_V2"));
  CHECK_FALSE(flagged("LOOM_GOOD_ARGS_SIZE_V2_3"));
  CHECK_FALSE(flagged("LOOM_THING_EXT_SIZE_V1"));
  CHECK_FALSE(flagged("LOOM_THING_EXT_SIZE_V2_4"));  // appended to an extension in 2.4
  CHECK_FALSE(flagged("LOOM_OLD_ARGS_SIZE_V2_5"));
  CHECK_FALSE(flagged("LOOM_OLD_ARGS_SIZE_V1"));  // a documented alias
  CHECK(flagged("LOOM_SLOT_ARGS_SIZE_V1"));       // _V1 on an args struct
  CHECK(flagged("LOOM_SLOT_ARGS_SIZE_V2_99"));    // a minor after LOOM_ABI_MINOR
  CHECK(flagged("LOOM_SLOT_ARGS_SIZE_V3"));       // no such suffix
  CHECK(flagged("LOOM_THING_EXT_SIZE_V2"));       // _V2 on an extension
  CHECK(flagged("LOOM_GOOD_ARGS_SIZE_V2_2"));     // 2.2 ends before 2.0's last field
  CHECK(flagged("LOOM_OTHER_SIZE_V2"));           // named for another struct
  CHECK(flagged("LOOM_OLD_ARGS_SIZE_V1X"));       // an undocumented alias that breaks the rule
}

TEST_CASE("ABI 2.18: loom_model_create_args ends with its ext chain") {
  static_assert(LOOM_ABI_MINOR >= 18);
  CHECK(LOOM_MODEL_CREATE_ARGS_SIZE_V2_18 == sizeof(loom_model_create_args));
  CHECK(LOOM_MODEL_CREATE_ARGS_SIZE_V2_18 > LOOM_MODEL_CREATE_ARGS_SIZE_V2_13);
  CHECK(offsetof(loom_model_create_args, ext) >= LOOM_MODEL_CREATE_ARGS_SIZE_V2_13);
  loom_model_create_args a{};
  a.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2_13;
  CHECK_FALSE(LOOM_HAS_FIELD(&a, loom_model_create_args, ext));
  a.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2_18;
  CHECK(LOOM_HAS_FIELD(&a, loom_model_create_args, ext));
  // The renamed sizes keep their old names, as aliases with the same value.
  CHECK(LOOM_GROUPED_GEMM_ARGS_SIZE_V1 == LOOM_GROUPED_GEMM_ARGS_SIZE_V2_5);
  CHECK(LOOM_ATTENTION_MERGE_ARGS_SIZE_V1 == LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7);
}
