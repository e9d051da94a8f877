#include "progress.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace ddprun::worker {
namespace {

// Calls step() for batches 1..`batches` of epoch 0 of 2: loss 0.1 per batch, 10 samples a
// batch taking 1 s each, 2 ranks, so the rate is always 20 and the ETA `batches - batch`.
void run_epoch(ProgressReporter& progress, std::int64_t batches) {
  for (std::int64_t b = 1; b <= batches; ++b) {
    progress.step(0, 2, b, batches, 0.1 * static_cast<double>(b), 10.0 * static_cast<double>(b),
                  static_cast<double>(b), 2);
  }
  progress.end_epoch();
}

TEST(ProgressTest, PlainLineEveryLogEverySteps) {
  std::ostringstream out;
  ProgressReporter progress(out, true, false, 3);
  run_epoch(progress, 7);
  EXPECT_EQ(out.str(),
            "epoch 1/2  step 3/7  loss 0.3000  samples/s 20  ETA 4 s\n"
            "epoch 1/2  step 6/7  loss 0.6000  samples/s 20  ETA 1 s\n");
}

TEST(ProgressTest, NothingWhenDisabledOrLogEveryIsZero) {
  std::ostringstream quiet_plain, quiet_terminal, never;
  ProgressReporter disabled_plain(quiet_plain, false, false, 1);
  ProgressReporter disabled_terminal(quiet_terminal, false, true, 1);
  ProgressReporter zero(never, true, false, 0);
  run_epoch(disabled_plain, 4);
  run_epoch(disabled_terminal, 4);
  run_epoch(zero, 4);
  EXPECT_EQ(quiet_plain.str(), "");
  EXPECT_EQ(quiet_terminal.str(), "");
  EXPECT_EQ(never.str(), "");
}

// The first draw and an epoch's last step are never held back by the five-a-second limit,
// so this does not depend on timing.
TEST(ProgressTest, TerminalRedrawsInPlaceAndClearsAtTheEnd) {
  std::ostringstream out;
  ProgressReporter progress(out, true, true, 100);
  progress.step(0, 1, 1, 5, 0.25, 8, 2, 1);
  EXPECT_EQ(out.str(), "\repoch 1/1  step 1/5  loss 0.2500  samples/s 4  ETA 8 s\033[K");
  progress.step(0, 1, 5, 5, 0.125, 40, 10, 1);
  EXPECT_EQ(out.str(),
            "\repoch 1/1  step 1/5  loss 0.2500  samples/s 4  ETA 8 s\033[K"
            "\repoch 1/1  step 5/5  loss 0.1250  samples/s 4  ETA 0 s\033[K");
  out.str("");
  progress.end_epoch();
  EXPECT_EQ(out.str(), "\r\033[K");
  out.str("");
  progress.end_epoch();  // nothing drawn since
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressTest, PlainLinesNeedNoClearing) {
  std::ostringstream out;
  ProgressReporter progress(out, true, false, 1);
  progress.step(0, 1, 1, 2, 0.5, 4, 1, 1);
  progress.end_epoch();
  EXPECT_EQ(out.str(), "epoch 1/1  step 1/2  loss 0.5000  samples/s 4  ETA 1 s\n");
}

EpochSummary second_epoch() {
  EpochSummary s;
  s.epoch = 1;
  s.epochs = 3;
  s.step = 40;
  s.loss_sum = 16;
  s.samples = 64;
  s.seconds = 2;
  s.test_accuracy = 0.8125;
  s.test_loss = 0.5;
  s.world_size = 2;
  return s;
}

TEST(ProgressTest, EpochLineFields) {
  EXPECT_EQ(epoch_line(second_epoch()),
            "epoch 2/3  step 40  train_loss 0.2500  test_accuracy 0.8125  samples/s 32");
}

TEST(ProgressTest, EpochLineWithoutSamplesOrTime) {
  auto s = second_epoch();
  s.samples = 0;
  s.seconds = 0;
  EXPECT_EQ(epoch_line(s),
            "epoch 2/3  step 40  train_loss 0.0000  test_accuracy 0.8125  samples/s 0");
}

TEST(ProgressTest, MetricsLineKeysAndValues) {
  const std::string line = metrics_line(second_epoch());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.is_object());
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"epoch", "epoch_seconds", "samples_per_s", "step",
                                      "test_accuracy", "test_loss", "train_loss", "world_size"}));
  EXPECT_EQ(j.at("epoch"), 2);
  EXPECT_EQ(j.at("step"), 40);
  EXPECT_EQ(j.at("train_loss"), 0.25);
  EXPECT_EQ(j.at("test_accuracy"), 0.8125);
  EXPECT_EQ(j.at("test_loss"), 0.5);
  EXPECT_EQ(j.at("samples_per_s"), 32.0);
  EXPECT_EQ(j.at("epoch_seconds"), 2.0);
  EXPECT_EQ(j.at("world_size"), 2);
}

TEST(ProgressTest, StepMetricsLineIsTheWindowsOwnLossAndRate) {
  StepWindow w;
  w.step = 50;
  w.epoch = 1.25;
  w.loss_sum = 32;  // 64 samples at a mean loss of 0.5
  w.samples = 64;
  w.seconds = 0.5;
  w.world_size = 2;
  w.lr = 0.001;
  const auto j = nlohmann::json::parse(step_metrics_line(w));
  EXPECT_EQ(j.at("kind"), "step");
  EXPECT_EQ(j.at("step"), 50);
  EXPECT_EQ(j.at("epoch"), 1.25);
  EXPECT_EQ(j.at("loss"), 0.5);
  EXPECT_EQ(j.at("samples_per_s"), 256.0) << "rank 0's 64 samples x 2 ranks in 0.5 s";
  EXPECT_EQ(j.at("lr"), 0.001);
  EXPECT_FALSE(j.contains("test_accuracy")) << "told apart from epoch lines";
  w.seconds = 0;
  w.samples = 0;
  const auto empty = nlohmann::json::parse(step_metrics_line(w));
  EXPECT_EQ(empty.at("samples_per_s"), 0.0);
  EXPECT_EQ(empty.at("loss"), 0.0);
}

class MetricsFileTest : public ::testing::Test {
 protected:
  support::TempDir temp_;
  std::filesystem::path dir_ = temp_.path();
};

TEST_F(MetricsFileTest, AppendsOneLinePerEpoch) {
  const std::string path = dir_ / "metrics.jsonl";
  auto s = second_epoch();
  append_metrics_line(path, s);
  s.epoch = 2;
  s.step = 60;
  append_metrics_line(path, s);
  std::ifstream in(path);
  std::string first, second, rest;
  ASSERT_TRUE(std::getline(in, first));
  ASSERT_TRUE(std::getline(in, second));
  EXPECT_FALSE(std::getline(in, rest));
  EXPECT_EQ(first, metrics_line(second_epoch()));
  EXPECT_EQ(nlohmann::json::parse(second).at("epoch"), 3);
  EXPECT_EQ(nlohmann::json::parse(second).at("step"), 60);
}

TEST_F(MetricsFileTest, ErrorNamesTheFile) {
  const std::string path = dir_ / "missing" / "metrics.jsonl";
  try {
    append_metrics_line(path, second_epoch());
    FAIL() << "no error for " << path;
  } catch (const std::system_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("write " + path + ": ", 0), 0u) << e.what();
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "missing"));
}

TEST_F(MetricsFileTest, ProgressFileHoldsTheLatestStepAndFailsQuietlyOnce) {
  std::ostringstream err;
  ProgressFile progress((dir_ / "rank_0.progress").string(), err);
  progress.reached(40);
  progress.reached(80);
  std::ifstream in(dir_ / "rank_0.progress");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "80                  \n");  // fixed width: rewritten in place
  EXPECT_EQ(err.str(), "");
  ProgressFile nowhere((dir_ / "missing" / "p").string(), err);
  nowhere.reached(1);
  nowhere.reached(2);
  EXPECT_EQ(err.str().rfind("ddp-train: warning: cannot write the progress file ", 0), 0u)
      << err.str();
  EXPECT_EQ(err.str().find('\n'), err.str().size() - 1) << err.str();  // one line, once
  ProgressFile off("", err);
  off.reached(3);  // no file asked for: nothing to do
}

}  // namespace
}  // namespace ddprun::worker
