// All-reduce bandwidth between the ranks of a job (start it with ddprun) against memcpy
// bandwidth in one process, 4 KiB to 100 MiB, over Communicator as ddp-train uses it: gloo,
// or shared memory when all ranks share a node (--shared-memory 0: gloo only). Rank 0 writes:
//   ddprun --nproc-per-node 2 -- build/bin/allreduce-bench --out bench/results/allreduce.json
// Bandwidth is bytes / time per operation (nccl-tests' "algbw"); medians, minima and maxima
// over --reps repetitions, each the mean of enough operations to last a while.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/env.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {{"median", v[v.size() / 2]}, {"min", v.front()}, {"max", v.back()}};
}

// GB/s (1e9 bytes per second) of `op` moving `bytes`, repeated `iters` times.
template <class Op>
double bandwidth(std::size_t bytes, int iters, Op op) {
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * iters / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int reps = 5;
  bool shared_memory = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--out") out_path = argv[i + 1];
    if (arg == "--reps") reps = std::max(1, std::stoi(argv[i + 1]));
    if (arg == "--shared-memory") shared_memory = std::string(argv[i + 1]) != "0";
  }
  try {
    at::set_num_threads(1);
    const auto env = ddprun::worker::read_worker_env(ddprun::snapshot_environment(environ));
    ddprun::worker::CommOptions options;
    options.shared_memory = shared_memory;
    auto comm = ddprun::worker::Communicator::connect(env, options);
    const int rank = comm->rank();
    nlohmann::json rows = nlohmann::json::array();
    const std::vector<std::size_t> sizes = {4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20,
                                            4u << 20, 16u << 20, 64u << 20, 100u << 20};
    for (const std::size_t bytes : sizes) {
      const auto numel = static_cast<std::int64_t>(bytes / sizeof(float));
      auto tensor = comm->data().device_zeros(numel, at::kFloat).fill_(1);
      std::vector<char> src(bytes, 1), dst(bytes);
      const int iters = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 1, 1000));
      comm->data().allreduce(tensor);  // warm-up: connections, page faults
      std::memcpy(dst.data(), src.data(), bytes);
      std::vector<double> allreduce, memcpy;
      for (int r = 0; r < reps; ++r) {
        comm->control().barrier();
        allreduce.push_back(bandwidth(bytes, iters, [&] { comm->data().allreduce(tensor); }));
        memcpy.push_back(bandwidth(bytes, iters, [&] {
          std::memcpy(dst.data(), src.data(), bytes);
          asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copy
        }));
      }
      auto row = nlohmann::json{{"bytes", bytes},
                                {"iterations_per_rep", iters},
                                {"allreduce_gb_per_s", summary(allreduce)},
                                {"memcpy_gb_per_s", summary(memcpy)}};
      row["ratio"] = row["allreduce_gb_per_s"]["median"].get<double>() /
                     row["memcpy_gb_per_s"]["median"].get<double>();
      if (rank == 0) {
        std::cout << bytes << " bytes: all-reduce " << row["allreduce_gb_per_s"]["median"]
                  << " GB/s, memcpy " << row["memcpy_gb_per_s"]["median"] << " GB/s, ratio "
                  << row["ratio"] << std::endl;
      }
      rows.push_back(row);
    }
    if (rank == 0 && !out_path.empty()) {
      const nlohmann::json j = {{"benchmark", "allreduce"},
                                {"backend", "gloo"},
                                {"transport", comm->transport()},
                                {"world", comm->world_size()},
                                {"reps", reps},
                                {"bandwidth", "bytes / seconds per operation, 1e9 bytes/s"},
                                {"rows", rows}};
      std::ofstream(out_path) << j.dump(2) << "\n";
      std::cout << "wrote " << out_path << std::endl;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "allreduce-bench: error: " << e.what() << "\n";
    return 1;
  }
}
