#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs every test; then builds the launcher
# under ASan/UBSan and runs its tests again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh ci
if command -v clang-format >/dev/null; then
  git ls-files '*.h' '*.cc' | xargs -r clang-format --dry-run --Werror
fi
ctest --preset ci -j 2
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$(nproc)"
ctest --preset asan -j 2
