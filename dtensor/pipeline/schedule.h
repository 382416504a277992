// Pipeline schedules (PyTorch's ScheduleGPipe, Schedule1F1B and ScheduleInterleaved1F1B): the
// order in which each stage runs its micro-batches' forwards and backwards, kept apart from what a
// stage computes (the split PyTorch's torch.distributed.pipelining makes between PipelineStage and
// a schedule).
//
// Stage s of p runs, for m micro-batches:
//   gpipe  F0 F1 ... F(m-1) B0 B1 ... B(m-1)
//   1f1b   min(m, p-s-1) warm-up forwards, then one forward and one backward alternately while
//          forwards remain, then the remaining backwards: stage 0 of 2 with m = 3 runs
//          F0 F1 B0 F2 B1 B2, the last stage F0 B0 F1 B1 F2 B2 (PyTorch's order)
//   interleaved-1f1b (Megatron's interleaved schedule as PyTorch's ScheduleInterleaved1F1B orders
//          it): the model is cut into p*v stages ("virtual stages"), stage c on rank c mod p, so
//          rank s holds the v model chunks s, s+p, ...; micro-batches go in rounds of
//          r = m / max(1, m/p) (m must be a multiple of the round count max(1, m/p)); rank s runs
//          min((v-1)*r + 2*(p-1-s), m*v) warm-up forwards, then one forward and one backward
//          alternately, then the remaining backwards; its i-th forward runs chunk (i/r) mod v,
//          its j-th backward chunk v-1 - (j/r) mod v, each chunk's micro-batches in order.
//          Needs p >= 2 (a chunk's neighbours live on other ranks).
//
// Messages: the forward of micro-batch k on (virtual) stage c sends its activation to stage c+1,
// the backward sends its input gradient to stage c-1. Each pair of neighbouring stages talks over
// its own link (a two-rank group; with v > 1 links c and c+p join the same two ranks, and a
// backend pairs one rank pair's messages in order, so they share one order: a channel), and both
// ends issue the channel's messages in one order: the order of their send times on the unit-cost
// timeline below (activation first on a tie). A rank posts a
// receive as soon as every earlier message of its channel is issued, long before it waits for it,
// and sends right after the action that computes the message. With the same order at both ends
// of every link and waits only where an action needs its input, the programs cannot deadlock even
// where each link completes its messages one at a time (passes/p2p_order.h proves it per program).
//
// Timeline: each forward of a rank's stage takes `forward_cost`, each backward `backward_cost`
// (divided by v for a chunk: a rank does the same work whatever v); an action starts when its rank
// is free and its input is there (F(c,k) after F(c-1,k), B(c,k) after B(c+1,k)). The bubble of a
// rank is the idle fraction of the makespan: with equal costs per micro-batch GPipe and 1F1B give
// (p-1)/(m+p-1), interleaved-1f1b (p-1)/(v*m+p-1) when p divides m.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dt::pipeline {

enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b };
// "gpipe" | "1f1b" | "interleaved-1f1b"; ValueError otherwise.
Schedule parse_schedule(std::string_view text);
std::string_view schedule_name(Schedule schedule);

struct Action {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  // the rank's model chunk: virtual stage chunk * p + rank (0 unless interleaved)
  bool operator==(const Action&) const = default;
};

// Throws ValueError unless stages, microbatches, virtual_stages >= 1, virtual_stages is 1 except
// with interleaved-1f1b, and interleaved-1f1b has p >= 2 ranks and m a multiple of its rounds
// max(1, m/p) (PyTorch's condition).
void check_schedule(Schedule schedule, int stages, int microbatches, int virtual_stages = 1);

// Returns rank `stage`'s actions in schedule order (`stages`: the ranks p; `virtual_stages`: the
// model chunks per rank). Throws ValueError unless 0 <= stage < stages and check_schedule passes.
std::vector<Action> stage_actions(Schedule schedule, int stages, int stage, int microbatches, int virtual_stages = 1);

// One message between neighbouring (virtual) stages: the activation of a forward (from stage to
// stage+1) or the gradient of a backward (from stage to stage-1).
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
  std::vector<std::vector<double>> start;  // [rank][index in stage_actions]
  double makespan = 0;
  // Returns the idle fraction of rank s's makespan.
  double bubble(int stage) const;
  std::vector<double> busy;  // per rank
};

// Runs the schedule on the unit-cost model (file comment).
Timeline simulate(Schedule schedule, int stages, int microbatches, double forward_cost = 1, double backward_cost = 1,
                  int virtual_stages = 1);

// Returns the theoretical bubble fraction (p-1)/(v*m+p-1) (v = 1: GPipe and 1F1B).
double theoretical_bubble(int stages, int microbatches, int virtual_stages = 1);

// Returns rank `stage`'s program: its actions in schedule order with the posts and waits of their
// messages (file comment), every send waited for at the end.
std::vector<Step> stage_program(Schedule schedule, int stages, int stage, int microbatches, int virtual_stages = 1);

// Returns rank `stage`'s program for inference (forwards only). One chunk per rank: every receive
// posted first, then per micro-batch: wait for its activation, run, send. Several chunks: the
// forwards in interleaved-1f1b's order, messages as in stage_program.
std::vector<Step> forward_program(int stages, int stage, int microbatches, int virtual_stages = 1);

}  // namespace dt::pipeline
