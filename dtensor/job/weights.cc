#include "dtensor/job/weights.h"

#include <filesystem>
#include <mutex>

#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::job {

struct Weights::Full {
  std::once_flag once;
  TensorMap tensors;
};

Weights Weights::full(TensorMap tensors) {
  Weights w;
  w.full_ = std::make_shared<Full>();
  std::call_once(w.full_->once, [&] { w.full_->tensors = std::move(tensors); });
  return w;
}

Weights Weights::checkpoint(io::ShardedCheckpoint checkpoint) {
  Weights w;
  w.checkpoint_ = std::move(checkpoint);
  w.full_ = std::make_shared<Full>();
  return w;
}

Weights Weights::load(const std::string& path, const std::string& flag) {
  if (std::filesystem::is_directory(path)) return checkpoint(io::read_sharded_checkpoint(path, flag));
  return full(io::read_safetensors(path));
}

bool Weights::empty() const { return !checkpoint_ && (!full_ || full_->tensors.empty()); }

const TensorMap& Weights::full_tensors() const {
  static const TensorMap none;
  if (!full_) return none;
  // Assembled at most once, also when several rank threads ask at the same time.
  std::call_once(full_->once, [this] {
    if (checkpoint_) full_->tensors = sharding::assemble_checkpoint(*checkpoint_);
  });
  return full_->tensors;
}

bool Weights::matches(const ir::Graph& graph, const sharding::Sharding& sharding, const DeviceMesh& mesh) const {
  if (!checkpoint_ || checkpoint_->mesh.str() != mesh.str() || checkpoint_->mesh.ranks() != mesh.ranks()) return false;
  if (!checkpoint_->sub_meshes.empty()) return false;  // a pipeline's: its stages' tensors are assembled
  for (const ir::Value* p : graph.params()) {
    auto it = checkpoint_->placements.find(p->name);
    if (it == checkpoint_->placements.end() || parse_placements(it->second) != sharding.values[size_t(p->id)])
      return false;
    auto s = checkpoint_->shapes.find(p->name);
    if (s == checkpoint_->shapes.end() || s->second != p->type.shape) return false;
  }
  return true;
}

TensorMap Weights::rank_shards(const ir::Graph& graph, const sharding::Sharding& sharding, const DeviceMesh& mesh,
                               int rank, bool matching) const {
  if (!matching) return sharding::shard_weights(graph, sharding, full_tensors(), rank);
  // The checkpoint was written for exactly this layout: hand each rank its own shards.
  const std::vector<int>& ranks = mesh.ranks();
  const size_t index = size_t(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
  DT_CHECK(index < checkpoint_->local.size()) << "no shards for rank " << rank;
  const TensorMap& mine = checkpoint_->local[index];
  TensorMap out;
  for (const ir::Value* p : graph.params()) {
    auto it = mine.find(p->name);
    if (it == mine.end()) DT_THROW(IoError) << "the checkpoint has no shard of " << p->name << " for rank " << rank;
    const Tensor& t = it->second;
    const Shape local = local_shape_at(mesh.shape(), sharding.values[size_t(p->id)], p->type.shape, *mesh.coordinate(rank));
    if (t.shape() != local || t.dtype() != p->type.dtype)
      DT_THROW(IoError) << "the checkpoint's shard of " << p->name << " for rank " << rank << " on mesh " << mesh.str()
                        << " is " << dtype_name(t.dtype()) << shape_str(t.shape()) << ", expected "
                        << dtype_name(p->type.dtype) << shape_str(local);
    out.emplace(p->name, t);
  }
  return out;
}

}  // namespace dt::job
