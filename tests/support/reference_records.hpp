// The text records of the tests' reference files (tests/model/data, tests/data/data): one per
// line, its kind the first word and its values the rest; blank lines and # comments skipped.
#pragma once

#include <istream>
#include <sstream>
#include <string>

namespace loomtest {

// Calls each(kind, values) for every record of `f`, values a stream over the rest of the line.
// `each` may read the lines after a record from `f` itself (a record of several rows).
template <class Each>
void each_record(std::istream& f, Each each) {
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    each(kind, static_cast<std::istream&>(in));
  }
}

}  // namespace loomtest
