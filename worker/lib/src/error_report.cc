#include <chrono>
#include <cstdlib>
#include <exception>
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

namespace {

// Set once, before any thread that could throw starts.
std::string g_program;
std::string g_error_file;

[[noreturn]] void end_as_error() noexcept {
  std::string what;
  try {
    if (const auto uncaught = std::current_exception()) std::rethrow_exception(uncaught);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  if (what.empty()) std::abort();  // no exception: a bug, kept for the core dump
  const std::string first_line = what.substr(0, what.find('\n'));
  std::cerr << g_program << ": error: " << first_line << "\n" << std::flush;
  if (!g_error_file.empty()) write_error_file(g_error_file, {first_line, what});
  std::_Exit(1);
}

}  // namespace

void end_uncaught_exceptions_as_errors(std::string program, std::string error_file) {
  g_program = std::move(program);
  g_error_file = std::move(error_file);
  std::set_terminate(end_as_error);
}

}  // namespace ddprun::worker
