#pragma once
// How many threads each rank computes with. ddprun gives Python workers torchrun's
// OMP_NUM_THREADS=1 when several share a node; ddp-train takes its share of the CPUs
// (DDPRUN_THREADS_PER_RANK) instead, unless the config or the user said otherwise.

#include <optional>

namespace ddprun::worker {

// `configured` > 0 wins, then the launcher's share, then OMP_NUM_THREADS; 0: leave the
// libraries' defaults alone.
int choose_threads(int configured, std::optional<int> threads_per_rank,
                   std::optional<int> omp_num_threads);

// Sets OpenBLAS's own thread count when OpenBLAS is the BLAS in use (it read
// OMP_NUM_THREADS when it loaded, before main); a no-op with other BLAS libraries.
void set_blas_threads(int threads);

}  // namespace ddprun::worker
