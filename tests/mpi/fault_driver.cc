// Fault injection for the mpi backend: `mpirun -np 3 mpi_fault_driver <mode>`.
//
// Every rank runs all_reduce #1 on the world (all alive), then the victim (rank 1, or rank 2 for
// subgroup_stall) misbehaves before collective #2 while the others issue it with a 3 s timeout:
//   exit            the victim calls _exit(0) (a crashed process)
//   kill            the victim sends itself SIGKILL
//   stall           the victim sleeps 30 s instead (alive but late)
//   mismatch        with check_collectives, the victim issues all_gather instead of all_reduce
//   subgroup_stall  as stall, on group [0, 2], with rank 2 as the victim (rank 1 only waits)
//   mismatch_elsewhere  with check_collectives and a 60 s timeout: ranks 0 and 1 disagree on
//                   collective #1 of group [0, 1] while rank 2 waits in world collective #2,
//                   which they never issue; rank 2 must learn the mismatch from the members'
//                   announcement at once, not time out
// The survivors' CommError is printed by run_mpi ("[rank r] dtensor: error: ...") before it
// aborts the job; run_fault_test.sh checks the messages, the exit status and the time taken.
// In exit, kill and stall, ranks 0 and 2 both wait in collective #2; the first to time out aborts
// the job, and a busy machine can skew their deadlines by more than the time it takes to report,
// so rank 2 waits three times as long: rank 0, whose report the test reads, always times out
// first (the job still ends at rank 0's timeout).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/comm/mpi/mpi_runtime.h"

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "exit" && mode != "kill" && mode != "stall" && mode != "mismatch" && mode != "subgroup_stall" &&
      mode != "mismatch_elsewhere") {
    std::fprintf(stderr, "usage: mpi_fault_driver exit|kill|stall|mismatch|subgroup_stall|mismatch_elsewhere\n");
    return 64;
  }
  dt::mpi::MpiRuntime runtime(&argc, &argv);
  dt::CommOptions options;
  const bool second_survivor = runtime.world_rank() == 2 && (mode == "exit" || mode == "kill" || mode == "stall");
  options.timeout = dt::Duration(mode == "mismatch_elsewhere" ? 60000 : second_survivor ? 9000 : 3000);
  options.check_collectives = mode == "mismatch" || mode == "mismatch_elsewhere";
  dt::mpi::run_mpi(
      [&](dt::ProcessGroup& world) {
        int me = world.rank();
        size_t count = 1000;
        std::vector<float> buf(count, 1.0f), gathered(count * world.size());
        world.all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();  // #1
        if (mode == "mismatch_elsewhere") {
          if (me == 2) {
            world.all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();  // #2, never matched
          } else {
            dt::ProcessGroupPtr group = world.new_group({0, 1});
            if (me == 0)
              group->all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();
            else
              group->all_gather(buf.data(), gathered.data(), count, dt::DType::f32)->wait();
          }
        } else if (mode == "subgroup_stall") {
          if (me == 1) {
            std::this_thread::sleep_for(std::chrono::seconds(30));
            return;
          }
          dt::ProcessGroupPtr group = world.new_group({0, 2});
          group->all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();  // #1
          if (me == 2) {
            std::this_thread::sleep_for(std::chrono::seconds(30));
            return;
          }
          group->all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();  // #2
        } else {
          if (me == 1) {
            std::fprintf(stderr, "[rank 1] fault_driver: injecting '%s' before collective #2\n", mode.c_str());
            std::fflush(stderr);
            if (mode == "exit") std::_Exit(0);
            if (mode == "kill") std::raise(SIGKILL);
            if (mode == "stall") {
              std::this_thread::sleep_for(std::chrono::seconds(30));
              return;
            }
            world.all_gather(buf.data(), gathered.data(), count, dt::DType::f32)->wait();  // mismatch
          } else {
            world.all_reduce(buf.data(), count, dt::DType::f32, dt::ReduceOp::sum)->wait();  // #2
          }
        }
        std::printf("[rank %d] fault_driver: no fault detected\n", me);
      },
      options);
  return 0;
}
