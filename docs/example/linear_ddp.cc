// Fits y = 3x + 1 with DDP over ddprun's worker library. Run: ddprun --nproc-per-node 2
// ./linear_ddp
#include <torch/torch.h>

#include <ddprun/worker/communicator.h>
#include <ddprun/worker/ddp.h>
#include <ddprun/worker/env.h>
#include <cstdint>
#include <iostream>

extern char** environ;

int main() {
  using namespace ddprun::worker;
  const WorkerEnv env = read_worker_env(ddprun::snapshot_environment(environ));
  auto comm = Communicator::connect(env, CommOptions{});
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::LinearImpl>(1, 1);
  DistributedDataParallel ddp(model, *comm);  // every rank starts from rank 0's weights
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  torch::manual_seed(
      static_cast<std::uint64_t>(100 + comm->rank()));  // each rank its own data shard
  for (int step = 0; step < 200; ++step) {
    const auto x = torch::rand({32, 1});
    const auto loss = torch::mse_loss(model->forward(x), 3 * x + 1);
    optimizer.zero_grad();
    ddp.prepare_for_backward();
    loss.backward();
    ddp.finish_gradient_sync();  // gradients averaged over all ranks
    optimizer.step();
  }
  if (comm->rank() == 0) {
    std::cout << "w=" << model->weight.item<float>() << " b=" << model->bias.item<float>() << "\n";
  }
}
