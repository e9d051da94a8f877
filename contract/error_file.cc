#include "ddprun/contract/error_file.h"

#include <nlohmann/json.hpp>

namespace ddprun {

std::string format_error_file(const ErrorReport& report, long long unix_seconds) {
  nlohmann::json j;
  j["message"]["message"] = report.message;
  j["message"]["extraInfo"]["py_callstack"] = report.callstack;
  j["message"]["extraInfo"]["timestamp"] = std::to_string(unix_seconds);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<ErrorReport> parse_error_file(std::string_view text) {
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("message")) return std::nullopt;
  const auto& outer = doc["message"];
  ErrorReport report;
  if (outer.is_string()) {
    report.message = outer.get<std::string>();
  } else if (outer.is_object() && outer.contains("message") && outer["message"].is_string()) {
    report.message = outer["message"].get<std::string>();
    if (outer.contains("extraInfo") && outer["extraInfo"].is_object()) {
      const auto& extra = outer["extraInfo"];
      if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
        report.callstack = extra["py_callstack"].get<std::string>();
      }
    }
  }
  if (report.message.empty()) return std::nullopt;
  return report;
}

}  // namespace ddprun
