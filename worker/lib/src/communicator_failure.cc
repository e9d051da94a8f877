// What a failed collective does: the roll call in the store that names the ranks that did
// not respond, then the CollectiveError (CommunicatorImpl::fail).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <thread>

#include "communicator_impl.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/stop_signals.h"

namespace ddprun::worker {

namespace {

constexpr const char* kResponsiveKey = "responsive/";

// Marks `rank` in the store and returns the ranks whose marks are missing after `wait`.
// Blocks for as long as the store does not answer: run it where it can be abandoned.
std::vector<int> find_unresponsive(c10d::Store& store, int rank, int size,
                                   std::chrono::milliseconds wait) {
  store.set(kResponsiveKey + std::to_string(rank), std::vector<std::uint8_t>{1});
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int r = 0; r < size; ++r) {
      if (r != rank && !store.check({kResponsiveKey + std::to_string(r)})) missing.push_back(r);
    }
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string list_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (const int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

bool told_to_stop_now() {
  const int sig = StopSignals::received();
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

}  // namespace

void CommunicatorImpl::fail(const std::string& op, const std::exception& error) {
  std::string what = error.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    what = c10_error->what_without_backtrace();
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const std::string head = op + " failed on rank " + std::to_string(rank) + ": ";
  const bool first = !failed;
  failed = true;
  // This node's other ranks may be waiting for this one in a segment: let them fail now.
  for (auto* segment : segments) segment->abort();
  if (!first || size == 1 || unresponsive_wait.count() == 0) {
    throw CollectiveError(head + what);
  }
  // Told to stop now (ddprun tearing the job down after another rank failed): a peer gone
  // is expected, and waiting to name it would only delay the teardown. SIGUSR1/SIGUSR2
  // notices leave time, so the names are still worth having then.
  if (told_to_stop_now()) throw CollectiveError(head + what + " (while stopping)");
  // The store may be hosted by a stopped rank 0, and a TCPStore client then blocks in recv
  // for as long as it likes: ask from a thread that can be abandoned.
  auto result = std::make_shared<std::promise<std::vector<int>>>();
  auto future = result->get_future();
  std::thread([result, store = store, r = rank, n = size, wait = unresponsive_wait] {
    try {
      result->set_value(find_unresponsive(*store, r, n, wait));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  char wait_text[32];
  std::snprintf(wait_text, sizeof wait_text, "%.1f s",
                std::chrono::duration<double>(unresponsive_wait).count());
  std::string who;
  // A stop signal (ddprun tearing the job down) ends the wait: nobody needs the names then.
  const auto deadline =
      std::chrono::steady_clock::now() + unresponsive_wait + std::chrono::seconds(2);
  while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready &&
         std::chrono::steady_clock::now() < deadline) {
    if (told_to_stop_now()) throw CollectiveError(head + what + " (while stopping)");
  }
  if (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    who = "rank 0 did not respond (its store did not answer within " + std::string(wait_text) + ")";
  } else {
    try {
      const auto missing = future.get();
      who = missing.empty()
                ? "every rank responded afterwards"
                : std::string(missing.size() == 1 ? "rank " : "ranks ") + list_ranks(missing) +
                      " did not respond within " + std::string(wait_text);
    } catch (const std::exception& e) {
      who = "rank 0 did not respond (its store: " + std::string(e.what()) + ")";
    }
  }
  throw CollectiveError(head + who + " (stopped, hung or dead?); " + what,
                        "look at the ranks named: their logs, whether they still run");
}

}  // namespace ddprun::worker
