// docs/schedulers.md ("Walltime") lists the commands and the outputs each parser accepts;
// the outputs were recorded from Slurm 22.05 and Grid Engine 8.1.9 on Debian 12, PBS and LSF
// from their documentation (tests/schedulers/walltime_test.cc).

#include "walltime.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <sstream>
#include <string_view>

namespace ddprun {
namespace {

// What a scheduler's answer said: a time, "no limit", or nothing usable.
struct Answer {
  enum Kind { kTime, kUnlimited, kUnreadable } kind = kUnreadable;
  std::int64_t value = 0;
};
constexpr Answer kUnlimited{Answer::kUnlimited, 0};
constexpr Answer kUnreadable{Answer::kUnreadable, 0};
Answer at(std::int64_t value) {
  return {Answer::kTime, value};
}

std::string_view trim(std::string_view text) {
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::vector<std::string> words(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// Digits only, no sign, no overflow.
std::optional<std::int64_t> parse_count(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// "[[H:]M:]S" (Grid Engine's and PBS's durations; the first field may exceed 59).
std::optional<std::int64_t> parse_duration(std::string_view text) {
  const auto fields = split(text, ':');
  if (fields.size() > 3) return std::nullopt;
  std::int64_t seconds = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto field = parse_count(fields[i]);
    if (!field || (i > 0 && *field > 59)) return std::nullopt;
    seconds = seconds * 60 + *field;
  }
  return seconds;
}

// Local wall-clock time to unix seconds with mktime, so in this process's TZ: the tools
// print in their TZ, which they inherit from ddprun. tm_isdst = -1 lets mktime decide
// summer time; in the repeated hour of autumn it may pick either, an hour apart. A date
// that mktime had to normalise (31 June, 25:00) is rejected.
std::optional<std::int64_t> from_local(int year, int month, int day, int hour, int minute,
                                       int second) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1) || tm.tm_year != year - 1900 || tm.tm_mon != month - 1 ||
      tm.tm_mday != day || tm.tm_hour != hour || tm.tm_min != minute || tm.tm_sec != second) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(t);
}

// "HH:MM:SS" into three numbers.
bool parse_clock(std::string_view text, std::array<int, 3>& hms) {
  const auto fields = split(text, ':');
  if (fields.size() != 3) return false;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto value = parse_count(fields[i]);
    if (!value || fields[i].size() != 2) return false;
    hms[i] = static_cast<int>(*value);
  }
  return true;
}

// Slurm's "standard" time format, local time: 2026-11-23T18:00:11.
std::optional<std::int64_t> parse_iso_local(std::string_view text) {
  if (text.size() != 19 || text[4] != '-' || text[7] != '-' || text[10] != 'T') {
    return std::nullopt;
  }
  const auto year = parse_count(text.substr(0, 4));
  const auto month = parse_count(text.substr(5, 2));
  const auto day = parse_count(text.substr(8, 2));
  std::array<int, 3> hms{};
  if (!year || !month || !day || !parse_clock(text.substr(11), hms)) return std::nullopt;
  return from_local(static_cast<int>(*year), static_cast<int>(*month), static_cast<int>(*day),
                    hms[0], hms[1], hms[2]);
}

// ctime's layout, local time, as PBS's qstat -f prints times: "Mon Nov 23 17:00:00 2026"
// (the day may be padded with a blank: "Mon Nov  2 ...").
std::optional<std::int64_t> parse_ctime_local(std::string_view text) {
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const auto w = words(text);
  if (w.size() != 5) return std::nullopt;
  const auto month = std::find(kMonths.begin(), kMonths.end(), w[1]);
  const auto day = parse_count(w[2]);
  const auto year = parse_count(w[4]);
  std::array<int, 3> hms{};
  if (month == kMonths.end() || !day || !year || !parse_clock(w[3], hms)) return std::nullopt;
  return from_local(static_cast<int>(*year), static_cast<int>(month - kMonths.begin()) + 1,
                    static_cast<int>(*day), hms[0], hms[1], hms[2]);
}

// ---- Slurm ----

// One end time as squeue %e or scontrol's EndTime= print it: unix seconds (we ask for
// SLURM_TIME_FORMAT=%s), else the standard local format; NONE (running, no limit),
// N/A (pending) and scontrol's Unknown (either) mean no end is known.
Answer slurm_time(std::string_view text) {
  text = trim(text);
  if (text == "NONE" || text == "N/A" || text == "Unknown") return kUnlimited;
  if (const auto seconds = parse_count(text); seconds && *seconds > 0) return at(*seconds);
  if (const auto local = parse_iso_local(text)) return at(*local);
  return kUnreadable;
}

// squeue prints one line per job (a heterogeneous job: one per component); the earliest
// end is the one that matters.
Answer parse_squeue_end(const std::string& out) {
  Answer best = kUnreadable;
  for (std::string_view line : split(out, '\n')) {
    if (trim(line).empty()) continue;
    const Answer one = slurm_time(line);
    if (one.kind == Answer::kUnreadable) return kUnreadable;
    if (one.kind == Answer::kTime && (best.kind != Answer::kTime || one.value < best.value)) {
      best = one;
    } else if (best.kind == Answer::kUnreadable) {
      best = one;
    }
  }
  return best;
}

// `scontrol show job ID`: the EndTime=VALUE word.
Answer parse_scontrol_end(const std::string& out) {
  for (const std::string& word : words(out)) {
    if (word.rfind("EndTime=", 0) == 0) return slurm_time(std::string_view(word).substr(8));
  }
  return kUnreadable;
}

// Runs argv and parses its output; a command that failed is unreadable.
Answer ask(const RunCommand& run, const std::vector<std::string>& argv,
           Answer (*parse)(const std::string&)) {
  const auto out = run(argv);
  return out ? parse(*out) : kUnreadable;
}

std::optional<JobEndTime> slurm_end(const std::string& id, const Environment& env,
                                    const RunCommand& run) {
  // Newer Slurm puts the end in the job's environment; 22.05 does not.
  if (const auto value = lookup(env, "SLURM_JOB_END_TIME")) {
    if (const auto seconds = parse_count(trim(*value)); seconds && *seconds > 0) {
      return JobEndTime{*seconds, "SLURM_JOB_END_TIME"};
    }
  }
  // SLURM_TIME_FORMAT=%s makes squeue and scontrol print unix seconds (checked on 22.05):
  // no time zone to agree on, and a user's own SLURM_TIME_FORMAT cannot change the layout.
  Answer answer = ask(run, {"env", "SLURM_TIME_FORMAT=%s", "squeue", "-h", "-j", id, "-o", "%e"},
                      parse_squeue_end);
  if (answer.kind == Answer::kTime) return JobEndTime{answer.value, "squeue"};
  if (answer.kind == Answer::kUnlimited) return std::nullopt;
  answer =
      ask(run, {"env", "SLURM_TIME_FORMAT=%s", "scontrol", "show", "job", id}, parse_scontrol_end);
  if (answer.kind == Answer::kTime) return JobEndTime{answer.value, "scontrol show job"};
  return std::nullopt;
}

// ---- Grid Engine ----

// `qstat -j ID`: the shorter of h_rt and s_rt on the "hard resource_list:" line
// ("h_rt=600,s_rt=540,h_vmem=2G"; 8.1.9 prints seconds, older versions may print H:M:S).
// s_rt counts because Grid Engine sends SIGUSR1 then: the job should be drained by then.
// `name` says which limit it was.
Answer parse_sge_limit(const std::string& out, std::string& name) {
  if (out.find("job_number:") == std::string::npos) return kUnreadable;
  Answer best = kUnlimited;
  for (std::string_view line : split(out, '\n')) {
    constexpr std::string_view kKey = "hard resource_list:";
    if (line.substr(0, kKey.size()) != kKey) continue;
    for (std::string_view item : split(trim(line.substr(kKey.size())), ',')) {
      const std::size_t eq = item.find('=');
      const std::string_view key = item.substr(0, eq);
      if (eq == std::string_view::npos || (key != "h_rt" && key != "s_rt")) continue;
      const std::string_view value = item.substr(eq + 1);
      if (value == "INFINITY") continue;
      const auto seconds = parse_duration(value);
      if (!seconds) return kUnreadable;
      if (best.kind != Answer::kTime || *seconds < best.value) {
        best = at(*seconds);
        name = std::string(key);
      }
    }
  }
  return best;
}

// The text between <tag> and </tag> from `from` on, with where it ended.
std::optional<std::string_view> xml_value(std::string_view xml, std::string_view tag,
                                          std::size_t& from) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const std::size_t start = xml.find(open, from);
  if (start == std::string_view::npos) return std::nullopt;
  const std::size_t end = xml.find(close, start + open.size());
  if (end == std::string_view::npos) return std::nullopt;
  from = end + close.size();
  return xml.substr(start + open.size(), end - start - open.size());
}

// `qstat -xml -j ID`: each started task's <JAT_task_number> and <JAT_start_time> (unix
// seconds). `task` is SGE_TASK_ID when numeric; otherwise (not an array job) the earliest
// start, which can only make the end earlier.
std::optional<std::int64_t> parse_sge_start(const std::string& xml,
                                            std::optional<std::int64_t> task) {
  std::optional<std::int64_t> best;
  std::size_t at_task = 0;
  while (const auto number = xml_value(xml, "JAT_task_number", at_task)) {
    std::size_t at_start = at_task;
    const std::size_t next_task = xml.find("<JAT_task_number>", at_task);
    const auto start = xml_value(xml, "JAT_start_time", at_start);
    if (!start || (next_task != std::string::npos && at_start > next_task)) continue;
    const auto seconds = parse_count(*start);
    if (!seconds || *seconds == 0) continue;  // 0: not started
    if (task && parse_count(*number) != task) continue;
    if (!best || *seconds < *best) best = seconds;
  }
  return best;
}

std::optional<JobEndTime> sge_end(const std::string& id, const Environment& env,
                                  const RunCommand& run) {
  const auto text = run({"qstat", "-j", id});
  if (!text) return std::nullopt;
  std::string limit_name;
  const Answer limit = parse_sge_limit(*text, limit_name);
  if (limit.kind != Answer::kTime) return std::nullopt;
  // The limit counts from the job's start, which was before ddprun's: now + limit would
  // be too late, so without the real start there is no answer. qstat -j's text has no
  // start time in 8.1.9 and the job's environment has none either; its XML has it.
  const auto xml = run({"qstat", "-xml", "-j", id});
  if (!xml) return std::nullopt;
  std::optional<std::int64_t> task;
  if (const auto value = lookup(env, "SGE_TASK_ID")) task = parse_count(*value);
  const auto start = parse_sge_start(*xml, task);
  if (!start) return std::nullopt;
  return JobEndTime{*start + limit.value, "qstat -j " + limit_name + " + JAT_start_time"};
}

// ---- PBS Pro / OpenPBS / Torque ----

// `qstat -f ID`: "    name = value" lines. The limit is Resource_List.walltime (or
// Torque's PBS_WALLTIME, seconds); the start is stime (PBS Pro, OpenPBS) or start_time
// (Torque), in ctime's layout and local time.
std::optional<JobEndTime> pbs_end(const std::string& id, const Environment& env,
                                  const RunCommand& run) {
  const auto out = run({"qstat", "-f", id});
  if (!out) return std::nullopt;
  std::optional<std::int64_t> limit, start;
  std::string limit_source = "qstat -f walltime";
  if (const auto value = lookup(env, "PBS_WALLTIME")) {
    limit = parse_count(trim(*value));
    limit_source = "PBS_WALLTIME";
  }
  for (std::string_view line : split(*out, '\n')) {
    const std::size_t eq = line.find(" = ");
    if (eq == std::string_view::npos) continue;
    const std::string_view name = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 3));
    if (name == "Resource_List.walltime" && limit_source != "PBS_WALLTIME") {
      limit = parse_duration(value);
    } else if (name == "stime" || name == "start_time") {
      start = parse_ctime_local(value);
      if (!start) start = parse_count(value);  // some Torque versions: unix seconds
    }
  }
  if (!limit || !start) return std::nullopt;
  return JobEndTime{*start + *limit, limit_source + " + stime"};
}

// ---- LSF ----

// `bjobs -noheader -o time_left ID`: "H:MM L" (documented as bjobs -WL's "hours:minutes
// status"). Only L is a run limit; E and X are about an estimate, which LSF does not
// enforce. Minute resolution.
std::optional<JobEndTime> lsf_end(const std::string& id, const RunCommand& run, std::int64_t now) {
  const auto out = run({"bjobs", "-noheader", "-o", "time_left", id});
  if (!out) return std::nullopt;
  const auto w = words(*out);
  if (w.size() != 2 || w[1] != "L") return std::nullopt;
  const auto fields = split(w[0], ':');
  if (fields.size() != 2 || fields[1].size() != 2) return std::nullopt;
  const auto hours = parse_count(fields[0]);
  const auto minutes = parse_count(fields[1]);
  if (!hours || !minutes || *minutes > 59) return std::nullopt;
  return JobEndTime{now + (*hours * 60 + *minutes) * 60, "bjobs time_left"};
}

}  // namespace

std::optional<JobEndTime> job_end_time(const std::string& scheduler, const std::string& job_id,
                                       const Environment& env, const RunCommand& run,
                                       std::int64_t now_unix) {
  if (job_id.empty()) return std::nullopt;
  if (scheduler == "slurm") return slurm_end(job_id, env, run);
  if (scheduler == "sge") return sge_end(job_id, env, run);
  if (scheduler == "pbs") return pbs_end(job_id, env, run);
  if (scheduler == "lsf") return lsf_end(job_id, run, now_unix);
  return std::nullopt;
}

}  // namespace ddprun
