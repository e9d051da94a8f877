#!/usr/bin/env bash
# Installs only what the demo needs, builds ddprun and ddp-train, trains an MLP on
# Fashion-MNIST with 2 DDP ranks on this machine, draws the curves, and says what happened.
# Arguments go to ddp-train (e.g. --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
source scripts/packages.sh
ensure_packages "${demo_packages[@]}"
cmake --preset demo >/dev/null
cmake --build --preset demo -j "$(nproc)" --target ddprun ddp-train

out=build/demo
mkdir -p "$out"
metrics=$out/fashion_mlp.jsonl
rm -f "$metrics"
train_start=$(date +%s)
build/bin/ddprun --nproc-per-node 2 --tag-output -- \
  build/bin/ddp-train --config configs/fashion_mlp.json --metrics-file "$metrics" "$@"
train_seconds=$(($(date +%s) - train_start))
scripts/plot-metrics.sh -o "$out/fashion_mlp.png" "$metrics" >/dev/null

# The last epoch's line, e.g. {"epoch":4,...,"samples_per_s":83612.3,"test_accuracy":0.851,...}
# (step lines, every 20 steps, carry "kind":"step").
last=$(grep -v '"kind":"step"' "$metrics" | tail -n 1)
field() { sed -E "s/.*\"$1\":([-0-9.e+]+).*/\1/" <<<"$last"; }
cat <<TXT

ddprun demo: 2 DDP ranks on this machine trained an MLP on Fashion-MNIST for $(field epoch) epochs in ${train_seconds} s
  test accuracy $(awk -v a="$(field test_accuracy)" 'BEGIN { printf "%.1f%%", a * 100 }'), $(awk -v r="$(field samples_per_s)" 'BEGIN { printf "%.0f", r }') samples/s in the last epoch (both ranks together)
  metrics, a JSON line every 20 steps and one per epoch: $metrics
  training curves: $out/fashion_mlp.png
  set-up, build and training took $(($(date +%s) - start)) s

Next:
  build/bin/ddprun --nproc-per-node 2 -- build/bin/ddp-train --config configs/fashion_cnn.json   # a CNN
  build/bin/ddprun --nproc-per-node 2 python3 your_torchrun_script.py                              # any torchrun script
  build/bin/ddprun --help; docs/multinode.md for several nodes; scripts/test.sh for the tests
TXT
