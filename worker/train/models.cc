#include "models.h"

#include "ddprun/worker/sync_batch_norm.h"

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

// `h` through batch norm `bn` when the model has one.
at::Tensor normed(const std::shared_ptr<SyncBatchNorm>& bn, const at::Tensor& h) {
  return bn ? bn->forward(h) : h;
}

// A block's layer and, when there is one, its batch norm.
std::vector<std::shared_ptr<torch::nn::Module>> with_norm(
    std::shared_ptr<torch::nn::Module> layer, const std::shared_ptr<SyncBatchNorm>& bn) {
  std::vector<std::shared_ptr<torch::nn::Module>> modules{std::move(layer)};
  if (bn) modules.push_back(bn);
  return modules;
}

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
  explicit Cnn(bool batch_norm)
      : conv1_(register_module("conv1",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2_(register_module("conv2",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc_(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {
    if (batch_norm) {
      bn1_ = register_module("bn1", std::make_shared<SyncBatchNorm>(16));
      bn2_ = register_module("bn2", std::make_shared<SyncBatchNorm>(32));
    }
  }

  std::size_t block_count() const override { return 3; }

 protected:
  at::Tensor block(std::size_t i, const at::Tensor& h) override {
    switch (i) {
      case 0:
        return torch::max_pool2d(torch::relu(normed(bn1_, conv1_->forward(h))), 2);  // 16x14x14
      case 1:
        return torch::max_pool2d(torch::relu(normed(bn2_, conv2_->forward(h))), 2);  // 32x7x7
      default:
        return fc_->forward(h.reshape({h.size(0), -1}));
    }
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) override {
    if (i == 0) return with_norm(conv1_.ptr(), bn1_);
    if (i == 1) return with_norm(conv2_.ptr(), bn2_);
    return {fc_.ptr()};
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Linear fc_;
  std::shared_ptr<SyncBatchNorm> bn1_, bn2_;  // null without model.batch_norm
};

class Toy : public Model {
 public:
  explicit Toy(bool batch_norm)
      : fc1_(register_module("fc1", torch::nn::Linear(10, 10))),
        fc2_(register_module("fc2", torch::nn::Linear(10, 5))) {
    if (batch_norm) bn_ = register_module("bn", std::make_shared<SyncBatchNorm>(10));
  }

  std::size_t block_count() const override { return 2; }

 protected:
  at::Tensor block(std::size_t i, const at::Tensor& h) override {
    return i == 0 ? torch::relu(normed(bn_, fc1_->forward(h))) : fc2_->forward(h);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) override {
    return i == 0 ? with_norm(fc1_.ptr(), bn_)
                  : std::vector<std::shared_ptr<torch::nn::Module>>{fc2_.ptr()};
  }

 private:
  torch::nn::Linear fc1_, fc2_;
  std::shared_ptr<SyncBatchNorm> bn_;  // null without model.batch_norm
};

}  // namespace

void Model::set_batch_norm_plane(Plane* plane) {
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* bn = dynamic_cast<SyncBatchNorm*>(m.get())) bn->set_plane(plane);
  }
}

std::shared_ptr<Model> make_model(const std::string& name, bool batch_norm) {
  if (name == "mlp") return std::make_shared<Mlp>();
  if (name == "cnn") return std::make_shared<Cnn>(batch_norm);
  if (name == "toy") return std::make_shared<Toy>(batch_norm);
  throw std::invalid_argument("unknown model '" + name + "' (known: mlp, cnn, toy)");
}

}  // namespace ddprun::worker
