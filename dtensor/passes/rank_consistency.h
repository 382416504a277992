// The cross-rank proof that per-rank programs cannot hang: every member of every process group
// issues the same sequence of collectives on that group.
//
// A collective is any node whose op defines OpDef::bytes_sent. Its signature is what the members
// must agree on to complete it: op, dtype, element count and reduce op (and the root of a
// broadcast). all_to_all_single may move different amounts per rank (uneven shards), so only its
// op and dtype are compared. Position k of group G on rank r is the k-th collective on G in r's
// program order, which is the order the runtime issues them in.
//
// Worked example: on a 2x2 mesh, rank 0 and rank 1 share `group tp = [0, 1]`. If rank 0's program
// reaches an all_to_all_single where rank 1's reaches an all_reduce as their 12th collective on
// tp, both ranks would block at run time until the timeout; this check reports instead
//   "group tp [0, 1], collective #11: rank 0 issues all_to_all_single(f32, ...) but rank 1 issues
//    all_reduce(f32, 16384, sum)".
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/program_orbits.h"

namespace dt::passes {

// Returns the signature of a collective node as the check compares it ("all_reduce(f32, 16384,
// sum)"); `with_count` false leaves the element count out.
std::string collective_signature(const ir::Node& node, bool with_count = true);

// Throws InternalError (the compiler emitted programs that would hang) naming the stage, the
// group, the position and the two differing collectives, when some group's members disagree.
// programs[i] is global rank ranks[i]'s program; groups are matched by their rank lists, so
// programs must come from one partition of one mesh. Members of a group that have no program in
// `programs` are not checked.
void check_rank_consistency(std::span<const ir::Graph* const> programs, std::span<const int> ranks,
                            std::string_view stage);

// The same proof for a whole job from one program per orbit (ir/program_orbits.h): representatives[o]
// is the program that stands for orbit o (its representative's, or with RankOrbit::same_as the
// equal one of another orbit; the messages then name orbit o's real group through
// RankOrbits::group_ranks). Members of one orbit issue the same collectives (their
// programs are the same up to renaming), so each process group needs one comparison per orbit
// among its members: a group whose first member is in orbit o is checked from o's representative,
// against the representative of every other orbit among its members. A divergence is reported as
// check_rank_consistency reports it, with the group's rank list and the two members' real ranks
// (the group's first member and the lowest member of the first orbit that differs); when several
// groups diverge, the one with the smallest rank list. The work is one program per orbit, whatever
// the number of ranks.
void check_orbit_consistency(std::span<const ir::Graph* const> representatives, const ir::RankOrbits& orbits,
                             std::string_view stage);

// Throws InternalError when `program` (global rank `rank`) is not `representative`'s program (of
// rank `representative_rank`, its orbit's) up to renaming: the same nodes with the same ops,
// operands, result types and groups, in the same order. This is what lets one program stand for
// its orbit; rank_pipeline.h checks it for every program it transforms that is not a
// representative.
void check_same_orbit(const ir::Graph& program, int rank, const ir::Graph& representative, int representative_rank,
                      std::string_view stage);

}  // namespace dt::passes
