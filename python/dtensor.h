// The Python DTensor's C++ side (python/dtensor.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt::python {

namespace py = pybind11;

// A distributed tensor seen from Python. On in-process ranks (threads) the object holds the spec
// and every rank's shard (by global rank), and each collective call runs the ranks as threads;
// after init_process_group("mpi") it holds this process's rank's DTensor only, and each call is
// the library's collective on the process world.
class PyDTensor {
 public:
  // Cuts `full` into the mesh's shards (collective over in-process ranks).
  static PyDTensor distribute(const Tensor& full, const DeviceMesh& mesh, const Placements& placements);
  const DTensorSpec& spec() const { return *spec_; }
  // Rank `rank`'s shard (none: this process's, rank 0 in-process); ValueError when the rank is not
  // in the mesh (or, under mpi, is another process's). Not -1 for "mine": to_local(rank=-1) is
  // a caller's mistake to report, not rank 0.
  const Tensor& local(std::optional<int> rank) const;
  PyDTensor redistribute(const Placements& placements) const;
  Tensor full_tensor() const;

 private:
  std::shared_ptr<const DTensorSpec> spec_;
  std::vector<Tensor> locals_;  // threads
  DTensor mine_;                // mpi
  bool mpi_ = false;
};

void bind_dtensor(py::module_& m);

}  // namespace dt::python
