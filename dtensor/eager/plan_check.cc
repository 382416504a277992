#include "dtensor/eager/plan_check.h"

#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/rng.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/redistribute/executor.h"

namespace dt {

namespace {

bool close(double a, double b, double rtol) {
  if (a == b) return true;
  return std::fabs(a - b) <= rtol * std::fabs(b) + 1e-12;
}

// Calls fn(local flat index, global flat index) for every element of a block at `offset`.
template <typename Fn>
void for_each_element(const Shape& local, const Shape& offset, const Shape& global, Fn fn) {
  int64_t total = numel(local);
  if (total == 0) return;
  Strides gstr = contiguous_strides(global);
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t g = 0;
    for (size_t d = 0; d < local.size(); ++d) g += (offset[d] + idx[d]) * gstr[d];
    fn(k, g);
    for (size_t d = local.size(); d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

std::string check_locals(const DTensorSpec& spec, const std::vector<Tensor>& locals, const Tensor& full, double rtol) {
  const DeviceMesh& mesh = spec.mesh();
  const std::vector<double> ref = full.to_doubles();
  bool partial = false;
  ReduceOp cls = ReduceOp::sum;
  for (const Placement& p : spec.placements())
    if (p.is_partial()) {
      partial = true;
      cls = p.op() == ReduceOp::avg ? ReduceOp::sum : p.op();
    }
  const double init = cls == ReduceOp::max   ? -std::numeric_limits<double>::infinity()
                      : cls == ReduceOp::min ? std::numeric_limits<double>::infinity()
                                             : 0.0;
  std::vector<double> acc(ref.size(), init);
  for (int r : mesh.ranks()) {
    std::vector<int64_t> coord = *mesh.coordinate(r);
    const Tensor& local = locals.at(size_t(r));
    Shape expected = spec.local_shape_at(coord);
    if (!local.defined() || local.shape() != expected)
      return fmt::format("rank {} holds shape {}, expected {}", r, local.defined() ? shape_str(local.shape()) : "none",
                         shape_str(expected));
    if (local.dtype() != spec.dtype()) return fmt::format("rank {} holds dtype {}", r, dtype_name(local.dtype()));
    std::vector<int64_t> base = coord;
    double weight = 1;
    for (size_t m = 0; m < coord.size(); ++m) {
      if (spec.placements()[m].is_replicate()) base[m] = 0;
      if (spec.placements()[m].is_partial() && spec.placements()[m].op() == ReduceOp::avg) weight /= double(mesh.shape()[m]);
    }
    std::vector<double> vals = local.to_doubles();
    if (base != coord) {
      std::vector<double> twin = locals.at(size_t(mesh.rank_at(base))).to_doubles();
      if (twin != vals) return fmt::format("replicas differ: rank {} vs rank {}", r, mesh.rank_at(base));
      continue;
    }
    std::string error;
    for_each_element(expected, spec.global_offset_at(coord), spec.shape(), [&](int64_t k, int64_t g) {
      double v = vals[size_t(k)];
      if (!partial) {
        if (error.empty() && !close(v, ref[size_t(g)], rtol))
          error = fmt::format("rank {} element {} (global {}) is {}, expected {}", r, k, g, v, ref[size_t(g)]);
      } else if (cls == ReduceOp::sum) {
        acc[size_t(g)] += weight * v;
      } else if (cls == ReduceOp::max) {
        acc[size_t(g)] = std::max(acc[size_t(g)], v);
      } else {
        acc[size_t(g)] = std::min(acc[size_t(g)], v);
      }
    });
    if (!error.empty()) return error;
  }
  if (partial)
    for (size_t g = 0; g < ref.size(); ++g)
      if (!close(acc[g], ref[g], rtol))
        return fmt::format("reduction of the partial locals at global element {} is {}, expected {}", g, acc[g], ref[g]);
  return "";
}

Tensor exact_random(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randint(shape, -50, 51, gen, DType::i64).to(dtype);
}

std::string verify_plan(const RedistributePlan& plan, uint64_t seed) {
  DeviceMesh mesh(plan.mesh_shape);
  Tensor full = exact_random(plan.shape, plan.dtype, seed);
  std::vector<Tensor> outs(size_t(mesh.size()));
  run_ranks(int(mesh.size()), [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, mesh);
    DTensor x = distribute_tensor(full, groups, plan.src);
    outs[size_t(groups->global_rank())] = execute_plan(plan, x.to_local(), *groups);
  });
  return check_locals(DTensorSpec(mesh, plan.dst, plan.shape, plan.dtype), outs, full);
}

}  // namespace dt
