// The threads backend's collective algorithms, one file each (Gloo style), all written against a
// started Rendezvous (all_reduce's two through the peer memory they share with the mpi backend): every participant's descriptor and buffer pointers are visible, and the
// algorithm reads peers' buffers directly (no staging copies).
//
// Shared contract of every algorithm:
//  * All participants run the same algorithm with the same number of phase barriers (the
//    descriptors were checked to agree on op, count and element width before it runs).
//  * No participant touches another participant's buffers after passing its final barrier, so a
//    rank may complete (and its caller free its buffers) as soon as it returns.
//  * Reductions go through reduce_buffers in rank order 0..n-1: bitwise-identical results.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

#include "dtensor/comm/peer_memory.h"
#include "dtensor/comm/threads/world.h"

namespace dt::threads {

// Chunk sizes of the paced copies (AlgorithmContext::paced_chunks). all_gather reads every rank's
// input at once, so n chunks of 1 MiB stay well inside a shared L3; broadcast reads one buffer.
// (The all_reduce algorithms pipeline 4 MiB pieces: RendezvousPeerMemory::pipeline_bytes.)
inline constexpr size_t kAllGatherChunkBytes = size_t(1) << 20;
inline constexpr size_t kBroadcastChunkBytes = size_t(2) << 20;

struct AlgorithmContext {
  Rendezvous& rv;
  int me;                           // my participant index
  std::vector<std::byte>& scratch;  // this endpoint's reusable scratch memory
  const CommOptions& options;

  int size() const { return rv.size(); }
  const Participant& part(int i) const { return rv.participant(i); }
  const Participant& mine() const { return rv.participant(me); }
  const CollectiveDesc& desc() const { return mine().desc; }
  void barrier() const { rv.barrier(options.timeout); }

  // Calls copy(begin, len) for each chunk of `chunk` bytes of [0, nbytes), with a barrier after
  // each (when there are peers): the ranks stay within one chunk of each other, so a buffer all
  // of them read is pulled from memory once and found in the shared cache by the others. The
  // last barrier is the "read" one: every rank has read what it needed of its peers' buffers.
  template <typename F>
  void paced_chunks(size_t nbytes, size_t chunk, F&& copy) const {
    for (size_t begin = 0; begin < nbytes; begin += chunk) {
      copy(begin, std::min(chunk, nbytes - begin));
      if (size() > 1) barrier();
    }
  }
};

// The rendezvous as peer memory (peer_memory.h) for the all_reduce algorithms shared with the mpi
// backend (all_reduce_algos.h): peer(i) is participant i's in-place `buf`; finish() is a barrier.
class RendezvousPeerMemory final : public PeerMemory {
 public:
  explicit RendezvousPeerMemory(AlgorithmContext& ctx) : ctx_(ctx) {}
  int size() const override { return ctx_.size(); }
  int me() const override { return ctx_.me; }
  std::byte* peer(int i) const override { return static_cast<std::byte*>(ctx_.part(i).out); }
  void barrier() override { ctx_.barrier(); }
  void finish() override { ctx_.barrier(); }
  std::vector<std::byte>& scratch() override { return ctx_.scratch; }
  // 64 MiB, 4 ranks, 2 shared cores (median of 6 runs each): ~39 ms per two-shot call with 4 MiB,
  // ~49 ms with 8 MiB, ~170 ms unchunked.
  size_t pipeline_bytes() const override { return size_t(4) << 20; }

 private:
  AlgorithmContext& ctx_;
};

void all_gather(AlgorithmContext& ctx);
void reduce_scatter(AlgorithmContext& ctx);
void all_to_all(AlgorithmContext& ctx);
void broadcast(AlgorithmContext& ctx);
void send_recv(AlgorithmContext& ctx);
void barrier(AlgorithmContext& ctx);

// Runs the algorithm for the descriptor's op (all_reduce: the descriptor's algo, resolved by the
// caller); returns the all_reduce algorithm that ran (`automatic` for other ops).
AllReduceAlgo run_algorithm(AlgorithmContext& ctx);

}  // namespace dt::threads
