// `dtensor bench pipeline`: GPipe, 1F1B and interleaved 1F1B (v = 2 model chunks per rank) stage
// programs run for real on the threads backend, for p = 2, 4 stages and m = 1, 2, 4, 8
// micro-batches, against the schedules' theory.
//
// Each stage's program (tests/support/pipeline_stages.h) runs per micro-batch one [rows, width] x
// [width, width] matmul forward and two backward (input and weight gradient: a backward costs about
// twice a forward), sending activations and gradients to its neighbours over send/recv. Per
// configuration the step runs --repeat times (after one warm-up) and the step with the shortest
// makespan is kept (the machine may be shared):
//   bubble_measured   per stage, 1 - busy / makespan, where busy is the time the stage's compute
//                     nodes ran (every node but send, recv and wait) and the makespan runs from the
//                     first node any stage starts to the last any stage ends; the mean over stages
//   bubble_theory     (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) interleaved: the idle
//                     fraction with free communication
//   overhead_ms       per slot, (makespan - S * t) / S with S = v*m+p-1 slots (v = 1 but
//                     interleaved), t the mean compute time of one micro-batch's forward + backward
//                     on one stage (one chunk when interleaved): what communication and scheduling
//                     add to each slot of the ideal timeline
//   activations_held  per rank, the most (micro-batch, chunk) forwards that ran and whose backward
//                     has not (each holds its stage input until its backward): GPipe m on every
//                     stage, 1F1B min(m, p - stage), interleaved up to (v-1)*m/rounds + 2(p-1-s) + 1
//                     chunk inputs; peak_activation_bytes is that times one activation's bytes (in
//                     this bench a chunk's input is as large as a stage's: in a model cut into p*v
//                     chunks each chunk's compute is 1/v of a stage's, its input the same size)
//   boundary_bytes    bytes the step's sends move across stage boundaries (each of the p*v-1 links
//                     carries m activations and m gradients), next to that theory
// Each interleaved chunk here runs the same matmul as a whole stage of the other schedules, so a
// rank computes v times as much; the bubble is a fraction, the same for any cost per chunk.
// With fewer cores than stages the stages' compute shares cores, so busy time stretches and the
// measured bubble is not the schedule's: the report says how many cores there were.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/bench_registry.h"
#include "dtensor/core/parallel.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/runtime/launcher.h"
#include "tests/support/pipeline_stages.h"

namespace dt::bench {
namespace {

struct PipelineBenchOptions {
  int64_t rows = 128, width = 512;
  int repeat = 3;
  bool json = false;
};

struct PipelineResult {
  pipeline::Schedule schedule = pipeline::Schedule::gpipe;
  int stages = 0, microbatches = 0, virtual_stages = 1;
  double makespan_ms = 0, slot_ms = 0;  // slot: mean forward + backward compute of one micro-batch
  std::vector<double> bubble{};         // per stage
  std::vector<int> held{};              // activations held, per stage
  int64_t activation_bytes = 0, boundary_bytes = 0;

  double bubble_mean() const {
    double s = 0;
    for (double b : bubble) s += b;
    return s / double(bubble.size());
  }
  double theory() const { return pipeline::theoretical_bubble(stages, microbatches, virtual_stages); }
  double overhead_ms() const {
    const double slots = virtual_stages * microbatches + stages - 1;
    return (makespan_ms - slots * slot_ms) / slots;
  }
  int64_t boundary_theory() const {
    return 2 * int64_t(microbatches) * (stages * virtual_stages - 1) * activation_bytes;
  }
};

// Returns the most micro-batches a stage holds between its forward and its backward.
int activations_held(pipeline::Schedule schedule, int stages, int stage, int microbatches, int virtual_stages) {
  int live = 0, most = 0;
  for (const pipeline::Action& a : pipeline::stage_actions(schedule, stages, stage, microbatches, virtual_stages)) {
    live += a.forward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

// What one stage's nodes did in one step.
struct StageTimes {
  runtime::Clock::time_point first = runtime::Clock::time_point::max(), last = runtime::Clock::time_point::min();
  double busy_s = 0;
};

PipelineResult measure(pipeline::Schedule schedule, int p, int m, int v, const PipelineBenchOptions& o) {
  std::vector<ir::Graph> graphs;
  std::vector<const ir::Graph*> view;
  std::vector<runtime::Bindings> bindings(static_cast<size_t>(p));
  PipelineResult r{.schedule = schedule, .stages = p, .microbatches = m, .virtual_stages = v};
  r.activation_bytes = o.rows * o.width * int64_t(sizeof(float));
  for (int s = 0; s < p; ++s)
    graphs.push_back(test_support::pipeline_stage_graph({.schedule = schedule, .stages = p, .stage = s,
                                                         .microbatches = m, .virtual_stages = v,
                                                         .rows = o.rows, .width = o.width,
                                                         .weight_gradient = true, .link_ranks = {},
                                                         .dp_group = "", .dp_ranks = {}}));
  for (int s = 0; s < p; ++s) {
    view.push_back(&graphs[size_t(s)]);
    // Small weights keep the values bounded however many stages multiply them.
    bindings[size_t(s)]["w"] = Tensor::full({o.width, o.width}, 1.0 / double(o.width));
    for (const ir::Node* n : graphs[size_t(s)].nodes())
      if (n->op == ir::OpKind::send) r.boundary_bytes += n->operands[0]->type.numel() * int64_t(sizeof(float));
    r.held.push_back(activations_held(schedule, p, s, m, v));
  }
  for (int k = 0; k < m; ++k) bindings[0]["mb" + std::to_string(k)] = Tensor::full({o.rows, o.width}, double(k + 1));

  std::mutex mu;
  std::vector<StageTimes> times;
  runtime::LaunchOptions options;
  options.node_hook = [&](int rank) {
    return [&, rank](const ir::Node& n, size_t, runtime::Clock::time_point start, runtime::Clock::time_point end) {
      const bool comm = n.op == ir::OpKind::wait_tensor || ir::op_def(n.op).point_to_point;
      std::lock_guard lock(mu);
      StageTimes& t = times[size_t(rank)];
      t.first = std::min(t.first, start);
      t.last = std::max(t.last, end);
      if (!comm) t.busy_s += std::chrono::duration<double>(end - start).count();
    };
  };
  double best = -1;
  for (int run = 0; run <= std::max(1, o.repeat); ++run) {  // run 0 warms up
    times.assign(size_t(p), StageTimes{});
    runtime::launch(view, bindings, options);
    auto first = times[0].first;
    auto last = times[0].last;
    double busy = 0;
    for (const StageTimes& t : times) {
      first = std::min(first, t.first);
      last = std::max(last, t.last);
      busy += t.busy_s;
    }
    const double makespan = std::chrono::duration<double>(last - first).count();
    if (run == 0 || (best >= 0 && makespan >= best)) continue;
    best = makespan;
    r.makespan_ms = makespan * 1e3;
    r.slot_ms = busy / double(p * m * v) * 1e3;
    r.bubble.clear();
    for (const StageTimes& t : times) r.bubble.push_back(1 - t.busy_s / makespan);
  }
  return r;
}

nlohmann::json to_json(const PipelineResult& r) {
  std::vector<int64_t> peak;
  for (int h : r.held) peak.push_back(h * r.activation_bytes);
  return {{"schedule", pipeline::schedule_name(r.schedule)},
          {"stages", r.stages},
          {"microbatches", r.microbatches},
          {"virtual_stages", r.virtual_stages},
          {"bubble_theory", r.theory()},
          {"bubble_measured", r.bubble_mean()},
          {"bubble_measured_per_stage", r.bubble},
          {"makespan_ms", r.makespan_ms},
          {"microbatch_compute_ms", r.slot_ms},
          {"overhead_ms_per_microbatch", r.overhead_ms()},
          {"activations_held_per_stage", r.held},
          {"peak_activation_bytes_per_stage", peak},
          {"activation_bytes", r.activation_bytes},
          {"boundary_bytes_per_step", r.boundary_bytes},
          {"boundary_bytes_theory", r.boundary_theory()}};
}

void run_pipeline_bench(const PipelineBenchOptions& o) {
  set_threads_per_rank(1);  // one core's worth per stage: the stages are what runs in parallel
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<PipelineResult> results;
  for (pipeline::Schedule schedule :
       {pipeline::Schedule::gpipe, pipeline::Schedule::one_f_one_b, pipeline::Schedule::interleaved_1f1b})
    for (int p : {2, 4})
      for (int m : {1, 2, 4, 8})
        results.push_back(measure(schedule, p, m, schedule == pipeline::Schedule::interleaved_1f1b ? 2 : 1, o));
  if (o.json) {
    nlohmann::json runs = nlohmann::json::array();
    for (const PipelineResult& r : results) runs.push_back(to_json(r));
    nlohmann::json j{{"config", {{"rows", o.rows}, {"width", o.width}, {"repeat", o.repeat}, {"cores", cores},
                                 {"backend", "threads"}}},
                     {"runs", runs}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("pipeline on threads: micro-batch [{}, {}] x [{}, {}] f32, best of {} steps, {} cores\n", o.rows, o.width,
             o.width, o.width, o.repeat, cores);
  fmt::print("{:<16} {:>2} {:>2} {:>2} {:>8} {:>8} {:>10} {:>12} {:>13} {:>15} {:>15}\n", "schedule", "p", "v", "m", "bubble",
             "theory", "mb_ms", "overhead_ms", "act_held", "peak_act_bytes", "boundary_bytes");
  for (const PipelineResult& r : results) {
    std::string held;
    for (int h : r.held) held += (held.empty() ? "" : ",") + std::to_string(h);
    fmt::print("{:<16} {:>2} {:>2} {:>2} {:>8.3f} {:>8.3f} {:>10.3f} {:>12.3f} {:>13} {:>15} {:>15}\n",
               pipeline::schedule_name(r.schedule), r.stages, r.virtual_stages, r.microbatches, r.bubble_mean(), r.theory(), r.slot_ms,
               r.overhead_ms(), held, *std::max_element(r.held.begin(), r.held.end()) * r.activation_bytes,
               r.boundary_bytes);
  }
  if (cores < 4) fmt::print("note: {} cores for 4 stages: their compute shares cores, so p = 4 is not measured\n", cores);
}

BenchRegistrar reg("pipeline", [](CLI::App& bench) {
  auto opt = std::make_shared<PipelineBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("pipeline", "GPipe, 1F1B and interleaved 1F1B stage programs on threads: bubble vs theory, "
                                                   "activation memory, bytes across stage boundaries");
  const CLI::Range size(int64_t(1), int64_t(1) << 16);
  cmd->add_option("--rows", opt->rows, "Rows of one micro-batch's activation")->capture_default_str()->check(size);
  cmd->add_option("--width", opt->width, "Width of activations and of the square weight")->capture_default_str()->check(size);
  cmd->add_option("--repeat", opt->repeat, "Steps per configuration (the shortest is kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", opt->json, "Print JSON");
  cmd->callback([opt] { run_pipeline_bench(*opt); });
});

}  // namespace
}  // namespace dt::bench
