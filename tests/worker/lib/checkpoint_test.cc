#include "ddprun/worker/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "ddprun/common/files.h"
#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/errors.h"

#include "temp_dir.h"

namespace ddprun::worker {
namespace {

// A model of the library's tests' own: two layers, 10 -> 10 -> 5.
struct SmallNet : torch::nn::Module {
  SmallNet()
      : fc1(register_module("fc1", torch::nn::Linear(10, 10))),
        fc2(register_module("fc2", torch::nn::Linear(10, 5))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = (base_ / "ckpt").string(); }

  static unsigned mode_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }

  // One SGD-with-momentum step so the optimizer has state worth saving.
  static void train_step(SmallNet& model, torch::optim::Optimizer& opt) {
    opt.zero_grad();
    model.forward(torch::ones({4, 10})).sum().backward();
    opt.step();
  }

  ddprun::support::TempDir folder_;
  std::filesystem::path base_ = folder_.path();
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripRestoresModelOptimizerAndPosition) {
  torch::manual_seed(1);
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_step(*model, opt);
  CheckpointMeta meta{{7, 2, 3},
                      0xfedcba9876543210ull,
                      2,
                      8,
                      torch::arange(12, torch::kByte).reshape({2, 6}),
                      {},
                      torch::tensor({1024.0, 17.0}, torch::kDouble)};
  EXPECT_EQ(save_checkpoint(dir_, *model, opt, meta, 2), "ckpt-00000007.pt");
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/ckpt-00000007.pt"), 0600u);
  EXPECT_EQ(mode_of(dir_ + "/latest"), 0600u);

  torch::manual_seed(2);  // different initial weights
  auto restored = std::make_shared<SmallNet>();
  torch::optim::SGD opt2(restored->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto latest = find_latest_checkpoint(dir_);
  ASSERT_TRUE(latest.has_value());
  const CheckpointMeta got = load_checkpoint(*latest, *restored, opt2);
  EXPECT_EQ(got.position.step, 7);
  EXPECT_EQ(got.position.epoch, 2);
  EXPECT_EQ(got.position.batch_in_epoch, 3);
  EXPECT_EQ(got.seed, 0xfedcba9876543210ull);
  EXPECT_EQ(got.world_size, 2);
  EXPECT_EQ(got.batch_size_per_rank, 8);
  ASSERT_TRUE(got.rng_cpu.defined());
  EXPECT_TRUE(torch::equal(got.rng_cpu, meta.rng_cpu));
  EXPECT_FALSE(got.rng_device.defined());
  ASSERT_TRUE(got.loss_scale.defined());
  EXPECT_TRUE(torch::equal(got.loss_scale, meta.loss_scale));
  const auto a = model->parameters(), b = restored->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));

  // Same momentum buffers: one more identical step gives identical weights.
  train_step(*model, opt);
  train_step(*restored, opt2);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
}

TEST_F(CheckpointTest, LatestFollowsNewestAndOldOnesArePruned) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (std::int64_t step : {1, 2, 3})
    save_checkpoint(dir_, *model, opt, {{step, 0, step}, 1, 1, 8, {}, {}, {}}, 2);
  EXPECT_EQ(find_latest_checkpoint(dir_)->path(), dir_ + "/ckpt-00000003.pt");
  EXPECT_EQ(find_latest_checkpoint(dir_)->step, 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt-00000001.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt-00000002.pt"));
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);  // no leftovers
  }
}

TEST_F(CheckpointTest, NoLatestMeansFreshStart) {
  EXPECT_FALSE(find_latest_checkpoint(dir_).has_value());
}

TEST_F(CheckpointTest, BadLatestOrBadFileIsACheckpointError) {
  make_directories(dir_);
  write_file_atomically(dir_, "latest", "../../etc/passwd\n");
  EXPECT_THROW(find_latest_checkpoint(dir_), CheckpointError);
  write_file_atomically(dir_, "latest", "ckpt-00000009.pt\n");
  EXPECT_THROW(find_latest_checkpoint(dir_), CheckpointError);

  write_file_atomically(dir_, "latest", "ckpt-00000009.pt 16 00000000\n");
  EXPECT_THROW(find_latest_checkpoint(dir_), CheckpointError);  // names a missing file

  write_file_atomically(dir_, "ckpt-00000009.pt", "not a checkpoint");
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  const CheckpointRecord wrong_crc{dir_, "ckpt-00000009.pt", 9, 16, 0};
  EXPECT_THROW(load_checkpoint(wrong_crc, *model, opt), CheckpointError);
}

TEST_F(CheckpointTest, TruncatedOrAlteredCheckpointIsNeverLoaded) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *model, opt, {{4, 0, 4}, 1, 1, 8, {}, {}, {}}, 2);
  const auto record = find_latest_checkpoint(dir_);
  ASSERT_TRUE(record.has_value());
  EXPECT_NO_THROW(load_checkpoint(*record, *model, opt));
  auto bytes = read_file(record->path());
  write_file_atomically(dir_, record->name, bytes.substr(0, bytes.size() - 1));
  try {
    load_checkpoint(*record, *model, opt);
    ADD_FAILURE() << "a truncated checkpoint was loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete or damaged"), std::string::npos) << e.what();
  }
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  write_file_atomically(dir_, record->name, bytes);
  EXPECT_THROW(load_checkpoint(*record, *model, opt), CheckpointError);
}

TEST_F(CheckpointTest, CheckpointWithoutItsRecordIsIgnored) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *model, opt, {{4, 0, 4}, 1, 1, 8, {}, {}, {}}, 2);
  std::filesystem::remove(dir_ + "/latest");
  EXPECT_FALSE(find_latest_checkpoint(dir_).has_value());
}

TEST_F(CheckpointTest, SymbolicLinksAreRefused) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *model, opt, {{4, 0, 4}, 1, 1, 8, {}, {}, {}}, 2);
  const std::string link_dir = (base_ / "link").string();
  std::filesystem::create_directory_symlink(dir_, link_dir);
  const auto expect_refused = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << ": followed a symbolic link";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("is a symbolic link, which is never followed"),
                std::string::npos)
          << what << ": " << e.what();
    }
  };
  expect_refused(
      [&] {
        save_checkpoint(link_dir, *model, opt, {{5, 0, 5}, 1, 1, 8, {}, {}, {}}, 2);
      },
      "save into a linked folder");
  expect_refused([&] { find_latest_checkpoint(link_dir); }, "find in a linked folder");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt-00000005.pt"));

  // A linked "latest", and a linked checkpoint file, in a real folder.
  const std::string other = (base_ / "other").string();
  make_directories(other);
  std::filesystem::create_symlink(dir_ + "/latest", other + "/latest");
  expect_refused([&] { find_latest_checkpoint(other); }, "linked latest");
  std::filesystem::remove(other + "/latest");
  const auto record = find_latest_checkpoint(dir_);
  ASSERT_TRUE(record.has_value());
  std::filesystem::create_symlink(record->path(), other + "/" + record->name);
  write_file_atomically(other, "latest", read_file(dir_ + "/latest"));
  expect_refused([&] { load_checkpoint(*find_latest_checkpoint(other), *model, opt); },
                 "linked file");
}

TEST_F(CheckpointTest, FoldersAre0700AndFiles0600WhateverTheUmask) {
  const mode_t old = ::umask(0);
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_ + "/nested", *model, opt, {{1, 0, 1}, 1, 1, 8, {}, {}, {}}, 2);
  ::umask(old);
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/nested"), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/nested/ckpt-00000001.pt"), 0600u);
  EXPECT_EQ(mode_of(dir_ + "/nested/latest"), 0600u);
}

TEST_F(CheckpointTest, LeftoversOfACrashedWriterAreRemovedByTheNextSave) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  std::string held;
  EXPECT_THROW(save_checkpoint(dir_, *model, opt, {{1, 0, 1}, 1, 1, 8, {}, {}, {}}, 2,
                               [&](const std::string& tmp) {
                                 held = tmp;
                                 throw std::runtime_error("crash");
                               }),
               std::runtime_error);
  EXPECT_FALSE(held.empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + held));  // removed on the way out
  EXPECT_FALSE(find_latest_checkpoint(dir_).has_value());
  // A writer killed at that point leaves the file: the next save removes it.
  write_file_atomically(dir_, held, "partial");
  save_checkpoint(dir_, *model, opt, {{2, 0, 2}, 1, 1, 8, {}, {}, {}}, 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + held));
  EXPECT_EQ(find_latest_checkpoint(dir_)->step, 2);
}

TEST_F(CheckpointTest, CheckpointOfAnotherModelIsRefused) {
  auto other = std::make_shared<torch::nn::LinearImpl>(10, 3);
  torch::optim::SGD opt(other->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *other, opt, {{1, 0, 1}, 1, 1, 8, {}, {}, {}}, 1);
  auto toy = std::make_shared<SmallNet>();
  torch::optim::SGD opt2(toy->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_THROW(load_checkpoint(*find_latest_checkpoint(dir_), *toy, opt2), CheckpointError);
}

TEST_F(CheckpointTest, ACheckpointThatLatestNeverNamedDoesNotOutliveTheOneItNames) {
  // A writer that crashed after renaming ckpt-200 but before updating latest: the run
  // resumes from 100 and saves 150 with keep_last 1; 150 must stay, 200 must go.
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *model, opt, {{100, 0, 100}, 1, 1, 8, {}, {}, {}}, 1);
  std::filesystem::copy_file(dir_ + "/ckpt-00000100.pt", dir_ + "/ckpt-00000200.pt");
  save_checkpoint(dir_, *model, opt, {{150, 0, 150}, 1, 1, 8, {}, {}, {}}, 1);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt-00000150.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt-00000200.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt-00000100.pt"));
  EXPECT_EQ(find_latest_checkpoint(dir_)->step, 150);
}

TEST_F(CheckpointTest, StepsPastEightDigitsArePrunedByNumberNotByName) {
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (std::int64_t step : {99'999'999, 100'000'000})
    save_checkpoint(dir_, *model, opt, {{step, 0, 0}, 1, 1, 8, {}, {}, {}}, 1);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt-100000000.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt-99999999.pt"));
  EXPECT_EQ(find_latest_checkpoint(dir_)->step, 100'000'000);
}

struct NetWithSizedBuffer : torch::nn::Module {
  explicit NetWithSizedBuffer(std::int64_t n)
      : fc(register_module("fc", torch::nn::Linear(2, 2))),
        running(register_buffer("running", torch::zeros({n}))) {}
  torch::nn::Linear fc;
  at::Tensor running;
};

TEST_F(CheckpointTest, BufferAndOptimizerStateShapeMismatchesAreRefused) {
  auto saved = std::make_shared<NetWithSizedBuffer>(3);
  torch::optim::SGD opt(saved->parameters(), torch::optim::SGDOptions(0.1));
  save_checkpoint(dir_, *saved, opt, {{1, 0, 1}, 1, 1, 8, {}, {}, {}}, 1);
  auto wider = std::make_shared<NetWithSizedBuffer>(4);
  torch::optim::SGD opt2(wider->parameters(), torch::optim::SGDOptions(0.1));
  try {
    load_checkpoint(*find_latest_checkpoint(dir_), *wider, opt2);
    FAIL() << "a buffer of another shape was loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("buffer running has another shape"), std::string::npos)
        << e.what();
  }
  // Momentum saved for fc1 then fc2; an optimizer that lists them the other way round
  // would get each parameter's momentum in the other's shape.
  auto model = std::make_shared<SmallNet>();
  torch::optim::SGD momentum(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train_step(*model, momentum);
  save_checkpoint(dir_, *model, momentum, {{2, 0, 2}, 1, 1, 8, {}, {}, {}}, 1);
  auto same = std::make_shared<SmallNet>();
  auto reversed = same->parameters();
  std::reverse(reversed.begin(), reversed.end());
  torch::optim::SGD swapped(reversed, torch::optim::SGDOptions(0.1).momentum(0.9));
  try {
    load_checkpoint(*find_latest_checkpoint(dir_), *same, swapped);
    FAIL() << "optimizer state of another shape was loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the optimizer state of parameter #"), std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, AtomicWriteReplacesWholeFiles) {
  write_file_atomically(base_.string(), "f", "first", 0640);
  write_file_atomically(base_.string(), "f", "second", 0640);
  EXPECT_EQ(read_file((base_ / "f").string()), "second");
  EXPECT_EQ(mode_of((base_ / "f").string()), 0640u);
  EXPECT_THROW(write_file_atomically((base_ / "missing").string(), "f", "x"), std::system_error);
}

TEST_F(CheckpointTest, TheErrorFileWrittenHereIsTheOneTheLauncherReads) {
  const std::string path = (base_ / "rank_0.error.json").string();
  write_error_file(path, {"boom", "trace"});
  const auto read = parse_error_file(read_file(path));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->message, "boom");
  EXPECT_EQ(read->callstack, "trace");
  EXPECT_EQ(mode_of(path), 0644u);
}

}  // namespace
}  // namespace ddprun::worker
