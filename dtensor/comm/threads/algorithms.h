// The threads backend's collective algorithms, one file each (Gloo style), all written against a
// started Rendezvous: every participant's descriptor and buffer pointers are visible, and the
// algorithm reads peers' buffers directly (no staging copies).
//
// Shared contract of every algorithm:
//  * All participants run the same algorithm with the same number of phase barriers (the
//    descriptors were checked to agree on op, count and element width before it runs).
//  * No participant touches another participant's buffers after passing its final barrier, so a
//    rank may complete (and its caller free its buffers) as soon as it returns.
//  * Reductions go through reduce_buffers in rank order 0..n-1: bitwise-identical results.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "dtensor/comm/threads/world.h"

namespace dt::threads {

struct AlgorithmContext {
  Rendezvous& rv;
  int me;                           // my participant index
  std::vector<std::byte>& scratch;  // this endpoint's reusable scratch memory
  const CommOptions& options;

  int size() const { return rv.size(); }
  const Participant& part(int i) const { return rv.participant(i); }
  const Participant& mine() const { return rv.participant(me); }
  void barrier() const { rv.barrier(options.timeout); }
};

// Returns "one_shot" or "two_shot": the all_reduce algorithm used for a buffer of `nbytes`.
std::string_view all_reduce_algorithm(size_t nbytes, const CommOptions& options);
// Returns the same choice as an AllReduceAlgo (never `automatic`).
AllReduceAlgo resolve_all_reduce_algo(size_t nbytes, const CommOptions& options);

void all_reduce_one_shot(AlgorithmContext& ctx);
void all_reduce_two_shot(AlgorithmContext& ctx);
void all_gather(AlgorithmContext& ctx);
void reduce_scatter(AlgorithmContext& ctx);
void all_to_all(AlgorithmContext& ctx);
void broadcast(AlgorithmContext& ctx);
void send_recv(AlgorithmContext& ctx);
void barrier(AlgorithmContext& ctx);

// Runs the algorithm for the descriptor's op (all_reduce: the descriptor's algo, by size when
// `automatic`); returns the all_reduce algorithm that ran (`automatic` for other ops).
AllReduceAlgo run_algorithm(AlgorithmContext& ctx);

}  // namespace dt::threads
