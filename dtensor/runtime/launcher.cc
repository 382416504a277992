#include "dtensor/runtime/launcher.h"

#include <algorithm>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"

namespace dt::runtime {

std::vector<RankResult> launch(const std::vector<const ir::Graph*>& programs, const std::vector<Bindings>& bindings,
                               const LaunchOptions& options) {
  if (programs.size() != bindings.size())
    DT_THROW(ValueError) << programs.size() << " programs but " << bindings.size() << " binding sets";
  if (programs.empty()) DT_THROW(ValueError) << "launch needs at least one program";
  std::vector<RankResult> results(programs.size());
  run_ranks(
      int(programs.size()),
      [&](ProcessGroup& world) {
        const size_t r = size_t(world.rank());
        const ir::Graph& g = *programs[r];
        GroupMap groups = make_groups(g, world);
        Interpreter interp(g);
        if (options.node_hook) interp.set_node_hook(options.node_hook(int(r)));
        RankResult& out = results[r];
        for (int i = 0; i < std::max(options.repeat, 1); ++i) {
          RunStats s;
          out.outputs = interp.run(bindings[r], groups, &s);
          if (i == 0 || s.seconds < out.stats.seconds) out.stats = s;
        }
      },
      options.comm);
  return results;
}

}  // namespace dt::runtime
