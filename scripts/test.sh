#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs every test (the multi-node ones on
# simulated nodes when root), checks the worker against LibTorch 2.x's CUDA headers with
# NCCL and without (compile only), and the hostlist table against Slurm 24.11's scontrol; then
# builds the launcher, and the worker with ddp-train, under ASan/UBSan and runs their tests
# again, and fuzzes the hostlist and hostfile parsers.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
phase_start=$started
# Says how long the phase that just ended took, and the total so far.
phase() {
  local now
  now=$(date +%s)
  echo "test.sh: $1 took $((now - phase_start)) s ($((now - started)) s so far)"
  phase_start=$now
}
scripts/setup.sh ci
phase "setup and build"
git ls-files '*.h' '*.cc' | xargs -r clang-format --dry-run --Werror
scripts/tidy.sh build
phase "clang-format and clang-tidy"
ctest --preset ci -j 2
phase "ctest"

# Checks against Debian trixie's packages, fetched through a private apt. Exit 100 means
# the mirror could not be reached at all, which says nothing about the code; any other
# failure (apt's included) fails the tests.
trixie_check() {
  local what=$1 rc=0
  shift
  "$@" || rc=$?
  if ((rc == 100)); then
    echo "test.sh: warning: $what check skipped: the Debian mirror could not be reached" >&2
  elif ((rc != 0)); then
    exit "$rc"
  fi
}
# The hostlist table against Slurm 24.11's own parser (scontrol unpacked, no daemon): text
# after a bracket group, which sites' Slurm 23.02.5+ puts in node lists.
trixie_check "Slurm 24.11 hostlist" scripts/check-slurm-hostlist.sh
# The worker against a CUDA build of LibTorch 2.x with NCCL (libtorch-cuda-dev, CUDA and
# NCCL headers), compile only (docs/gpu.md); also the branches a CPU LibTorch 2.x takes.
trixie_check "CUDA build" scripts/check-cuda-build.sh
phase "trixie checks"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$(nproc)"
phase "ASan launcher build"
# Not again under ASan: the install tests (they build and run ddprun of their own) and the
# recorded mpirun table (mpirun's time); both ran in the first ctest.
ctest --preset asan -j 2
phase "ASan launcher tests"
# The worker library and ddp-train (shared-memory all-reduce, DDP, checkpoints, preemption)
# under ASan/UBSan with leak checking; LibTorch needs no suppressions. The allocator test is
# left out: the sanitizer replaces the malloc it tunes.
cmake --preset asan-worker >/dev/null
cmake --build --preset asan-worker -j "$(nproc)"
phase "ASan worker build"
ctest --preset asan-worker -j 2
phase "ASan worker tests"

# 30 s of libFuzzer on the hostlist and hostfile parsers, under ASan/UBSan.
source scripts/packages.sh
ensure_packages clang-14 libclang-rt-14-dev
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DDDPRUN_FUZZ=ON -DDDPRUN_BUILD_WORKER=OFF \
  -DBUILD_TESTING=ON >/dev/null
cmake --build build-fuzz --target hostlist_fuzz -j "$(nproc)"
mkdir -p build-fuzz/corpus
build-fuzz/bin/hostlist_fuzz -max_total_time=30 -print_final_stats=0 -dict=tests/fuzz/hostlist.dict \
  build-fuzz/corpus tests/fuzz/corpus 2>&1 | grep -E "^Done|ERROR|SUMMARY"
phase "fuzzing"
