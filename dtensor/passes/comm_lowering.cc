// Comm lowering (Inductor's comm_lowering.py): picks the concrete form of each all_reduce.
//
//  * bytes <= one-shot threshold: `one_shot_all_reduce(x)`, a blocking out-of-place all_reduce
//    placed where the wait was; the wait is dropped (it has nothing left to wait for).
//  * above: in-place `all_reduce_(x) {algo = two_shot}` followed by the original wait. In place
//    is only legal when nothing reads x afterwards and x is a buffer of its own (the fresh result
//    of a compute op or of a bucket copy-in, not a view, input or parameter); otherwise
//    `clone(x)` comes first and the collective works on the clone.
//  * a bucketed all_gather (bucket_copy_in read only by the all_gather) becomes FSDP2's in-place
//    form: `all_gather_copy_in(x...)` writes the inputs straight into this rank's block of the
//    output buffer and `all_gather_into_tensor_` gathers the other blocks around it, which saves
//    the flat input buffer and one copy of it.
// Other collectives (single all_gathers, reduce_scatter, all_to_all) keep their functional form.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/graph_edit.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {

// A value whose producer gives it a buffer of its own (OpDef::fresh_result).
bool owns_buffer(const ir::Value* v) { return v->producer && ir::op_def(v->producer->op).fresh_result; }

// bucket_copy_in -> all_gather_into_tensor  =>  all_gather_copy_in -> all_gather_into_tensor_.
bool lower_all_gather_buckets(const ir::Graph& graph, const UseLists& uses, GraphEdit& edit, size_t original) {
  bool any = false;
  for (size_t i = 0; i < original; ++i) {
    const ir::Node* ag = graph.nodes()[i];
    if (ag->op != ir::OpKind::all_gather_into_tensor) continue;
    const ir::Value* flat = ag->operands[0];
    const ir::Node* copy_in = flat->producer;
    if (!copy_in || copy_in->op != ir::OpKind::bucket_copy_in || uses.users(flat).size() != 1 || uses.is_output(flat))
      continue;
    const std::string& group = ag->attr_str("group");
    edit.drop(copy_in);
    edit.drop(ag);
    ir::Value* buf = edit.add(ir::OpKind::all_gather_copy_in, copy_in->operands,
                              {{"group", group}, {"dtype", copy_in->attr_dtype("dtype")}, {"bitcast", copy_in->attr_bool("bitcast")}},
                              edit.key(copy_in));
    edit.replace(flat, buf);
    ir::Value* r = edit.add(ir::OpKind::all_gather_into_tensor_, {buf}, {{"group", group}}, edit.key(ag));
    edit.set_order(r, double(i));
    edit.replace(ag->result(), r);
    any = true;
  }
  return any;
}

class CommLoweringPass : public Pass {
 public:
  explicit CommLoweringPass(const PassOptions& o) : threshold_(o.one_shot_threshold_bytes) {}
  std::string_view name() const override { return "comm-lowering"; }
  std::string_view summary() const override {
    return "in-place all_reduce (clone when the input is read later), blocking one-shot at or under a size";
  }

  bool run(ir::Graph& graph) override {
    UseLists uses(graph);
    GraphEdit edit(graph);
    bool any = false;
    // Index loop: edit.add appends to graph.nodes(), which may reallocate.
    const size_t original = graph.nodes().size();
    for (size_t i = 0; i < original; ++i) {
      const ir::Node* ar = graph.nodes()[i];
      if (ar->op != ir::OpKind::all_reduce) continue;
      const auto& readers = uses.users(ar->result());
      if (readers.size() != 1 || readers[0]->op != ir::OpKind::wait_tensor) continue;
      const ir::Node* wait = readers[0];
      ir::Value* x = ar->operands[0];
      const std::string& group = ar->attr_str("group");
      const std::string& op = ar->attr_str("op");
      const size_t bytes = x->type.nbytes();
      any = true;
      edit.drop(ar);
      edit.drop(wait);
      if (threshold_ > 0 && bytes <= threshold_) {
        ir::Value* r = edit.add(ir::OpKind::one_shot_all_reduce, {x}, {{"group", group}, {"op", op}}, edit.key(wait),
                                ar->result()->name + "_oneshot");
        edit.set_order(r, double(i));
        edit.replace(wait->result(), r);
        continue;
      }
      ir::Value* buf = x;
      if (!owns_buffer(x) || uses.users(x).size() != 1 || uses.is_output(x))
        buf = edit.add(ir::OpKind::clone, {x}, {}, edit.key(ar) - 0.25, x->name + "_clone");
      ir::Value* r = edit.add(ir::OpKind::all_reduce_, {buf},
                              {{"group", group}, {"op", op}, {"algo", std::string(threshold_ > 0 ? "two_shot" : "auto")}},
                              edit.key(ar), ar->result()->name + "_inplace");
      edit.set_order(r, double(i));
      edit.replace(ar->result(), r);
      ir::Value* w = edit.add(ir::OpKind::wait_tensor, {r}, {}, edit.key(wait), wait->result()->name + "_inplace");
      edit.replace(wait->result(), w);
    }
    any = lower_all_gather_buckets(graph, uses, edit, original) || any;
    return any && edit.commit();
  }

 private:
  size_t threshold_;
};

}  // namespace

PassPtr make_comm_lowering_pass(const PassOptions& o) { return std::make_unique<CommLoweringPass>(o); }

}  // namespace dt::passes
