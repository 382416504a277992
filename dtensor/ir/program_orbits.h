// The distinct per-rank programs of one job ("orbits"): which ranks run the same program up to
// renaming, so that the passes and the cross-rank check can look at one program per orbit instead
// of one per rank (passes/rank_pipeline.h).
//
// Two ranks are in one orbit when their programs are the same but for the rank lists of their
// process groups and the attributes that say where this rank's shard starts (a slice's start, a
// masked embedding's first row): same nodes, ops, shapes and collectives, in the same order. The
// partitioner knows which coordinates give such programs (sharding/rank_orbits.h); the passes only
// read this description, so they need nothing of sharding.
//
// Worked example: gpt with fsdp x tp on a 256x256 mesh whose dims divide every sharded dim has
// four orbits, whatever the mesh size: dp coordinate 0 or not x tp coordinate 0 or not (group
// index 0 adds a rowwise bias once; a replicate -> partial move keeps the value there). Rank 0's
// tp group [0, 1, ..., 255] holds ranks of orbit 0 (rank 0) and orbit 1 (ranks 1..255): its peers
// on "tp" are {orbit 0, rank 0} and {orbit 1, rank 1}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dt::ir {

// A member of a process group that stands for every member of the group in its orbit.
struct OrbitPeer {
  size_t orbit = 0;  // index into RankOrbits::orbits
  int rank = -1;     // the lowest rank of the group in that orbit
};

struct RankOrbit {
  int representative = -1;  // the orbit's lowest rank: its program stands for every member's
  int64_t ranks = 0;        // how many ranks run this program
  // Another orbit (lower index) whose representative's program this one's equals up to renaming,
  // found after partitioning (the classes that define orbits may be finer than needed): its
  // program stands for this orbit too, and this representative's need not be built; -1: none.
  int same_as = -1;
  // Per process group the representative's program declares (by name): one peer per orbit found
  // among the group's members, in increasing rank order (the representative's orbit included).
  std::vector<std::pair<std::string, std::vector<OrbitPeer>>> peers;
};

struct RankOrbits {
  std::vector<RankOrbit> orbits;  // by increasing representative rank
  // Returns the orbit of a global rank of the job (-1 when the rank is not in it).
  std::function<int(int rank)> orbit_of;
  // Returns the ranks of the process group named `group` that holds `rank`, in group-index order
  // (for messages about an orbit whose program is another's).
  std::function<std::vector<int>(int rank, const std::string& group)> group_ranks;
  // Returns the orbit whose program stands for orbit o (o itself unless same_as is set).
  size_t program_orbit(size_t o) const {
    return orbits[o].same_as >= 0 ? size_t(orbits[o].same_as) : o;
  }
  int64_t total_ranks() const {
    int64_t n = 0;
    for (const RankOrbit& o : orbits) n += o.ranks;
    return n;
  }
};

}  // namespace dt::ir
