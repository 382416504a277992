#include "dtensor/comm/mpi/mpi_process_group.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "dtensor/comm/all_reduce_algos.h"
#include "dtensor/comm/mpi/all_reduce_shared.h"
#include "dtensor/comm/mpi/collective_check.h"
#include "dtensor/comm/mpi/mpi_datatypes.h"
#include "dtensor/comm/mpi/mpi_runtime.h"
#include "dtensor/comm/mpi/peer_state_agent.h"
#include "dtensor/comm/reduce_kernel.h"

namespace dt::mpi {
namespace {

// Returns count as an MPI int; MPI counts are ints, so larger buffers are a ValueError.
int mpi_count(size_t count, std::string_view what) {
  if (count > size_t(INT_MAX))
    DT_THROW(ValueError) << what << " count " << count << " exceeds the MPI limit of " << INT_MAX
                         << " elements per call";
  return int(count);
}

// Largest all_reduce routed through the shared arena (its segments grow to this size).
constexpr size_t kMaxSharedBytes = size_t(1) << 30;

// Returns the DTENSOR_MPI_ALL_REDUCE setting: "mpi", "shm" or "auto" (default).
std::string all_reduce_mode() {
  const char* v = std::getenv("DTENSOR_MPI_ALL_REDUCE");
  std::string mode = v ? v : "auto";
  if (mode != "mpi" && mode != "shm" && mode != "auto")
    DT_THROW(ValueError) << "DTENSOR_MPI_ALL_REDUCE must be mpi, shm or auto, got '" << mode << "'";
  return mode;
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::vector<int> global_ranks, CommOptions options)
    : comm_(comm), global_ranks_(std::move(global_ranks)), options_(options) {
  MpiCallGuard guard;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  int size = 0;
  MPI_Comm_size(comm_, &size);
  DT_CHECK(size == int(global_ranks_.size())) << "communicator size " << size << " for group "
                                              << ranks_str(global_ranks_);
  if (options_.check_collectives) {
    check_mpi(MPI_Comm_dup(comm_, &check_comm_), "MPI_Comm_dup for --check-collectives");
    MPI_Comm_set_errhandler(check_comm_, MPI_ERRORS_RETURN);
  }
  progress_ = register_group(global_ranks_);
  if (all_reduce_mode() != "mpi" && size > 1) {
    // Collective over the members, like the constructor's callers (world(), new_group()).
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, /*key=*/0, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    log_group_placement(node_size == size);
    if (node_size == size) {
      // key 0 everywhere keeps comm_'s order, so member index = group index.
      node_comm_ = node;
      MPI_Comm_set_errhandler(node_comm_, MPI_ERRORS_RETURN);
      arena_ = std::make_unique<SharedArena>(node_comm_, global_ranks_);
    } else {
      MPI_Comm_free(&node);
    }
  }
}

// DTENSOR_MPI_LOG_GROUPS=1: the group's first member says on stderr whether the group is on one
// host (its all_reduce may use the shared-memory window) or spans hosts (every collective goes
// through MPI), so a multi-host run (and its test) can see what runs where.
void MpiProcessGroup::log_group_placement(bool one_host) const {
  const char* v = std::getenv("DTENSOR_MPI_LOG_GROUPS");
  if (!v || std::string(v) != "1" || rank_ != 0) return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "dtensor mpi: group %s %s\n", ranks_str(global_ranks_).c_str(),
               one_host ? fmt::format("on one host ({}): shared-memory window", host).c_str()
                        : "spans hosts: collectives through MPI");
}

bool MpiProcessGroup::all_reduce_on_arena(size_t nbytes) const {
  return arena_ && nbytes > 0 && nbytes <= kMaxSharedBytes;
}

std::string MpiProcessGroup::all_reduce_algorithm(size_t nbytes) const {
  if (!all_reduce_on_arena(nbytes)) return "mpi:iallreduce";
  return fmt::format("shm_{}", all_reduce_algo_name(choose_all_reduce_algo(AllReduceAlgo::automatic, nbytes, options_)));
}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a fault a peer may be gone; freeing is skipped since the process is about to abort.
  if (finalized || comm_fault_happened()) return;
  arena_.reset();
  MpiCallGuard guard;
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

std::shared_ptr<std::vector<std::byte>> MpiProcessGroup::scratch(size_t bytes) {
  if (scratch_ && scratch_.use_count() == 1) {
    if (scratch_->size() < bytes) scratch_->resize(bytes);
    return scratch_;
  }
  auto fresh = std::make_shared<std::vector<std::byte>>(bytes);
  if (!scratch_) scratch_ = fresh;
  return fresh;
}

WorkContext MpiProcessGroup::begin(CollectiveDesc desc, bool collective) {
  WorkContext context;
  context.group = progress_;
  context.my_global_rank = global_ranks_[rank_];
  if (collective) {
    context.seq = progress_->issued.load() + 1;
    progress_->issued.store(context.seq);
    progress_->last_op.store(int64_t(desc.op));
  }
  context.flight_id = flight_recorder().record_issued(std::string(collective_op_name(desc.op)),
                                                      desc.str(), global_ranks_, context.seq,
                                                      desc.bytes());
  context.desc = std::move(desc);
  if (collective && options_.check_collectives) {
    try {
      check_collective_matches(check_comm_, size(), context, options_.timeout);
    } catch (const CommError& e) {
      // Every member sees the mismatch at once; the other processes (outside this group, or
      // blocked elsewhere) learn it from the announcement instead of waiting for their timeouts.
      std::string message = record_failure(context, e.what());
      if (PeerStateAgent* agent = peer_state_agent()) agent->announce_fault(message, kAnnounceGrace);
      DT_THROW(CommError) << message;
    }
  }
  return context;
}

WorkPtr MpiProcessGroup::finish(WorkContext context, int rc, std::vector<MPI_Request> requests,
                                std::function<void()> on_complete, std::shared_ptr<void> keepalive) {
  if (rc != MPI_SUCCESS) {
    DT_THROW(CommError) << record_failure(context, failure_message(context, rc));
  }
  flight_recorder().record_started(context.flight_id);
  return std::make_shared<MpiWork>(std::move(context), std::move(requests), std::move(on_complete),
                                   options_.timeout, std::move(keepalive));
}

WorkPtr MpiProcessGroup::issue_all_reduce(const CollectiveDesc& desc, void* buf) {
  size_t count = desc.count;
  DType dtype = desc.dtype;
  ReduceOp op = desc.reduce_op;
  int n = mpi_count(count, "all_reduce");
  MPI_Op mpi_op = mpi_reduce_op(dtype, op, "all_reduce");
  WorkContext context = begin(desc, true);
  if (all_reduce_on_arena(desc.bytes())) {
    flight_recorder().record_started(context.flight_id);
    auto work = std::make_shared<MpiWork>(context, std::vector<MPI_Request>{}, nullptr, options_.timeout);
    try {
      all_reduce_shared(*arena_, desc.algo, buf, count, dtype, op, options_.timeout);
    } catch (const ArenaTimeout& e) {
      std::string message = timeout_message(context, options_.timeout);
      work->set_failed(record_failure(context, message + fmt::format(" (in the shared-memory all_reduce at {})", e.what())));
    } catch (const CommError& e) {
      work->set_failed(record_failure(context, e.what()));
    }
    return work;
  }
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    rc = MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_datatype(dtype), mpi_op, comm_, &requests[0]);
  }
  std::function<void()> on_complete;
  if (op == ReduceOp::avg) on_complete = [=, group_size = size()] { divide_in_place(buf, count, dtype, group_size); };
  return finish(std::move(context), rc, std::move(requests), std::move(on_complete));
}

WorkPtr MpiProcessGroup::issue_all_gather(const CollectiveDesc& desc, const void* in, void* out) {
  size_t count = desc.count;
  DType dtype = desc.dtype;
  int n = mpi_count(count, "all_gather");
  const int rows = mpi_count(desc.rows, "all_gather rows"), inner = mpi_count(count / desc.rows, "all_gather row");
  const int stride = mpi_count(count / desc.rows * size_t(size()), "all_gather row stride");
  WorkContext context = begin(desc, true);
  // MPI forbids aliased send/receive buffers unless the input is given as MPI_IN_PLACE.
  // (rows > 1: my block starts one row piece into `out`, its rows strided as the receive type's.)
  const char* my_block = static_cast<const char*>(out) + size_t(rank_) * count / desc.rows * itemsize(dtype);
  const void* send = (in == my_block && count > 0) ? MPI_IN_PLACE : in;
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    MPI_Datatype t = mpi_datatype(dtype);
    if (desc.rows == 1) {
      rc = MPI_Iallgather(send, n, t, out, n, t, comm_, &requests[0]);
    } else {
      // Row-interleaved blocks (CollectiveDesc::rows): each rank's block is received as `rows`
      // rows of `inner` elements, size() * inner apart, and the next rank's block starts one row
      // piece later (the type's extent). MPI keeps a freed type alive for the pending call.
      MPI_Datatype rows_type, block_type;
      MPI_Type_vector(rows, inner, stride, t, &rows_type);
      MPI_Type_create_resized(rows_type, 0, MPI_Aint(count / desc.rows * itemsize(dtype)), &block_type);
      MPI_Type_commit(&block_type);
      rc = MPI_Iallgather(send, n, t, out, 1, block_type, comm_, &requests[0]);
      MPI_Type_free(&block_type);
      MPI_Type_free(&rows_type);
    }
  }
  return finish(std::move(context), rc, std::move(requests));
}

// reduce_scatter as MPI_Ialltoall of the blocks followed by a local reduction: Open MPI's
// MPI_Ireduce_scatter_block (libnbc) reduces the whole buffer onto rank 0 and scatters from there,
// funnelling every byte through one process. The all-to-all moves the (n-1)/n of the input a ring
// would, and the local reduce_buffers combines the n blocks in group order in f32 for bf16/f16,
// so the result is the same on every run and matches the threads backend.
WorkPtr MpiProcessGroup::issue_reduce_scatter(const CollectiveDesc& desc, const void* in, void* out) {
  size_t count = desc.count;
  DType dtype = desc.dtype;
  ReduceOp op = desc.reduce_op;
  int n = mpi_count(count, "reduce_scatter");
  mpi_count(count * size_t(size()), "reduce_scatter input");
  WorkContext context = begin(desc, true);
  size_t block_bytes = count * itemsize(dtype);
  std::shared_ptr<std::vector<std::byte>> blocks = scratch(block_bytes * size_t(size()));
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    MPI_Datatype t = mpi_datatype(dtype);
    rc = MPI_Ialltoall(in, n, t, blocks->data(), n, t, comm_, &requests[0]);
  }
  auto on_complete = [=, group_size = size()] {
    std::vector<const void*> inputs(static_cast<size_t>(group_size));
    for (int j = 0; j < group_size; ++j) inputs[size_t(j)] = blocks->data() + size_t(j) * block_bytes;
    reduce_buffers(inputs.data(), group_size, out, count, dtype, op);
  };
  return finish(std::move(context), rc, std::move(requests), std::move(on_complete));
}

WorkPtr MpiProcessGroup::issue_all_to_all(const CollectiveDesc& desc, const void* in, void* out) {
  const std::vector<size_t>& send_counts = desc.send_counts;
  const std::vector<size_t>& recv_counts = desc.recv_counts;
  DType dtype = desc.dtype;
  // MPI reads the count and displacement arrays until completion: the Work keeps them alive.
  auto arrays = std::make_shared<std::vector<int>>(4 * size_t(size()));
  int* sc = arrays->data();
  int* sd = sc + size();
  int* rc_counts = sd + size();
  int* rd = rc_counts + size();
  size_t send_offset = 0, recv_offset = 0;
  for (int j = 0; j < size(); ++j) {
    sc[j] = mpi_count(send_counts[j], "all_to_all send");
    sd[j] = mpi_count(send_offset, "all_to_all send offset");
    rc_counts[j] = mpi_count(recv_counts[j], "all_to_all recv");
    rd[j] = mpi_count(recv_offset, "all_to_all recv offset");
    send_offset += send_counts[j];
    recv_offset += recv_counts[j];
  }
  WorkContext context = begin(desc, true);
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    MPI_Datatype t = mpi_datatype(dtype);
    rc = MPI_Ialltoallv(in, sc, sd, t, out, rc_counts, rd, t, comm_, &requests[0]);
  }
  return finish(std::move(context), rc, std::move(requests), nullptr, arrays);
}

WorkPtr MpiProcessGroup::issue_broadcast(const CollectiveDesc& desc, void* buf) {
  int root = desc.root;
  DType dtype = desc.dtype;
  int n = mpi_count(desc.count, "broadcast");
  WorkContext context = begin(desc, true);
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    rc = MPI_Ibcast(buf, n, mpi_datatype(dtype), root, comm_, &requests[0]);
  }
  return finish(std::move(context), rc, std::move(requests));
}

WorkPtr MpiProcessGroup::issue_point_to_point(const CollectiveDesc& desc, const void* in, void* out) {
  bool is_send = desc.op == CollectiveOp::send;
  int n = mpi_count(desc.count, is_send ? "send" : "recv");
  WorkContext context = begin(desc, false);
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    if (is_send)
      rc = MPI_Isend(in, n, mpi_datatype(desc.dtype), desc.root, /*tag=*/0, comm_, &requests[0]);
    else
      rc = MPI_Irecv(out, n, mpi_datatype(desc.dtype), desc.root, /*tag=*/0, comm_, &requests[0]);
  }
  return finish(std::move(context), rc, std::move(requests));
}

WorkPtr MpiProcessGroup::issue_barrier(const CollectiveDesc& desc) {
  WorkContext context = begin(desc, true);
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc;
  {
    MpiCallGuard guard;
    rc = MPI_Ibarrier(comm_, &requests[0]);
  }
  return finish(std::move(context), rc, std::move(requests));
}

WorkPtr MpiProcessGroup::issue(const CollectiveDesc& desc, const void* in, void* out) {
  switch (desc.op) {
    case CollectiveOp::all_reduce: return issue_all_reduce(desc, out);
    case CollectiveOp::all_gather: return issue_all_gather(desc, in, out);
    case CollectiveOp::reduce_scatter: return issue_reduce_scatter(desc, in, out);
    case CollectiveOp::all_to_all: return issue_all_to_all(desc, in, out);
    case CollectiveOp::broadcast: return issue_broadcast(desc, out);
    case CollectiveOp::send:
    case CollectiveOp::recv: return issue_point_to_point(desc, in, out);
    case CollectiveOp::barrier: return issue_barrier(desc);
  }
  DT_CHECK(false) << "unknown collective op " << int(desc.op);
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::new_group(const std::vector<int>& ranks) {
  check_group_ranks(ranks, global_ranks_, global_ranks_[rank_]);
  MPI_Comm comm = MPI_COMM_NULL;
  {
    MpiCallGuard guard;
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    check_mpi(MPI_Group_incl(world_group, int(ranks.size()), ranks.data(), &group), "MPI_Group_incl");
    // Only the members call MPI_Comm_create_group; the tag separates concurrent creations.
    int tag = int(std::hash<std::string>{}(ranks_str(ranks)) % 32000);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    check_mpi(rc, fmt::format("MPI_Comm_create_group for group {}", ranks_str(ranks)));
  }
  return std::make_shared<MpiProcessGroup>(comm, ranks, options_);
}

}  // namespace dt::mpi
