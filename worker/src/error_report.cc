#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/errors.h"

namespace ddprun::worker {

std::string format_error_file(const ErrorReport& report, long long unix_seconds) {
  nlohmann::json j;
  j["message"]["message"] = report.message;
  j["message"]["extraInfo"]["py_callstack"] = report.callstack;
  j["message"]["extraInfo"]["timestamp"] = std::to_string(unix_seconds);
  // Invalid UTF-8 (e.g. bytes from a path) must not turn the report into another error.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void write_error_file(const std::string& path, const ErrorReport& report) noexcept {
  try {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::filesystem::path p(path);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    write_file_atomically(dir, p.filename().string(), format_error_file(report, now), 0644);
  } catch (const std::exception& e) {
    std::cerr << "ddp-train: error: cannot write error file " << path << ": " << e.what() << "\n";
  }
}

}  // namespace ddprun::worker
