// The layout of every public ABI struct and the values of the ABI enums, as this compiler
// lays them out from the SDK headers: the table tests/abi/abi_v<MAJOR>.golden records.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace loomabi {

// One line of the golden file: "struct field offset size". Besides one row per field, each
// struct has "(sizeof)" (offset = alignof, size = sizeof) and "(fields)" (size = the number
// of fields the compiler counts); each enum constant is "<enum> <constant> <value> <sizeof>".
struct Row {
  std::string type, field;
  long long offset;
  size_t size;
};

std::vector<Row> layout();
// Structs whose field list in abi_layout.cpp misses fields the compiler counts ("" = none).
std::string listing_problems();
std::string format(const std::vector<Row>& rows);  // the golden file's text

}  // namespace loomabi
