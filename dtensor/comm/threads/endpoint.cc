#include "dtensor/comm/threads/endpoint.h"

#include <exception>
#include <fmt/format.h>

#include "dtensor/comm/threads/algorithms.h"
#include "dtensor/comm/timeout.h"

namespace dt::threads {

void WorkState::finish(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool WorkState::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool WorkState::wait_until(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return done_; });
}

void WorkState::wait_forever() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

std::string WorkState::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

ThreadsWork::~ThreadsWork() {
  if (state_->done()) return;
  if (std::uncaught_exceptions() > 0) {
    // The issuing thread is unwinding and the buffers are about to be freed: withdraw the
    // collective if no peer can be reading them yet, else let it finish (it runs to completion).
    std::string reason = fmt::format("rank {} abandoned {} while unwinding an exception", state_->rank, state_->label);
    if (world_.abandon(state_->key, state_->members, reason)) return;
  }
  // Dropping a Work does not cancel it: keep the caller's buffers alive until it is done.
  state_->wait_forever();
}

void ThreadsWork::throw_if_failed() {
  std::string error = state_->error();
  if (!error.empty()) throw CommError(error, state_->key.seq, state_->members);
}

void ThreadsWork::wait() {
  // The progress thread bounds every collective by the group's timeout, so this terminates.
  state_->wait_forever();
  throw_if_failed();
}

void ThreadsWork::wait(Duration timeout) {
  if (!state_->wait_until(deadline_after(timeout)))
    throw CommError(fmt::format("{}: wait on rank {} timed out after {} ms (the collective is still in flight)",
                                state_->label, state_->rank, timeout.count()),
                    state_->key.seq, state_->members);
  throw_if_failed();
}

Endpoint::Endpoint(World& world, int group_id, std::vector<int> ranks, int index)
    : world_(world), group_id_(group_id), ranks_(std::move(ranks)), index_(index) {
  thread_ = std::thread([this] { run(); });
}

Endpoint::~Endpoint() { drain(); }

WorkPtr Endpoint::submit(const CollectiveDesc& desc, const void* in, void* out) {
  RendezvousKey key;
  key.group_id = group_id_;
  std::vector<int> members;
  int index = index_;
  std::string label;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_)
      DT_THROW(CommError) << collective_op_name(desc.op) << " on group " << ranks_str(ranks_) << " issued by rank "
                          << global_rank() << " after its rank function returned";
    if (desc.op == CollectiveOp::send || desc.op == CollectiveOp::recv) {
      bool is_send = desc.op == CollectiveOp::send;
      key.kind = RendezvousKey::p2p;
      key.src = is_send ? index_ : desc.root;
      key.dst = is_send ? desc.root : index_;
      key.seq = is_send ? ++next_send_seq_[desc.root] : ++next_recv_seq_[desc.root];
      members = {ranks_[size_t(key.src)], ranks_[size_t(key.dst)]};
      index = is_send ? 0 : 1;
      label = fmt::format("{} #{} from rank {} to rank {} on group {}", collective_op_name(desc.op), key.seq,
                          members[0], members[1], ranks_str(ranks_));
    } else {
      key.seq = next_seq_++;
      members = ranks_;
      label = fmt::format("{} #{} on group {}", collective_op_name(desc.op), key.seq, ranks_str(ranks_));
    }
  }
  Task task;
  task.state = std::make_shared<WorkState>(key, members, global_rank(), label);
  task.me = Participant{desc, in, out};
  task.index = index;
  task.record_id = world_.recorder(global_rank())
                       .record_issued(std::string(collective_op_name(desc.op)), desc.str(), ranks_, key.seq, desc.bytes());
  auto work = std::make_shared<ThreadsWork>(world_, task.state);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return work;
}

void Endpoint::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (drained_) return;
    drained_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Endpoint::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(task);
  }
}

void Endpoint::execute(Task& task) {
  WorkState& st = *task.state;
  FlightRecorder& recorder = world_.recorder(global_rank());
  auto fail = [&](const std::string& message) {
    // Record (and dump) before finishing, so a waiter that sees the failure finds the dump.
    recorder.record_failed(task.record_id, message);
    recorder.dump_to_env_dir();
    st.finish(message);
  };

  std::shared_ptr<Rendezvous> rv;
  try {
    rv = world_.arrive(st.key, st.members, task.index, std::move(task.me),
                       deadline_after(world_.options().timeout));
  } catch (const CommError& e) {
    fail(fmt::format("{} failed on rank {}: {}", st.label, global_rank(), e.what()));
    return;
  }
  recorder.record_started(task.record_id);

  std::string error;
  std::vector<const CollectiveDesc*> descs;
  for (int i = 0; i < rv->size(); ++i) descs.push_back(&rv->participant(i).desc);
  MatchLevel level = world_.options().check_collectives ? MatchLevel::full : MatchLevel::memory_safety;
  // Every participant sees the same descriptors, so all of them take the same branch here.
  error = find_collective_mismatch(descs, rv->members(), st.key.seq, level);
  if (error.empty()) {
    try {
      AlgorithmContext ctx{*rv, task.index, scratch_, world_.options()};
      AllReduceAlgo ran = run_algorithm(ctx);
      if (ran != AllReduceAlgo::automatic) world_.count_all_reduce(ran);
    } catch (const std::exception& e) {
      error = fmt::format("{} failed on rank {}: {}", st.label, global_rank(), e.what());
    }
  }
  world_.leave(st.key, rv);
  if (error.empty()) {
    recorder.record_completed(task.record_id);
    st.finish("");
  } else {
    fail(error);
  }
}

}  // namespace dt::threads
