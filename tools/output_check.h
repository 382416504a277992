// What `dtensor run` does with a run's outputs, on one device and sharded alike: compare them with
// a reference (every output the --expect file names, each reported), describe non-finite values
// instead of printing an infinite difference, and save them (--save-outputs).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"

namespace dt::tools {

// The non-finite values of a tensor: how many, and the first one (row-major) with its index.
struct NonFinite {
  int64_t count = 0;
  std::vector<int64_t> first_index;
  double first_value = 0;
};
NonFinite find_non_finite(const Tensor& t);
// Returns "3 non-finite values (first: nan at [0, 5])".
std::string non_finite_text(const NonFinite& nf);

// Returns, per graph output, the tensor of the --expect file (or, for a directory, the full tensors
// assembled from `run --save-outputs DIR --sharded`'s rank files) that it is compared with: the
// tensor named like the output, else (output 0 only, as before outputs were named) the tensor
// `output`. Throws ValueError naming the file's tensors when it names none of the outputs.
std::vector<std::optional<Tensor>> expected_outputs(const ir::Graph& graph, const std::string& file);

struct OutputCheck {
  nlohmann::json outputs = nlohmann::json::array();  // one entry per output (see check_outputs)
  bool match = true;                                 // every compared output matched and none is non-finite
  double max_abs_diff = 0, max_rel_diff = 0;         // over the compared outputs
  std::vector<std::string> lines;                    // the text report, one line per output
};

// Checks every output: non-finite values (a mismatch), and the difference from its reference
// where there is one. Each JSON entry: name, type, value (for one element), max_abs_diff,
// max_rel_diff, mismatches, match (compared ones), non_finite {count, first_index, first_value}.
OutputCheck check_outputs(const ir::Graph& graph, const std::vector<Tensor>& outputs,
                          const std::vector<std::optional<Tensor>>& reference, double rtol, double atol);

// Writes every output under its graph name to a safetensors file (atomically).
void save_outputs(const std::string& path, const ir::Graph& graph, const std::vector<Tensor>& outputs);

}  // namespace dt::tools
