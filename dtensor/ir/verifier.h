// Checks the invariants of a Graph (graph.h) and throws dt::ParseError at the first violation,
// prefixed with `file:line:col: ` for parsed graphs (`graph NAME, node I: ` for built ones):
//   - every operand is defined before use (topological order), every output is defined;
//   - operand counts and attribute kinds match the op schema; groups named by collectives are
//     declared;
//   - result types equal the op's inference (dtype and static shape);
//   - every collective result has exactly one wait_tensor, and nothing else reads it before that
//     wait.
#pragma once

#include "dtensor/ir/graph.h"

namespace dt::ir {

void verify(const Graph& graph);

}  // namespace dt::ir
