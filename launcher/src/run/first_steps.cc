#include "run/first_steps.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>

#include "ddprun/common/files.h"
#include "run/restart_policy.h"

namespace ddprun {

FirstSteps::FirstSteps(const std::vector<std::string>& progress_files, Clock::time_point started,
                       Clock::time_point now)
    : files_(progress_files),
      watch_of_(progress_files.size(), -1),
      seconds_(progress_files.size()),
      started_(started) {
  const bool any = std::any_of(files_.begin(), files_.end(),
                               [](const std::string& file) { return !file.empty(); });
  if (!any) return;
  inotify_ = UniqueFd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_.valid()) return;
  std::map<std::string, int> watches;  // one watch per folder
  for (std::size_t child = 0; child < files_.size(); ++child) {
    const auto slash = files_[child].rfind('/');
    if (files_[child].empty() || slash == std::string::npos) continue;
    const std::string folder = files_[child].substr(0, slash);
    auto found = watches.find(folder);
    if (found == watches.end()) {
      // Written in place (ddp-train) or renamed into place.
      const int watch =
          ::inotify_add_watch(inotify_.get(), folder.c_str(), IN_MODIFY | IN_MOVED_TO);
      if (watch < 0) continue;  // no such folder (yet): that child's step goes unseen
      found = watches.emplace(folder, watch).first;
    }
    watch_of_[child] = found->second;
    ++waiting_;
  }
  // What was written before the watch: after it, so that no write falls between the two.
  for (std::size_t child = 0; child < files_.size(); ++child) {
    if (watch_of_[child] >= 0) check(child, now);
  }
  if (waiting_ == 0) inotify_.reset();
}

bool FirstSteps::on_readable(Clock::time_point now) {
  alignas(inotify_event) char buffer[16 * 1024];
  for (;;) {
    const ssize_t got = ::read(inotify_.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EAGAIN: all read
    for (ssize_t at = 0; at < got;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      if (event->len == 0) continue;
      const std::string name(event->name);
      for (std::size_t child = 0; child < files_.size(); ++child) {
        if (watch_of_[child] != event->wd || seconds_[child]) continue;
        const std::string& file = files_[child];
        if (file.size() > name.size() &&
            file.compare(file.size() - name.size(), name.size(), name) == 0 &&
            file[file.size() - name.size() - 1] == '/') {
          check(child, now);
        }
      }
    }
  }
  if (waiting_ == 0) inotify_.reset();
  return waiting_ == 0;
}

void FirstSteps::check(std::size_t child, Clock::time_point now) {
  if (!parse_progress(read_file_head(files_[child], 64))) return;  // not a whole step yet
  seconds_[child] = std::chrono::duration<double>(now - started_).count();
  seen_any_ = true;
  --waiting_;
}

std::string format_first_steps(const std::vector<std::optional<double>>& seconds,
                               const std::vector<int>& ranks,
                               const std::vector<std::string>& hosts) {
  std::optional<std::size_t> first;
  std::optional<std::size_t> last;
  std::size_t count = 0;
  for (std::size_t child = 0; child < seconds.size(); ++child) {
    if (!seconds[child]) continue;
    ++count;
    if (!first || *seconds[child] < *seconds[*first]) first = child;
    if (!last || *seconds[child] > *seconds[*last]) last = child;
  }
  if (count == 0) return {};
  const auto at = [&](std::size_t child) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f s", *seconds[child]);
    return std::string(text);
  };
  const auto who = [&](std::size_t child) {
    return "rank " + std::to_string(ranks.at(child)) + " (" + hosts.at(child) + ")";
  };
  std::string line =
      "ddprun: first step on " +
      (count == 1 ? "rank " + std::to_string(ranks.at(*last)) : std::to_string(count) + " ranks") +
      " within " + at(*last) + " of their start";
  if (count > 1 && *seconds[*last] > *seconds[*first]) {  // ties: seen at the watch's start
    line += " (the last: " + who(*last) + "; the first: " + who(*first) + " at " + at(*first) + ")";
  }
  return line + "\n";
}

}  // namespace ddprun
