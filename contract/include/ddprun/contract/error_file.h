#pragma once
// The error file a failing worker leaves at TORCHELASTIC_ERROR_FILE, in torchelastic's
// format so that Python workers' files read the same:
//   {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "N"}}}
// The worker writes it (format_error_file); the launcher reads it for its failure report
// (parse_error_file), which also accepts the short form {"message": "..."}.

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

struct ErrorReport {
  std::string message;    // one line, no backtrace
  std::string callstack;  // free text: a backtrace when there is one, else empty
};

// The file's text for `report` with `unix_seconds` as its timestamp, ending in '\n'.
// Invalid UTF-8 in the report is replaced, so the file is always valid JSON.
std::string format_error_file(const ErrorReport& report, long long unix_seconds);

// The report in `text`, or nullopt when it is not an error file with a non-empty message.
// Never throws.
std::optional<ErrorReport> parse_error_file(std::string_view text);

}  // namespace ddprun
