// Prints a Graph in the IR text format (docs/ir.md). parse(print(g)) rebuilds g, and printing
// that again gives the same text.
#pragma once

#include <string>

#include "dtensor/ir/graph.h"

namespace dt::ir {

// Returns the text of the graph.
std::string print(const Graph& graph);
// Returns one node's line without indentation or newline: `%3 = relu(%2) : f32[8, 256]`.
std::string print_node(const Node& node);

}  // namespace dt::ir
