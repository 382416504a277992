#include "dtensor/pipeline/graph_copy.h"

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::pipeline {

void copy_node(ir::Graph& g, const ir::Node& n, ValueMap& map, bool keep_names, std::vector<ir::Attr> attrs) {
  ir::Node probe;
  probe.op = n.op;
  for (const ir::Value* o : n.operands) {
    auto it = map.find(o);
    DT_CHECK(it != map.end()) << "copying " << ir::op_name(n.op) << ": operand %" << o->name << " has no copy";
    probe.operands.push_back(it->second);
  }
  probe.attrs = attrs.empty() ? n.attrs : std::move(attrs);
  std::vector<ir::TensorType> types;
  ir::op_def(n.op).infer(probe, g, types);
  std::vector<std::string> names;
  if (keep_names)
    for (const ir::Value* r : n.results) names.push_back(r->name);
  std::vector<ir::Value*> operands(probe.operands.begin(), probe.operands.end());
  ir::Node* copy = g.append(n.op, std::move(operands), std::move(probe.attrs), std::move(types), std::move(names));
  for (size_t i = 0; i < n.results.size(); ++i) map[n.results[i]] = copy->results[i];
}

}  // namespace dt::pipeline
