#include "recovery.h"

#include <unistd.h>

#include <cstring>

#include <torch/torch.h>

#include "ddprun/common/signal_name.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/stop_signals.h"

namespace ddprun::worker {

GroupPlace starting_group(const WorkerEnv& env, std::chrono::milliseconds timeout) {
  if (env.membership_file.empty()) return {};
  const auto now = read_membership(env.membership_file);
  // ddprun writes the file once every rank has started: until then every rank is a first
  // process. A replacement finds it (on a spare node, told by DDPRUN_REPLACEMENT, it waits
  // for it), and waits for its own pid in it.
  if (!now && !env.replacement) return {};
  const pid_t self = ::getpid();
  const Membership membership = wait_for_membership(
      env.membership_file,
      [&](const Membership& m) { return group_generation(m, env.rank, self).has_value(); },
      timeout);
  GroupPlace place;
  place.group = *group_generation(membership, env.rank, self);
  const Membership::Member& rank0 = membership.ranks.front();
  place.rank0_pid = rank0.state == Membership::State::kReplaced ? rank0.pid : -1;
  return place;
}

NextGroup next_group(const WorkerEnv& env, const GroupPlace& place,
                     std::chrono::milliseconds timeout) {
  if (env.membership_file.empty()) {
    throw CollectiveError(
        "a rank was lost and there is no membership file to learn its "
        "replacement from",
        "runtime.recovery \"peer\" needs ddprun --restart-scope rank");
  }
  const auto stop = [] {
    if (const int sig = StopSignals::received(); sig != 0) {
      throw CollectiveError("stopped (" + signal_name(sig) +
                            ") while waiting for a lost rank's replacement");
    }
  };
  const Membership membership = wait_for_membership(
      env.membership_file,
      [&](const Membership& m) { return replacements_running(m, place.group); }, timeout, stop);
  if (membership.ranks.size() != static_cast<std::size_t>(env.world_size)) {
    throw EnvError(env.membership_file + " names " + std::to_string(membership.ranks.size()) +
                   " rank(s); WORLD_SIZE is " + std::to_string(env.world_size));
  }
  NextGroup next;
  next.place.group = membership.recoveries;
  const Membership::Member& rank0 = membership.ranks.front();
  next.place.rank0_pid = rank0.state == Membership::State::kReplaced ? rank0.pid : -1;
  next.store_host_lost = next.place.rank0_pid != place.rank0_pid && env.rank != 0;
  return next;
}

StateSource find_state_source(Plane& control, std::int64_t steps_done) {
  const int world = control.world_size(), rank = control.rank();
  // Per rank: its steps done, and 1 for a replacement; summed, every rank sees every row.
  auto table = torch::zeros({world, 2}, torch::kLong);
  table[rank][0] = steps_done;
  table[rank][1] = steps_done < 0 ? 1 : 0;
  control.allreduce(table, ReduceOp::kSum);
  StateSource source;
  const auto* rows = table.data_ptr<std::int64_t>();
  for (int r = 0; r < world; ++r) {
    if (rows[2 * r + 1] != 0) source.replacements.push_back(r);
    if (rows[2 * r] > source.steps) {
      source.steps = rows[2 * r];
      source.rank = r;
    }
  }
  for (int r = 0; r < world; ++r) {
    if (rows[2 * r + 1] == 0 && rows[2 * r] != source.steps) source.holders_agree = false;
  }
  if (source.steps < 0) source.rank = -1;
  return source;
}

void broadcast_bytes(Plane& control, int source, std::string& bytes) {
  auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  std::vector<at::Tensor> sizes{size};
  control.broadcast(sizes, source);
  const auto count = size.item<std::int64_t>();
  auto buffer = torch::empty({count}, torch::kByte);
  if (control.rank() == source) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  std::vector<at::Tensor> payload{buffer};
  control.broadcast(payload, source);
  if (control.rank() != source) {
    bytes.assign(static_cast<const char*>(buffer.data_ptr()), static_cast<std::size_t>(count));
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (const int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace ddprun::worker
