// The recipe reference (docs/recipes.md), generated from the schemas: the engine's sections
// and the keys of every plugin the registry found.
#pragma once

#include <map>
#include <string>

namespace loom::engine {

class Registry;

// Markdown. Each part sits between "<!-- loom:begin ID -->" and "<!-- loom:end ID -->"
// markers (ID "engine" or "<kind>/<name>") so a test can compare the parts it can
// regenerate. Deterministic: no paths, plugins in kind then name order.
std::string recipes_markdown(Registry& registry);

// The marked parts of a generated document, by ID.
std::map<std::string, std::string> marked_parts(const std::string& markdown);

}  // namespace loom::engine
