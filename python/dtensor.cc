// DTensor on in-process ranks (the threads backend): the Python object holds every rank's local
// shard, and each collective call starts the mesh's ranks as threads that run the library's eager
// DTensor (dtensor/eager) on their own shard.
#include "python/dtensor.h"

#include <pybind11/stl.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/redistribute/planner.h"
#include "python/arrays.h"
#include "python/world.h"

namespace dt::python {
namespace {

// Runs fn(rank's DTensor view) on every rank of the mesh with the GIL released.
void on_every_rank(const DeviceMesh& mesh, const std::function<void(ProcessGroup& world, std::shared_ptr<const MeshGroups>)>& fn) {
  py::gil_scoped_release release;
  run_ranks(int(mesh.size()), [&](ProcessGroup& world) { fn(world, MeshGroups::create(world, mesh)); });
}

}  // namespace

PyDTensor PyDTensor::distribute(const Tensor& full, const DeviceMesh& mesh, const Placements& placements) {
  PyDTensor out;
  if (ProcessGroup* world = process_world()) {
    py::gil_scoped_release release;
    out.mpi_ = true;
    out.mine_ = distribute_tensor(full, MeshGroups::create(*world, mesh), placements);
    out.spec_ = std::make_shared<DTensorSpec>(out.mine_.spec());
    return out;
  }
  out.locals_.resize(size_t(mesh.size()));
  std::mutex mu;
  on_every_rank(mesh, [&](ProcessGroup&, std::shared_ptr<const MeshGroups> groups) {
    DTensor d = distribute_tensor(full, groups, placements);
    std::lock_guard lock(mu);
    out.locals_[size_t(groups->global_rank())] = d.to_local();
    if (!out.spec_) out.spec_ = std::make_shared<DTensorSpec>(d.spec());
  });
  return out;
}

const Tensor& PyDTensor::local(std::optional<int> rank) const {
  if (mpi_) {
    const int me = mine_.groups()->global_rank();
    if (rank && *rank != me)
      DT_THROW(ValueError) << "rank " << *rank << "'s shard is in its own process: this is rank " << me;
    return mine_.to_local();
  }
  const int r = rank.value_or(0);
  if (r < 0 || size_t(r) >= locals_.size())
    DT_THROW(ValueError) << "rank " << r << " is not in the mesh " << spec_->mesh().str() << " (ranks 0.."
                         << locals_.size() - 1 << ")";
  return locals_[size_t(r)];
}

PyDTensor PyDTensor::redistribute(const Placements& placements) const {
  PyDTensor out;
  if (mpi_) {
    py::gil_scoped_release release;
    out.mpi_ = true;
    out.mine_ = mine_.redistribute(placements);
    out.spec_ = std::make_shared<DTensorSpec>(out.mine_.spec());
    return out;
  }
  out.locals_.resize(locals_.size());
  std::mutex mu;
  on_every_rank(spec_->mesh(), [&](ProcessGroup&, std::shared_ptr<const MeshGroups> groups) {
    int r = groups->global_rank();
    DTensor d(locals_[size_t(r)], spec_, groups);
    DTensor e = d.redistribute(placements);
    std::lock_guard lock(mu);
    out.locals_[size_t(r)] = e.to_local();
    if (!out.spec_) out.spec_ = std::make_shared<DTensorSpec>(e.spec());
  });
  return out;
}

Tensor PyDTensor::full_tensor() const {
  if (mpi_) {
    py::gil_scoped_release release;
    return mine_.full_tensor();
  }
  Tensor full;
  on_every_rank(spec_->mesh(), [&](ProcessGroup&, std::shared_ptr<const MeshGroups> groups) {
    int r = groups->global_rank();
    Tensor t = DTensor(locals_[size_t(r)], spec_, groups).full_tensor();
    if (r == 0) full = t;  // every rank holds the same tensor
  });
  return full;
}

void bind_dtensor(py::module_& m) {
  py::class_<PyDTensor>(m, "_DTensor", "Every rank's local shard of a distributed tensor (use dtensor.DTensor).")
      .def_static(
          "distribute",
          [](py::handle array, const std::vector<int64_t>& mesh_shape, const std::string& placements) {
            Tensor full = to_tensor(array, "tensor");
            return PyDTensor::distribute(full, DeviceMesh(mesh_shape), parse_placements(placements));
          },
          py::arg("tensor"), py::arg("mesh_shape"), py::arg("placements"))
      .def_property_readonly("placements", [](const PyDTensor& d) { return placements_str(d.spec().placements()); })
      .def_property_readonly("shape", [](const PyDTensor& d) { return shape_tuple(d.spec().shape()); })
      .def_property_readonly("dtype", [](const PyDTensor& d) { return numpy_dtype_name(d.spec().dtype()); })
      .def_property_readonly("mesh_shape", [](const PyDTensor& d) { return shape_tuple(d.spec().mesh().shape()); })
      .def("local", [](const PyDTensor& d, std::optional<int> rank) { return to_numpy(d.local(rank)); }, py::arg("rank"))
      .def("local_shape", [](const PyDTensor& d, std::optional<int> rank) { return shape_tuple(d.local(rank).shape()); },
           py::arg("rank"))
      .def("redistribute", [](const PyDTensor& d, const std::string& placements) {
        return d.redistribute(parse_placements(placements));
      }, py::arg("placements"))
      .def("full_tensor", [](const PyDTensor& d) { return to_numpy(d.full_tensor()); });

  py::class_<RedistributePlan, std::shared_ptr<RedistributePlan>>(m, "RedistributePlan",
                                                                  "The cheapest redistribution between two placement lists "
                                                                  "(`dtensor plan`): its steps, bytes and estimated time.")
      .def_property_readonly("steps",
                             [](const RedistributePlan& p) {
                               py::list steps;
                               for (const RedistributeStep& s : p.steps) {
                                 py::dict d;
                                 d["mesh_dim"] = s.mesh_dim;
                                 d["mesh_dims"] = s.mesh_dims();
                                 d["kind"] = std::string(step_kind_name(s.kind));
                                 d["from"] = s.src.str();
                                 d["to"] = s.dst.str();
                                 d["bytes"] = s.bytes;
                                 d["time_us"] = s.time_us;
                                 steps.append(d);
                               }
                               return steps;
                             })
      .def_property_readonly("total_bytes", [](const RedistributePlan& p) { return p.total_bytes; })
      .def_property_readonly("total_time_us", [](const RedistributePlan& p) { return p.total_time_us; })
      .def_property_readonly("collectives", [](const RedistributePlan& p) { return p.collective_counts(); })
      .def_property_readonly("src", [](const RedistributePlan& p) { return placements_str(p.src); })
      .def_property_readonly("dst", [](const RedistributePlan& p) { return placements_str(p.dst); })
      .def("__str__", &RedistributePlan::table)
      .def("__repr__", [](const RedistributePlan& p) {
        return "RedistributePlan(" + placements_str(p.src) + " -> " + placements_str(p.dst) + ", " +
               std::to_string(p.steps.size()) + " steps, " + std::to_string(p.total_bytes) + " bytes per rank)";
      });

  m.def("_check_mesh", [](const std::vector<int64_t>& shape) { DeviceMesh mesh(shape); }, py::arg("shape"),
        "Throws dtensor.ValueError when the shape is not a mesh (a size below 1, too many dims or ranks).");
  m.def(
      "_plan_redistribute",
      [](const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& shape, const std::string& dtype,
         const std::string& src, const std::string& dst) {
        DeviceMesh mesh(mesh_shape);  // validates the shape
        auto plan = default_planner().plan(mesh.shape(), parse_placements(src), parse_placements(dst), shape,
                                           parse_dtype(dtype));
        return std::make_shared<RedistributePlan>(*plan);
      },
      py::arg("mesh_shape"), py::arg("shape"), py::arg("dtype"), py::arg("src"), py::arg("dst"));
}

}  // namespace dt::python
