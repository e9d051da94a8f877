#include "report/labels.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "ddprun/common/signal_name.h"

namespace ddprun {
namespace {

constexpr std::size_t kMaxRuns = 8;  // format_number_set: runs shown before the rest is counted

}  // namespace

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return "signal " + signal_name(WTERMSIG(wait_status)) +
           (WCOREDUMP(wait_status) ? " (core dumped)" : "");
  }
  return "unknown status " + std::to_string(wait_status);
}

std::string child_label(const RankResult& child) {
  if (!child.agent) return "rank " + std::to_string(child.rank);
  if (child.node_rank < 0) return "the agents' launcher";
  return "node " + std::to_string(child.node_rank);
}

std::string error_label(bool colour) {
  return colour ? "ddprun: \033[1;31merror:\033[0m " : "ddprun: error: ";
}

bool colour_wanted(int fd, const Environment& env) {
  const auto no_colour = lookup(env, "NO_COLOR");
  if (no_colour && !no_colour->empty()) return false;
  if (lookup(env, "TERM").value_or("") == "dumb") return false;
  return ::isatty(fd) == 1;
}

std::string format_number_set(std::string_view noun, std::vector<int> numbers) {
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::string text(noun);
  if (numbers.size() != 1) text += 's';
  text += ' ';
  std::size_t runs = 0;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t last = i;
    while (last + 1 < numbers.size() && numbers[last + 1] == numbers[last] + 1) ++last;
    if (runs == kMaxRuns) {
      text += " and " + std::to_string(numbers.size() - i) + " more";
      break;
    }
    if (runs > 0) text += ", ";
    text += std::to_string(numbers[i]);
    if (last > i) text += "-" + std::to_string(numbers[last]);
    ++runs;
    i = last + 1;
  }
  return text;
}

}  // namespace ddprun
