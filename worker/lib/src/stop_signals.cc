#include "ddprun/worker/stop_signals.h"

#include "ddprun/common/signal_name.h"

#include <atomic>
#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace ddprun::worker {
namespace {

// Lock-free, so reading and writing it from a handler is safe.
std::atomic<int> g_received{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free);

constexpr std::pair<const char*, int> kNames[] = {
    {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
};

extern "C" void record_stop_signal(int sig) {
  int expected = 0;
  g_received.compare_exchange_strong(expected, sig);  // keep the first
}

}  // namespace

std::optional<int> stop_signal_number(const std::string& name) {
  for (const auto& [n, sig] : kNames) {
    if (name == n) return sig;
  }
  return std::nullopt;
}

StopSignals::StopSignals(const std::vector<int>& signals) {
  if (g_installed.exchange(true)) throw std::logic_error("StopSignals installed twice");
  g_received = 0;
  try {
    for (const int sig : signals) {
      struct sigaction action {};
      action.sa_handler = record_stop_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      struct sigaction old {};
      if (::sigaction(sig, &action, &old) != 0) {
        throw std::system_error(errno, std::generic_category(), "sigaction " + signal_name(sig));
      }
      previous_.emplace_back(sig, old);
    }
  } catch (...) {
    for (const auto& [sig, old] : previous_) ::sigaction(sig, &old, nullptr);
    g_installed = false;
    throw;
  }
}

StopSignals::~StopSignals() {
  if (keep_) return;  // recorded until exit; a second instance stays refused
  for (const auto& [sig, old] : previous_) ::sigaction(sig, &old, nullptr);
  g_installed = false;
}

int StopSignals::received() noexcept {
  return g_received.load();
}

}  // namespace ddprun::worker
