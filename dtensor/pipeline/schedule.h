// Pipeline schedules (PyTorch's ScheduleGPipe and Schedule1F1B): the order in which each stage
// runs its micro-batches' forwards and backwards, kept apart from what a stage computes (the
// split PyTorch's torch.distributed.pipelining makes between PipelineStage and a schedule).
//
// Stage s of p runs, for m micro-batches:
//   gpipe  F0 F1 ... F(m-1) B0 B1 ... B(m-1)
//   1f1b   min(m, p-s-1) warm-up forwards, then one forward and one backward alternately while
//          forwards remain, then the remaining backwards: stage 0 of 2 with m = 3 runs
//          F0 F1 B0 F2 B1 B2, the last stage F0 B0 F1 B1 F2 B2 (PyTorch's order)
//
// Messages: the forward of micro-batch k on stage s sends its activation to stage s+1, the
// backward sends its input gradient to stage s-1. Each pair of neighbouring stages talks over its
// own link (a two-rank group), and both ends issue the link's messages in one order: the order of
// their send times on the unit-cost timeline below (activation first on a tie). A rank posts a
// receive as soon as every earlier message of its link is issued, long before it waits for it,
// and sends right after the action that computes the message. With the same order at both ends
// of every link and waits only where an action needs its input, the programs cannot deadlock even
// where each link completes its messages one at a time (passes/p2p_order.h proves it per program).
//
// Timeline: each forward takes `forward_cost`, each backward `backward_cost`; an action starts
// when its stage is free and its input is there (F(s,k) after F(s-1,k), B(s,k) after B(s+1,k)).
// The bubble of a stage is the idle fraction of the makespan: with equal costs per micro-batch
// both schedules give (p-1)/(m+p-1).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dt::pipeline {

enum class Schedule { gpipe, one_f_one_b };
Schedule parse_schedule(std::string_view text);  // "gpipe" | "1f1b"; ValueError otherwise
std::string_view schedule_name(Schedule schedule);

struct Action {
  bool forward = true;
  int microbatch = 0;
  bool operator==(const Action&) const = default;
};

// Returns stage `stage`'s actions in schedule order. Throws ValueError unless 0 <= stage < stages
// and stages, microbatches >= 1.
std::vector<Action> stage_actions(Schedule schedule, int stages, int stage, int microbatches);

// One message between neighbouring stages: the activation of a forward (from stage to stage+1) or
// the gradient of a backward (from stage to stage-1).
struct Message {
  bool activation = true;
  int microbatch = 0;
  int from = 0, to = 0;  // stages
  int link() const { return from < to ? from : to; }  // link k joins stages k and k+1
  bool operator==(const Message&) const = default;
};

// One step of a stage's program: post a receive, post a send, wait for a message, or run an
// action (its input message already waited for).
struct Step {
  enum Kind { post_recv, post_send, wait, run } kind = run;
  Message message;  // post_recv, post_send, wait
  Action action;    // run
};

struct Timeline {
  std::vector<std::vector<double>> start;  // [stage][index in stage_actions]
  double makespan = 0;
  // Returns the idle fraction of stage s's makespan.
  double bubble(int stage) const;
  std::vector<double> busy;  // per stage
};

// Runs the schedule on the unit-cost model (file comment).
Timeline simulate(Schedule schedule, int stages, int microbatches, double forward_cost = 1, double backward_cost = 1);

// Returns the theoretical bubble fraction (p-1)/(m+p-1) of both schedules.
double theoretical_bubble(int stages, int microbatches);

// Returns stage `stage`'s program: its actions in schedule order with the posts and waits of their
// messages (file comment), every send waited for at the end.
std::vector<Step> stage_program(Schedule schedule, int stages, int stage, int microbatches);

// Returns stage `stage`'s program for inference (forwards only, the same for every schedule):
// every receive posted first, then per micro-batch: wait for its activation, run, send.
std::vector<Step> forward_program(int stages, int stage, int microbatches);

}  // namespace dt::pipeline
