// Each pipeline rank's program: its stage's graph (stages.h) copied once per micro-batch forward
// and backward in schedule order (schedule.h's stage_program), the values crossing stages moved by
// send/recv over one two-rank group per link ("pp<k>" joins stages k and k+1), then, for training,
// the gradients accumulated over the micro-batches, divided by their count (the loss is the mean
// of the micro-batches' losses, as PyTorch's schedules compute it) and one optimizer update per
// parameter.
//
// Data: each micro-batch k binds the stage's data inputs as "<name>.mb<k>" (rows k*b .. (k+1)*b-1
// of the batch: microbatch_input()).
#pragma once

#include <string>
#include <vector>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/pipeline/schedule.h"
#include "dtensor/pipeline/stages.h"

namespace dt::pipeline {

struct ProgramOptions {
  Schedule schedule = Schedule::gpipe;
  std::vector<int> stage_ranks;  // [stage]: the rank that runs it
  bool training = true;
  autodiff::OptimizerConfig optimizer;  // training
  bool with_grads = false;              // training: append every parameter's gradient to the outputs
};

struct StageProgram {
  int stage = 0, rank = 0;
  // graph: the rank's program. Training: params, state and updates as a TrainStep's (output k +
  // first_update replaces the binding updates[k]); grads_begin: where the gradients start.
  autodiff::TrainStep step;
  size_t first_update = 0;     // 1 on the last stage (output 0 is the loss), else 0
  std::vector<std::string> data;  // the model's data inputs this stage reads
  int microbatches = 1;
};

// Returns the name micro-batch k of data input `name` is bound as.
std::string microbatch_input(const std::string& name, int k);

// Builds every stage's program (the file comment). Forward only (options.training false): the
// last stage's outputs are the model's outputs, each micro-batch's concatenated on dim 0 (scalars
// averaged).
std::vector<StageProgram> stage_programs(const std::vector<StageGraph>& stages, const StageSplit& split,
                                         const ProgramOptions& options);

}  // namespace dt::pipeline
