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

std::vector<double> reduce_locals(const DTensorSpec& spec, const std::vector<Tensor>& locals) {
  const DeviceMesh& mesh = spec.mesh();
  const int64_t total = numel(spec.shape()), ndim = mesh.ndim();
  // Each rank's local placed at its global offset (covered marks where it holds data).
  std::vector<std::vector<double>> buf(size_t(mesh.size()));
  std::vector<std::vector<char>> covered(size_t(mesh.size()));
  for (int r : mesh.ranks()) {
    const std::vector<int64_t> coord = *mesh.coordinate(r);
    buf[size_t(r)].assign(size_t(total), 0.0);
    covered[size_t(r)].assign(size_t(total), 0);
    const std::vector<double> vals = locals.at(size_t(r)).to_doubles();
    for_each_element(spec.local_shape_at(coord), spec.global_offset_at(coord), spec.shape(),
                     [&](int64_t k, int64_t g) {
                       buf[size_t(r)][size_t(g)] = vals[size_t(k)];
                       covered[size_t(r)][size_t(g)] = 1;
                     });
  }
  // Combine mesh dim m into the member at index 0, for m from the last to the first.
  for (int64_t m = ndim - 1; m >= 0; --m) {
    const Placement& p = spec.placements()[size_t(m)];
    const int64_t n = mesh.shape()[size_t(m)];
    for (int r : mesh.ranks()) {
      std::vector<int64_t> coord = *mesh.coordinate(r);
      bool head = coord[size_t(m)] == 0;
      for (int64_t k = m + 1; k < ndim; ++k) head = head && coord[size_t(k)] == 0;
      if (!head || p.is_replicate()) continue;
      std::vector<double>& acc = buf[size_t(r)];
      std::vector<char>& cov = covered[size_t(r)];
      for (int64_t j = 1; j < n; ++j) {
        coord[size_t(m)] = j;
        const int other = mesh.rank_at(coord);
        const std::vector<double>& v = buf[size_t(other)];
        for (int64_t g = 0; g < total; ++g) {
          if (!covered[size_t(other)][size_t(g)]) continue;
          double& a = acc[size_t(g)];
          const double b = v[size_t(g)];
          if (p.is_shard()) a = b;
          else if (p.op() == ReduceOp::sum || p.op() == ReduceOp::avg) a += b;
          else if (p.op() == ReduceOp::prod) a *= b;
          else if (p.op() == ReduceOp::max) a = std::max(a, b);
          else a = std::min(a, b);
          cov[size_t(g)] = 1;
        }
      }
      if (p.is_partial() && p.op() == ReduceOp::avg)
        for (double& a : acc) a /= double(n);
    }
  }
  return buf[size_t(mesh.rank_at(std::vector<int64_t>(size_t(ndim), 0)))];
}

std::string check_locals(const DTensorSpec& spec, const std::vector<Tensor>& locals, const Tensor& full, double rtol) {
  const DeviceMesh& mesh = spec.mesh();
  const std::vector<double> ref = full.to_doubles();
  const bool partial = spec.has_partial();
  for (int r : mesh.ranks()) {
    std::vector<int64_t> coord = *mesh.coordinate(r);
    const Tensor& local = locals.at(size_t(r));
    Shape expected = spec.local_shape_at(coord);
    if (!local.defined() || local.shape() != expected)
      return fmt::format("rank {} holds shape {}, expected {}", r, local.defined() ? shape_str(local.shape()) : "none",
                         shape_str(expected));
    if (local.dtype() != spec.dtype()) return fmt::format("rank {} holds dtype {}", r, dtype_name(local.dtype()));
    std::vector<int64_t> base = coord;
    for (size_t m = 0; m < coord.size(); ++m)
      if (spec.placements()[m].is_replicate()) base[m] = 0;
    std::vector<double> vals = local.to_doubles();
    if (base != coord) {
      std::vector<double> twin = locals.at(size_t(mesh.rank_at(base))).to_doubles();
      if (twin != vals) return fmt::format("replicas differ: rank {} vs rank {}", r, mesh.rank_at(base));
      continue;
    }
    if (partial) continue;
    std::string error;
    for_each_element(expected, spec.global_offset_at(coord), spec.shape(), [&](int64_t k, int64_t g) {
      double v = vals[size_t(k)];
      if (error.empty() && !close(v, ref[size_t(g)], rtol))
        error = fmt::format("rank {} element {} (global {}) is {}, expected {}", r, k, g, v, ref[size_t(g)]);
    });
    if (!error.empty()) return error;
  }
  const std::vector<double> acc = partial ? reduce_locals(spec, locals) : std::vector<double>{};
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
