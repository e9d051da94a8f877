#include "threads.h"

#include <dlfcn.h>

namespace ddprun::worker {

int choose_threads(int configured, std::optional<int> threads_per_rank,
                   std::optional<int> omp_num_threads) {
  if (configured > 0) return configured;
  if (threads_per_rank) return *threads_per_rank;
  return omp_num_threads.value_or(0);
}

void set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  // Looked up at run time: which BLAS libblas.so.3 is depends on the machine's alternatives.
  if (void* symbol = ::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    reinterpret_cast<SetThreads>(symbol)(threads);
  }
}

}  // namespace ddprun::worker
