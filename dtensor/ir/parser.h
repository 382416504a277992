// Parses the IR text format (docs/ir.md) into a Graph and verifies it.
//
// Every problem throws a dt::Error whose message starts with `file:line:col: ` and says what was
// expected: `mlp.dt:7:8: unknown op 'lnear'`, `mlp.dt:9:22: undefined value %h`. Syntax and
// verifier problems are ParseError; an op's inference error keeps its type (`mlp.dt:4:8: matmul
// inner dims differ ...` is a ShapeError), located by the verifier.
#pragma once

#include <string>
#include <string_view>

#include "dtensor/ir/graph.h"

namespace dt::ir {

struct ParseOptions {
  bool verify = true;  // run verify() on the result (types against inference, waits, groups)
};

// Returns the graph written in `text`; `filename` prefixes error messages.
Graph parse(std::string_view text, const std::string& filename = "<input>", const ParseOptions& options = {});
// Reads and parses a file (IoError when it cannot be read).
Graph parse_file(const std::string& path, const ParseOptions& options = {});

}  // namespace dt::ir
