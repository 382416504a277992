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

// The comparison rule of --expect. Element i matches when
//   |a_i - e_i| <= atol * s + rtol * |e_i|,   s = max(1, max_j |e_j|) over the output's finite values:
// atol is absolute for outputs within [-1, 1] and scales with the output's largest magnitude above
// that, so f32 rounding noise on large outputs (GPT-2 logits up to 400: noise ~1e-4) is accepted
// at the default tolerances while a difference that matters on the output's own scale is not. NaN
// never matches, an infinity only itself. The relative difference reported is
//   |a_i - e_i| / max(|e_i|, atol * s),
// never divided by zero: an expected 0 is measured against the tolerance floor (atol 0 and both 0:
// 0; atol 0 and only e_i 0: inf).
struct OutputDiff {
  bool shapes_match = true;
  int64_t mismatches = 0;
  double max_abs_diff = 0, max_rel_diff = 0;
  double atol_scale = 1;  // s above
};
OutputDiff compare_output(const Tensor& actual, const Tensor& expected, double rtol, double atol);

struct OutputCheck {
  nlohmann::json outputs = nlohmann::json::array();  // one entry per output (see check_outputs)
  bool match = true;                                 // every compared output matched and none is non-finite
  double max_abs_diff = 0, max_rel_diff = 0;         // over the compared outputs
  std::vector<std::string> lines;                    // the text report, one line per output
};

// Checks every output: non-finite values (a mismatch), and the difference from its reference
// where there is one (compare_output). Each JSON entry: name, type, value (for one element),
// max_abs_diff, max_rel_diff, atol_scale, mismatches, match (compared ones), non_finite {count,
// first_index, first_value}.
OutputCheck check_outputs(const ir::Graph& graph, const std::vector<Tensor>& outputs,
                          const std::vector<std::optional<Tensor>>& reference, double rtol, double atol);

// Writes every output under its graph name to a safetensors file (atomically).
void save_outputs(const std::string& path, const ir::Graph& graph, const std::vector<Tensor>& outputs);

}  // namespace dt::tools
