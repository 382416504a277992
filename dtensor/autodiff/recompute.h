// Activation recomputation (checkpointing) of a training step's blocks: the backward keeps only
// each block's input and re-runs the block's forward ops just before its backward ops, instead of
// keeping every activation the backward reads from the forward to the backward.
//
// Why: without it all layers' saved activations are live at the end of the forward at once (the
// example gpt at hidden 512, 4 layers, batch 4, seq 256 saves about 32 MiB per layer); with it a
// step holds one block's activations plus every block's input. The price is the forward of every
// block once more (about one forward of the model per step) and, sharded, its collectives again.
//
// A block is a module-list entry: the parameters whose names start with `<path>.<index>.` (as
// torch's ModuleList names them: `h.3.attn.q_proj.weight` is in block `h.3`), the unit a plan's
// patterns already name. Its ops are the forward ops from the first that reads one of its
// parameters up to the first op after its last parameter read that reads a parameter of anything
// else (so the residual add after the last linear belongs to the block). Values the block computes
// and a later forward op outside it reads are its outputs (the next block's input): kept. Every
// other value of the block that the backward reads is recomputed: the ops making it are cloned
// (named `<value>.recompute`) and the clones of a block are placed, in forward order, just before
// the first backward op that reads one of them. The recomputed ops are ordinary IR, so sharding
// places their collectives (fsdp gathers, tp all_reduces) like the forward's, in the same order on
// every rank, and reshard-after-forward gathers the parameters they read again for them.
//
// The clones read the block's input through a reshape to its own shape (`<input>.recompute`, a
// view: no copy): cse merges a node into an earlier one with the same op, attributes and operands,
// and without a distinct operand every recomputed op would merge back into the forward op it
// recomputes. The recomputation runs the same ops on the same values, so its results are bitwise
// the forward's.
//
//   %3 = layer_norm(%2, ...)                         (forward, block h.0, input %2)
//   %4 = linear(%3, %h.0.attn.q_proj.weight, ...)
//   ...
//   %2.recompute = reshape(%2) {shape = [...]}        (backward, before h.0's first backward op)
//   %3.recompute = layer_norm(%2.recompute, ...)
//   %4.recompute = linear(%3.recompute, ...)
//   ...  = linear backward reading %3.recompute instead of %3
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "dtensor/ir/graph.h"

namespace dt::autodiff {

enum class Recompute { none, blocks };

// "none" | "blocks" (ValueError naming the accepted values otherwise).
Recompute parse_recompute(std::string_view text);
std::string_view recompute_name(Recompute r);

// Recomputes the blocks of training graph `g`, whose first `forward_nodes` nodes are the forward
// (autodiff appends the backward after them), as described above. Returns the number of blocks
// recomputed. ValueError when the model has no blocks (no parameter named `<path>.<index>.<...>`)
// or two blocks' ops interleave in the forward.
int recompute_blocks(ir::Graph& g, size_t forward_nodes);

}  // namespace dt::autodiff
