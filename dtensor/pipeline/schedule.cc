#include "dtensor/pipeline/schedule.h"

#include <algorithm>
#include <tuple>

#include "dtensor/core/error.h"

namespace dt::pipeline {
namespace {

void check_sizes(int stages, int microbatches) {
  if (stages < 1) DT_THROW(ValueError) << "a pipeline needs at least 1 stage, got " << stages;
  if (microbatches < 1) DT_THROW(ValueError) << "a pipeline needs at least 1 micro-batch, got " << microbatches;
}

// End times of every forward and backward: [stage][micro-batch].
struct Ends {
  std::vector<std::vector<double>> f, b;
};

Ends run_timeline(Schedule schedule, int p, int m, double fc, double bc, Timeline* out) {
  std::vector<std::vector<Action>> order;
  for (int s = 0; s < p; ++s) order.push_back(stage_actions(schedule, p, s, m));
  Ends e{std::vector<std::vector<double>>(size_t(p), std::vector<double>(size_t(m), -1)),
         std::vector<std::vector<double>>(size_t(p), std::vector<double>(size_t(m), -1))};
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free(size_t(p), 0);
  if (out) {
    out->start.assign(size_t(p), {});
    out->busy.assign(size_t(p), 0);
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[size_t(s)] < order[size_t(s)].size()) {
        const Action a = order[size_t(s)][next[size_t(s)]];
        const size_t k = size_t(a.microbatch);
        double ready = 0;
        if (a.forward && s > 0) ready = e.f[size_t(s - 1)][k];
        if (!a.forward) ready = s < p - 1 ? e.b[size_t(s + 1)][k] : e.f[size_t(s)][k];
        if (ready < 0) break;  // its input is not computed yet
        const double start = std::max(ready, free[size_t(s)]);
        const double cost = a.forward ? fc : bc;
        (a.forward ? e.f : e.b)[size_t(s)][k] = free[size_t(s)] = start + cost;
        if (out) {
          out->start[size_t(s)].push_back(start);
          out->busy[size_t(s)] += cost;
          out->makespan = std::max(out->makespan, start + cost);
        }
        ++next[size_t(s)];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) DT_CHECK(next[size_t(s)] == order[size_t(s)].size()) << "schedule stalls at stage " << s;
  return e;
}

}  // namespace

Schedule parse_schedule(std::string_view text) {
  if (text == "gpipe") return Schedule::gpipe;
  if (text == "1f1b") return Schedule::one_f_one_b;
  DT_THROW(ValueError) << "unknown pipeline schedule '" << text << "' (expected gpipe or 1f1b)";
}

std::string_view schedule_name(Schedule schedule) { return schedule == Schedule::gpipe ? "gpipe" : "1f1b"; }

std::vector<Action> stage_actions(Schedule schedule, int stages, int stage, int microbatches) {
  check_sizes(stages, microbatches);
  if (stage < 0 || stage >= stages) DT_THROW(ValueError) << "stage " << stage << " out of range for " << stages << " stages";
  std::vector<Action> out;
  if (schedule == Schedule::gpipe) {
    for (int k = 0; k < microbatches; ++k) out.push_back({true, k});
    for (int k = 0; k < microbatches; ++k) out.push_back({false, k});
    return out;
  }
  const int warmup = std::min(microbatches, stages - stage - 1);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({true, f});
  for (; f < microbatches; ++f, ++b) {
    out.push_back({true, f});
    out.push_back({false, b});
  }
  for (; b < microbatches; ++b) out.push_back({false, b});
  return out;
}

double Timeline::bubble(int stage) const { return makespan > 0 ? 1 - busy[size_t(stage)] / makespan : 0; }

Timeline simulate(Schedule schedule, int stages, int microbatches, double forward_cost, double backward_cost) {
  check_sizes(stages, microbatches);
  Timeline t;
  run_timeline(schedule, stages, microbatches, forward_cost, backward_cost, &t);
  return t;
}

double theoretical_bubble(int stages, int microbatches) {
  return double(stages - 1) / double(microbatches + stages - 1);
}

std::vector<Step> stage_program(Schedule schedule, int stages, int stage, int microbatches) {
  const std::vector<Action> actions = stage_actions(schedule, stages, stage, microbatches);
  const Ends ends = run_timeline(schedule, stages, microbatches, 1, 1, nullptr);
  // The messages of the stage's links (link stage-1 and link stage), each in send-time order.
  auto link_messages = [&](int link) {
    std::vector<std::pair<double, Message>> ms;
    for (int k = 0; k < microbatches; ++k) {
      ms.push_back({ends.f[size_t(link)][size_t(k)], Message{true, k, link, link + 1}});
      ms.push_back({ends.b[size_t(link + 1)][size_t(k)], Message{false, k, link + 1, link}});
    }
    std::stable_sort(ms.begin(), ms.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.first, !a.second.activation, a.second.microbatch) <
             std::make_tuple(b.first, !b.second.activation, b.second.microbatch);
    });
    std::vector<Message> out;
    for (auto& [t, msg] : ms) out.push_back(msg);
    return out;
  };
  struct Link {
    std::vector<Message> messages;
    size_t cursor = 0;
  };
  std::vector<Link> links(2);  // 0: to the previous stage, 1: to the next
  if (stage > 0) links[0].messages = link_messages(stage - 1);
  if (stage < stages - 1) links[1].messages = link_messages(stage);
  std::vector<Step> out;
  std::vector<Message> sent;
  auto flush = [&](Link& l) {
    for (; l.cursor < l.messages.size() && l.messages[l.cursor].to == stage; ++l.cursor)
      out.push_back({Step::post_recv, l.messages[l.cursor], {}});
  };
  auto link_of = [&](const Message& msg) -> Link& { return msg.link() < stage ? links[0] : links[1]; };
  flush(links[0]);
  flush(links[1]);
  for (const Action& a : actions) {
    const int k = a.microbatch;
    if (a.forward ? stage > 0 : stage < stages - 1) {
      const Message in = a.forward ? Message{true, k, stage - 1, stage} : Message{false, k, stage + 1, stage};
      Link& l = link_of(in);
      DT_CHECK(std::find(l.messages.begin(), l.messages.begin() + std::ptrdiff_t(l.cursor), in) !=
               l.messages.begin() + std::ptrdiff_t(l.cursor))
          << "stage " << stage << " would wait for a message it has not posted";
      out.push_back({Step::wait, in, {}});
    }
    out.push_back({Step::run, {}, a});
    if (a.forward ? stage < stages - 1 : stage > 0) {
      const Message msg = a.forward ? Message{true, k, stage, stage + 1} : Message{false, k, stage, stage - 1};
      Link& l = link_of(msg);
      DT_CHECK(l.cursor < l.messages.size() && l.messages[l.cursor] == msg)
          << "stage " << stage << " sends out of its link's order";
      out.push_back({Step::post_send, msg, {}});
      sent.push_back(msg);
      ++l.cursor;
      flush(l);
    }
  }
  for (const Message& msg : sent) out.push_back({Step::wait, msg, {}});
  return out;
}

std::vector<Step> forward_program(int stages, int stage, int microbatches) {
  check_sizes(stages, microbatches);
  std::vector<Step> out;
  if (stage > 0)
    for (int k = 0; k < microbatches; ++k) out.push_back({Step::post_recv, Message{true, k, stage - 1, stage}, {}});
  for (int k = 0; k < microbatches; ++k) {
    if (stage > 0) out.push_back({Step::wait, Message{true, k, stage - 1, stage}, {}});
    out.push_back({Step::run, {}, Action{true, k}});
    if (stage < stages - 1) out.push_back({Step::post_send, Message{true, k, stage, stage + 1}, {}});
  }
  if (stage < stages - 1)
    for (int k = 0; k < microbatches; ++k) out.push_back({Step::wait, Message{true, k, stage, stage + 1}, {}});
  return out;
}

}  // namespace dt::pipeline
