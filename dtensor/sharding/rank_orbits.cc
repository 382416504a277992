#include "dtensor/sharding/rank_orbits.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "dtensor/core/error.h"

namespace dt::sharding {
namespace {

// Per mesh dim, every size a split on it may divide. For each value and tensor dim: the mesh dims
// that shard that dim in any layout the value takes (its own, where it is read, what each reader
// needs, as an output: a redistribution between two of them passes through mixes of the two), and
// the closure of the dim's size under chunking by those mesh dims in any order (full and short
// chunks: a nested split divides what earlier splits left).
std::vector<std::set<int64_t>> split_sizes(const ir::Graph& graph, const Sharding& s) {
  const DeviceMesh& mesh = s.mesh;
  const size_t nd = size_t(mesh.ndim());
  std::vector<std::vector<const Placements*>> layouts(graph.num_values());
  auto add = [&](const ir::Value* v, const Placements& p) {
    if (size_t(v->id) < layouts.size() && !p.empty()) layouts[size_t(v->id)].push_back(&p);
  };
  auto add_value = [&](const ir::Value* v) {
    if (size_t(v->id) < s.values.size()) add(v, s.values[size_t(v->id)]);
    if (size_t(v->id) < s.reads.size()) add(v, s.reads[size_t(v->id)]);
  };
  for (const ir::Value* v : graph.inputs()) add_value(v);
  for (const ir::Value* v : graph.params()) add_value(v);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node* n = graph.nodes()[i];
    for (const ir::Value* r : n->results) add_value(r);
    if (i < s.nodes.size())
      for (size_t k = 0; k < n->operands.size() && k < s.nodes[i].operands.size(); ++k)
        add(n->operands[k], s.nodes[i].operands[k]);
  }
  for (size_t k = 0; k < graph.outputs().size() && k < s.outputs.size(); ++k) add(graph.outputs()[k], s.outputs[k]);

  std::vector<std::set<int64_t>> out(nd);
  std::set<std::pair<int64_t, uint32_t>> done;  // (size, mesh dims splitting it)
  for (const ir::Value* v : graph.values()) {
    if (!v || size_t(v->id) >= layouts.size() || layouts[size_t(v->id)].empty()) continue;
    for (size_t d = 0; d < v->type.shape.size(); ++d) {
      uint32_t dims = 0;
      for (const Placements* p : layouts[size_t(v->id)])
        for (size_t m = 0; m < p->size() && m < nd; ++m)
          if ((*p)[m].is_shard() && size_t((*p)[m].dim()) == d && mesh.size(int64_t(m)) > 1) dims |= 1u << m;
      const int64_t l = v->type.shape[d];
      if (!dims || l <= 1 || !done.insert({l, dims}).second) continue;
      // States (size left, mesh dims that split it already): each mesh dim splits a dim once.
      std::set<std::pair<int64_t, uint32_t>> seen = {{l, 0u}};
      std::vector<std::pair<int64_t, uint32_t>> stack = {{l, 0u}};
      while (!stack.empty()) {
        const auto [x, used] = stack.back();
        stack.pop_back();
        for (size_t m = 0; m < nd; ++m) {
          if (!(dims & (1u << m)) || (used & (1u << m))) continue;
          out[m].insert(x);
          const int64_t n = mesh.size(int64_t(m)), b = (x + n - 1) / n;
          for (int64_t y : {b, x - (x / b) * b})
            if (y > 1 && seen.insert({y, used | (1u << m)}).second) stack.push_back({y, used | (1u << m)});
        }
      }
    }
  }
  return out;
}

struct OrbitSpace {
  DeviceMesh mesh;
  std::vector<std::vector<int64_t>> starts;  // per mesh dim

  int64_t class_of(int64_t m, int64_t c) const {
    const auto& s = starts[size_t(m)];
    return int64_t(std::upper_bound(s.begin(), s.end(), c) - s.begin()) - 1;
  }
  // Mixed-radix index of a class per dim (dim 0 slowest).
  size_t index_of(const std::vector<int64_t>& classes) const {
    size_t idx = 0;
    for (size_t m = 0; m < classes.size(); ++m) idx = idx * starts[m].size() + size_t(classes[m]);
    return idx;
  }
  std::vector<int64_t> coords_of(const std::vector<int64_t>& classes) const {
    std::vector<int64_t> c(classes.size());
    for (size_t m = 0; m < classes.size(); ++m) c[m] = starts[m][size_t(classes[m])];
    return c;
  }
  int64_t class_size(int64_t m, int64_t k) const {
    const auto& s = starts[size_t(m)];
    const int64_t end = size_t(k) + 1 < s.size() ? s[size_t(k) + 1] : mesh.size(m);
    return end - s[size_t(k)];
  }
};

}  // namespace

MeshOrbits::MeshOrbits(const ir::Graph& graph, const Sharding& sharding)
    : mesh_(sharding.mesh), dim_names_(sharding.mesh_dim_names), starts_(size_t(sharding.mesh.ndim())) {
  const std::vector<std::set<int64_t>> sizes = split_sizes(graph, sharding);
  for (int64_t m = 0; m < mesh_.ndim(); ++m) {
    const int64_t n = mesh_.size(m);
    std::set<int64_t> cuts = {0};
    if (n > 1) cuts.insert(1);
    for (int64_t l : sizes[size_t(m)]) {
      // Chunks [0, full) are full; chunk `full` is short when the split is uneven; the rest empty.
      const int64_t b = (l + n - 1) / n, full = l / b;
      if (full < n) cuts.insert(full);
      if (l % b && full + 1 < n) cuts.insert(full + 1);
    }
    starts_[size_t(m)].assign(cuts.begin(), cuts.end());
  }
}

int64_t MeshOrbits::class_of(int64_t m, int64_t c) const {
  const auto& s = starts_[size_t(m)];
  return int64_t(std::upper_bound(s.begin(), s.end(), c) - s.begin()) - 1;
}

ir::RankOrbits MeshOrbits::orbits() const {
  auto space = std::make_shared<OrbitSpace>(OrbitSpace{mesh_, starts_});
  const size_t nd = size_t(mesh_.ndim());
  size_t total = 1;
  for (const auto& s : starts_) total *= s.size();
  // Process groups as the partitioner declares them: one per mesh dim of size > 1, and the
  // flattened ones the planner may use (every subset of two or more of those dims, named by
  // joining the dim names with '_', as LoweringContext::flat_group does).
  std::vector<int64_t> real;
  for (size_t m = 0; m < nd; ++m)
    if (mesh_.size(int64_t(m)) > 1) real.push_back(int64_t(m));
  std::vector<std::pair<std::string, std::vector<int64_t>>> groups;
  for (int64_t m : real) groups.push_back({dim_names_[size_t(m)], {m}});
  if (real.size() >= 2 && int64_t(real.size()) <= DeviceMesh::kMaxFlatDims)
    for (uint32_t subset = 1; subset < (1u << real.size()); ++subset) {
      if (__builtin_popcount(subset) < 2) continue;
      std::string name;
      std::vector<int64_t> dims;
      for (size_t k = 0; k < real.size(); ++k)
        if (subset & (1u << k)) {
          name += (name.empty() ? "" : "_") + dim_names_[size_t(real[k])];
          dims.push_back(real[k]);
        }
      groups.push_back({name, dims});
    }

  ir::RankOrbits out;
  out.orbits.resize(total);
  std::vector<int64_t> classes(nd, 0);
  for (size_t idx = 0; idx < total; ++idx) {
    // classes <- the mixed-radix digits of idx.
    size_t rest = idx;
    for (size_t m = nd; m-- > 0;) {
      classes[m] = int64_t(rest % starts_[m].size());
      rest /= starts_[m].size();
    }
    ir::RankOrbit& o = out.orbits[idx];
    const std::vector<int64_t> coords = space->coords_of(classes);
    o.representative = mesh_.rank_at(coords);
    o.ranks = 1;
    for (size_t m = 0; m < nd; ++m) o.ranks *= space->class_size(int64_t(m), classes[m]);
    for (const auto& [name, dims] : groups) {
      // Members vary the group's coordinates; one per class combination, in group-index order
      // (the group's lowest mesh dim slowest).
      std::vector<ir::OrbitPeer> peers;
      std::vector<int64_t> k(dims.size(), 0), cls = classes;
      for (;;) {
        for (size_t j = 0; j < dims.size(); ++j) cls[size_t(dims[j])] = k[j];
        peers.push_back({space->index_of(cls), mesh_.rank_at(space->coords_of(cls))});
        size_t j = dims.size();
        while (j-- > 0) {
          if (size_t(++k[j]) < starts_[size_t(dims[j])].size()) break;
          k[j] = 0;
        }
        if (j == size_t(-1)) break;
      }
      o.peers.push_back({name, std::move(peers)});
    }
  }
  std::map<std::string, uint32_t> group_dims;
  for (const auto& [name, dims] : groups) {
    uint32_t mask = 0;
    for (int64_t m : dims) mask |= 1u << m;
    group_dims[name] = mask;
  }
  out.group_ranks = [space, group_dims](int rank, const std::string& group) -> std::vector<int> {
    auto it = group_dims.find(group);
    if (it == group_dims.end()) return {};
    return space->mesh.flat_group_ranks(it->second, rank);
  };
  out.orbit_of = [space](int rank) -> int {
    const auto c = space->mesh.coordinate(rank);
    if (!c) return -1;
    std::vector<int64_t> classes(c->size());
    for (size_t m = 0; m < c->size(); ++m) classes[m] = space->class_of(int64_t(m), (*c)[m]);
    return int(space->index_of(classes));
  };
  return out;
}

ir::RankOrbits rank_orbits(const ir::Graph& graph, const Sharding& sharding) {
  return MeshOrbits(graph, sharding).orbits();
}

}  // namespace dt::sharding
