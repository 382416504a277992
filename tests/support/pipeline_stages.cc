#include "tests/support/pipeline_stages.h"

#include <map>
#include <tuple>

#include "dtensor/ir/builder.h"

namespace dt::test_support {

int64_t pipeline_tag(const pipeline::Message& message) {
  return 2 * int64_t(message.microbatch) + (message.activation ? 0 : 1);
}

ir::Graph pipeline_stage_graph(const PipelineStageOptions& o) {
  using pipeline::Message;
  using pipeline::Step;
  const int s = o.stage, p = o.stages;
  ir::Graph g("stage" + std::to_string(s));
  ir::Builder b(g);
  auto link_name = [](int k) { return "link" + std::to_string(k); };
  auto link_ranks = [&](int k) { return o.link_ranks ? o.link_ranks(k) : std::vector<int>{k, k + 1}; };
  if (s > 0) b.group(link_name(s - 1), link_ranks(s - 1));
  if (s < p - 1) b.group(link_name(s), link_ranks(s));
  if (!o.dp_group.empty()) b.group(o.dp_group, o.dp_ranks);
  const Shape act{o.rows, o.width};
  ir::Value* w = b.input("w", DType::f32, {o.width, o.width});
  std::vector<ir::Value*> mbs;
  if (s == 0)
    for (int k = 0; k < o.microbatches; ++k) mbs.push_back(b.input("mb" + std::to_string(k), DType::f32, act));
  using Key = std::tuple<bool, int, int, int>;
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from, msg.to}; };
  std::map<Key, ir::Value*> posted, arrived;
  const size_t m = size_t(o.microbatches);
  std::vector<ir::Value*> input(m), forward(m), backward(m), outputs;
  ir::Value* grad = nullptr;
  for (const Step& step : pipeline::stage_program(o.schedule, p, s, o.microbatches)) {
    const Message& msg = step.message;
    switch (step.kind) {
      case Step::post_recv:
        posted[key(msg)] = b.recv(link_name(msg.link()), msg.from > msg.to ? 1 : 0, DType::f32, act, pipeline_tag(msg));
        break;
      case Step::post_send: {
        ir::Value* v = msg.activation ? forward[size_t(msg.microbatch)] : backward[size_t(msg.microbatch)];
        posted[key(msg)] = b.send(v, link_name(msg.link()), msg.to > msg.from ? 1 : 0, pipeline_tag(msg));
        break;
      }
      case Step::wait:
        arrived[key(msg)] = b.wait_tensor(posted.at(key(msg)));
        break;
      case Step::run: {
        const size_t k = size_t(step.action.microbatch);
        if (step.action.forward) {
          input[k] = s == 0 ? mbs[k] : arrived.at(Key{true, int(k), s - 1, s});
          forward[k] = b.matmul(input[k], w);
          break;
        }
        ir::Value* in = s == p - 1 ? forward[k] : arrived.at(Key{false, int(k), s + 1, s});
        backward[k] = b.matmul(in, w);
        if (!o.weight_gradient) break;
        ir::Value* dw = b.matmul(b.transpose(input[k], 0, 1), in);
        if (!o.dp_group.empty()) dw = b.wait_tensor(b.all_reduce(dw, o.dp_group));
        grad = grad ? b.add(grad, dw) : dw;
        break;
      }
    }
  }
  if (s == 0) outputs = backward;
  else outputs.push_back(grad ? grad : w);
  b.outputs(outputs);
  return g;
}

}  // namespace dt::test_support
