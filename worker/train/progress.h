#pragma once
// What rank 0 tells the user while training: progress within an epoch, one line per
// finished epoch, and the metrics file. No LibTorch: it takes plain numbers, so the trainer
// does the collectives and this stays cheap to compile and to test.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::worker {

// Rank 0's view of an epoch in progress. On a terminal: one line redrawn in place ("\r",
// the text, "\033[K"), at most five times a second and always at an epoch's last step;
// otherwise a plain line every `log_every` steps, no control characters. Not thread-safe.
class ProgressReporter {
 public:
  // `enabled` false (other ranks, progress.quiet): writes nothing. `log_every` <= 0: no
  // plain lines. Keeps a reference to `out`.
  ProgressReporter(std::ostream& out, bool enabled, bool terminal, std::int64_t log_every);

  // After step `batch` (1-based) of `batches` in `epoch` (0-based) of `epochs`: `loss` is
  // the epoch's mean loss so far and `samples` the samples done, both this rank's own (no
  // collective per step); `seconds` since the epoch began; `world` ranks scale the rate.
  void step(std::int64_t epoch, std::int64_t epochs, std::int64_t batch, std::int64_t batches,
            double loss, double samples, double seconds, int world);

  // Clears a redrawn line ("\r\033[K") so the epoch line takes its place.
  void end_epoch();

 private:
  using Clock = std::chrono::steady_clock;

  std::ostream& out_;
  bool enabled_;
  bool terminal_;
  std::int64_t log_every_;
  bool drawn_ = false;
  Clock::time_point last_draw_{};
};

// A finished epoch, summed over every rank.
struct EpochSummary {
  std::int64_t epoch = 0;   // 0-based; reported 1-based
  std::int64_t epochs = 0;  // in the whole run
  std::int64_t step = 0;    // optimizer steps done in total
  double loss_sum = 0;      // training loss times samples
  double samples = 0;       // training samples
  double seconds = 0;       // the epoch's wall time (rank 0's)
  double test_accuracy = 0;
  double test_loss = 0;
  int world_size = 0;
  // Each rank's compute and wait seconds per step in the epoch (straggler.h); empty on one
  // rank.
  std::vector<double> compute_per_step;
  std::vector<double> wait_per_step;
};

// "epoch E/N  step S  train_loss L  test_accuracy A  samples/s R": loss and accuracy with 4
// decimals, the rate (samples over seconds, 0 when either is 0) with none. No newline.
std::string epoch_line(const EpochSummary& summary);

// One JSON object (no newline) with epoch (1-based), step, train_loss, test_accuracy,
// test_loss, samples_per_s, epoch_seconds and world_size.
std::string metrics_line(const EpochSummary& summary);

// Tells the launcher how far training got (DDPRUN_PROGRESS_FILE; empty `path`: nothing to
// do): the step, as a fixed-width number rewritten in place (one pwrite, cheap enough for
// every step; ddprun's --stall-timeout and restart decisions read it). A failure to write
// is reported once on `err` and then nothing more is tried: it costs a restart decision or
// stall detection, not the training.
class ProgressFile {
 public:
  ProgressFile(std::string path, std::ostream& err) : path_(std::move(path)), err_(err) {}
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;
  void reached(std::int64_t step);

 private:
  static constexpr std::size_t kWidth = 20;  // any int64
  std::string path_;
  std::ostream& err_;
  int fd_ = -1;
  bool failed_ = false;
};

// Rank 0's training over the last metrics.every_steps steps (its own: no collective).
struct StepWindow {
  std::int64_t step = 0;  // optimizer steps done in total at the window's end
  double epoch = 0;       // where that is, in epochs (1.5: half-way through the second)
  double loss_sum = 0;    // rank 0's loss times its samples over the window
  double samples = 0;     // rank 0's samples over the window
  double seconds = 0;     // the window's wall time
  int world_size = 0;     // scales rank 0's rate to the job's
  double lr = 0;          // the learning rate in use
};

// {"kind":"step","step":S,"epoch":E,"loss":L,"samples_per_s":R,"lr":LR} (no newline): a
// line epoch lines can be told from by "kind". The rate is rank 0's samples times the
// world size over the seconds (0 when either is 0).
std::string step_metrics_line(const StepWindow& window);

// Appends metrics_line and a newline to `path` (created if missing). Throws
// std::system_error "write PATH: reason" when it cannot be opened or written.
void append_metrics_line(const std::string& path, const EpochSummary& summary);

// The same for any line.
void append_line(const std::string& path, const std::string& line);

}  // namespace ddprun::worker
