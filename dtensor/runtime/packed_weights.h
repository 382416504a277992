// The packed copies of a graph's constant linear weights, kept by an Interpreter between runs
// (gemm_f32_packed.h: packing W once instead of on every call, as ONNX Runtime does for constant
// initializers).
//
// A weight qualifies when it is a parameter read directly as the weight of an op that packs it
// (OpDef::packs_weight: linear, all_gather_linear_in; f32, 2-d) and no
// in-place op of the graph writes it: the training step's updates do, so a training graph's
// weights are never packed. Each run still binds its own tensors, which the caller may have
// changed since the last run (rebound, or written in place). A copy is kept only for a read-only
// storage (a safetensors file's bytes, tensor.h), whose contents cannot change while it lives, and
// is used while the bound tensor is the one packed: the same storage (still alive), offset and
// strides. Any other weight has no copy: its linear packs it block by block during the call
// (gemm_f32_packing), which costs what OpenBLAS's own packing does and gives the same bits, so
// nothing has to tell whether writable bytes changed. (An earlier version kept copies of writable
// weights too, checked by a hash of their bytes on every run: 8.9 ms of the anchor gpt's 64 MiB,
// more than the packing saved.)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"
#include "dtensor/kernels/gemm_f32_packed.h"

namespace dt::runtime {

class PackedWeights {
 public:
  // Finds the graph's linear nodes whose weight qualifies (above).
  explicit PackedWeights(const ir::Graph& graph);

  // Returns node `node`'s weight packed, given `weight`, the tensor bound to it this run; packs it
  // when new or rebound. Null when the node's weight does not qualify, is writable, or f32 GEMMs
  // take the blas path (f32_packed_linears).
  const PackedWeight* get(size_t node, const Tensor& weight);

  // The number of nodes whose weight qualifies.
  size_t packable_nodes() const;
  // The number of times a weight was packed (tests: a rebound weight packs again).
  int64_t packs() const { return packs_; }

 private:
  struct Entry {
    std::weak_ptr<Storage> storage;  // the storage packed from
    int64_t offset = 0;
    Strides strides;
    std::unique_ptr<PackedWeight> packed;
  };
  std::vector<int> entry_of_node_;  // per node: index into entries_, or -1
  std::vector<Entry> entries_;      // per qualifying parameter (shared by the nodes that read it)
  int64_t packs_ = 0;
};

}  // namespace dt::runtime
