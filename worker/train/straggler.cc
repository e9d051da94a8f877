#include "straggler.h"

#include <algorithm>
#include <cstdio>

namespace ddprun::worker {
namespace {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds * 1000);
  return text;
}

}  // namespace

std::vector<Straggler> find_stragglers(const std::vector<RankTimes>& ranks, double ratio,
                                       double floor_s) {
  std::vector<double> compute;
  for (const RankTimes& r : ranks) {
    if (r.steps > 0) compute.push_back(r.compute_per_step());
  }
  if (compute.size() < 2) return {};
  const double median = median_of(compute);
  std::vector<Straggler> out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const double mine = ranks[i].compute_per_step();
    if (ranks[i].steps == 0 || mine < median * ratio || mine - median < floor_s) continue;
    std::vector<double> others_wait;
    for (std::size_t j = 0; j < ranks.size(); ++j) {
      if (j != i && ranks[j].steps > 0) others_wait.push_back(ranks[j].wait_per_step());
    }
    out.push_back({static_cast<int>(i), mine, median, median_of(others_wait)});
  }
  std::sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) {
    return a.compute_per_step > b.compute_per_step;
  });
  return out;
}

std::string straggler_line(const Straggler& s, const std::string& host, std::int64_t step) {
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", s.median > 0 ? s.compute_per_step / s.median : 0);
  return "ddp-train: straggler: rank " + std::to_string(s.rank) + " on " + host + " computes " +
         ms(s.compute_per_step) + " ms a step, " + ratio + "x the median " + ms(s.median) +
         " ms; the others wait " + ms(s.others_wait) + " ms a step (window ending at step " +
         std::to_string(step) + ")";
}

std::int64_t next_window(const std::vector<RankTimes>& ranks, double target_s) {
  double slowest = 0;
  for (const RankTimes& r : ranks) {
    if (r.steps > 0) {
      slowest = std::max(slowest, (r.compute_s + r.wait_s) / static_cast<double>(r.steps));
    }
  }
  if (slowest <= 0) return 10;
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(target_s / slowest) + 1, 10, 1000);
}

std::string timing_table(const std::vector<RankTimes>& ranks,
                         const std::vector<std::string>& hosts) {
  const auto stragglers = find_stragglers(ranks);
  std::string text =
      "ddp-train: time per step by rank (compute, then waiting for the others' "
      "gradients):\n";
  char line[256];
  std::snprintf(line, sizeof line, "ddp-train: %5s  %-20s %12s %9s\n", "rank", "host", "compute ms",
                "wait ms");
  text += line;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const bool slow = std::any_of(stragglers.begin(), stragglers.end(), [&](const Straggler& s) {
      return s.rank == static_cast<int>(i);
    });
    std::snprintf(line, sizeof line, "ddp-train: %5zu  %-20s %12s %9s%s\n", i,
                  i < hosts.size() ? hosts[i].c_str() : "?",
                  ms(ranks[i].compute_per_step()).c_str(), ms(ranks[i].wait_per_step()).c_str(),
                  slow ? "  <- straggler" : "");
    text += line;
  }
  return text;
}

}  // namespace ddprun::worker
