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
  const int s = o.stage, p = o.stages, n = p * o.virtual_stages;
  ir::Graph g("stage" + std::to_string(s));
  ir::Builder b(g);
  auto link_name = [](int k) { return "link" + std::to_string(k); };
  auto link_ranks = [&](int k) { return o.link_ranks ? o.link_ranks(k) : std::vector<int>{k % p, (k + 1) % p}; };
  for (int c = s; c < n; c += p)
    for (int link : {c - 1, c})
      if (link >= 0 && link < n - 1) b.group(link_name(link), link_ranks(link));
  if (!o.dp_group.empty()) b.group(o.dp_group, o.dp_ranks);
  const Shape act{o.rows, o.width};
  ir::Value* w = b.input("w", DType::f32, {o.width, o.width});
  std::vector<ir::Value*> mbs;
  if (s == 0)
    for (int k = 0; k < o.microbatches; ++k) mbs.push_back(b.input("mb" + std::to_string(k), DType::f32, act));
  using Key = std::tuple<bool, int, int, int>;
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from, msg.to}; };
  // Links k and k+p join the same two ranks (one message order): their tags differ.
  auto tag = [&](const Message& msg) { return pipeline_tag(msg) + 2 * int64_t(o.microbatches) * (msg.link() / p); };
  std::map<Key, ir::Value*> posted, arrived;
  std::map<std::pair<int, int>, ir::Value*> input, forward, backward;  // by (stage, micro-batch)
  std::vector<ir::Value*> outputs;
  ir::Value* grad = nullptr;
  for (const Step& step : pipeline::stage_program(o.schedule, p, s, o.microbatches, o.virtual_stages)) {
    const Message& msg = step.message;
    switch (step.kind) {
      case Step::post_recv:
        posted[key(msg)] = b.recv(link_name(msg.link()), msg.from > msg.to ? 1 : 0, DType::f32, act, tag(msg));
        break;
      case Step::post_send: {
        ir::Value* v = (msg.activation ? forward : backward).at({msg.from, msg.microbatch});
        posted[key(msg)] = b.send(v, link_name(msg.link()), msg.to > msg.from ? 1 : 0, tag(msg));
        break;
      }
      case Step::wait:
        arrived[key(msg)] = b.wait_tensor(posted.at(key(msg)));
        break;
      case Step::run: {
        const int k = step.action.microbatch, c = step.action.chunk * p + s;
        if (step.action.forward) {
          ir::Value* in = input[{c, k}] = c == 0 ? mbs[size_t(k)] : arrived.at(Key{true, k, c - 1, c});
          forward[{c, k}] = b.matmul(in, w);
          break;
        }
        ir::Value* in = c == n - 1 ? forward.at({c, k}) : arrived.at(Key{false, k, c + 1, c});
        ir::Value* back = backward[{c, k}] = b.matmul(in, w);
        if (c == 0) outputs.push_back(back);
        if (!o.weight_gradient) break;
        ir::Value* dw = b.matmul(b.transpose(input.at({c, k}), 0, 1), in);
        if (!o.dp_group.empty()) dw = b.wait_tensor(b.all_reduce(dw, o.dp_group));
        grad = grad ? b.add(grad, dw) : dw;
        break;
      }
    }
  }
  if (s != 0) outputs = {grad ? grad : w};
  b.outputs(outputs);
  return g;
}

}  // namespace dt::test_support
