#!/usr/bin/env bash
# Installs what ddprun's tests need from Debian (only what is missing), then configures
# and builds everything, tests included. (The demo needs less: scripts/demo.sh.)
# Usage: scripts/setup.sh [CMAKE_PRESET]   (default: "default"; CI uses "ci")
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}

source scripts/packages.sh
ensure_packages "${demo_packages[@]}" "${test_packages[@]}"
ensure_packages_without_starting "${daemon_packages[@]}"

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
