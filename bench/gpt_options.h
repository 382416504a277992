// The size options of the example gpt (--vocab, --hidden, --heads, --layers, --batch, --seq), declared
// once for the command that writes it (`dtensor example gpt`) and the benchmarks that build it
// (`bench model`, `bench train`, `bench styles`). Each caller's defaults are the GptConfig it passes.
#pragma once

#include <CLI/CLI.hpp>

#include "dtensor/ir/example_models.h"

namespace dt::bench {

// Adds the size options to `cmd`, stored in `cfg` (defaults shown in the help). --max-seq only
// when `with_max_seq`: the benchmarks instead build with max_seq = seq (fitted_max_seq below).
void add_gpt_options(CLI::App* cmd, ir::GptConfig& cfg, bool with_max_seq = false);

// `cfg` with max_seq = seq: the position embedding a benchmark's sequence needs, no more.
inline ir::GptConfig fitted_max_seq(ir::GptConfig cfg) {
  cfg.max_seq = cfg.seq;
  return cfg;
}

}  // namespace dt::bench
