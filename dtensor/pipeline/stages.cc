#include "dtensor/pipeline/stages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/pipeline/graph_copy.h"

namespace dt::pipeline {
namespace {

using ir::Value;

// Position of each parameter's first reader (absent: never read).
std::map<const Value*, size_t> first_readers(const ir::Graph& g) {
  std::map<const Value*, size_t> out;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (const Value* o : g.nodes()[i]->operands)
      if (o->kind == ir::ValueKind::param) out.emplace(o, i);
  return out;
}

// True when module `name` holds parameter `p` (h.2 holds h.2.attn.q_proj.weight).
bool holds(const std::string& name, const std::string& param) {
  return param.size() > name.size() && param.compare(0, name.size(), name) == 0 && param[name.size()] == '.';
}

// The numbered block a parameter belongs to (h.2.attn.q_proj.weight -> h.2), "" when none.
std::string block_of(const std::string& param) {
  for (size_t start = 0, dot; (dot = param.find('.', start)) != std::string::npos; start = dot + 1) {
    const std::string part = param.substr(start, dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); }))
      return param.substr(0, dot);
  }
  return "";
}

double node_cost(const ir::Node& n) {
  const ir::OpDef& def = ir::op_def(n.op);
  if (def.flops) return def.flops(n);
  double elements = 0;
  for (const Value* r : n.results) elements += double(r->type.numel());
  return elements;
}

}  // namespace

StageSplit split_stages(const ir::Graph& model, const sharding::PipelinePlan& plan, int ranks) {
  const std::string where = "the plan's pipeline";
  if (plan.stages > 0 && plan.stages != ranks)
    DT_THROW(ValueError) << where << " asks for " << plan.stages << " stages but mesh dim " << plan.mesh_dim << " has "
                         << ranks << " ranks";
  // Interleaved: v model chunks per rank, p * v stages in all (stage x on rank x mod p).
  const int stages = ranks * plan.virtual_stages;
  const std::string count = plan.virtual_stages > 1 ? std::to_string(ranks) + " ranks x " +
                                                          std::to_string(plan.virtual_stages) + " virtual stages"
                                                    : std::to_string(ranks) + " ranks";
  StageSplit split;
  split.stages = stages;
  split.virtual_stages = plan.virtual_stages;
  split.microbatches = plan.microbatches;
  split.first_node = {0};
  split.first_module = {""};
  const auto first = first_readers(model);
  if (!plan.split_before.empty()) {
    if (int(plan.split_before.size()) + 1 != stages)
      DT_THROW(ValueError) << where << "'s " << plan.split_before.size() << " split points make "
                           << plan.split_before.size() + 1 << " stages but mesh dim " << plan.mesh_dim << " has "
                           << count;
    for (const std::string& name : plan.split_before) {
      size_t at = std::numeric_limits<size_t>::max();
      for (const auto& [p, pos] : first)
        if (holds(name, p->name)) at = std::min(at, pos);
      if (at == std::numeric_limits<size_t>::max())
        DT_THROW(ValueError) << where << " splits before '" << name << "', which names no module of " << model.name();
      if (at <= split.first_node.back())
        DT_THROW(ValueError) << where << " splits before '" << name << "', which does not start after the previous "
                             << "stage's first node: split points must follow the model's order";
      split.first_node.push_back(at);
      split.first_module.push_back(name);
    }
  } else if (stages > 1) {
    // Candidate cuts: the first reader of each numbered block; the cut nearest each k/N of the FLOPs.
    std::map<std::string, size_t> blocks;
    for (const auto& [p, pos] : first)
      if (std::string b = block_of(p->name); !b.empty() && (!blocks.count(b) || pos < blocks[b])) blocks[b] = pos;
    std::vector<std::pair<size_t, std::string>> cuts;
    for (const auto& [b, pos] : blocks) cuts.push_back({pos, b});
    std::sort(cuts.begin(), cuts.end());
    if (!cuts.empty() && cuts.front().first == 0) cuts.erase(cuts.begin());
    if (int(cuts.size()) < stages - 1)
      DT_THROW(ValueError) << where << " asks for " << stages << " stages" << (plan.virtual_stages > 1 ? " (" + count + ")" : "") << " but " << model.name() << " has only "
                           << cuts.size() << " block boundaries (numbered modules such as h.1) to cut at";
    std::vector<double> prefix{0};
    for (const ir::Node* n : model.nodes()) prefix.push_back(prefix.back() + node_cost(*n));
    size_t next = 0;  // first candidate still free
    for (int k = 1; k < stages; ++k) {
      const double target = prefix.back() * k / stages;
      size_t best = next;
      // Leave one candidate for each later cut.
      for (size_t c = next; c + size_t(stages - 1 - k) < cuts.size(); ++c)
        if (std::abs(prefix[cuts[c].first] - target) < std::abs(prefix[cuts[best].first] - target)) best = c;
      split.first_node.push_back(cuts[best].first);
      split.first_module.push_back(cuts[best].second);
      next = best + 1;
    }
  }
  for (const Value* v : model.inputs())
    if (v->type.rank() > 0 && v->type.shape[0] % plan.microbatches != 0)
      DT_THROW(ValueError) << where << " has " << plan.microbatches << " micro-batches, which do not divide the batch "
                           << v->type.shape[0] << " of input " << v->name << " " << ir::type_str(v->type)
                           << ": micro-batches must be equal (PyTorch's PipelineStage refuses uneven ones too)";
  return split;
}

ir::Graph rebatch(const ir::Graph& model, int64_t microbatches) {
  ir::Graph g(model.name());
  ValueMap map;
  // Values that depend on a data input, whose dim 0 is then the batch; and the batch sizes.
  std::vector<bool> batched(model.num_values(), false);
  std::set<int64_t> batch_sizes;
  for (const Value* v : model.inputs()) {
    ir::TensorType t = v->type;
    if (t.rank() > 0) {
      batch_sizes.insert(t.shape[0]);
      t.shape[0] /= microbatches;
    }
    batched[size_t(v->id)] = true;
    map[v] = g.add_input(v->name, t);
  }
  for (const Value* p : model.params()) {
    Value* c = g.add_param(p->name, p->type);
    c->frozen = p->frozen;
    map[p] = c;
  }
  for (const ir::Node* n : model.nodes()) {
    std::vector<ir::Attr> attrs = n->attrs;
    const ir::OpDef& def = ir::op_def(n->op);
    bool reads_batch = false;
    for (const Value* o : n->operands) reads_batch = reads_batch || batched[size_t(o->id)];
    for (size_t a = 0; a < def.attrs.size(); ++a) {
      if (def.attrs[a].name != "shape" || n->operands.empty()) continue;
      const Value* x = n->operands[0];
      auto& shape = std::get<std::vector<int64_t>>(attrs[a]);
      if (shape.empty() || shape[0] == -1) continue;
      // A shape given to a value whose batch shrank: its dim 0 (holding the batch) shrinks alike.
      const bool shrank = map.at(x)->type.numel() != x->type.numel();
      // A value that holds no batch broadcast to the batch along a new or size-1 dim 0 (Hugging
      // Face's position_ids.expand(batch, seq), inv_freq.expand(batch, -1, 1)): exported at the
      // whole batch, it must now broadcast to the micro-batch, or the ops that mix it with batched
      // values would see two batches (or, at a micro-batch of 1, broadcast the batched side up).
      const bool broadcast_to_batch = !batched[size_t(x->id)] && n->op == ir::OpKind::expand &&
                                      (x->type.rank() < int64_t(shape.size()) || x->type.shape[0] == 1) &&
                                      batch_sizes.count(shape[0]) > 0;
      if (!shrank && !broadcast_to_batch) continue;
      if (shape[0] % microbatches != 0)
        DT_THROW(ValueError) << "cannot cut " << model.name() << " into " << microbatches << " micro-batches: "
                             << ir::op_name(n->op) << " %" << n->result()->name << " gives the batch shape "
                             << shape_str(Shape(shape.begin(), shape.end()));
      shape[0] /= microbatches;
      reads_batch = true;
    }
    for (const Value* r : n->results) batched[size_t(r->id)] = reads_batch;
    try {
      copy_node(g, *n, map, true, std::move(attrs));
    } catch (const ShapeError& e) {
      // A batch the rules above cannot see: a constant holding the whole batch (folded at export
      // from a batch-dependent computation, its rows unequal), or a shape computed at full batch.
      DT_THROW(ValueError) << "cannot cut " << model.name() << " into " << microbatches << " micro-batches: "
                           << ir::op_name(n->op) << " %" << n->result()->name
                           << " mixes the micro-batch with a value that holds the whole batch (" << e.message()
                           << ")";
    }
  }
  std::vector<Value*> outputs;
  for (const Value* o : model.outputs()) outputs.push_back(map.at(o));
  g.set_outputs(std::move(outputs));
  return g;
}

std::vector<StageGraph> build_stages(const ir::Graph& model, const StageSplit& split, bool training,
                                     autodiff::Recompute recompute) {
  if (training) autodiff::find_loss(model);  // its errors name the model's shapes, not a micro-batch's
  const ir::Graph g = rebatch(model, split.microbatches);
  const int p = split.stages;
  const auto& nodes = g.nodes();
  std::vector<int> stage_of_node(nodes.size());
  for (size_t i = 0, s = 0; i < nodes.size(); ++i) {
    while (s + 1 < split.first_node.size() && i >= split.first_node[s + 1]) ++s;
    stage_of_node[i] = int(s);
  }
  const size_t nv = g.num_values();
  std::vector<bool> constant(nv, false);  // depends on no input and no parameter
  std::vector<int> made(nv, -1), last_read(nv, -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node* n = nodes[i];
    bool all_constant = true;
    for (const Value* o : n->operands) {
      all_constant = all_constant && constant[size_t(o->id)];
      last_read[size_t(o->id)] = std::max(last_read[size_t(o->id)], stage_of_node[i]);
    }
    for (const Value* r : n->results) {
      constant[size_t(r->id)] = all_constant;
      made[size_t(r->id)] = stage_of_node[i];
    }
  }
  for (const Value* o : g.outputs()) last_read[size_t(o->id)] = p - 1;
  // links[k]: the values crossing link k (stage k to k+1), by id.
  std::vector<std::vector<const Value*>> links(size_t(std::max(p - 1, 0)));
  for (const Value* v : g.values())
    if (v->kind == ir::ValueKind::result && !constant[size_t(v->id)])
      for (int k = made[size_t(v->id)]; k < last_read[size_t(v->id)]; ++k) links[size_t(k)].push_back(v);

  std::vector<StageGraph> out;
  for (int s = 0; s < p; ++s) {
    StageGraph sg;
    sg.graph = ir::Graph(g.name() + ".stage" + std::to_string(s));
    ir::Graph& t = sg.graph;
    ValueMap map;
    if (s > 0)
      for (const Value* v : links[size_t(s - 1)]) sg.inputs_from_prev.push_back(map[v] = t.add_input(v->name, v->type));
    // Operands from outside the stage: data inputs and parameters on first use, constants recomputed.
    std::function<void(const Value*)> bring = [&](const Value* v) {
      if (map.count(v)) return;
      if (v->kind == ir::ValueKind::input) {
        sg.data.push_back(map[v] = t.add_input(v->name, v->type));
      } else if (v->kind == ir::ValueKind::param) {
        Value* c = map[v] = t.add_param(v->name, v->type);
        c->frozen = v->frozen;
        if (!v->frozen && is_floating(v->type.dtype)) sg.params.push_back(c);
      } else {
        DT_CHECK(constant[size_t(v->id)]) << "value %" << v->name << " reaches stage " << s << " by no link";
        for (const Value* o : v->producer->operands) bring(o);
        copy_node(t, *v->producer, map, true);
      }
    };
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (stage_of_node[i] != s) continue;
      for (const Value* o : nodes[i]->operands) bring(o);
      copy_node(t, *nodes[i], map, true);
    }
    if (s < p - 1)
      for (const Value* v : links[size_t(s)]) sg.outputs_to_next.push_back(map.at(v));
    else
      for (const Value* o : g.outputs()) {
        bring(o);
        sg.outputs.push_back(map.at(o));
      }
    sg.forward_nodes = sg.backward_begin = t.nodes().size();
    if (training) {
      ir::Builder b(t);
      Value* loss = nullptr;
      if (s == p - 1) {
        sg.loss = map.at(autodiff::find_loss(g));
        sg.seed = t.add_input("grad_in." + sg.loss->name, sg.loss->type);
        loss = b.mul(sg.loss, sg.seed);
      } else {
        // The surrogate loss sum_i sum(y_i * gy_i): its gradient at y_i is gy_i exactly.
        for (Value* y : sg.outputs_to_next) {
          if (!is_floating(y->type.dtype)) continue;
          Value* gy = t.add_input("grad_in." + y->name, y->type);
          sg.grads_from_next.push_back(gy);
          Value* term = b.sum(b.mul(y, gy));
          loss = loss ? b.add(loss, term) : term;
        }
        if (!loss) DT_THROW(ValueError) << "pipeline stage " << s << " sends no floating value to stage " << s + 1;
      }
      sg.backward_begin = t.nodes().size();
      std::vector<Value*> wrt = sg.params;
      std::vector<Value*> from_prev;
      for (Value* x : sg.inputs_from_prev)
        if (is_floating(x->type.dtype)) from_prev.push_back(x);
      wrt.insert(wrt.end(), from_prev.begin(), from_prev.end());
      std::vector<std::pair<Value*, Value*>> pairs;
      std::vector<Value*> grads = autodiff::append_gradients(t, loss, wrt, &pairs);
      for (const auto& [v, gv] : pairs) sg.gradient_pairs.emplace_back(v->id, gv->id);
      for (size_t i = 0; i < sg.params.size(); ++i) {
        if (!grads[i])
          DT_THROW(ValueError) << "the loss does not depend on parameter " << sg.params[i]->name
                               << ": nothing would train it (remove it from the model)";
        sg.param_grads.push_back(grads[i]);
      }
      for (size_t i = 0; i < from_prev.size(); ++i) {
        Value* gx = grads[sg.params.size() + i];
        if (!gx)  // the loss does not depend on it: its gradient is zero
          gx = b.record(ir::OpKind::full, {},
                        {{"shape", std::vector<int64_t>(from_prev[i]->type.shape.begin(), from_prev[i]->type.shape.end())},
                         {"value", 0.0},
                         {"dtype", from_prev[i]->type.dtype}})[0];
        sg.grads_to_prev.push_back(gx);
      }
    }
    std::vector<Value*> outs = sg.outputs_to_next;
    for (const auto* list : {&sg.grads_to_prev, &sg.param_grads}) outs.insert(outs.end(), list->begin(), list->end());
    if (sg.loss) outs.push_back(sg.loss);
    if (!training) outs.insert(outs.end(), sg.outputs.begin(), sg.outputs.end());
    t.set_outputs(std::move(outs));
    // After the outputs are set: the values sent on and the loss are kept, not recomputed.
    if (training && recompute == autodiff::Recompute::blocks) {
      autodiff::recompute_blocks(t, sg.forward_nodes);
      sg.recomputed = true;
    }
    out.push_back(std::move(sg));
  }
  return out;
}

std::map<std::string, std::vector<int>> stages_by_param(
    int stages, const std::function<const std::vector<ir::Value*>&(int)>& params_of) {
  std::map<std::string, std::vector<int>> out;
  for (int x = 0; x < stages; ++x)
    for (const ir::Value* v : params_of(x)) {
      std::vector<int>& xs = out[v->name];
      if (xs.empty() || xs.back() != x) xs.push_back(x);
    }
  return out;
}

}  // namespace dt::pipeline
