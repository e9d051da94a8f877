#!/usr/bin/env bash
# clang-tidy's checks (.clang-tidy) over the launcher, the schedulers and common, with the
# compile commands of the build folder given (default: build, the ci preset's); any finding
# fails. No LibTorch code: about 30 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# clang-tidy counts what it suppressed in system headers on stderr: only findings remain.
git ls-files 'launcher/src/*.cc' 'schedulers/*.cc' 'common/*.cc' |
  xargs -r -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2>&1 |
  { grep -v '^[0-9]* warnings* generated\.$' || true; }
