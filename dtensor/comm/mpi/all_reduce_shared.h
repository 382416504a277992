// all_reduce through the shared-memory arena (shared_arena.h) across the processes of one host:
// the arena as peer memory (peer_memory.h) for the one-shot and two-shot algorithms the threads
// backend runs too (all_reduce_algos.h).
//
// Per operation k on the arena:
//   wait done>=k-1   every member finished operation k-1 (no one still reads my segment)
//   copy-in          my buffer into my segment
//   barrier          every segment holds its member's input
//   the algorithm    peer(i) = segment i, output = the caller's buffer; its barriers are arena
//                    barriers (phase counter), its finish() publishes done=k without waiting
// Reductions go through reduce_buffers in member order, so every member's result is bitwise
// identical to the threads backend's (bf16/f16 accumulate in f32 and round once).
#pragma once

#include "dtensor/comm/mpi/shared_arena.h"

namespace dt::mpi {

// Runs the all_reduce of buf (count elements) with `algo` (resolved: one_shot or two_shot) across
// the arena's members; throws ArenaTimeout (or CommError when growing the arena fails) after
// `timeout`.
void all_reduce_shared(SharedArena& arena, AllReduceAlgo algo, void* buf, size_t count, DType dtype, ReduceOp op,
                       Duration timeout);

}  // namespace dt::mpi
