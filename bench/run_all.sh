#!/usr/bin/env bash
# The whole benchmark suite in one command: every script writes bench/results/NAME.json,
# then bench/plot.py draws bench/results/summary.svg. Needs a built tree (scripts/setup.sh);
# the benchmarks on simulated nodes (scale, hierarchy) need root (network namespaces) and are
# skipped otherwise.
# Usage: bench/run_all.sh [--quick]   (--quick: fewer repetitions)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=5
[[ ${1:-} == --quick ]] && reps=2
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo unknown)
echo "bench: $(date -u +%F) on $(hostname), $(nproc) CPUs, BLAS $blas"
python3 bench/launch.py --reps "$reps" --n 1 8 16
python3 bench/supervise.py --reps "$reps"
python3 bench/first_step.py --reps "$reps"
python3 bench/train.py --reps "$reps"
python3 bench/placement.py --reps "$reps"
python3 bench/sync_overhead.py --reps "$reps"
build/bin/ddprun -q --nproc-per-node 2 -- build/bin/allreduce-bench --reps "$reps" \
  --out bench/results/allreduce.json
build/bin/ddprun -q --nproc-per-node 2 -- build/bin/allreduce-bench --reps "$reps" \
  --shared-memory 0 --out bench/results/allreduce_gloo.json
if [[ $(id -u) == 0 ]]; then
  /usr/bin/python3 bench/scale.py --reps "$reps"
  /usr/bin/python3 bench/hierarchy.py --reps "$reps"
fi
python3 bench/plot.py
