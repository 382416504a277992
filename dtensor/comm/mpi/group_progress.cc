#include "dtensor/comm/mpi/group_progress.h"

#include <map>
#include <mutex>

namespace dt::mpi {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::vector<int>, int> ordinals;  // groups created so far per rank list
  std::map<int64_t, std::weak_ptr<GroupProgress>> by_id;
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked: the agent thread may read it during exit
  return *r;
}

// Returns a 63-bit FNV-1a hash of the rank list and ordinal (non-negative, fits MPI_INT64_T).
int64_t group_hash(const std::vector<int>& ranks, int ordinal) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(ranks.size());
  for (int r : ranks) mix(uint64_t(uint32_t(r)));
  mix(uint64_t(ordinal));
  return int64_t(h >> 1);
}

}  // namespace

std::shared_ptr<GroupProgress> register_group(const std::vector<int>& global_ranks) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto g = std::make_shared<GroupProgress>();
  g->global_ranks = global_ranks;
  g->id = group_hash(global_ranks, r.ordinals[global_ranks]++);
  r.by_id[g->id] = g;
  return g;
}

std::shared_ptr<GroupProgress> find_group(int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second.lock();
}

}  // namespace dt::mpi
