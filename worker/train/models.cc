#include "models.h"

#include <torch/torch.h>

#include <stdexcept>

namespace ddprun::worker {
namespace {

class Mlp : public Model {
 public:
  Mlp()
      : fc1_(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2_(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3_(register_module("fc3", torch::nn::Linear(128, 10))) {}

  at::Tensor forward(const at::Tensor& x) override {
    auto h = torch::relu(fc1_->forward(x.reshape({x.size(0), -1})));
    h = torch::relu(fc2_->forward(h));
    return fc3_->forward(h);
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

  at::Tensor forward(const at::Tensor& x) override {
    auto h = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);  // 16 x 14 x 14
    h = torch::max_pool2d(torch::relu(conv2_->forward(h)), 2);       // 32 x 7 x 7
    return fc_->forward(h.reshape({h.size(0), -1}));
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

  at::Tensor forward(const at::Tensor& x) override {
    return fc2_->forward(torch::relu(fc1_->forward(x)));
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
