// Barrier: the rendezvous itself is the barrier (it starts only when every member arrived), and
// no data moves, so there is no phase barrier to run.
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void barrier(AlgorithmContext&) {}

}  // namespace dt::threads
