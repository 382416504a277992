// The peer-memory interface the shared-memory collective algorithms are written against (Gloo
// style: each algorithm once, each transport once).
//
// A PeerMemory is one collective's view of n members' buffers, every member able to read every
// buffer with plain loads: peer(i) is member i's buffer, which member i alone writes (unless an
// algorithm says otherwise) and every member may read. Two implementations:
//  * the threads rendezvous (threads/algorithms.h): peer(i) is rank i's own `buf`, so the output
//    of an in-place all_reduce is this member's peer buffer;
//  * the MPI-3 shared window (mpi/all_reduce_shared.h): peer(i) is member i's segment of the
//    window, into which the member copied its input; the output is the caller's buffer, which no
//    peer sees.
//
// Synchronisation:
//  * barrier(): returns once every member called it the same number of times; everything a member
//    wrote before its call is visible to every member after theirs.
//  * finish(): called exactly once, last, by every member of every collective: "I no longer read
//    any peer's buffer and no longer write mine". Threads: a barrier, since the peer buffers are
//    the callers' and a caller may free its buffer once its collective completes. MPI window: only
//    publishes it; the next collective on the window waits for every member's finish before it
//    overwrites a segment, so the wait overlaps the caller's work in between.
//    Because of the MPI form, a member may write its own peer buffer after finish() only where the
//    output is that buffer (threads), whose finish() is a full barrier.
#pragma once

#include <cstddef>
#include <vector>

namespace dt {

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual int size() const = 0;
  virtual int me() const = 0;
  virtual std::byte* peer(int i) const = 0;
  virtual void barrier() = 0;
  virtual void finish() = 0;
  // Returns this member's reusable private memory (grown by the algorithm as needed).
  virtual std::vector<std::byte>& scratch() = 0;
  // Returns the bytes of all members' buffers that one pipeline step of a chunked algorithm should
  // span (two-shot: see all_reduce_two_shot.cc), SIZE_MAX for no chunking. It weighs a barrier
  // against the cache: the threads rendezvous's barrier is a futex wake, so chunks that stay in the
  // shared cache win; see the implementations for the measurements behind their values.
  virtual size_t pipeline_bytes() const = 0;
};

}  // namespace dt
