// Each pipeline rank's program: its share of its stage's graph (stages.h; the graph itself on a
// one-rank stage, its partitioned program on a stage's sub-mesh) copied once per micro-batch
// forward and backward in schedule order (schedule.h's stage_program), the values crossing stages
// moved by send/recv between the ranks at the same place of neighbouring stages' sub-meshes (one
// two-rank group per link and place, named "pp<link>" at every place), then, for training, the gradients
// accumulated over the micro-batches, divided by their count (the loss is the mean of the
// micro-batches' losses, as PyTorch's schedules compute it) and one optimizer update per parameter
// shard. A parameter trained in stages on several pipeline ranks (tied weights) has its gradient
// summed over them first (an all_reduce on group "tied.<name>" of the ranks at the same place), so
// every copy takes the same update.
//
// Data: each micro-batch k binds the stage's data inputs as "<name>.mb<k>" (rows k*b .. (k+1)*b-1
// of the batch, then the rank's shard: microbatch_input()); the seed input (stages.h) binds 1.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/pipeline/schedule.h"
#include "dtensor/pipeline/stages.h"

namespace dt::pipeline {

// One rank's share of a stage for one micro-batch: `graph` (the stage graph or a partitioned
// program of it) and its values in the stage graph's roles.
struct StageWork {
  const ir::Graph* graph = nullptr;
  std::vector<const ir::Node*> forward, backward;  // backward: the nodes that depend on the seed or a gy
  std::vector<ir::Value*> inputs_from_prev, outputs_to_next, grads_from_next, grads_to_prev, data, params,
      param_grads, outputs;
  ir::Value* loss = nullptr;
  ir::Value* seed = nullptr;
};

// Finds stage graph `sg`'s values in `program` (sg.graph itself, or a program partitioned from
// it: inputs and parameters by name, outputs by position).
StageWork stage_work(const StageGraph& sg, const ir::Graph& program, bool training);

struct ProgramOptions {
  Schedule schedule = Schedule::gpipe;
  int virtual_stages = 1;  // stages per rank: stage x runs on pipeline rank x mod (stages / v)
  bool training = true;
  autodiff::OptimizerConfig optimizer;  // training
  autodiff::Recompute recompute = autodiff::Recompute::none;  // training: stages.h's build_stages
  bool with_grads = false;              // training: append every parameter's gradient to the outputs
};

struct StageProgram {
  int stage = 0, rank = 0;  // stage: the rank's index along the pipeline dim
  std::vector<int> stages;  // the stages it runs: stage, stage + p, ... (several when interleaved)
  int place = 0;  // the rank's index in its stage's sub-mesh
  // graph: the rank's program. Training: params, state and updates as a TrainStep's (output k +
  // first_update replaces the binding updates[k]); grads_begin: where the gradients start.
  autodiff::TrainStep step;
  size_t first_update = 0;        // 1 on the last stage (output 0 is the loss), else 0
  std::vector<std::string> data;  // the model's data inputs this stage reads
  std::string seed;               // the input bound to 1 (the last stage, training), else ""
};

// Returns the name micro-batch k of data input `name` is bound as.
std::string microbatch_input(const std::string& name, int k);

// The global rank at place c (its index in the sub-mesh's rank order) of pipeline rank s's sub-mesh.
using RankAt = std::function<int(int s, int c)>;

// Builds the program of the rank at place c of pipeline rank s from its share of each stage it runs
// (the file comment): work[x] is that place's StageWork for x = s, s + p, ... (p = work.size() /
// options.virtual_stages), and any place's for the other stages (only the value counts of their
// messages are read, which every place shares). Each link is one group "pp<link>" of the two ranks
// at place c of its stages' sub-meshes: ranks of one orbit get programs equal up to renaming.
// Forward only (options.training false): the last stage's outputs are the model's outputs, each
// micro-batch's concatenated on dim 0 (scalars averaged).
StageProgram stage_program(const std::vector<const StageWork*>& work, int s, int c, const RankAt& rank_at,
                           int microbatches, const ProgramOptions& options);

}  // namespace dt::pipeline
