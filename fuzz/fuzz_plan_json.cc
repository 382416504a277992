// Parallel plan JSON: parse, round-trip through to_json, and resolve against the example gpt on a
// mesh of two ranks per named mesh dim (the user's path from `--plan` to the sharding stage).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtensor/ir/example_models.h"
#include "dtensor/sharding/parallel_plan.h"
#include "fuzz/fuzz_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dt::ir::Graph gpt = dt::ir::build_gpt({.vocab = 16, .hidden = 8, .heads = 2, .layers = 2,
                                                      .max_seq = 8, .batch = 2, .seq = 4});
  const std::string text(reinterpret_cast<const char*>(data), size);
  dt::fuzz::expect_clean([&] {
    dt::sharding::ParallelPlan plan = dt::sharding::ParallelPlan::parse(text, "fuzz.json");
    const std::string json = plan.to_json();
    dt::fuzz::require(dt::sharding::ParallelPlan::parse(json, "again.json").to_json() == json,
                      "parse(to_json(plan)).to_json() == to_json(plan)");
    dt::Shape mesh_shape;
    for (size_t i = 0; i < plan.mesh_dims.size(); ++i) mesh_shape.push_back(2);
    if (mesh_shape.empty()) mesh_shape.push_back(1);
    dt::DeviceMesh mesh(mesh_shape);  // more than 8 dims: a ValueError, like --mesh
    (void)dt::sharding::resolve_plan(plan, gpt, mesh);
  });
  return 0;
}
