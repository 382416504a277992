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
//  * an all_gather whose input is a linear's result read by nothing else (f32/f64: the
//    vocabulary-parallel lm_head's logits) becomes `all_gather_linear_in(x, w, b) {dim}`, the
//    linear writing straight into this rank's block of the gathered buffer, and
//    `all_gather_into_tensor_ {dim}` gathering the other blocks around it. The gathered dim is 0,
//    or d when the gather feeds the view -> permute -> reshape chain of a gather along d
//    (ir/gather_join.h), whose reshape's readers then read the buffer; d must be the last dim (or
//    follow size-1 dims) for the block to be rows a GEMM writes (ir::block_rows_fold). Saves the
//    gather's copy of the own block (on the anchor gpt's tp 2: 8 MiB of logits per rank, read and
//    written again) and the linear's separate output; the values are the linear's, unchanged
//    (its weight packed as a linear's would be: OpDef::packs_weight).
// Other collectives (single all_gathers, reduce_scatter, all_to_all) keep their functional form.
#include "dtensor/ir/gather_join.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/graph_edit.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {

// A value whose producer gives it a buffer of its own (OpDef::fresh_result).
bool owns_buffer(const ir::Value* v) { return v->producer && ir::op_def(v->producer->op).fresh_result; }

// The in-place form of an all_gather's input producer: the op that writes this rank's block
// straight into the gathered buffer, its attributes, the gathered dim and the gather-join chain
// the buffer replaces (a gather along dim > 0).
struct InPlaceProducer {
  ir::OpKind op;
  ir::NamedAttrs attrs;
  int64_t dim = 0;
  std::optional<ir::GatherJoinChain> join;
};

// Returns how the producer of `ag`'s input writes into its block, or nullopt when it cannot:
//   bucket_copy_in (read only by the gather)            -> all_gather_copy_in, dim 0;
//   linear (f32/f64, read only by the gather, waited on) -> all_gather_linear_in {dim}, dim 0 or
//   the d of the gather-join chain after the wait, when the block is rows a GEMM writes.
std::optional<InPlaceProducer> in_place_producer(const ir::Node& ag, const UseLists& uses) {
  const ir::Value* block = ag.operands[0];
  const ir::Node* p = block->producer;
  if (!p || uses.sole_user(block) != &ag || uses.is_output(block)) return std::nullopt;
  const std::string& group = ag.attr_str("group");
  if (p->op == ir::OpKind::bucket_copy_in)
    return InPlaceProducer{ir::OpKind::all_gather_copy_in,
                           {{"group", group}, {"dtype", p->attr_dtype("dtype")}, {"bitcast", p->attr_bool("bitcast")}},
                           0,
                           std::nullopt};
  const ir::Node* wait = uses.sole_user(ag.result());
  if (p->op != ir::OpKind::linear || !wait || wait->op != ir::OpKind::wait_tensor || block->type.rank() < 1 ||
      (block->type.dtype != DType::f32 && block->type.dtype != DType::f64))
    return std::nullopt;
  std::optional<ir::GatherJoinChain> join = ir::match_gather_join(ag, uses);
  const int64_t dim = join ? join->dim : 0;
  if (!ir::block_rows_fold(block->type.shape, dim)) return std::nullopt;  // a middle dim: the GEMM cannot write its block
  return InPlaceProducer{ir::OpKind::all_gather_linear_in, {{"group", group}, {"dim", dim}}, dim, std::move(join)};
}

// producer -> all_gather_into_tensor [-> wait -> view -> permute -> reshape]  =>
// in-place producer -> all_gather_into_tensor_ [-> wait, read where the reshape was].
bool lower_in_place_gathers(const ir::Graph& graph, const UseLists& uses, GraphEdit& edit, size_t original) {
  bool any = false;
  for (size_t i = 0; i < original; ++i) {
    const ir::Node* ag = graph.nodes()[i];
    if (ag->op != ir::OpKind::all_gather_into_tensor) continue;
    std::optional<InPlaceProducer> form = in_place_producer(*ag, uses);
    if (!form) continue;
    const ir::Value* block = ag->operands[0];
    const ir::Node* producer = block->producer;
    const std::string& group = ag->attr_str("group");
    edit.drop(producer);
    edit.drop(ag);
    // The new values take the names of those they replace (%logits, %logits.ag, the join's).
    ir::Value* buf = edit.add(form->op, producer->operands, form->attrs, edit.key(producer));
    edit.replace(block, buf);
    ir::Value* r =
        edit.add(ir::OpKind::all_gather_into_tensor_, {buf}, {{"group", group}, {"dim", form->dim}}, edit.key(ag));
    edit.set_order(r, double(i));
    edit.replace(ag->result(), r);
    any = true;
    if (!form->join) continue;  // the wait now reads r
    // The gathered buffer is already in the join's layout: one wait stands for wait -> view ->
    // permute -> reshape.
    const ir::GatherJoinChain& join = *form->join;
    for (const ir::Node* n : {join.wait, join.view, join.permute, join.join}) edit.drop(n);
    ir::Value* w = edit.add(ir::OpKind::wait_tensor, {r}, {}, edit.key(join.wait));
    edit.replace(join.join->result(), w);
  }
  return any;
}

bool lower_comm(ir::Graph& graph, size_t one_shot_threshold) {
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
    if (one_shot_threshold > 0 && bytes <= one_shot_threshold) {
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
                            {{"group", group}, {"op", op}, {"algo", std::string(one_shot_threshold > 0 ? "two_shot" : "auto")}},
                            edit.key(ar), ar->result()->name + "_inplace");
    edit.set_order(r, double(i));
    edit.replace(ar->result(), r);
    ir::Value* w = edit.add(ir::OpKind::wait_tensor, {r}, {}, edit.key(wait), wait->result()->name + "_inplace");
    edit.replace(wait->result(), w);
  }
  any = lower_in_place_gathers(graph, uses, edit, original) || any;
  return any && edit.commit();
}

}  // namespace

PassPtr make_comm_lowering_pass(const PassOptions& o) {
  return make_pass("comm-lowering",
                   "in-place all_reduce (clone when the input is read later), blocking one-shot at or under a size",
                   [threshold = o.one_shot_threshold_bytes](ir::Graph& g) { return lower_comm(g, threshold); });
}

}  // namespace dt::passes
