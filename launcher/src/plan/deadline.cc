#include "plan/deadline.h"

#include <algorithm>
#include <ctime>
#include <vector>

#include "ddprun/common/parse_int.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "plan/torchrun_values.h"

namespace ddprun {
namespace {

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

std::string local_time(std::int64_t unix_seconds, bool with_date) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm parts{};
  ::localtime_r(&t, &parts);
  char text[64];
  if (with_date) {
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  } else {
    std::strftime(text, sizeof text, "%H:%M:%S", &parts);
  }
  return text;
}

}  // namespace

std::int64_t parse_deadline(const std::string& text) {
  if (all_digits(text) && text.size() <= 12) return std::stoll(text);
  std::tm parts{};
  parts.tm_isdst = -1;
  int used = 0;
  char separator = 0;
  const int fields =
      std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d%n", &parts.tm_year, &parts.tm_mon,
                  &parts.tm_mday, &separator, &parts.tm_hour, &parts.tm_min, &used);
  bool valid = fields == 6 && (separator == 'T' || separator == ' ');
  if (valid && static_cast<std::size_t>(used) < text.size()) {
    int more = 0;
    valid = std::sscanf(text.c_str() + used, ":%2d%n", &parts.tm_sec, &more) == 1 &&
            static_cast<std::size_t>(used + more) == text.size();
  }
  if (valid) {
    const int month = parts.tm_mon, day = parts.tm_mday, hour = parts.tm_hour;
    parts.tm_year -= 1900;
    parts.tm_mon -= 1;
    const std::time_t t = std::mktime(&parts);
    // mktime normalises 2026-02-31 into March: a date it had to move is no date.
    if (t != static_cast<std::time_t>(-1) && parts.tm_mon == month - 1 && parts.tm_mday == day &&
        parts.tm_hour == hour) {
      return static_cast<std::int64_t>(t);
    }
  }
  throw UsageError("--deadline " + text + ": expected unix seconds or local time " +
                   "YYYY-MM-DDTHH:MM[:SS]");
}

std::int64_t parse_duration(const std::string& option, const std::string& text) {
  if (const auto seconds = parse_seconds(text); seconds && *seconds >= 0 && *seconds < 1e10) {
    return static_cast<std::int64_t>(*seconds);
  }
  // [[D-]HH:]MM:SS: every field a small number, minutes and seconds below 60.
  std::string clock = text;
  std::int64_t days = 0;
  if (const auto dash = text.find('-'); dash != std::string::npos) {
    const auto value = parse_int(text.substr(0, dash));
    days = value && *value >= 0 ? *value : -1;
    clock = text.substr(dash + 1);
  }
  std::vector<std::int64_t> fields;
  bool valid = days >= 0 && !clock.empty();
  for (std::size_t start = 0; valid;) {
    const auto colon = clock.find(':', start);
    const std::string part =
        clock.substr(start, colon == std::string::npos ? colon : colon - start);
    const auto value = parse_int(part);
    valid = value && *value >= 0 && part.size() <= 6;
    fields.push_back(value.value_or(0));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  valid = valid && fields.size() >= 2 && fields.size() <= 3 && (days == 0 || fields.size() == 3) &&
          fields.back() < 60 && fields[fields.size() - 2] < 60;
  if (!valid) {
    throw UsageError(option + " " + text +
                     ": expected seconds, or [[D-]HH:]MM:SS (e.g. 600, 1:30:00, 2-00:00:00)");
  }
  std::int64_t total = 0;
  for (const std::int64_t field : fields) total = total * 60 + field;
  return days * 86400 + total;
}

std::optional<JobEndTime> resolve_job_end(std::optional<std::int64_t> deadline_unix,
                                          std::optional<std::int64_t> time_limit_s,
                                          const std::string& scheduler, const std::string& job_id,
                                          const Environment& env, const RunCommand& run,
                                          std::int64_t now_unix) {
  if (deadline_unix) return JobEndTime{*deadline_unix, "--deadline"};
  if (time_limit_s) return JobEndTime{now_unix + *time_limit_s, "--time-limit"};
  if (job_id.empty()) return std::nullopt;
  return job_end_time(scheduler, job_id, env, run, now_unix);
}

std::int64_t drain_time(std::int64_t end_unix, std::int64_t drain_before_s, std::int64_t now_unix) {
  return std::max(end_unix - drain_before_s, now_unix + (end_unix - now_unix) / 2);
}

std::string format_drain_line(const JobEndTime& end, std::int64_t drain_before_s, int drain_signal,
                              std::int64_t now_unix) {
  const std::int64_t drain_at = drain_time(end.unix_seconds, drain_before_s, now_unix);
  std::string line = "ddprun: the job ends at " + local_time(end.unix_seconds, true) + " (" +
                     end.source + "); workers get " + signal_name(drain_signal) + " at " +
                     local_time(drain_at, false) + ", " +
                     std::to_string(end.unix_seconds - drain_at) + " s before\n";
  if (drain_at != end.unix_seconds - drain_before_s) {
    line += "ddprun: warning: only " + std::to_string(end.unix_seconds - now_unix) +
            " s are left, less than twice --drain-before " + std::to_string(drain_before_s) +
            ": the notice comes when half of that has passed\n";
  }
  return line;
}

}  // namespace ddprun
