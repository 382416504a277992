// Copying nodes from one graph into another (the stages cut from a model, each micro-batch's copy
// of a stage in a rank's program).
#pragma once

#include <unordered_map>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::pipeline {

using ValueMap = std::unordered_map<const ir::Value*, ir::Value*>;

// Appends a copy of `n` to `g` with its operands looked up in `map` (each must be there) and maps
// its results to the copies. The result types are re-inferred from the new operands and `attrs`
// (n's own when empty); names are kept when `keep_names`, else fresh.
void copy_node(ir::Graph& g, const ir::Node& n, ValueMap& map, bool keep_names, std::vector<ir::Attr> attrs = {});

}  // namespace dt::pipeline
