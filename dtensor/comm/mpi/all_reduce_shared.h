// all_reduce through the shared-memory arena (shared_arena.h): one-shot and two-shot, the same
// algorithms as the threads backend, across the processes of one host.
//
// one-shot (bytes <= CommOptions::one_shot_threshold): every member copies its buffer into its
// segment, then reduces all n segments, in member order 0..n-1, straight into its own buffer.
// One synchronisation, n reads of the data per member: lowest latency, for small buffers.
//
// two-shot: after the same copy-in, member i reduces chunk i (torch.chunk sizes: c = ceil(count/n),
// chunk i = [i*c, min((i+1)*c, count)), possibly short or empty) of all segments into chunk i of
// its own segment; then every member copies chunk j from member j's segment. Each member reads
// the data about twice instead of n times: for large buffers.
//
// Step order and why it is safe, per operation k (counters of shared_arena.h):
//   wait done>=k-1   peers finished reading my segment in operation k-1 (so I may overwrite it)
//   copy-in; signal ready=k; wait ready>=k
//   reduce (one-shot: into my buffer; two-shot: my chunk, into my segment)
//   two-shot only: signal reduced=k; wait reduced>=k; copy every chunk out
//   signal done=k
// Reductions go through reduce_buffers in member order, so every member's result is bitwise
// identical (bf16/f16 accumulate in f32 and round once).
#pragma once

#include <string>
#include <string_view>

#include "dtensor/comm/mpi/shared_arena.h"

namespace dt::mpi {

// Returns "shm_one_shot" or "shm_two_shot" for a buffer of nbytes.
std::string_view shared_all_reduce_algorithm(size_t nbytes, const CommOptions& options);

// Runs the all_reduce of buf (count elements) across the arena's members; throws ArenaTimeout
// (or CommError when growing the arena fails) after options.timeout.
void all_reduce_shared(SharedArena& arena, void* buf, size_t count, DType dtype, ReduceOp op,
                       const CommOptions& options);

}  // namespace dt::mpi
