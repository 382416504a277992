// The modules a plan search decides: each module of the graph (the prefix of its parameters'
// names), and the classes of identical repeated blocks (h.0.attn, h.1.attn, ... -> h.*.attn) that
// the exact and descent searches decide once for all their members.
#pragma once

#include <string>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::autoplan {

// A module name with every all-digit component replaced by `*` (h.3.attn -> h.*.attn).
std::string block_pattern(const std::string& module);

struct ModuleClass {
  std::string pattern;               // a module name, or a glob matching exactly `modules`
  std::vector<std::string> modules;  // in the graph's order
};

// The graph's modules in the order of their first parameter; with `group`, the modules of repeated
// blocks with identical parameters in one class each (a glob that would also match modules outside
// its class is replaced by the class's names, one class each).
std::vector<ModuleClass> module_classes(const ir::Graph& g, bool group);

}  // namespace dt::autoplan
