#include <chrono>
#include <filesystem>
#include <iostream>

#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/errors.h"

namespace ddprun::worker {

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
