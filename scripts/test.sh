#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs every test (the multi-node ones on
# simulated nodes when root), checks the worker against LibTorch 2.x's CUDA headers with
# NCCL and without (compile only), and the hostlist table against Slurm 24.11's scontrol; then
# builds the launcher, and the worker with ddp-train, under ASan/UBSan and runs their tests
# again, and fuzzes the hostlist and hostfile parsers.
#
# After the first build the work runs in two lanes side by side: the tests (ctest, then the
# ASan tests, one suite at a time: their waits are what the lane leaves idle) and, at the
# lowest CPU priority, the builds and checks that only need a core: first the ASan builds,
# which the ASan tests wait for, then side by side what nothing waits for (clang-format
# and clang-tidy, the trixie checks, fuzzing). ctest keeps about 40% of 2 cores idle while
# its ranks wait on each other; the builds take that, and give it back whenever a test wants
# it. The trixie checks' downloads (about 1 GB) run from the start, beside the first build:
# they wait on the network, not on a core.
# Each step's output is printed whole when it ends, with its time; the first that fails
# stops the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

lint() {
  git ls-files '*.h' '*.cc' | xargs -r clang-format --dry-run --Werror
  scripts/tidy.sh build
}

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
trixie_downloads() {
  trixie_check "Slurm 24.11 hostlist" scripts/check-slurm-hostlist.sh --fetch
  trixie_check "CUDA build" scripts/check-cuda-build.sh --fetch
}
trixie_checks() {
  # The hostlist table against Slurm 24.11's own parser (scontrol unpacked, no daemon): text
  # after a bracket group, which sites' Slurm 23.02.5+ puts in node lists.
  trixie_check "Slurm 24.11 hostlist" scripts/check-slurm-hostlist.sh
  # The worker against a CUDA build of LibTorch 2.x with NCCL (libtorch-cuda-dev, CUDA and
  # NCCL headers), compile only (docs/gpu.md); also the branches a CPU LibTorch 2.x takes.
  trixie_check "CUDA build" scripts/check-cuda-build.sh
}

asan_launcher_build() {
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$(nproc)"
}
# Not again under ASan: the install tests (they build and run ddprun of their own) and the
# recorded mpirun table (mpirun's time); both ran in the first ctest.
asan_launcher_tests() { ctest --preset asan -j 2; }
# The worker library and ddp-train (shared-memory all-reduce, DDP, checkpoints, preemption)
# under ASan/UBSan with leak checking; LibTorch needs no suppressions. The allocator test is
# left out: the sanitizer replaces the malloc it tunes.
asan_worker_build() {
  cmake --preset asan-worker >/dev/null
  cmake --build --preset asan-worker -j "$(nproc)"
}
asan_worker_tests() { ctest --preset asan-worker -j 2; }

# 30 s of libFuzzer on the hostlist and hostfile parsers, under ASan/UBSan.
fuzzing() {
  source scripts/packages.sh
  ensure_packages clang-14 libclang-rt-14-dev
  cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DDDPRUN_FUZZ=ON \
    -DDDPRUN_BUILD_WORKER=OFF -DBUILD_TESTING=ON >/dev/null
  cmake --build build-fuzz --target hostlist_fuzz -j "$(nproc)"
  mkdir -p build-fuzz/corpus
  build-fuzz/bin/hostlist_fuzz -max_total_time=30 -print_final_stats=0 \
    -dict=tests/fuzz/hostlist.dict build-fuzz/corpus tests/fuzz/corpus 2>&1 |
    grep -E "^Done|ERROR|SUMMARY"
}

# The steps: name, niceness (19: only what the tests leave idle), the steps it waits for,
# and the function that does it. A lane is a chain of steps; the tests' lane waits for the
# builds it runs.
steps=(
  "setup and build|0||scripts/setup.sh ci"
  "trixie downloads|19||trixie_downloads"
  "ASan launcher build|19|setup and build|asan_launcher_build"
  "ASan worker build|19|ASan launcher build|asan_worker_build"
  "clang-format and clang-tidy|19|ASan worker build|lint"
  "trixie checks|19|ASan worker build;trixie downloads|trixie_checks"
  "fuzzing|19|ASan worker build|fuzzing"
  "ctest|0|setup and build|ctest --preset ci -j 2"
  "ASan launcher tests|0|ctest;ASan launcher build|asan_launcher_tests"
  "ASan worker tests|0|ASan launcher tests;ASan worker build|asan_worker_tests"
)
logs=$(mktemp -d)
declare -A step_of_pid=() step_began=() step_done=()
start_ready_steps() {
  local step name niceness needs fn ready need
  for step in "${steps[@]}"; do
    IFS='|' read -r name niceness needs fn <<<"$step"
    [[ -v step_began[$name] ]] && continue
    ready=1
    IFS=';' read -ra need_list <<<"$needs"
    for need in "${need_list[@]}"; do [[ -v step_done[$need] ]] || ready=0; done
    ((ready)) || continue
    step_began[$name]=$(date +%s)
    (
      renice -n "$niceness" -p "$BASHPID" >/dev/null
      $fn
    ) >"$logs/$name.log" 2>&1 &
    step_of_pid[$!]=$name
  done
}
# Each step runs in a process group of its own (set -m), so that a failure, or this script's
# end, stops a step's whole tree.
stop_steps() {
  local pid
  for pid in "${!step_of_pid[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
}
trap stop_steps EXIT
set -m
start_ready_steps
while ((${#step_of_pid[@]} > 0)); do
  rc=0
  wait -n -p pid "${!step_of_pid[@]}" || rc=$?
  name=${step_of_pid[$pid]}
  unset "step_of_pid[$pid]"
  cat "$logs/$name.log"
  now=$(date +%s)
  echo "test.sh: $name took $((now - step_began[$name])) s ($((now - started)) s so far)"
  if ((rc != 0)); then
    echo "test.sh: $name failed (exit $rc)" >&2
    exit "$rc"
  fi
  step_done[$name]=1
  start_ready_steps
done
trap - EXIT
rm -rf "$logs"
