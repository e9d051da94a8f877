#include "ddprun/worker/env.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/env_names.h"

#include "ddprun/contract/errors.h"
#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

const std::string* find(const Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int int_in_range(const std::string& value, const char* name, int min, int max) {
  const std::optional<int> parsed = parse_int(value);
  if (!parsed) {
    throw EnvError(std::string(name) + "='" + value + "' is not an integer",
                   "the launcher (ddprun, torchrun) sets it; unset it to run standalone");
  }
  const int out = *parsed;
  if (out < min || out > max) {
    throw EnvError(std::string(name) + "=" + value + " is out of range " + std::to_string(min) +
                   ".." + std::to_string(max));
  }
  return out;
}

int required_int(const Environment& env, const char* name, int min, int max) {
  const std::string* value = find(env, name);
  if (value == nullptr) {
    throw EnvError(std::string(name) + " is not set but other launcher variables are",
                   "start the worker with ddprun or torchrun, or unset them all to run "
                   "standalone");
  }
  return int_in_range(*value, name, min, max);
}

int optional_int(const Environment& env, const char* name, int fallback, int min, int max) {
  const std::string* value = find(env, name);
  return value == nullptr ? fallback : int_in_range(*value, name, min, max);
}

}  // namespace

WorkerEnv read_worker_env(const Environment& env) {
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  WorkerEnv out;

  if (const auto* v = find(env, ddprun::env::kRunId); v != nullptr && !v->empty()) out.run_id = *v;
  out.restart_count = optional_int(env, ddprun::env::kRestartCount, 0, 0, kMaxInt);
  if (const auto* v = find(env, ddprun::env::kErrorFile)) out.error_file = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunProgressFile)) out.progress_file = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunTraceFile)) out.trace_file = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunMembershipFile)) out.membership_file = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunReplacement)) out.replacement = *v == "1";
  if (const auto* v = find(env, ddprun::env::kOmpNumThreads); v != nullptr && !v->empty()) {
    out.omp_num_threads = int_in_range(*v, ddprun::env::kOmpNumThreads, 1, 4096);
  }
  if (const auto* v = find(env, ddprun::env::kDdprunThreadsPerRank); v != nullptr && !v->empty()) {
    out.threads_per_rank = int_in_range(*v, ddprun::env::kDdprunThreadsPerRank, 1, 4096);
  }
  if (const auto* v = find(env, ddprun::env::kDdprunCpuSharers); v != nullptr && !v->empty()) {
    out.cpu_sharers = int_in_range(*v, ddprun::env::kDdprunCpuSharers, 1, 1 << 20);
  }
  if (const auto* v = find(env, ddprun::env::kGlooSocketIfname)) out.gloo_socket_ifname = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunHost)) out.host = *v;
  if (const auto* v = find(env, ddprun::env::kDdprunDevices); v != nullptr && !v->empty()) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = v->find(',', start);
      const std::string item = v->substr(start, comma == std::string::npos ? comma : comma - start);
      out.devices.push_back(int_in_range(item, ddprun::env::kDdprunDevices, 0, 1023));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (const auto* v = find(env, ddprun::env::kDdprunStdoutTty)) out.stdout_is_terminal = *v == "1";

  const std::array placement = {ddprun::env::kRank,      ddprun::env::kLocalRank,
                                ddprun::env::kWorldSize, ddprun::env::kLocalWorldSize,
                                ddprun::env::kGroupRank, ddprun::env::kMasterAddr,
                                ddprun::env::kMasterPort};
  bool any = false;
  for (const char* name : placement) any = any || find(env, name) != nullptr;
  if (!any) {
    out.standalone = true;
    return out;
  }

  out.world_size = required_int(env, ddprun::env::kWorldSize, 1, kMaxInt);
  out.rank = required_int(env, ddprun::env::kRank, 0, out.world_size - 1);
  out.local_world_size =
      optional_int(env, ddprun::env::kLocalWorldSize, out.world_size, 1, out.world_size);
  out.local_rank = optional_int(env, ddprun::env::kLocalRank, out.rank % out.local_world_size, 0,
                                out.local_world_size - 1);
  out.group_rank = optional_int(env, ddprun::env::kGroupRank, 0, 0, kMaxInt);
  const std::string* addr = find(env, ddprun::env::kMasterAddr);
  if (addr == nullptr || addr->empty()) {
    throw EnvError(
        std::string(ddprun::env::kMasterAddr) + " is not set but " + ddprun::env::kRank + " is",
        "start the worker with ddprun or torchrun");
  }
  out.master_addr = *addr;
  out.master_port = required_int(env, ddprun::env::kMasterPort, 1, 65535);
  return out;
}

bool is_spare(const Environment& env) {
  const std::string* spare = find(env, env::kDdprunSpare);
  return spare != nullptr && *spare == "1";
}

std::optional<Environment> become_rank(int fd) {
  std::string input;
  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw EnvError(std::string("a warm spare could not read its rank: ") + std::strerror(errno));
    if (got == 0) break;
    input.append(chunk, static_cast<std::size_t>(got));
  }
  if (input.empty()) return std::nullopt;
  if (input.back() != '\0')
    throw EnvError("a warm spare's rank environment does not end with a NUL byte");
  Environment env;
  for (std::size_t start = 0; start < input.size();) {
    const std::size_t end = input.find('\0', start);
    const std::string entry = input.substr(start, end - start);
    const std::size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw EnvError("a warm spare's rank environment has an entry without a name: '" +
                     entry.substr(0, 64) + "'");
    }
    env[entry.substr(0, equals)] = entry.substr(equals + 1);
    start = end + 1;
  }
  ::clearenv();
  for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
  return env;
}

std::vector<int> rank_devices(const WorkerEnv& env, int count) {
  std::vector<int> devices;
  if (env.devices.empty()) {
    for (int i = 0; i < count; ++i) devices.push_back(env.local_rank * count + i);
    return devices;
  }
  if (static_cast<int>(env.devices.size()) < count) {
    throw ddprun::UsageError("this worker needs " + std::to_string(count) + " devices, and " +
                                 std::string(ddprun::env::kDdprunDevices) + " gives it " +
                                 std::to_string(env.devices.size()),
                             "start it with ddprun --gpus-per-proc " + std::to_string(count));
  }
  devices.assign(env.devices.begin(), env.devices.begin() + count);
  return devices;
}

}  // namespace ddprun::worker
