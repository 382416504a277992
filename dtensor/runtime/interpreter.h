// Runs a verified Graph on CPU for one rank.
//
// Nodes run in order through their registry kernels. Each intermediate buffer is released right
// after its last reader (last-use indices computed once per graph), so peak memory is the largest
// set of simultaneously live results, which RunStats reports. Collectives are issued without
// blocking: the Work and the buffers it touches are kept until the matching wait_tensor, which
// blocks on it. Node hooks see the start and end time of every node (for traces).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"

namespace dt::runtime {

using Clock = std::chrono::steady_clock;
// Process groups of a rank by the graph's group names.
using GroupMap = std::map<std::string, std::shared_ptr<ProcessGroup>>;
// Tensors bound to graph inputs and parameters, by value name.
using Bindings = std::map<std::string, Tensor>;

struct RunStats {
  double seconds = 0;     // wall time of run()
  size_t peak_bytes = 0;  // peak bytes of live node results (views of inputs and params excluded)
  size_t nodes = 0;
};

// Called after every node with its index and start/end times.
using NodeHook = std::function<void(const ir::Node& node, size_t index, Clock::time_point start, Clock::time_point end)>;

class Interpreter {
 public:
  // `graph` must outlive the interpreter and satisfy verify().
  explicit Interpreter(const ir::Graph& graph);

  void set_node_hook(NodeHook hook) { hook_ = std::move(hook); }
  // Returns the graph outputs. Every data input and parameter must be bound with its declared
  // dtype and shape (IoError otherwise). Graphs with collectives need `groups` holding this
  // rank's group for each group its collectives name.
  std::vector<Tensor> run(const Bindings& bindings, const GroupMap& groups = {}, RunStats* stats = nullptr);

  // Returns, per node index, the ids of the values released after it.
  const std::vector<std::vector<int>>& release_plan() const { return release_after_; }

 private:
  const ir::Graph& g_;
  std::vector<std::vector<int>> release_after_;
  bool has_collectives_ = false;
  NodeHook hook_;
};

// Returns this rank's groups for the graph's declarations: `world` itself for a group whose ranks
// are world's ranks in order, else world.new_group(ranks) for the groups that contain this rank.
GroupMap make_groups(const ir::Graph& graph, ProcessGroup& world);

}  // namespace dt::runtime
