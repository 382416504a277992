#include "dtensor/pipeline/program.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/pipeline/graph_copy.h"

namespace dt::pipeline {
namespace {

using ir::Value;

// Every place's link k is named alike (its rank list differs): the programs of one orbit then
// differ only by renaming, and the proof by orbit keys a link's queue by its name.
std::string link_group(int link) { return "pp" + std::to_string(link); }

// The group summing a tied parameter's gradients (named alike at every place, as the links).
std::string tied_group(const std::string& param) { return "tied." + param; }

// Returns a scalar constant of `dtype`.
Value* scalar(ir::Builder& b, double value, DType dtype) {
  return b.record(ir::OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", value}, {"dtype", dtype}})[0];
}

// The tags of each link's messages: links k and k+p join the same two ranks (a channel,
// schedule.h), so each link gets its own range of 2 m * stride tags, stride the most values one of
// its messages carries (activations of stage k, gradients of stage k+1).
struct LinkTags {
  std::vector<int64_t> base, stride;
  int64_t tag(const Message& msg, size_t i) const {
    const size_t l = size_t(msg.link());
    return base[l] + (2 * int64_t(msg.microbatch) + (msg.activation ? 0 : 1)) * stride[l] + int64_t(i);
  }
};

LinkTags link_tags(const std::vector<const StageWork*>& works, int p, int m) {
  const int n = int(works.size());
  LinkTags t;
  std::vector<int64_t> next(size_t(p), 0);
  for (int link = 0; link + 1 < n; ++link) {
    t.stride.push_back(int64_t(
        std::max(works[size_t(link)]->outputs_to_next.size(), works[size_t(link + 1)]->grads_to_prev.size())));
    t.base.push_back(next[size_t(link % p)]);
    next[size_t(link % p)] += 2 * int64_t(m) * t.stride.back();
  }
  return t;
}

}  // namespace

StageProgram stage_program(const std::vector<const StageWork*>& works, int s, int c, const RankAt& rank_at, int m,
                           const ProgramOptions& o) {
  DT_CHECK(o.virtual_stages >= 1 && works.size() % size_t(o.virtual_stages) == 0)
      << works.size() << " stages for " << o.virtual_stages << " virtual stages per rank";
  const int n = int(works.size()), p = n / o.virtual_stages;
  StageProgram out;
  out.stage = s;
  for (int x = s; x < n; x += p) out.stages.push_back(x);
  out.rank = rank_at(s, c);
  out.place = c;
  auto work = [&](int x) -> const StageWork& { return *works[size_t(x)]; };
  out.step.graph = ir::Graph(work(s).graph->name() + ".rank" + std::to_string(out.rank));
  ir::Graph& g = out.step.graph;
  ir::Builder b(g);
  ValueMap shared;  // the stages' parameters and seed, read by every micro-batch
  std::vector<ValueMap> mb(static_cast<size_t>(m));  // each micro-batch's copies
  std::map<std::string, std::vector<Value*>> data_inputs;  // by name: one input per micro-batch
  // The trained parameters, once each however many of this rank's stages read them (interleaved
  // stages may share one), and by stage the slot of each of its trained parameters.
  std::vector<Value*> trained;
  std::map<std::string, size_t> slot_of;
  std::map<int, std::vector<size_t>> slots;
  for (int x : out.stages) {
    const StageWork& sg = work(x);
    for (const ir::GroupDecl& d : sg.graph->groups())  // the stage's collectives'
      if (!g.find_group(d.name)) b.group(d.name, d.ranks);
    for (int link : {x - 1, x})
      if (link >= 0 && link < n - 1)
        b.group(link_group(link), {rank_at(link % p, c), rank_at((link + 1) % p, c)});
    for (const Value* v : sg.graph->params()) {
      Value* copy = g.find(v->name);  // an earlier stage of this rank reads it too
      if (!copy) {
        copy = g.add_param(v->name, v->type);
        copy->frozen = v->frozen;
      }
      DT_CHECK(copy->kind == ir::ValueKind::param && copy->type == v->type)
          << "parameter " << v->name << " of stage " << x << " is " << ir::type_str(v->type) << " here but "
          << ir::type_str(copy->type) << " in another stage of rank " << out.rank;
      shared[v] = copy;
    }
    if (sg.seed) {
      shared[sg.seed] = g.add_input(sg.seed->name, sg.seed->type);
      out.seed = sg.seed->name;
    }
    for (const Value* d : sg.data) {
      std::vector<Value*>& inputs = data_inputs[d->name];
      if (inputs.empty()) {
        out.data.push_back(d->name);
        for (int k = 0; k < m; ++k) inputs.push_back(g.add_input(microbatch_input(d->name, k), d->type));
      }
      for (int k = 0; k < m; ++k) mb[size_t(k)][d] = inputs[size_t(k)];
    }
    for (const Value* v : sg.params) {
      const auto [it, fresh] = slot_of.emplace(v->name, trained.size());
      if (fresh) trained.push_back(shared.at(v));
      slots[x].push_back(it->second);
    }
  }
  for (ValueMap& map : mb) map.insert(shared.begin(), shared.end());
  // This rank's end of a message: the stage that sends or receives it here.
  auto local = [&](const Message& msg) { return msg.to % p == s ? msg.to : msg.from; };
  // The values a message carries, as the stage graph names them (sender's or receiver's side).
  auto carried = [&](const Message& msg) -> const std::vector<Value*>& {
    const int x = local(msg);
    const StageWork& sg = work(x);
    if (msg.activation) return msg.to == x ? sg.inputs_from_prev : sg.outputs_to_next;
    return msg.to == x ? sg.grads_from_next : sg.grads_to_prev;
  };
  const LinkTags tags = link_tags(works, p, m);
  using Key = std::tuple<bool, int, int>;  // activation, micro-batch, sender
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from}; };
  std::map<Key, std::vector<Value*>> posted;
  std::vector<Value*> grads(trained.size(), nullptr), losses;
  const StageWork& last = work(out.stages.back());
  std::vector<std::vector<Value*>> outputs(out.stages.back() == n - 1 ? last.outputs.size() : 0);
  const std::vector<Step> program = o.training ? stage_program(o.schedule, p, s, m, o.virtual_stages)
                                               : forward_program(p, s, m, o.virtual_stages);
  for (const Step& step : program) {
    const Message& msg = step.message;
    const int k = msg.microbatch;
    if (step.kind == Step::run) {
      const int x = step.action.chunk * p + s;
      const StageWork& sg = work(x);
      ValueMap& map = mb[size_t(step.action.microbatch)];
      for (const ir::Node* node : step.action.forward ? sg.forward : sg.backward) copy_node(g, *node, map, false);
      if (step.action.forward) {
        if (x == n - 1)
          for (size_t i = 0; i < sg.outputs.size(); ++i) outputs[i].push_back(map.at(sg.outputs[i]));
        continue;
      }
      for (size_t i = 0; i < sg.params.size(); ++i) {
        Value* gk = map.at(sg.param_grads[i]);
        Value*& acc = grads[slots.at(x)[i]];
        acc = acc ? b.add(acc, gk) : gk;
      }
      if (sg.loss) losses.push_back(map.at(sg.loss));
      continue;
    }
    const std::vector<Value*>& values = carried(msg);
    const int x = local(msg);
    // Both ends number a message's tensors alike: (link, micro-batch, direction, index).
    auto tag = [&](size_t i) { return tags.tag(msg, i); };
    const int64_t peer = (msg.from == x ? msg.to : msg.from) > x ? 1 : 0;
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
          if (msg.to == x) mb[size_t(k)][values[i]] = arrived;
        }
        break;
      }
      case Step::run: break;
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
  if (!losses.empty()) {
    results.push_back(mean(losses));
    out.first_update = 1;
  }
  for (Value*& grad : grads)
    if (m > 1) grad = b.mul(grad, scalar(b, 1.0 / m, grad->type.dtype));
  // Tied weights (a trained parameter that stages on other pipeline ranks read too, GPT-2's wte in
  // the first and last stage): its gradient is the sum of theirs, as Megatron-LM's embedding group
  // sums them, so every holder applies the same update. One all_reduce per such parameter, in name
  // order on every holder, over the ranks at this place of the pipeline ranks holding it (the
  // compile checked that its placements agree, so the shards do).
  const auto trained_in = stages_by_param(n, [&](int y) -> const std::vector<Value*>& { return work(y).params; });
  for (const auto& [name, slot] : slot_of) {
    std::set<int> holders;  // pipeline ranks
    for (int y : trained_in.at(name)) holders.insert(y % p);
    if (holders.size() < 2) continue;
    std::vector<int> ranks;
    for (int r : holders) ranks.push_back(rank_at(r, c));
    const std::string group = tied_group(name);
    b.group(group, ranks);
    grads[slot] = b.wait_tensor(b.all_reduce(grads[slot], group, "sum"));
  }
  std::vector<Value*> updated = autodiff::append_optimizer_updates(g, trained, grads, o.optimizer, out.step);
  results.insert(results.end(), updated.begin(), updated.end());
  out.step.grads_begin = results.size();
  if (o.with_grads) results.insert(results.end(), grads.begin(), grads.end());
  g.set_outputs(std::move(results));
  return out;
}

std::string microbatch_input(const std::string& name, int k) { return name + ".mb" + std::to_string(k); }

StageWork stage_work(const StageGraph& sg, const ir::Graph& program, bool training) {
  StageWork w;
  w.graph = &program;
  auto find = [&](const std::vector<Value*>& values) {
    std::vector<Value*> out;
    for (const Value* v : values) {
      Value* found = program.find(v->name);
      DT_CHECK(found) << "stage value " << v->name << " missing from its program";
      out.push_back(found);
    }
    return out;
  };
  w.inputs_from_prev = find(sg.inputs_from_prev);
  w.grads_from_next = find(sg.grads_from_next);
  w.data = find(sg.data);
  w.params = find(sg.params);
  if (sg.seed) w.seed = find({sg.seed})[0];
  // Outputs by position (stages.h: outputs_to_next, grads_to_prev, param_grads, loss | outputs).
  const auto& outs = program.outputs();
  size_t at = 0;
  auto take = [&](size_t n) {
    DT_CHECK(at + n <= outs.size()) << "stage program has " << outs.size() << " outputs";
    std::vector<Value*> out(outs.begin() + std::ptrdiff_t(at), outs.begin() + std::ptrdiff_t(at + n));
    at += n;
    return out;
  };
  w.outputs_to_next = take(sg.outputs_to_next.size());
  w.grads_to_prev = take(sg.grads_to_prev.size());
  w.param_grads = take(sg.param_grads.size());
  if (sg.loss && training) w.loss = take(1)[0];
  if (!training) w.outputs = take(sg.outputs.size());
  // The backward: every node that depends on the seed or a gradient from the next stage.
  const auto& nodes = program.nodes();
  std::vector<bool> backward(program.num_values(), false);
  if (w.seed) backward[size_t(w.seed->id)] = true;
  for (const Value* v : w.grads_from_next) backward[size_t(v->id)] = true;
  std::vector<bool> in_backward(nodes.size(), false);
  size_t first = nodes.size();  // the first backward node
  for (size_t i = 0; i < nodes.size(); ++i) {
    bool any = false;
    for (const Value* o : nodes[i]->operands) any = any || backward[size_t(o->id)];
    for (const Value* r : nodes[i]->results) backward[size_t(r->id)] = any;
    in_backward[i] = any;
    if (any) first = std::min(first, i);
  }
  // Recomputed blocks (stages.h): their clones depend on no seed or gy but belong to the backward,
  // as does every node after the first backward one that the forward's products do not need.
  if (sg.recomputed && training) {
    std::vector<bool> needed(program.num_values(), false);
    for (const Value* v : w.outputs_to_next) needed[size_t(v->id)] = true;
    if (w.loss) needed[size_t(w.loss->id)] = true;
    for (size_t i = nodes.size(); i-- > 0;) {
      bool need = false;
      for (const Value* r : nodes[i]->results) need = need || needed[size_t(r->id)];
      if (need && !in_backward[i])
        for (const Value* o : nodes[i]->operands) needed[size_t(o->id)] = true;
      if (i > first && !need) in_backward[i] = true;
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) (in_backward[i] ? w.backward : w.forward).push_back(nodes[i]);
  return w;
}

}  // namespace dt::pipeline
