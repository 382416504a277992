#include "dtensor/eager/dtensor.h"

#include "dtensor/comm/collectives.h"
#include "dtensor/core/error.h"
#include "dtensor/redistribute/backward.h"
#include "dtensor/redistribute/executor.h"

namespace dt {

namespace {

bool same_placements(const Placements& normalized, const Placements& requested, int64_t rank) {
  if (normalized.size() != requested.size()) return false;
  for (size_t m = 0; m < normalized.size(); ++m) {
    const Placement& r = requested[m];
    if (r.is_shard() && r.dim() < 0) {
      if (!normalized[m].is_shard(r.dim() + rank)) return false;
    } else if (normalized[m] != r) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const MeshGroups> checked(std::shared_ptr<const MeshGroups> groups) {
  if (!groups) DT_THROW(ValueError) << "a DTensor needs the rank's mesh groups (MeshGroups::create)";
  return groups;
}

// The metadata every rank must agree on, plus this rank's "local shape is right" flag.
constexpr int64_t kMetaLen = 4 + kMaxPlanTensorRank;
std::vector<int64_t> metadata(const DTensorSpec& spec, bool local_ok) {
  std::vector<int64_t> meta(size_t(kMetaLen), -1);
  meta[0] = local_ok ? 1 : 0;
  uint64_t h = 1469598103934665603ull;
  for (const Placement& p : spec.placements()) {
    h = (h ^ (uint64_t(p.kind()) * 131 + uint64_t(p.dim()) * 7 + uint64_t(p.op()))) * 1099511628211ull;
  }
  meta[1] = int64_t(h >> 1);
  meta[2] = int64_t(spec.dtype());
  meta[3] = spec.rank();
  for (int64_t t = 0; t < std::min<int64_t>(spec.rank(), kMaxPlanTensorRank); ++t) meta[size_t(4 + t)] = spec.shape()[size_t(t)];
  return meta;
}

}  // namespace

DTensor::DTensor(Tensor local, std::shared_ptr<const DTensorSpec> spec, std::shared_ptr<const MeshGroups> groups)
    : local_(std::move(local)), spec_(std::move(spec)), groups_(std::move(groups)) {}

DTensor DTensor::redistribute(const Placements& placements, RedistributePlanner& planner) const {
  if (same_placements(spec_->placements(), placements, spec_->rank())) return *this;
  auto plan = planner.plan(spec_->mesh().shape(), spec_->placements(), placements, spec_->shape(), spec_->dtype());
  Tensor local = execute_plan(*plan, local_, *groups_);
  auto spec = std::make_shared<const DTensorSpec>(spec_->mesh(), plan->dst, spec_->shape(), spec_->dtype());
  return DTensor(std::move(local), std::move(spec), groups_);
}

DTensor DTensor::redistribute(const DeviceMesh& mesh, const Placements& placements, RedistributePlanner& planner) const {
  if (mesh != spec_->mesh())
    DT_THROW(ValueError) << "cross-mesh redistribution is not supported: source mesh " << spec_->mesh().str()
                         << ", target mesh " << mesh.str();
  return redistribute(placements, planner);
}

Tensor DTensor::full_tensor(RedistributePlanner& planner) const {
  return redistribute(Placements(size_t(spec_->mesh().ndim()), Placement::replicate()), planner).to_local();
}

DTensor distribute_tensor(const Tensor& full, std::shared_ptr<const MeshGroups> groups, const Placements& placements) {
  checked(groups);
  auto spec = std::make_shared<const DTensorSpec>(groups->mesh(), placements, full.shape(), full.dtype());
  const auto& coord = groups->coordinate();
  Shape offset = spec->global_offset_at(coord), shape = spec->local_shape_at(coord);
  Tensor local = full;
  for (int64_t t = 0; t < full.dim(); ++t) local = local.narrow(t, offset[size_t(t)], shape[size_t(t)]);
  // Partial sum: index 0 of its mesh dim keeps the value, the others hold 0; partial prod the
  // same with 1; avg, max and min keep it everywhere. With mixed partials a 0 wins over a 1: the
  // reductions of any order (dtensor_spec.h) still give the value back.
  bool zero = false, one = false;
  for (size_t m = 0; m < spec->placements().size(); ++m) {
    const Placement& p = spec->placements()[m];
    if (p.is_partial() && p.op() == ReduceOp::sum && coord[m] != 0) zero = true;
    if (p.is_partial() && p.op() == ReduceOp::prod && coord[m] != 0) one = true;
  }
  local = zero ? Tensor::zeros(shape, full.dtype())
          : one ? Tensor::zeros(shape, full.dtype()).fill_(1)
                : local.clone();
  return DTensor(std::move(local), std::move(spec), std::move(groups));
}

DTensor from_local(const Tensor& local, std::shared_ptr<const MeshGroups> groups, const Placements& placements,
                   const Shape& global_shape, bool check_cross_rank) {
  checked(groups);
  auto spec = std::make_shared<const DTensorSpec>(groups->mesh(), placements, global_shape, local.dtype());
  Shape expected = spec->local_shape_at(groups->coordinate());
  const bool ok = local.shape() == expected;
  if (check_cross_rank) {
    // Gather everyone's metadata over mesh dim 0, then the result over mesh dim 1, ...: every
    // rank ends with every rank's metadata and so takes the same decision (nobody is left
    // waiting in a collective).
    std::vector<int64_t> meta = metadata(*spec, ok);
    Tensor buf = Tensor::from_vector(meta, {kMetaLen});
    for (int64_t m = 0; m < groups->mesh().ndim(); ++m) {
      Tensor out = Tensor::empty({buf.numel() * groups->mesh().size(m)}, DType::i64);
      all_gather_into_tensor(groups->group(m), out, buf)->wait();
      buf = out;
    }
    std::vector<int64_t> all = buf.to_vector<int64_t>();
    bool any_bad_shape = false;
    for (size_t r = 0; r < all.size(); r += size_t(kMetaLen)) {
      any_bad_shape |= all[r] == 0;
      for (int64_t k = 1; k < kMetaLen; ++k)
        if (all[r + size_t(k)] != meta[size_t(k)])
          DT_THROW(ValueError) << "from_local: ranks disagree on the global metadata (this rank: "
                               << placements_str(spec->placements()) << " " << shape_str(global_shape) << " "
                               << dtype_name(local.dtype()) << ")";
    }
    if (any_bad_shape && ok)
      DT_THROW(ShapeError) << "from_local: another rank's local tensor does not match its chunk shape";
  }
  if (!ok)
    DT_THROW(ShapeError) << "from_local: rank " << groups->global_rank() << " holds a local tensor of shape "
                         << shape_str(local.shape()) << " but " << placements_str(spec->placements()) << " of "
                         << shape_str(global_shape) << " on mesh " << groups->mesh().str() << " gives "
                         << shape_str(expected);
  return DTensor(local, std::move(spec), std::move(groups));
}

DTensor redistribute_backward(const DTensor& grad_output, const Placements& src, RedistributePlanner& planner) {
  Placements src_n = normalize_placements(src, grad_output.spec().mesh().ndim(), grad_output.spec().rank());
  return grad_output.redistribute(gradient_placements(src_n, grad_output.placements()), planner);
}

}  // namespace dt
