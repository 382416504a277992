// Layout of the printed text (see docs/ir.md):
//
//   graph NAME {
//     group tp = [0, 2]
//     input %input : f32[8, 64]
//     param %fc1.weight : f32[256, 64]
//     const %rope.cos : f32[128, 32]
//     %0 = linear(%input, %fc1.weight) : f32[8, 256]
//     %1, %2 = split(%0) {split_size = 128, dim = 1} : f32[8, 128], f32[8, 128]
//     return %1
//   }
//
// Attributes print in schema order and only when they differ from their default (required ones
// always print).
#include "dtensor/ir/printer.h"

#include <fmt/format.h>

#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void append_type(std::string& out, const TensorType& t) {
  out += dtype_name(t.dtype);
  out += '[';
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) out += ", ";
    fmt::format_to(std::back_inserter(out), "{}", t.shape[i]);
  }
  out += ']';
}

void append_value(std::string& out, const Value* v) {
  out += '%';
  out += v->name;
}

void append_node(std::string& out, const Node& n) {
  const OpDef& def = op_def(n.op);
  for (size_t i = 0; i < n.results.size(); ++i) {
    if (i) out += ", ";
    append_value(out, n.results[i]);
  }
  out += " = ";
  out += def.name();
  out += '(';
  for (size_t i = 0; i < n.operands.size(); ++i) {
    if (i) out += ", ";
    append_value(out, n.operands[i]);
  }
  out += ')';
  bool open = false;
  for (size_t i = 0; i < def.attrs.size(); ++i) {
    const AttrSpec& spec = def.attrs[i];
    if (spec.default_value && *spec.default_value == n.attrs[i]) continue;
    out += open ? ", " : " {";
    open = true;
    out += spec.name;
    out += " = ";
    append_attr(out, n.attrs[i], spec.kind);
  }
  if (open) out += '}';
  out += " : ";
  for (size_t i = 0; i < n.results.size(); ++i) {
    if (i) out += ", ";
    append_type(out, n.results[i]->type);
  }
}

}  // namespace

std::string print_node(const Node& node) {
  std::string out;
  append_node(out, node);
  return out;
}

std::string print(const Graph& g) {
  std::string out;
  out.reserve(64 * (g.nodes().size() + g.params().size() + 8));
  out += "graph ";
  out += g.name();
  out += " {\n";
  for (const GroupDecl& grp : g.groups()) {
    out += "  group ";
    out += grp.name;
    out += " = [";
    for (size_t i = 0; i < grp.ranks.size(); ++i) {
      if (i) out += ", ";
      fmt::format_to(std::back_inserter(out), "{}", grp.ranks[i]);
    }
    out += "]\n";
  }
  for (const Value* v : g.inputs()) {
    out += "  input ";
    append_value(out, v);
    out += " : ";
    append_type(out, v->type);
    out += '\n';
  }
  for (const Value* v : g.params()) {
    out += v->frozen ? "  const " : "  param ";
    append_value(out, v);
    out += " : ";
    append_type(out, v->type);
    out += '\n';
  }
  for (const auto& n : g.nodes()) {
    out += "  ";
    append_node(out, *n);
    if (n->loc.origin) {  // the node of an imported model it was made from (SourceLoc)
      out += " loc(";
      append_attr(out, Attr(std::string(n->loc.origin)), AttrKind::str);
      out += ')';
    }
    out += '\n';
  }
  out += "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out += i ? ", " : " ";
    append_value(out, g.outputs()[i]);
  }
  out += "\n}\n";
  return out;
}

}  // namespace dt::ir
