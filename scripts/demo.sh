#!/usr/bin/env bash
# Sets up, builds, and trains an MLP on Fashion-MNIST with 2 DDP ranks on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bin/ddprun --nproc-per-node 2 --tag-output -- build/bin/ddp-train --config configs/fashion_mlp.json "$@"
