// Runs a pipeline of passes over a Graph with optional hooks after each pass: print the IR,
// verify it, time it.
//
// Pipelines are spelled `default`, `none` or a comma list of pass names
// (`cse,dce,bucket-all-gather`); parse_pipeline() throws ValueError naming an unknown pass and
// listing the known ones.
#pragma once

#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/passes/pass.h"

namespace dt::passes {

struct PassInfo {
  std::string_view name;
  std::string_view summary;
  PassPtr (*make)(const PassOptions&);
};
// Returns every known pass, in default-pipeline order.
const std::vector<PassInfo>& registered_passes();
// Returns the pass names of the default pipeline.
const std::vector<std::string_view>& default_pipeline();

// Returns the passes of `spec` ("default" | "none" | "a,b,c"); throws ValueError for unknown or
// empty names.
std::vector<PassPtr> parse_pipeline(std::string_view spec, const PassOptions& options = {});

struct PassTiming {
  std::string name;
  double seconds = 0;
  bool changed = false;
};

class PassManager {
 public:
  void add(PassPtr pass) { passes_.push_back(std::move(pass)); }
  void add(std::vector<PassPtr> passes);
  size_t size() const { return passes_.size(); }

  // Prints `// -----// IR after <name> //----- //` and the graph after every pass to `out`.
  void enable_print_after_all(std::ostream& out) { print_to_ = &out; }
  // Runs ir::verify after every pass; a failure throws InternalError naming the pass (a pass that
  // emits invalid IR is a bug, whatever its input).
  void enable_verify_each(bool on = true) { verify_each_ = on; }

  // Runs every pass in order; returns per-pass timings.
  std::vector<PassTiming> run(ir::Graph& graph);
  // Runs pass 1 on every program, then pass 2 on every program, ...; calls after_each(pass name)
  // once every program went through that pass (the cross-rank checks hook in there). The
  // per-program hooks (verify, print with `headers[i]` before program i's IR) apply as in run().
  void run_all(std::span<ir::Graph* const> programs, std::span<const std::string> headers,
               const std::function<void(std::string_view pass_name)>& after_each);

 private:
  // Runs one pass on one graph with the hooks.
  PassTiming run_one(Pass& pass, ir::Graph& graph);

  std::vector<PassPtr> passes_;
  std::ostream* print_to_ = nullptr;
  bool verify_each_ = true;
};

// The largest bucket cap in MiB (1 TiB).
inline constexpr double kMaxBucketCapMb = 1 << 20;
// Returns "1,4" parsed as {1.0, 4.0}; throws ValueError for empty, non-numeric, non-positive or
// too large (> kMaxBucketCapMb, inf) entries.
std::vector<double> parse_bucket_caps(std::string_view text);

}  // namespace dt::passes
