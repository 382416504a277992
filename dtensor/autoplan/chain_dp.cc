#include "dtensor/autoplan/chain_dp.h"

#include <algorithm>
#include <map>

namespace dt::autoplan {

std::optional<ChainResult> chain_dp(const std::vector<int>& choices_per_step, const ChainStepFn& step,
                                    int64_t max_evals, int64_t* evals) {
  int64_t made = 0;
  std::map<std::string, ChainResult> layer = {{"", ChainResult{}}};
  double left = 0;  // choices of the steps not taken yet
  for (int c : choices_per_step) left += c;
  for (size_t k = 0; k < choices_per_step.size(); ++k) {
    // Projected: as many states at every later step as at this one. Pessimistic (states swell
    // where branches meet and shrink after), so a chain that would not fit stops early, not after
    // spending the budget.
    if (double(made) + double(layer.size()) * left > double(max_evals)) {
      if (evals) *evals = made;
      return std::nullopt;
    }
    left -= choices_per_step[k];
    std::map<std::string, ChainResult> next;
    for (const auto& [key, path] : layer) {
      std::vector<int> choices = path.choices;
      choices.push_back(0);
      for (int c = 0; c < choices_per_step[k]; ++c) {
        choices.back() = c;
        ++made;
        const ChainStepCost s = step(choices, key);
        if (!s.ok) continue;
        const double cost = path.cost + s.cost;
        auto it = next.find(s.key);
        // Strictly cheaper replaces (a relative margin keeps float noise from deciding ties).
        if (it == next.end()) next.emplace(s.key, ChainResult{choices, cost});
        else if (cost < it->second.cost - 1e-9 * std::max(1.0, it->second.cost)) it->second = {choices, cost};
      }
    }
    layer = std::move(next);
    if (layer.empty()) break;
  }
  if (evals) *evals = made;
  std::optional<ChainResult> best;
  for (const auto& [key, r] : layer)
    if (!best || r.cost < best->cost - 1e-9 * std::max(1.0, best->cost)) best = r;
  return best;
}

}  // namespace dt::autoplan
