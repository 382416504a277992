// The data-parallel fsdp plan the training tests compile a step with: every module fsdp on the
// one mesh dim "dp", the input and target split by batch. One definition for both train test sources.
#pragma once

#include "dtensor/sharding/parallel_plan.h"

namespace dt::sharding {

inline ParallelPlan fsdp_plan() {
  return ParallelPlan::parse(R"json({"mesh_dims": ["dp"], "inputs": {"input": {"dp": "S(0)"}, "target": {"dp": "S(0)"}},
    "modules": [{"pattern": "*", "style": "fsdp", "mesh_dim": "dp"}]})json");
}

}  // namespace dt::sharding
