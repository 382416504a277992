// Checks the invariants of a Graph (graph.h) and throws dt::ParseError at the first violation,
// prefixed with `file:line:col: ` for parsed graphs (`graph NAME, node I: ` for built ones). An
// error of an op's inference (ShapeError, DTypeError, ...) keeps its type: the verifier adds the
// node's location to it and rethrows it. The checks:
//   - every operand is defined before use (topological order), every output is defined;
//   - operand counts and attribute kinds match the op schema; groups named by collectives are
//     declared;
//   - result types equal the op's inference (dtype and static shape);
//   - every collective result has exactly one wait_tensor, and nothing else reads it before that
//     wait.
#pragma once

#include <string_view>

#include "dtensor/ir/graph.h"

namespace dt::ir {

struct VerifyOptions {
  // Set by the pass manager to the pass that just ran: the graph was valid before it, so any
  // violation (including an inference error) is a bug in that pass and throws dt::InternalError
  // "IR after pass NAME is invalid (a bug in that pass): <located message>".
  std::string_view after_pass;
};

void verify(const Graph& graph, const VerifyOptions& options = {});

}  // namespace dt::ir
