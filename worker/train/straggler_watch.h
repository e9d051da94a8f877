#pragma once
// The straggler watch of ddp-train: every rank's compute and wait times gathered over
// windows of steps (straggler.h holds the pure arithmetic).

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "straggler.h"

namespace ddprun::worker {

// Every rank's compute and wait time per step, gathered over windows of steps (one small
// all-reduce each, at the same steps on every rank: the window's length comes from the
// gathered times), to name the rank that holds the others back (straggler.h).
class StragglerWatch {
 public:
  // Off (`enabled` false): gathers nothing, as on one rank.
  StragglerWatch(Plane& control, int rank, int world, const std::string& host, std::ostream& out,
                 bool enabled)
      : control_(control), rank_(enabled ? rank : 0), world_(enabled ? world : 1), out_(out) {
    epoch_.resize(static_cast<std::size_t>(world));
    run_.resize(static_cast<std::size_t>(world));
    hosts_ = gather_hosts(host);
  }

  // After every step, on every rank.
  void stepped(double step_seconds, double wait_seconds, std::int64_t step) {
    window_.compute_s += std::max(0.0, step_seconds - wait_seconds);
    window_.wait_s += wait_seconds;
    ++window_.steps;
    if (window_.steps >= window_length_) flush(step);
  }

  // At the same step on every rank (an epoch's end): gathers what the window holds.
  void flush(std::int64_t step) {
    if (window_.steps == 0 || world_ < 2) return;
    const std::vector<RankTimes> gathered = gather(window_);
    window_ = {};
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      for (auto* total : {&epoch_[r], &run_[r]}) {
        total->compute_s += gathered[r].compute_s;
        total->wait_s += gathered[r].wait_s;
        total->steps += gathered[r].steps;
      }
    }
    window_length_ = next_window(gathered);
    std::vector<int> now;
    for (const Straggler& s : find_stragglers(gathered)) {
      now.push_back(s.rank);
      const bool known = std::find(named_.begin(), named_.end(), s.rank) != named_.end();
      if (rank_ == 0 && !known) {
        out_ << straggler_line(s, hosts_.at(static_cast<std::size_t>(s.rank)), step) << std::endl;
      }
    }
    named_ = now;  // named again only after it recovered in between
  }

  // The epoch's times by rank (then starts the next epoch's).
  std::vector<RankTimes> take_epoch() {
    std::vector<RankTimes> out(static_cast<std::size_t>(world_));
    out.swap(epoch_);
    return out;
  }
  std::string table() const { return timing_table(run_, hosts_); }

 private:
  std::vector<RankTimes> gather(const RankTimes& mine) {
    auto t = torch::zeros({world_, 3}, torch::kDouble);
    t[rank_][0] = mine.compute_s;
    t[rank_][1] = mine.wait_s;
    t[rank_][2] = static_cast<double>(mine.steps);
    control_.allreduce(t, ReduceOp::kSum);
    std::vector<RankTimes> out(static_cast<std::size_t>(world_));
    const auto* v = t.data_ptr<double>();
    for (std::size_t r = 0; r < out.size(); ++r) {
      out[r] = {v[3 * r], v[3 * r + 1], static_cast<std::int64_t>(v[3 * r + 2])};
    }
    return out;
  }

  std::vector<std::string> gather_hosts(const std::string& host) {
    constexpr std::int64_t kChars = 64;
    auto t = torch::zeros({world_, kChars}, torch::kInt);
    for (std::size_t i = 0; i < host.size() && i < static_cast<std::size_t>(kChars - 1); ++i) {
      t[rank_][static_cast<std::int64_t>(i)] = static_cast<unsigned char>(host[i]);
    }
    if (world_ > 1) control_.allreduce(t, ReduceOp::kSum);
    std::vector<std::string> hosts;
    const auto* v = t.data_ptr<std::int32_t>();
    for (int r = 0; r < world_; ++r) {
      std::string name;
      for (std::int64_t i = 0; i < kChars && v[r * kChars + i] != 0; ++i) {
        name += static_cast<char>(v[r * kChars + i]);
      }
      hosts.push_back(name.empty() ? "?" : name);
    }
    return hosts;
  }

  Plane& control_;
  int rank_;
  int world_;
  std::ostream& out_;
  std::vector<std::string> hosts_;
  RankTimes window_;
  std::int64_t window_length_ = 10;
  std::vector<RankTimes> epoch_;
  std::vector<RankTimes> run_;
  std::vector<int> named_;  // the stragglers of the last window
};

}  // namespace ddprun::worker
