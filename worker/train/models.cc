#include "models.h"

#include <torch/torch.h>

#include <stdexcept>

namespace ddprun::worker {

void Model::place(const std::vector<torch::Device>& devices) {
  const std::size_t blocks = block_count();
  if (devices.empty() || devices.size() > blocks) {
    throw std::invalid_argument("this model has " + std::to_string(blocks) +
                                " blocks: it can be split into 1 to " + std::to_string(blocks) +
                                " stages, not " + std::to_string(devices.size()));
  }
  stage_devices_ = devices;
  block_stage_.assign(blocks, 0);
  const std::size_t base = blocks / devices.size(), extra = blocks % devices.size();
  std::size_t i = 0;
  for (std::size_t s = 0; s < devices.size(); ++s) {
    for (std::size_t n = 0; n < base + (s < extra ? 1 : 0); ++n, ++i) {
      block_stage_[i] = s;
      for (auto& m : block_modules(i)) m->to(devices[s]);
    }
  }
}

at::Tensor Model::run_stage(std::size_t stage, at::Tensor h) {
  h = h.to(stage_devices_[stage]);
  for (std::size_t i = 0; i < block_count(); ++i) {
    if (block_stage_[i] == stage) h = block(i, h);
  }
  return h;
}

at::Tensor Model::forward(const at::Tensor& x) {
  if (block_stage_.empty()) place(stage_devices_);
  const std::size_t stages = stage_devices_.size();
  if (split_size_ <= 0 || split_size_ >= x.size(0)) {
    at::Tensor h = x;
    for (std::size_t s = 0; s < stages; ++s) h = run_stage(s, h);
    return h;
  }
  // A wavefront: at tick t stage s takes micro-batch t - s. Stages are visited last to
  // first, so each device is handed its work before the one feeding it gets the next.
  std::vector<at::Tensor> h = x.split(split_size_);
  const std::size_t chunks = h.size();
  for (std::size_t t = 0; t + 1 < chunks + stages; ++t) {
    for (std::size_t s = stages; s-- > 0;) {
      if (t >= s && t - s < chunks) h[t - s] = run_stage(s, h[t - s]);
    }
  }
  return torch::cat(h);
}

namespace {

class Mlp : public Model {
 public:
  Mlp()
      : fc1_(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2_(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3_(register_module("fc3", torch::nn::Linear(128, 10))) {}

  std::size_t block_count() const override { return 3; }

 protected:
  at::Tensor block(std::size_t i, const at::Tensor& h) override {
    switch (i) {
      case 0:
        return torch::relu(fc1_->forward(h.reshape({h.size(0), -1})));
      case 1:
        return torch::relu(fc2_->forward(h));
      default:
        return fc3_->forward(h);
    }
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) override {
    const torch::nn::Linear* layers[] = {&fc1_, &fc2_, &fc3_};
    return {layers[i]->ptr()};
  }

 private:
  torch::nn::Linear fc1_, fc2_, fc3_;
};

class Cnn : public Model {
 public:
  Cnn()
      : conv1_(register_module("conv1",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2_(register_module("conv2",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc_(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {}

  std::size_t block_count() const override { return 3; }

 protected:
  at::Tensor block(std::size_t i, const at::Tensor& h) override {
    switch (i) {
      case 0:
        return torch::max_pool2d(torch::relu(conv1_->forward(h)), 2);  // 16 x 14 x 14
      case 1:
        return torch::max_pool2d(torch::relu(conv2_->forward(h)), 2);  // 32 x 7 x 7
      default:
        return fc_->forward(h.reshape({h.size(0), -1}));
    }
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) override {
    if (i == 0) return {conv1_.ptr()};
    if (i == 1) return {conv2_.ptr()};
    return {fc_.ptr()};
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Linear fc_;
};

class Toy : public Model {
 public:
  Toy()
      : fc1_(register_module("fc1", torch::nn::Linear(10, 10))),
        fc2_(register_module("fc2", torch::nn::Linear(10, 5))) {}

  std::size_t block_count() const override { return 2; }

 protected:
  at::Tensor block(std::size_t i, const at::Tensor& h) override {
    return i == 0 ? torch::relu(fc1_->forward(h)) : fc2_->forward(h);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) override {
    return {i == 0 ? fc1_.ptr() : fc2_.ptr()};
  }

 private:
  torch::nn::Linear fc1_, fc2_;
};

}  // namespace

std::shared_ptr<Model> make_model(const std::string& name) {
  if (name == "mlp") return std::make_shared<Mlp>();
  if (name == "cnn") return std::make_shared<Cnn>();
  if (name == "toy") return std::make_shared<Toy>();
  throw std::invalid_argument("unknown model '" + name + "' (known: mlp, cnn, toy)");
}

}  // namespace ddprun::worker
