#include "dtensor/pipeline/program.h"

#include <map>
#include <tuple>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/pipeline/graph_copy.h"

namespace dt::pipeline {
namespace {

using ir::Value;

std::string link_group(int link) { return "pp" + std::to_string(link); }

// Returns a scalar constant of `dtype`.
Value* scalar(ir::Builder& b, double value, DType dtype) {
  return b.record(ir::OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", value}, {"dtype", dtype}})[0];
}

// Builds one stage's program.
StageProgram build(const std::vector<StageGraph>& stages, int s, int m, const ProgramOptions& o) {
  const int p = int(stages.size());
  const StageGraph& sg = stages[size_t(s)];
  const ir::Graph& t = sg.graph;
  StageProgram out;
  out.stage = s;
  out.rank = o.stage_ranks[size_t(s)];
  out.microbatches = m;
  out.step.graph = ir::Graph(t.name());
  ir::Graph& g = out.step.graph;
  ir::Builder b(g);
  for (int link : {s - 1, s})
    if (link >= 0 && link < p - 1) b.group(link_group(link), {o.stage_ranks[size_t(link)], o.stage_ranks[size_t(link + 1)]});
  ValueMap shared;  // the stage's parameters, read by every micro-batch
  for (const Value* v : t.params()) {
    Value* c = g.add_param(v->name, v->type);
    c->frozen = v->frozen;
    shared[v] = c;
  }
  std::vector<ValueMap> mb(size_t(m), shared);  // each micro-batch's copies
  for (const Value* d : sg.data) {
    out.data.push_back(d->name);
    for (int k = 0; k < m; ++k) mb[size_t(k)][d] = g.add_input(microbatch_input(d->name, k), d->type);
  }
  // The values a message carries, as the stage graph names them (sender's or receiver's side).
  auto carried = [&](const Message& msg) -> const std::vector<Value*>& {
    if (msg.activation) return msg.to == s ? sg.inputs_from_prev : sg.outputs_to_next;
    return msg.to == s ? sg.grads_from_next : sg.grads_to_prev;
  };
  using Key = std::tuple<bool, int, int>;  // activation, micro-batch, sender
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from}; };
  std::map<Key, std::vector<Value*>> posted;
  std::vector<Value*> grads(sg.params.size(), nullptr), losses;
  std::vector<std::vector<Value*>> outputs(sg.outputs.size());
  const std::vector<Step> program =
      o.training ? stage_program(o.schedule, p, s, m) : forward_program(p, s, m);
  for (const Step& step : program) {
    const Message& msg = step.message;
    const int k = msg.microbatch;
    const std::vector<Value*>& values = step.kind == Step::run ? sg.data : carried(msg);
    // Both ends number a message's tensors alike: (micro-batch, direction, index).
    auto tag = [&](size_t i) { return int64_t((2 * k + (msg.activation ? 0 : 1)) * values.size() + i); };
    const int64_t peer = msg.from == s ? (msg.to > s ? 1 : 0) : (msg.from > s ? 1 : 0);
    switch (step.kind) {
      case Step::post_recv:
        for (size_t i = 0; i < values.size(); ++i)
          posted[key(msg)].push_back(b.recv(link_group(msg.link()), peer, values[i]->type.dtype, values[i]->type.shape, tag(i)));
        break;
      case Step::post_send:
        for (size_t i = 0; i < values.size(); ++i)
          posted[key(msg)].push_back(b.send(mb[size_t(k)].at(values[i]), link_group(msg.link()), peer, tag(i)));
        break;
      case Step::wait: {
        std::vector<Value*>& handles = posted.at(key(msg));
        for (size_t i = 0; i < handles.size(); ++i) {
          Value* arrived = b.wait_tensor(handles[i]);
          if (msg.to == s) mb[size_t(k)][values[i]] = arrived;
        }
        break;
      }
      case Step::run: {
        ValueMap& map = mb[size_t(step.action.microbatch)];
        const auto& nodes = t.nodes();
        const size_t begin = step.action.forward ? 0 : sg.backward_begin;
        const size_t end = step.action.forward ? sg.forward_nodes : nodes.size();
        for (size_t i = begin; i < end; ++i) copy_node(g, *nodes[i], map, false);
        if (step.action.forward) {
          for (size_t i = 0; i < sg.outputs.size(); ++i) outputs[i].push_back(map.at(sg.outputs[i]));
          break;
        }
        for (size_t i = 0; i < grads.size(); ++i) {
          Value* gk = map.at(sg.param_grads[i]);
          grads[i] = grads[i] ? b.add(grads[i], gk) : gk;
        }
        if (sg.loss) losses.push_back(map.at(sg.loss));
        break;
      }
    }
  }
  // Sums in micro-batch order (the loss's and forward outputs') and their mean.
  auto mean = [&](const std::vector<Value*>& xs) {
    Value* acc = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) acc = b.add(acc, xs[i]);
    return m == 1 ? acc : b.mul(acc, scalar(b, 1.0 / m, acc->type.dtype));
  };
  std::vector<Value*> results;
  if (!o.training) {
    for (const std::vector<Value*>& xs : outputs)
      results.push_back(xs[0]->type.rank() == 0 ? mean(xs) : m == 1 ? xs[0] : b.cat(xs, 0));
    g.set_outputs(std::move(results));
    return out;
  }
  if (sg.loss) {
    results.push_back(mean(losses));
    out.first_update = 1;
  }
  std::vector<Value*> params;
  for (size_t i = 0; i < grads.size(); ++i) {
    params.push_back(shared.at(sg.params[i]));
    if (m > 1) grads[i] = b.mul(grads[i], scalar(b, 1.0 / m, grads[i]->type.dtype));
  }
  std::vector<Value*> updated = autodiff::append_optimizer_updates(g, params, grads, o.optimizer, out.step);
  results.insert(results.end(), updated.begin(), updated.end());
  out.step.grads_begin = results.size();
  if (o.with_grads) results.insert(results.end(), grads.begin(), grads.end());
  g.set_outputs(std::move(results));
  return out;
}

}  // namespace

std::string microbatch_input(const std::string& name, int k) { return name + ".mb" + std::to_string(k); }

std::vector<StageProgram> stage_programs(const std::vector<StageGraph>& stages, const StageSplit& split,
                                         const ProgramOptions& options) {
  DT_CHECK(options.stage_ranks.size() == stages.size()) << options.stage_ranks.size() << " ranks for " << stages.size()
                                                        << " stages";
  std::vector<StageProgram> out;
  for (int s = 0; s < int(stages.size()); ++s) out.push_back(build(stages, s, split.microbatches, options));
  return out;
}

}  // namespace dt::pipeline
