// The PyTorch side of `dtensor bench model --vs-torch` and `dtensor bench train --vs-torch`:
// runs bench/torch_gpt.py (the example gpt's architecture in PyTorch) with /usr/bin/python3 and
// reads its timing. Never in CI: the benches ask for it only with --vs-torch.
#pragma once

#include <optional>
#include <string>

#include "dtensor/ir/example_models.h"

namespace dt::bench {

struct TorchScript {
  std::string python = "/usr/bin/python3";
  std::string script = "bench/torch_gpt.py";
};

// Checks that the script exists (IoError naming --torch-script when not) and returns "" when
// python can import torch, else the note to print ("... cannot import torch: skipping ...").
std::string torch_unavailable(const TorchScript& t, const char* bench);

// The script's `part` (single | tp | train) on the gpt `m`: the fastest of `repeat` runs after a
// warm-up, in ms; `world` ranks for tp. nullopt (the reason printed to stderr) when it fails.
std::optional<double> torch_min_ms(const TorchScript& t, const std::string& part, const ir::GptConfig& m, int repeat,
                                   int world = 1);

}  // namespace dt::bench
