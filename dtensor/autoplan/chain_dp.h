// Dynamic programming over a chain of decisions whose costs are local: the exact minimum of
// sum_k cost_k(state_k, choice_k) where state_{k+1} = next_k(state_k, choice_k), the state being
// whatever of the first k choices the rest of the chain can still see (for the plan search: the
// placements of the values crossing the cut between module k and module k+1, search.h).
//
// The caller evaluates one step at a time: given the choices of steps 0..k (the path that reached a
// state, then the candidate choice of step k), it returns that step's cost and a key naming the
// state after it. Paths reaching the same key are interchangeable for the rest of the chain, so
// only the cheapest is kept (the first on ties: states are visited in key order, choices in index
// order, so the result is deterministic). Exact when the costs really are local (the caller's
// claim); evaluations = sum over steps of (states reached) x (choices).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dt::autoplan {

struct ChainStepCost {
  bool ok = false;      // false: this choice cannot follow that path (rejected)
  double cost = 0;      // the step's cost
  std::string key;      // the state after the step
};
// choices.size() == k + 1: the path's choices of steps 0..k-1, then step k's candidate; state: the
// key of the state the path reached ("" before step 0).
using ChainStepFn = std::function<ChainStepCost(const std::vector<int>& choices, const std::string& state)>;

struct ChainResult {
  std::vector<int> choices;  // one per step
  double cost = 0;
};

// nullopt when every path is rejected, or when more than max_evals evaluations are projected
// (before each step: the evaluations made + the states reached x the choices of every step left),
// in which case *evals tells how many were made.
std::optional<ChainResult> chain_dp(const std::vector<int>& choices_per_step, const ChainStepFn& step,
                                    int64_t max_evals, int64_t* evals = nullptr);

}  // namespace dt::autoplan
