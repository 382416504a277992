#include "dtensor/comm/mpi/collective_check.h"

#include <fmt/format.h>

#include "dtensor/comm/mpi/mpi_runtime.h"

namespace dt::mpi {
namespace {

// Fixed words: op, dtype, count, reduce_op | algo << 8, root, seq, group_id; then n send and n recv
// counts.
constexpr int kFixedWords = 7;

std::vector<int64_t> pack(const WorkContext& c, int n) {
  std::vector<int64_t> w(kFixedWords + 2 * size_t(n), 0);
  const CollectiveDesc& d = c.desc;
  w[0] = int64_t(d.op);
  w[1] = int64_t(d.dtype);
  w[2] = int64_t(d.count);
  w[3] = int64_t(d.reduce_op) | int64_t(d.algo) << 8;
  w[4] = d.root;
  w[5] = c.seq;
  w[6] = c.group->id;
  for (int j = 0; j < n && j < int(d.send_counts.size()); ++j) w[kFixedWords + j] = int64_t(d.send_counts[j]);
  for (int j = 0; j < n && j < int(d.recv_counts.size()); ++j) w[kFixedWords + n + j] = int64_t(d.recv_counts[j]);
  return w;
}

CollectiveDesc unpack(const int64_t* w, int n, int64_t* seq, int64_t* group_id) {
  CollectiveDesc d;
  d.op = CollectiveOp(w[0]);
  d.dtype = DType(w[1]);
  d.count = size_t(w[2]);
  d.reduce_op = ReduceOp(w[3] & 0xff);
  d.algo = AllReduceAlgo(w[3] >> 8);
  d.root = int(w[4]);
  *seq = w[5];
  *group_id = w[6];
  if (d.op == CollectiveOp::all_to_all) {
    for (int j = 0; j < n; ++j) d.send_counts.push_back(size_t(w[kFixedWords + j]));
    for (int j = 0; j < n; ++j) d.recv_counts.push_back(size_t(w[kFixedWords + n + j]));
  }
  return d;
}

}  // namespace

void check_collective_matches(MPI_Comm check_comm, int n, const WorkContext& context, Duration timeout) {
  std::vector<int64_t> mine = pack(context, n);
  int words = int(mine.size());
  std::vector<int64_t> all(size_t(words) * n);
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  {
    MpiCallGuard guard;
    check_mpi(MPI_Iallgather(mine.data(), words, MPI_INT64_T, all.data(), words, MPI_INT64_T,
                             check_comm, &requests[0]),
              fmt::format("MPI_Iallgather of the --check-collectives descriptors of collective #{}",
                          context.seq));
  }
  wait_requests(context, requests, timeout);

  std::vector<CollectiveDesc> descs(n);
  std::vector<int64_t> seqs(n), ids(n);
  for (int i = 0; i < n; ++i) descs[i] = unpack(&all[size_t(i) * words], n, &seqs[i], &ids[i]);
  const std::vector<int>& ranks = context.group->global_ranks;
  for (int i = 1; i < n; ++i) {
    if (seqs[i] != seqs[0] || ids[i] != ids[0])
      DT_THROW(CommError) << fmt::format(
          "collective #{} on group {} mismatch: rank {} issued {} as collective #{}, rank {} issued "
          "{} as collective #{}",
          context.seq, ranks_str(ranks), ranks[0], descs[0].str(), seqs[0], ranks[i], descs[i].str(),
          seqs[i]);
  }
  std::vector<const CollectiveDesc*> pointers;
  for (const CollectiveDesc& d : descs) pointers.push_back(&d);
  std::string mismatch = find_collective_mismatch(pointers, ranks, context.seq, MatchLevel::full);
  if (!mismatch.empty()) DT_THROW(CommError) << mismatch;
}

}  // namespace dt::mpi
