#include "progress.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <system_error>

#include "ddprun/worker/atomic_file.h"

namespace ddprun::worker {
namespace {

double train_loss(const EpochSummary& s) {
  return s.samples > 0 ? s.loss_sum / s.samples : 0;
}
double samples_per_second(const EpochSummary& s) {
  return s.seconds > 0 ? s.samples / s.seconds : 0;
}

}  // namespace

ProgressReporter::ProgressReporter(std::ostream& out, bool enabled, bool terminal,
                                   std::int64_t log_every)
    : out_(out), enabled_(enabled), terminal_(terminal), log_every_(log_every) {}

void ProgressReporter::step(std::int64_t epoch, std::int64_t epochs, std::int64_t batch,
                            std::int64_t batches, double loss, double samples, double seconds,
                            int world) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (terminal_) {
    if (now - last_draw_ < std::chrono::milliseconds(200) && batch != batches) return;
  } else if (log_every_ <= 0 || batch % log_every_ != 0) {
    return;
  }
  last_draw_ = now;
  const double rate = seconds > 0 ? samples * world / seconds : 0;
  const double eta =
      batch > 0 ? seconds / static_cast<double>(batch) * static_cast<double>(batches - batch) : 0;
  std::ostringstream text;
  text << std::fixed << "epoch " << epoch + 1 << "/" << epochs << "  step " << batch << "/"
       << batches << "  loss " << std::setprecision(4) << loss << "  samples/s "
       << std::setprecision(0) << rate << "  ETA " << std::setprecision(0) << eta << " s";
  if (terminal_) {
    out_ << '\r' << text.str() << "\033[K" << std::flush;
    drawn_ = true;
  } else {
    out_ << text.str() << std::endl;
  }
}

void ProgressReporter::end_epoch() {
  if (drawn_) out_ << "\r\033[K" << std::flush;
  drawn_ = false;
}

std::string epoch_line(const EpochSummary& summary) {
  std::ostringstream line;
  line << std::fixed << "epoch " << summary.epoch + 1 << "/" << summary.epochs << "  step "
       << summary.step << "  train_loss " << std::setprecision(4) << train_loss(summary)
       << "  test_accuracy " << std::setprecision(4) << summary.test_accuracy << "  samples/s "
       << std::setprecision(0) << samples_per_second(summary);
  return line.str();
}

std::string metrics_line(const EpochSummary& summary) {
  const nlohmann::json j = {
      {"epoch", summary.epoch + 1},        {"step", summary.step},
      {"train_loss", train_loss(summary)}, {"test_accuracy", summary.test_accuracy},
      {"test_loss", summary.test_loss},    {"samples_per_s", samples_per_second(summary)},
      {"epoch_seconds", summary.seconds},  {"world_size", summary.world_size}};
  nlohmann::json out = j;
  if (!summary.compute_per_step.empty()) {
    out["compute_s_per_step"] = summary.compute_per_step;
    out["wait_s_per_step"] = summary.wait_per_step;
  }
  return out.dump();
}

ProgressFile::~ProgressFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressFile::reached(std::int64_t step) {
  if (path_.empty() || failed_) return;
  if (fd_ < 0) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  // Fixed width, rewritten in place: a reader sees one whole number (with trailing
  // spaces) whatever it catches, and a step costs one pwrite.
  char text[kWidth + 1];
  std::memset(text, ' ', kWidth);
  text[kWidth] = '\n';
  std::to_chars(text, text + kWidth, step);
  if (fd_ >= 0 && ::pwrite(fd_, text, sizeof text, 0) == static_cast<ssize_t>(sizeof text)) return;
  err_ << "ddp-train: warning: cannot write the progress file " << path_ << ": "
       << std::strerror(errno) << "\n";
  failed_ = true;
}

std::string step_metrics_line(const StepWindow& window) {
  const double rate = window.seconds > 0 ? window.samples * window.world_size / window.seconds : 0;
  const nlohmann::json j = {{"kind", "step"},
                            {"step", window.step},
                            {"epoch", window.epoch},
                            {"loss", window.samples > 0 ? window.loss_sum / window.samples : 0.0},
                            {"samples_per_s", rate},
                            {"lr", window.lr}};
  return j.dump();
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream metrics(path, std::ios::app);
  metrics << line << "\n";
  if (!metrics.flush()) throw std::system_error(errno, std::generic_category(), "write " + path);
}

void append_metrics_line(const std::string& path, const EpochSummary& summary) {
  append_line(path, metrics_line(summary));
}

}  // namespace ddprun::worker
