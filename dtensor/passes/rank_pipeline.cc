#include "dtensor/passes/rank_pipeline.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "dtensor/core/error.h"
#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/passes/rank_consistency.h"

namespace dt::passes {
namespace {

// The cross-rank check of one stage over the programs given: by orbits when they are known.
class RankCheck {
 public:
  RankCheck(std::vector<ir::Graph>& programs, std::span<const int> ranks, const ir::RankOrbits* orbits)
      : programs_(programs), ranks_(ranks), orbits_(orbits) {
    DT_CHECK(ranks.size() == programs.size()) << programs.size() << " programs, " << ranks.size() << " ranks";
    if (!orbits_) return;
    const size_t n = orbits_->orbits.size();
    rep_of_orbit_.assign(n, size_t(-1));
    orbit_of_program_.resize(programs.size());
    for (size_t i = 0; i < programs.size(); ++i) {
      const int o = orbits_->orbit_of(ranks[i]);
      DT_CHECK(o >= 0 && size_t(o) < n) << "rank " << ranks[i] << " is in no orbit of the job";
      orbit_of_program_[i] = size_t(o);
      if (orbits_->orbits[size_t(o)].representative == ranks[i] && rep_of_orbit_[size_t(o)] == size_t(-1))
        rep_of_orbit_[size_t(o)] = i;
    }
    // An orbit whose program is another's (RankOrbit::same_as) is read from that one's.
    for (size_t o = 0; o < n; ++o) {
      const size_t p = orbits_->program_orbit(o);
      DT_CHECK(p <= o && rep_of_orbit_[p] != size_t(-1))
          << "no program for rank " << orbits_->orbits[p].representative << ", the representative of orbit " << p;
      if (rep_of_orbit_[o] == size_t(-1)) rep_of_orbit_[o] = rep_of_orbit_[p];
    }
  }

  // Returns how many programs the check read.
  size_t run(std::string_view stage) const {
    if (!orbits_) {
      std::vector<const ir::Graph*> view;
      for (const ir::Graph& g : programs_) view.push_back(&g);
      check_rank_consistency(view, ranks_, stage);
      if (has_point_to_point(view)) check_p2p_order(view, ranks_, stage);
      return view.size();
    }
    std::vector<const ir::Graph*> reps;
    for (size_t i : rep_of_orbit_) reps.push_back(&programs_[i]);
    check_orbit_consistency(reps, *orbits_, stage);
    if (has_point_to_point(reps)) check_p2p_order_by_orbit(reps, *orbits_, stage);
    for (size_t i = 0; i < programs_.size(); ++i) {
      const size_t rep = rep_of_orbit_[orbits_->program_orbit(orbit_of_program_[i])];
      if (rep != i) check_same_orbit(programs_[i], ranks_[i], programs_[rep], ranks_[rep], stage);
    }
    return programs_.size();
  }

 private:
  std::vector<ir::Graph>& programs_;
  std::span<const int> ranks_;
  const ir::RankOrbits* orbits_;
  std::vector<size_t> rep_of_orbit_, orbit_of_program_;
};

}  // namespace

RankPipelineStats run_rank_pipelines(PassManager& pm, std::vector<ir::Graph>& programs, std::span<const int> ranks,
                                     const RankPipelineOptions& options) {
  RankPipelineStats stats;
  stats.programs_transformed = programs.size();
  stats.orbits = options.orbits ? options.orbits->orbits.size() : 0;
  std::vector<ir::Graph*> all;
  std::vector<std::string> headers;
  for (size_t i = 0; i < programs.size(); ++i) {
    all.push_back(&programs[i]);
    headers.push_back(fmt::format("// ===== rank {} =====\n", i < ranks.size() ? ranks[i] : int(i)));
  }
  std::optional<RankCheck> check;
  if (options.check_ranks) {
    check.emplace(programs, ranks, options.orbits);
    stats.programs_checked = check->run("after partitioning");
  }
  if (options.print_after) pm.enable_print_after_all(*options.print_after);
  pm.run_all(all, headers, [&](std::string_view pass) {
    if (check) stats.programs_checked = std::max(stats.programs_checked, check->run(fmt::format("after pass {}", pass)));
  });
  bool placed = false;
  for (const ir::Graph& g : programs) placed = placed || check_comm_buffer_plan(g) > 0;
  if (placed && programs.size() > 1) plan_symmetric_comm_buffers(all);
  return stats;
}

}  // namespace dt::passes
