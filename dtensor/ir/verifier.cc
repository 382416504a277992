#include "dtensor/ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void locate(Error& e, const ::dt::detail::ParseAt& at) { e.locate(at.file, at.line, at.column, at.context); }

// A verification failure after a pass is a bug in that pass, not in the user's input.
[[noreturn, gnu::cold]] void throw_after_pass(std::string_view pass, const Error& e) {
  DT_THROW(InternalError) << "IR after pass " << pass << " is invalid (a bug in that pass): " << e.what();
}

// Collective state of each value while walking the nodes in order.
enum class WaitState : uint8_t { none, pending, waited };

class Verifier {
 public:
  Verifier(const Graph& g, std::string_view after_pass)
      : g_(g), after_pass_(after_pass), defined_(g.num_values(), 0), wait_(g.num_values(), WaitState::none) {}

  void run() {
    for (const Value* v : g_.inputs()) define(v, nullptr, 0);
    for (const Value* v : g_.params()) define(v, nullptr, 0);
    for (const GroupDecl& grp : g_.groups()) check_group(grp);
    const auto& nodes = g_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) check_node(*nodes[i], i);
    for (const Value* v : g_.outputs()) {
      DT_CHECK(v) << "null graph output";
      if (!defined_[size_t(v->id)]) DT_PARSE_FAIL(fail_at({}, 0, nullptr)) << "graph output %" << v->name << " is not defined";
    }
    for (const auto& n : nodes)
      for (const Value* r : n->results)
        if (wait_[size_t(r->id)] == WaitState::pending)
          DT_PARSE_FAIL(fail_at(n->loc, 0, n)) << "result %" << r->name << " of " << op_name(n->op)
                                      << " has no wait_tensor (every collective needs exactly one)";
  }

 private:
  // Where a violation is, and whom to blame: DT_PARSE_FAIL(fail_at(...)) << "message" throws a
  // ParseError at `at`, or, after a pass, the InternalError that names the pass.
  struct FailAt {
    ::dt::detail::ParseAt at;
    std::string_view after_pass;
    [[noreturn]] friend void operator&(const FailAt& f, const ::dt::detail::Message& m) {
      if (f.after_pass.empty()) f.at & m;
      ParseError located(m.str());
      locate(located, f.at);
      throw_after_pass(f.after_pass, located);
    }
  };

  // Starts an error message at `loc` (or at node index `index` for graphs built in code).
  ::dt::detail::ParseAt where(SourceLoc loc, size_t index, const Node* node) const {
    if (loc.line > 0) return {g_.source().empty() ? "<input>" : std::string(g_.source()), loc.line, loc.col, {}};
    if (node) return {{}, 0, 0, fmt::format("graph {}, node {} ({}): ", g_.name(), index, op_name(node->op))};
    return {{}, 0, 0, fmt::format("graph {}: ", g_.name())};
  }
  FailAt fail_at(SourceLoc loc, size_t index, const Node* node) const { return {where(loc, index, node), after_pass_}; }

  void define(const Value* v, const Node* node, size_t index) {
    DT_CHECK(v && size_t(v->id) < defined_.size() && g_.values()[size_t(v->id)] == v) << "foreign value";
    if (defined_[size_t(v->id)])
      DT_PARSE_FAIL(fail_at(v->loc, index, node)) << "value %" << v->name << " is defined twice";
    defined_[size_t(v->id)] = 1;
    // The sharding rules give every dim of an op's operands a factor, up to 127 per op.
    if (v->type.shape.size() > kMaxTensorDims)
      DT_PARSE_FAIL(fail_at(v->loc, index, node)) << "value %" << v->name << " has " << v->type.shape.size()
                                                  << " dims, more than the limit of " << kMaxTensorDims;
  }
  static constexpr size_t kMaxTensorDims = 32;

  void check_group(const GroupDecl& grp) {
    // Sorted, so that a 65,536-rank group costs n log n, not n^2 (it is checked after every pass).
    std::vector<int> sorted = grp.ranks;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      const int r = sorted[i];
      if (r < 0) DT_PARSE_FAIL(fail_at(grp.loc, 0, nullptr)) << "group " << grp.name << " has negative rank " << r;
      if (i > 0 && sorted[i - 1] == r)
        DT_PARSE_FAIL(fail_at(grp.loc, 0, nullptr)) << "group " << grp.name << " lists rank " << r << " twice";
    }
    if (grp.ranks.empty()) DT_PARSE_FAIL(fail_at(grp.loc, 0, nullptr)) << "group " << grp.name << " is empty";
  }

  void check_node(const Node& n, size_t index) {
    DT_CHECK(n.op != OpKind::count) << "node without op";
    const OpDef& def = op_def(n.op);
    const int count = int(n.operands.size());
    const int max_operands = def.max_operands();
    if (count < def.min_operands() || (max_operands >= 0 && count > max_operands))
      DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " expects operands (" << def.operand_signature() << "), got "
                                << count;
    for (const Value* v : n.operands) {
      DT_CHECK(v) << "null operand of " << op_name(n.op);
      if (!defined_[size_t(v->id)])
        DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << "operand %" << v->name << " of " << op_name(n.op)
                                  << " is used before it is defined";
      WaitState& w = wait_[size_t(v->id)];
      if (n.op == OpKind::wait_tensor) {
        if (w == WaitState::waited)
          DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << "%" << v->name << " already has a wait_tensor (exactly one is allowed)";
        if (w == WaitState::pending) w = WaitState::waited;
      } else if (w == WaitState::pending) {
        DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " reads %" << v->name << " of "
                                  << op_name(v->producer->op) << " before its wait_tensor";
      }
    }
    if (n.attrs.size() != def.attrs.size())
      DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " has " << n.attrs.size() << " attributes, expected "
                                << def.attrs.size();
    for (size_t i = 0; i < def.attrs.size(); ++i) {
      const AttrSpec& spec = def.attrs[i];
      if (n.attrs[i].index() != attr_index(spec.kind))
        DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " attribute " << spec.name << " must be of kind "
                                  << attr_kind_name(spec.kind);
      if (spec.kind == AttrKind::group && !g_.find_group(std::get<std::string>(n.attrs[i])))
        DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " names undeclared group " << std::get<std::string>(n.attrs[i]);
    }
    types_.clear();
    try {
      def.infer(n, g_, types_);
    } catch (Error& e) {
      // The inference error keeps its type (a ShapeError stays one); it gains the node's location.
      locate(e, where(n.loc, index, &n));
      if (!after_pass_.empty()) throw_after_pass(after_pass_, e);
      throw;
    }
    if (types_.size() != n.results.size())
      DT_PARSE_FAIL(fail_at(n.loc, index, &n)) << op_name(n.op) << " declares " << n.results.size() << " results but infers "
                                << types_.size();
    for (size_t i = 0; i < types_.size(); ++i) {
      const Value* r = n.results[i];
      DT_CHECK(r && r->producer == &n && r->result_index == int(i)) << "bad result link in " << op_name(n.op);
      if (r->type != types_[i])
        DT_PARSE_FAIL(fail_at(r->loc.line ? r->loc : n.loc, index, &n))
            << "type of %" << r->name << " is declared " << type_str(r->type) << " but " << op_name(n.op)
            << " infers " << type_str(types_[i]);
      define(r, &n, index);
      if (def.needs_wait) wait_[size_t(r->id)] = WaitState::pending;
    }
  }

  const Graph& g_;
  std::string_view after_pass_;
  std::vector<uint8_t> defined_;  // bytes, not vector<bool>: the bit arithmetic showed in profiles
  std::vector<WaitState> wait_;
  std::vector<TensorType> types_;
};

}  // namespace

void verify(const Graph& graph, const VerifyOptions& options) { Verifier(graph, options.after_pass).run(); }

}  // namespace dt::ir
