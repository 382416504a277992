// The all_reduce algorithms over peer memory (peer_memory.h), written once for the threads backend
// and the MPI shared window, and the one place that chooses between them.
//
// Every algorithm reads the members' inputs from peer(0..n-1) (each holding `count` elements),
// leaves the reduction in `out` (which may be this member's own peer buffer: in place) and calls
// pm.finish() exactly once. Reductions go through reduce_buffers in member order 0..n-1, element
// by element, so every member's result is bitwise identical whatever the algorithm or the slicing
// (bf16/f16 accumulate in f32 and round once).
#pragma once

#include <cstddef>

#include "dtensor/comm/peer_memory.h"
#include "dtensor/comm/process_group.h"

namespace dt {

// Returns the algorithm to run for an all_reduce of `nbytes` per member: `requested` unless it is
// `automatic`, else one-shot at or under CommOptions::one_shot_threshold, two-shot above. Every
// backend resolves here, on the caller's thread, so members compare concrete algorithms.
AllReduceAlgo choose_all_reduce_algo(AllReduceAlgo requested, size_t nbytes, const CommOptions& options);

void all_reduce_one_shot(PeerMemory& pm, void* out, size_t count, DType dtype, ReduceOp op);
void all_reduce_two_shot(PeerMemory& pm, void* out, size_t count, DType dtype, ReduceOp op);
// Runs `algo` (one_shot or two_shot; `automatic` is a bug: resolve it with choose_all_reduce_algo).
void run_all_reduce(PeerMemory& pm, AllReduceAlgo algo, void* out, size_t count, DType dtype, ReduceOp op);

}  // namespace dt
