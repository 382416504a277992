#include "dtensor/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "dtensor/core/error.h"

namespace dt::pipeline {
namespace {

// End times of every forward and backward: [virtual stage][micro-batch] (-1: not run).
struct Ends {
  std::vector<std::vector<double>> f, b;
};

// Runs every rank's actions `order` (p ranks, v chunks each) on the unit-cost timeline.
Ends run_timeline(const std::vector<std::vector<Action>>& order, int v, int m, double fc, double bc, Timeline* out) {
  const int p = int(order.size()), n = p * v;
  Ends e{std::vector<std::vector<double>>(size_t(n), std::vector<double>(size_t(m), -1)),
         std::vector<std::vector<double>>(size_t(n), std::vector<double>(size_t(m), -1))};
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
        const int c = a.chunk * p + s;  // the virtual stage
        double ready = 0;
        if (a.forward && c > 0) ready = e.f[size_t(c - 1)][k];
        if (!a.forward) ready = c < n - 1 ? e.b[size_t(c + 1)][k] : e.f[size_t(c)][k];
        if (ready < 0) break;  // its input is not computed yet
        const double start = std::max(ready, free[size_t(s)]);
        const double cost = (a.forward ? fc : bc) / v;
        (a.forward ? e.f : e.b)[size_t(c)][k] = free[size_t(s)] = start + cost;
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

std::vector<std::vector<Action>> every_rank(Schedule schedule, int p, int m, int v) {
  std::vector<std::vector<Action>> order;
  for (int s = 0; s < p; ++s) order.push_back(stage_actions(schedule, p, s, m, v));
  return order;
}

// PyTorch's ScheduleInterleaved1F1B order of rank s (schedule.h).
std::vector<Action> interleaved_actions(int p, int s, int m, int v) {
  const int rounds = std::max(1, m / p), per_round = m / rounds;
  const int total = m * v;
  const int warmup = std::min((v - 1) * per_round + 2 * (p - 1 - s), total);
  std::vector<int> forwards(size_t(v), 0), backwards(size_t(v), 0);
  std::vector<Action> out;
  auto forward = [&](int i) {
    const int chunk = (i / per_round) % v;
    out.push_back({true, forwards[size_t(chunk)]++, chunk});
  };
  auto backward = [&](int j) {
    const int chunk = v - 1 - (j / per_round) % v;
    out.push_back({false, backwards[size_t(chunk)]++, chunk});
  };
  int f = 0, b = 0;
  for (; f < warmup; ++f) forward(f);
  for (; f < total; ++f, ++b) {
    forward(f);
    backward(b);
  }
  for (; b < total; ++b) backward(b);
  return out;
}

// Turns rank `stage`'s actions into its program (schedule.h), given when every message is sent.
std::vector<Step> link_program(const std::vector<Action>& actions, const Ends& ends, int p, int v, int stage, int m) {
  const int n = p * v;
  auto rank_of = [p](int c) { return c % p; };
  // The messages of channel j (the links k = j mod p, all joining rank j to rank j+1 mod p: a
  // backend pairs the messages of one rank pair in order), in send-time order; gradients only
  // when run.
  auto channel_messages = [&](int channel) {
    std::vector<std::pair<double, Message>> ms;
    for (int link = channel; link < n - 1; link += p)
      for (int k = 0; k < m; ++k) {
        ms.push_back({ends.f[size_t(link)][size_t(k)], Message{true, k, link, link + 1}});
        if (ends.b[size_t(link + 1)][size_t(k)] >= 0)
          ms.push_back({ends.b[size_t(link + 1)][size_t(k)], Message{false, k, link + 1, link}});
      }
    std::stable_sort(ms.begin(), ms.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.first, !a.second.activation, a.second.microbatch, a.second.link()) <
             std::make_tuple(b.first, !b.second.activation, b.second.microbatch, b.second.link());
    });
    std::vector<Message> out;
    for (auto& [t, msg] : ms) out.push_back(msg);
    return out;
  };
  struct Link {
    std::vector<Message> messages;
    size_t cursor = 0;
  };
  std::map<int, Link> links;  // the rank's channels
  for (int c = stage; c < n; c += p)
    for (int link : {c - 1, c})
      if (link >= 0 && link < n - 1 && !links.count(link % p)) links[link % p].messages = channel_messages(link % p);
  auto link_of = [&](const Message& msg) -> Link& { return links.at(msg.link() % p); };
  std::vector<Step> out;
  std::vector<Message> sent;
  auto flush = [&](Link& l) {
    for (; l.cursor < l.messages.size() && rank_of(l.messages[l.cursor].to) == stage; ++l.cursor)
      out.push_back({Step::post_recv, l.messages[l.cursor], {}});
  };
  for (auto& [k, l] : links) flush(l);
  for (const Action& a : actions) {
    const int k = a.microbatch, c = a.chunk * p + stage;
    if (a.forward ? c > 0 : c < n - 1) {
      const Message in = a.forward ? Message{true, k, c - 1, c} : Message{false, k, c + 1, c};
      const Link& l = link_of(in);
      DT_CHECK(std::find(l.messages.begin(), l.messages.begin() + std::ptrdiff_t(l.cursor), in) !=
               l.messages.begin() + std::ptrdiff_t(l.cursor))
          << "stage " << stage << " would wait for a message it has not posted";
      out.push_back({Step::wait, in, {}});
    }
    out.push_back({Step::run, {}, a});
    if (a.forward ? c < n - 1 : c > 0) {
      const Message msg = a.forward ? Message{true, k, c, c + 1} : Message{false, k, c, c - 1};
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

}  // namespace

Schedule parse_schedule(std::string_view text) {
  if (text == "gpipe") return Schedule::gpipe;
  if (text == "1f1b") return Schedule::one_f_one_b;
  if (text == "interleaved-1f1b") return Schedule::interleaved_1f1b;
  DT_THROW(ValueError) << "unknown pipeline schedule '" << text << "' (expected gpipe, 1f1b or interleaved-1f1b)";
}

std::string_view schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved_1f1b: return "interleaved-1f1b";
  }
  return "?";
}

void check_schedule(Schedule schedule, int stages, int microbatches, int virtual_stages) {
  if (stages < 1) DT_THROW(ValueError) << "a pipeline needs at least 1 stage, got " << stages;
  if (microbatches < 1) DT_THROW(ValueError) << "a pipeline needs at least 1 micro-batch, got " << microbatches;
  if (virtual_stages < 1) DT_THROW(ValueError) << "a pipeline needs at least 1 virtual stage per rank, got " << virtual_stages;
  if (schedule != Schedule::interleaved_1f1b) {
    if (virtual_stages > 1)
      DT_THROW(ValueError) << "schedule " << schedule_name(schedule) << " runs one stage per rank, not "
                           << virtual_stages << " virtual stages: use interleaved-1f1b";
    return;
  }
  if (stages < 2)
    DT_THROW(ValueError) << "interleaved-1f1b needs at least 2 pipeline ranks (a model chunk's neighbours live on "
                         << "other ranks), got " << stages;
  const int rounds = std::max(1, microbatches / stages);
  if (microbatches % rounds != 0)
    DT_THROW(ValueError) << "interleaved-1f1b needs the micro-batch count to be a multiple of its rounds max(1, m/p) = "
                         << rounds << " (as PyTorch's ScheduleInterleaved1F1B), got m = " << microbatches
                         << " on p = " << stages;
}

std::vector<Action> stage_actions(Schedule schedule, int stages, int stage, int microbatches, int virtual_stages) {
  check_schedule(schedule, stages, microbatches, virtual_stages);
  if (stage < 0 || stage >= stages) DT_THROW(ValueError) << "stage " << stage << " out of range for " << stages << " stages";
  if (schedule == Schedule::interleaved_1f1b) return interleaved_actions(stages, stage, microbatches, virtual_stages);
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

Timeline simulate(Schedule schedule, int stages, int microbatches, double forward_cost, double backward_cost,
                  int virtual_stages) {
  Timeline t;
  run_timeline(every_rank(schedule, stages, microbatches, virtual_stages), virtual_stages, microbatches, forward_cost,
               backward_cost, &t);
  return t;
}

double theoretical_bubble(int stages, int microbatches, int virtual_stages) {
  return double(stages - 1) / double(virtual_stages * microbatches + stages - 1);
}

std::vector<Step> stage_program(Schedule schedule, int stages, int stage, int microbatches, int virtual_stages) {
  const std::vector<std::vector<Action>> order = every_rank(schedule, stages, microbatches, virtual_stages);
  const Ends ends = run_timeline(order, virtual_stages, microbatches, 1, 1, nullptr);
  return link_program(order[size_t(stage)], ends, stages, virtual_stages, stage, microbatches);
}

std::vector<Step> forward_program(int stages, int stage, int microbatches, int virtual_stages) {
  if (virtual_stages > 1) {  // the forwards of interleaved-1f1b's order
    std::vector<std::vector<Action>> order = every_rank(Schedule::interleaved_1f1b, stages, microbatches, virtual_stages);
    for (std::vector<Action>& actions : order) std::erase_if(actions, [](const Action& a) { return !a.forward; });
    const Ends ends = run_timeline(order, virtual_stages, microbatches, 1, 1, nullptr);
    return link_program(order[size_t(stage)], ends, stages, virtual_stages, stage, microbatches);
  }
  check_schedule(Schedule::gpipe, stages, microbatches);
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
