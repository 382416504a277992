// A rank killed mid-pipeline: `mpirun -np 3 pipeline_fault_driver mpi` (or `pipeline_fault_driver
// threads`, no mpirun). Three stages run their 1F1B programs (tests/support/pipeline_stages.h,
// 4 micro-batches) for one good step; in the second step stage 1 dies after its second matmul,
// with messages in flight both ways:
//   mpi      the victim sends itself SIGKILL (run_pipeline_fault_test.sh checks what the survivors
//            printed: each names rank 1, dead, before the timeout's abort ends the job)
//   threads  the victim's thread throws; every survivor's error must name rank 1, failed or
//            abandoning its transfer (checked here: exit 0 when they all do, 1 otherwise).
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "dtensor/comm/process_group.h"
#include "dtensor/runtime/launcher.h"
#include "tests/support/pipeline_stages.h"

namespace {

constexpr int kStages = 3, kVictim = 1, kMicrobatches = 4;

dt::runtime::RankResult run_step(dt::ProcessGroup& world, bool kill, dt::runtime::Backend backend) {
  dt::test_support::PipelineStageOptions o;
  o.schedule = dt::pipeline::Schedule::one_f_one_b;
  o.stages = kStages;
  o.stage = world.rank();
  o.microbatches = kMicrobatches;
  o.rows = 4;
  o.width = 16;
  const dt::ir::Graph g = dt::test_support::pipeline_stage_graph(o);
  dt::runtime::Bindings bindings{{"w", dt::Tensor::full({o.width, o.width}, 0.5)}};
  for (int k = 0; k < kMicrobatches && o.stage == 0; ++k)
    bindings["mb" + std::to_string(k)] = dt::Tensor::full({o.rows, o.width}, double(k + 1));
  dt::runtime::LaunchOptions options;
  if (kill && world.rank() == kVictim)
    options.node_hook = [backend](int) {
      return [backend, matmuls = 0](const dt::ir::Node& n, size_t, auto, auto) mutable {
        if (n.op != dt::ir::OpKind::matmul || ++matmuls < 2) return;
        std::fprintf(stderr, "[rank %d] pipeline_fault_driver: dying after matmul #2 of the step\n", kVictim);
        std::fflush(stderr);
        if (backend == dt::runtime::Backend::mpi) std::raise(SIGKILL);
        throw std::runtime_error("rank 1 died mid-pipeline");
      };
    };
  return dt::runtime::run_rank(g, bindings, world, options);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "mpi" && mode != "threads") {
    std::fprintf(stderr, "usage: pipeline_fault_driver mpi|threads\n");
    return 64;
  }
  const dt::runtime::Backend backend = dt::runtime::parse_backend(mode);
  dt::CommOptions comm;
  comm.timeout = dt::Duration(3000);
  std::mutex mu;
  std::map<int, std::string> errors;  // threads: each survivor's error
  try {
    dt::runtime::run_world(backend, kStages, [&](dt::ProcessGroup& world) {
      run_step(world, /*kill=*/false, backend);
      try {
        run_step(world, /*kill=*/true, backend);
      } catch (const dt::CommError& e) {
        std::lock_guard lock(mu);
        errors[world.rank()] = e.what();
        throw;
      }
      std::printf("[rank %d] pipeline_fault_driver: no fault detected\n", world.rank());
    }, comm);
  } catch (const std::exception& e) {
    std::printf("run ended with: %s\n", e.what());
  }
  bool ok = errors.size() == kStages - 1;
  for (const auto& [rank, text] : errors) {
    std::printf("[rank %d] %s\n", rank, text.c_str());
    // Its peer's failure, or its peer abandoning the transfer while the exception unwound it.
    ok = ok && (text.find("rank 1 failed before arriving (rank 1 died mid-pipeline)") != std::string::npos ||
                text.find("rank 1 abandoned") != std::string::npos);
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL: every survivor must name rank 1");
  return ok ? 0 : 1;
}
