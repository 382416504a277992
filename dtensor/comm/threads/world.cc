#include "dtensor/comm/threads/world.h"

#include <algorithm>
#include <fmt/format.h>

#include "dtensor/comm/process_group_base.h"
#include "dtensor/comm/threads/endpoint.h"
#include "dtensor/comm/timeout.h"

namespace dt::threads {

void Rendezvous::barrier(Duration timeout) {
  std::unique_lock<std::mutex> lock(barrier_mu_);
  int64_t generation = barrier_generation_;
  if (++barrier_count_ == size()) {
    barrier_count_ = 0;
    ++barrier_generation_;
    barrier_cv_.notify_all();
    return;
  }
  if (!barrier_cv_.wait_until(lock, deadline_after(timeout), [&] { return barrier_generation_ != generation; }))
    DT_THROW(CommError) << "phase barrier timed out after " << timeout.count()
                        << " ms inside a started collective (a member's progress thread stopped)";
}

World::World(int size, CommOptions options) : size_(size), options_(options), ranks_(size_t(size)) {
  for (int r = 0; r < size; ++r) recorders_.push_back(std::make_unique<FlightRecorder>(r));
}

World::~World() {
  // Endpoints' progress threads reference this World: stop them before members go away.
  std::lock_guard<std::mutex> lock(endpoints_mu_);
  for (auto& [key, ep] : endpoints_) ep->drain();
  endpoints_.clear();
}

Endpoint& World::endpoint(const std::vector<int>& ranks, int global_rank) {
  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[size_t(r)] = r;
  check_group_ranks(ranks, all, global_rank);
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  std::lock_guard<std::mutex> lock(endpoints_mu_);
  auto [gid_it, inserted] = group_ids_.try_emplace(ranks, int(group_ids_.size()));
  int gid = gid_it->second;
  std::unique_ptr<Endpoint>& ep = endpoints_[{gid, global_rank}];
  if (!ep) ep = std::make_unique<Endpoint>(*this, gid, ranks, int(it - ranks.begin()));
  return *ep;
}

std::shared_ptr<Rendezvous>& World::find_or_create(const RendezvousKey& key, const std::vector<int>& members) {
  std::shared_ptr<Rendezvous>& rv = rendezvous_[key];
  if (!rv) rv = std::make_shared<Rendezvous>(members);
  return rv;
}

void World::abort_locked(Rendezvous& rv, std::string reason) {
  if (rv.state_ != Rendezvous::State::gathering) return;
  rv.state_ = Rendezvous::State::aborted;
  rv.abort_reason_ = std::move(reason);
  cv_.notify_all();
}

std::string World::blocked_reason_locked(const Rendezvous& rv, int self_rank) const {
  const RankState& self = ranks_[size_t(self_rank)];
  if (self.status == RankStatus::failed) return fmt::format("rank {} failed: {}", self_rank, self.error);
  std::vector<std::string> reasons;
  for (int i = 0; i < rv.size(); ++i) {
    if (rv.arrived_[size_t(i)]) continue;
    int r = rv.members_[size_t(i)];
    const RankState& st = ranks_[size_t(r)];
    if (st.status == RankStatus::failed)
      reasons.push_back(fmt::format("rank {} failed before arriving ({})", r, st.error));
    else if (st.status == RankStatus::exited)
      reasons.push_back(fmt::format("rank {} exited without issuing it", r));
  }
  if (reasons.empty()) return "";
  return fmt::format("{}", fmt::join(reasons, "; "));
}

std::shared_ptr<Rendezvous> World::arrive(const RendezvousKey& key, const std::vector<int>& members,
                                          int index, Participant me, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  std::shared_ptr<Rendezvous> rv = find_or_create(key, members);
  int self_rank = members[size_t(index)];
  if (rv->state_ == Rendezvous::State::gathering) {
    const RankState& self = ranks_[size_t(self_rank)];
    if (self.status == RankStatus::failed) {
      abort_locked(*rv, fmt::format("rank {} failed: {}", self_rank, self.error));
    } else {
      DT_CHECK(!rv->arrived_[size_t(index)]) << "participant " << index << " arrived twice";
      rv->parts_[size_t(index)] = std::move(me);
      rv->arrived_[size_t(index)] = true;
      if (++rv->num_arrived_ == rv->size()) {
        rv->state_ = Rendezvous::State::started;
        cv_.notify_all();
      }
    }
  }
  while (rv->state_ == Rendezvous::State::gathering) {
    if (std::string why = blocked_reason_locked(*rv, self_rank); !why.empty()) {
      abort_locked(*rv, why);
      break;
    }
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int i = 0; i < rv->size(); ++i)
        if (!rv->arrived_[size_t(i)]) missing.push_back(rv->members_[size_t(i)]);
      abort_locked(*rv, fmt::format("ranks {} did not arrive within {} ms", ranks_str(missing),
                                    options_.timeout.count()));
      break;
    }
    cv_.wait_until(lock, deadline);
  }
  if (rv->state_ == Rendezvous::State::aborted) {
    std::string reason = rv->abort_reason_;
    lock.unlock();
    leave(key, rv);
    throw CommError(reason);
  }
  return rv;
}

void World::leave(const RendezvousKey& key, const std::shared_ptr<Rendezvous>& rv) {
  std::lock_guard<std::mutex> lock(mu_);
  if (++rv->num_left_ == rv->size()) {
    auto it = rendezvous_.find(key);
    if (it != rendezvous_.end() && it->second == rv) rendezvous_.erase(it);
  }
}

bool World::abandon(const RendezvousKey& key, const std::vector<int>& members, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Rendezvous>& rv = find_or_create(key, members);
  if (rv->state_ == Rendezvous::State::started) return false;
  abort_locked(*rv, reason);
  return true;
}

void World::mark_failed(int rank, std::exception_ptr error) {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  RankState& st = ranks_[size_t(rank)];
  st.status = RankStatus::failed;
  st.error = what;
  st.exception = error;
  st.failure_order = failures_++;
  cv_.notify_all();
}

void World::drain_rank(int rank) {
  std::vector<Endpoint*> eps;
  {
    std::lock_guard<std::mutex> lock(endpoints_mu_);
    for (auto& [key, ep] : endpoints_)
      if (key.second == rank) eps.push_back(ep.get());
  }
  for (Endpoint* ep : eps) ep->drain();
}

void World::mark_exited(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  RankState& st = ranks_[size_t(rank)];
  if (st.status == RankStatus::running) st.status = RankStatus::exited;
  cv_.notify_all();
}

std::exception_ptr World::root_cause() const {
  std::lock_guard<std::mutex> lock(mu_);
  const RankState* best = nullptr;
  bool best_is_comm = true;
  for (const RankState& st : ranks_) {
    if (st.status != RankStatus::failed) continue;
    bool is_comm = false;
    try {
      std::rethrow_exception(st.exception);
    } catch (const CommError&) {
      is_comm = true;
    } catch (...) {
    }
    bool better = best == nullptr || (best_is_comm && !is_comm) ||
                  (best_is_comm == is_comm && st.failure_order < best->failure_order);
    if (better) {
      best = &st;
      best_is_comm = is_comm;
    }
  }
  return best ? best->exception : nullptr;
}

}  // namespace dt::threads
