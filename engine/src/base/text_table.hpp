// Plain-text tables for the command line (`loom plugins`, `loom parity`).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace loom::engine {

// Rows of cells, each column as wide as its widest cell, two spaces between columns, no
// trailing spaces. The first row is usually the header.
void print_table(const std::vector<std::vector<std::string>>& rows, std::ostream& out);

}  // namespace loom::engine
