// The Python DTensor's C++ side (python/dtensor.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt::python {

namespace py = pybind11;

// A distributed tensor seen from the controlling Python thread: the spec and every rank's shard
// (by global rank).
class PyDTensor {
 public:
  // Cuts `full` into the mesh's shards (collective over in-process ranks).
  static PyDTensor distribute(const Tensor& full, const DeviceMesh& mesh, const Placements& placements);
  const DTensorSpec& spec() const { return *spec_; }
  // Rank `rank`'s shard; ValueError when the rank is not in the mesh.
  const Tensor& local(int rank) const;
  PyDTensor redistribute(const Placements& placements) const;
  Tensor full_tensor() const;

 private:
  std::shared_ptr<const DTensorSpec> spec_;
  std::vector<Tensor> locals_;
};

void bind_dtensor(py::module_& m);

}  // namespace dt::python
