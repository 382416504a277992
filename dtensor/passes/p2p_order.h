// The cross-rank proof that per-rank programs with point-to-point transfers (send, recv) cannot
// deadlock, the companion of rank_consistency.h's per-group collective order.
//
// The proof runs the programs' communication abstractly under the strictest semantics a backend
// has (the threads backend's): a rank issues its comm ops in program order without blocking and
// blocks at a wait_tensor until that op completes (at its end, until all its ops complete); on
// each process group a rank works through the ops it issued one at a time, in issue order, and the
// op at the head completes only when every participant has its counterpart at the head of the same
// group: all members for a collective, the peer's matching recv (or send) for a transfer (a
// rendezvous: a send is not buffered). Open MPI completes any schedule this accepts (its isend /
// irecv need no head-of-line order). A state where no rank can move and some rank is not done is a
// deadlock; a head pair that is a send and a recv between the same two ranks but disagrees on tag,
// dtype or element count is a mismatch.
//
// Worked example (one group [0, 1], 1F1B's steady state on stage 0 of 2):
//   rank 0: send a0, send a1, recv g0       rank 1: recv a0, send g0, recv a1
// After a0 pairs, rank 0's head is `send a1` and rank 1's is `send g0`: neither can complete, a
// deadlock. Issuing `recv g0` before `send a1` on rank 0 makes the heads pair all the way.
//
// The work is linear in the programs' comm ops; it runs only when some program has a transfer.
//
// By orbit (ir/program_orbits.h): the ranks of one orbit run one program up to renaming, so the proof
// runs one participant per orbit, its representative's program standing for every member, with
// each transfer's peer orbit derived from the peer rank (the group's member at the `peer` index).
// This is the same proof when every orbit that transfers on a group holds one rank of it (a
// pipeline's link between stages, whose coordinate on the pp dim is the orbit's own): then every
// member of an orbit pairs with its own peer, a member of one orbit, and the members of an orbit
// stay in one state at every step of the simulation above (a collective completes for all the
// group instances alike: orbits are products of per-dim classes, so every instance holds the same
// orbits). An orbit holding several ranks of a group it transfers on (several members sending to
// one peer, each in its turn) breaks the lockstep; the proof refuses it instead of guessing.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/program_orbits.h"

namespace dt::passes {

// Returns true when some program has a send or recv.
bool has_point_to_point(std::span<const ir::Graph* const> programs);

// Throws InternalError (the compiler emitted programs that would hang), naming the stage, when the
// programs can deadlock (each blocked rank and the op it waits for) or a pair of transfers
// mismatches. programs[i] is global rank ranks[i]'s program; groups are matched by their rank
// lists. Every rank a program communicates with must have a program among them.
void check_p2p_order(std::span<const ir::Graph* const> programs, std::span<const int> ranks, std::string_view stage);

// The same proof for a whole job from one program per orbit (file comment): representatives[o]
// stands for orbit o (as check_orbit_consistency takes them). Messages name the representatives'
// ranks and their groups. Throws InternalError as check_p2p_order does, and when an orbit holds
// several ranks of a group it transfers on. Returns the programs the proof read (one per orbit,
// whatever the number of ranks).
size_t check_p2p_order_by_orbit(std::span<const ir::Graph* const> representatives, const ir::RankOrbits& orbits,
                                std::string_view stage);

}  // namespace dt::passes
