#include "dtensor/redistribute/redistribute_plan.h"

#include "dtensor/layout/dtensor_spec.h"

#include <fmt/format.h>

namespace dt {

std::string_view step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::all_gather: return "all_gather";
    case StepKind::all_reduce: return "all_reduce";
    case StepKind::reduce_scatter: return "reduce_scatter";
    case StepKind::all_to_all: return "all_to_all";
    case StepKind::chunk: return "chunk";
    case StepKind::zero: return "zero";
    case StepKind::keep: return "keep";
  }
  return "?";
}

bool is_collective(StepKind kind) {
  return kind == StepKind::all_gather || kind == StepKind::all_reduce || kind == StepKind::reduce_scatter ||
         kind == StepKind::all_to_all;
}

double step_time_us(const CostModel& model, const Shape& mesh_shape, uint32_t mesh_dims_mask, StepKind kind,
                    int64_t bytes) {
  if (!is_collective(kind)) return 0.0;
  // Row-major rank order: mesh dim m's neighbours are stride(m) ranks apart.
  GroupExtent g;
  int64_t stride = 1;
  for (size_t m = mesh_shape.size(); m-- > 0;) {
    if (mesh_dims_mask >> m & 1u) {
      g.size *= mesh_shape[m];
      g.span += (mesh_shape[m] - 1) * stride;
    }
    stride *= mesh_shape[m];
  }
  return model.collective_us(step_kind_name(kind), bytes, g);
}

std::vector<int64_t> mesh_dims_of(uint32_t mask) {
  std::vector<int64_t> dims;
  for (int64_t m = 0; m < 32; ++m)
    if (mask >> m & 1u) dims.push_back(m);
  return dims;
}

std::vector<int64_t> RedistributeStep::mesh_dims() const {
  return flattened() ? mesh_dims_of(flat_dims) : std::vector<int64_t>{mesh_dim};
}

std::string RedistributeStep::mesh_dims_str() const {
  std::string out;
  for (int64_t m : mesh_dims()) {
    if (!out.empty()) out += '+';
    out += std::to_string(m);
  }
  return out;
}

RedistributePlan RedistributePlan::empty_for(const Shape& mesh_shape, const Placements& src,
                                             const Placements& dst, const Shape& shape, DType dtype) {
  const int64_t ndim = int64_t(mesh_shape.size()), rank = int64_t(shape.size());
  RedistributePlan plan;
  plan.mesh_shape = mesh_shape;
  plan.src = normalize_placements(src, ndim, rank);
  plan.dst = normalize_placements(dst, ndim, rank);
  plan.shape = shape;
  plan.dtype = dtype;
  return plan;
}

int RedistributePlan::num_collectives() const {
  int n = 0;
  for (const RedistributeStep& s : steps) n += is_collective(s.kind);
  return n;
}

std::map<std::string, int> RedistributePlan::collective_counts() const {
  std::map<std::string, int> out;
  for (const RedistributeStep& s : steps)
    if (is_collective(s.kind)) ++out[std::string(step_kind_name(s.kind))];
  return out;
}

std::string RedistributePlan::table() const {
  std::string out = fmt::format("redistribute {} -> {} of {} {} on mesh {}\n", placements_str(src),
                                placements_str(dst), shape_str(shape), dtype_name(dtype), shape_str(mesh_shape));
  out += fmt::format("{:>4}  {:>9}  {:<15} {:<8} {:<8} {:>14}  {:>10}\n", "step", "mesh_dim", "kind", "from", "to",
                     "bytes/rank", "est_us");
  for (size_t i = 0; i < steps.size(); ++i) {
    const RedistributeStep& s = steps[i];
    out += fmt::format("{:>4}  {:>9}  {:<15} {:<8} {:<8} {:>14}  {:>10.2f}\n", i, s.mesh_dims_str(), step_kind_name(s.kind),
                       s.src.str(), s.dst.str(), s.bytes, s.time_us);
  }
  if (steps.empty()) out += "  (no steps: the placements already match)\n";
  out += fmt::format("total: {} bytes per rank, {} collective(s), {:.2f} us estimated\n", total_bytes,
                     num_collectives(), total_time_us);
  return out;
}

}  // namespace dt
