#include "dtensor/passes/rank_pipeline.h"

#include <fmt/format.h>

#include <string>

#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/rank_consistency.h"

namespace dt::passes {

void run_rank_pipelines(PassManager& pm, std::vector<ir::Graph>& programs, std::span<const int> ranks,
                        const RankPipelineOptions& options) {
  std::vector<ir::Graph*> all;
  std::vector<const ir::Graph*> view;
  std::vector<std::string> headers;
  for (size_t i = 0; i < programs.size(); ++i) {
    all.push_back(&programs[i]);
    view.push_back(&programs[i]);
    headers.push_back(fmt::format("// ===== rank {} =====\n", i < ranks.size() ? ranks[i] : int(i)));
  }
  if (options.check_ranks) check_rank_consistency(view, ranks, "after partitioning");
  if (options.print_after) pm.enable_print_after_all(*options.print_after);
  pm.run_all(all, headers, [&](std::string_view pass) {
    if (options.check_ranks) check_rank_consistency(view, ranks, fmt::format("after pass {}", pass));
  });
  bool placed = false;
  for (const ir::Graph& g : programs) placed = placed || check_comm_buffer_plan(g) > 0;
  if (placed && programs.size() > 1) plan_symmetric_comm_buffers(all);
}

}  // namespace dt::passes
