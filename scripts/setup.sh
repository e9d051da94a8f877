#!/usr/bin/env bash
# Installs what ddprun needs from Debian (only what is missing), then configures and builds.
# Usage: scripts/setup.sh [CMAKE_PRESET]   (default: "default"; CI uses "ci")
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}

packages=(
  cmake g++ make pkg-config
  libtorch-dev libgloo-dev           # LibTorch 1.13 and the gloo headers c10d needs
  libopenblas0-pthread               # libtorch links libblas.so.3: without this, reference BLAS (~9x slower)
  libcli11-dev nlohmann-json3-dev libboost-dev zlib1g-dev
  googletest libgtest-dev
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
  python3-torch                      # torchrun-style Python scripts in the tests
  slurm-client                       # scontrol: the ground truth for hostlist tests
  gnuplot-nox                        # scripts/plot-metrics.sh
)

# Multi-node tests (tests/multinode, root only): namespaces, sshd, mpirun, Slurm.
daemon_packages=(
  iproute2 util-linux                # ip (bridge, veth), unshare, nsenter
  openssh-server openssh-client      # sshd per simulated node
  munge slurmctld slurmd             # a private Slurm cluster (slurm-client is above)
  gridengine-master gridengine-exec gridengine-client   # a private Grid Engine cell
)

source scripts/packages.sh
ensure_packages "${packages[@]}"
ensure_packages_without_starting "${daemon_packages[@]}"

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
