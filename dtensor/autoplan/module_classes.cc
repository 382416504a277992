#include "dtensor/autoplan/module_classes.h"

#include <algorithm>
#include <map>

#include "dtensor/ir/printer.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::autoplan {

std::string block_pattern(const std::string& module) {
  std::string out, part;
  auto flush = [&] {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    out += digits ? "*" : part;
    part.clear();
  };
  for (char c : module) {
    if (c == '.') { flush(); out += '.'; }
    else part += c;
  }
  flush();
  return out;
}

std::vector<ModuleClass> module_classes(const ir::Graph& g, bool group) {
  std::vector<std::string> order;                            // modules, first appearance
  std::map<std::string, std::string> signature;              // module -> its params' suffixes and types
  for (const ir::Value* p : g.params()) {
    const std::string m = sharding::module_of(p->name);
    if (!signature.count(m)) order.push_back(m);
    signature[m] += p->name.substr(m.size()) + ":" + ir::type_str(p->type) + ";";
  }
  std::vector<ModuleClass> classes;
  std::map<std::string, size_t> by_key;
  for (const std::string& m : order) {
    const std::string key = group ? block_pattern(m) + "|" + signature[m] : m;
    auto [it, fresh] = by_key.emplace(key, classes.size());
    if (fresh) classes.push_back({group ? block_pattern(m) : m, {}});
    classes[it->second].modules.push_back(m);
  }
  // A glob that also matches modules outside its class (different shapes, or another block
  // layout) is replaced by the class's names, one entry each.
  std::vector<ModuleClass> out;
  for (ModuleClass& c : classes) {
    bool exact = true;
    for (const std::string& m : order)
      if (sharding::pattern_matches(c.pattern, m) && std::find(c.modules.begin(), c.modules.end(), m) == c.modules.end()) exact = false;
    if (c.pattern.find('*') == std::string::npos || exact) {
      out.push_back(std::move(c));
      continue;
    }
    for (const std::string& m : c.modules) out.push_back({m, {m}});
  }
  return out;
}

}  // namespace dt::autoplan
