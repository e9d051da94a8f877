#!/usr/bin/env bash
# Builds the worker library, ddp-train, ddprun and the worker's tests against LibTorch 2.x
# in a Debian trixie root (debootstrap; trixie's own libtorch-dev 2.6 and libraries, so
# nothing mixes with the host's glibc) and runs the worker's test suites there: behaviour
# that compiles can still differ at run time (the TCPStore's libuv back end, Work and
# ProcessGroup semantics, gloo itself). Root only (debootstrap, chroot, mounts); needs a
# Debian mirror (exit 100 when it cannot be reached). CI runs it after the test command
# (.ci/run); about 5.5 minutes on a fresh 2-core machine (docs/worker-library.md).
#
# Usage: sudo scripts/check-libtorch2-runtime.sh
# Environment: TRIXIE_ROOT (default build/trixie-root; reused between runs), DEBIAN_MIRROR
#   (default http://deb.debian.org/debian), TEST_TIMEOUT (seconds per test program, 600).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
root=${TRIXIE_ROOT:-$top/build/trixie-root}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "check-libtorch2-runtime: $*"; }
[ "$(id -u)" -eq 0 ] || { say "needs root (debootstrap, chroot)"; exit 77; }
start=$(date +%s)

# python3-torch: the SyncBatchNorm tests compute their reference values with torch.
packages="g++ cmake make libtorch-dev libgloo-dev nlohmann-json3-dev libcli11-dev libgtest-dev
  zlib1g-dev libhwloc-dev libssl-dev python3 python3-torch procps elfutils"
if [ ! -f "$root/.complete" ]; then
  command -v debootstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  # Never delete through a mount left by a run that was killed (/dev is bound in there).
  if grep -q " $root/" /proc/mounts; then
    say "mounts remain under $root (a killed run?): unmount them first"
    exit 1
  fi
  rm -rf "$root"
  say "debootstrap trixie into $root"
  if ! debootstrap --variant=minbase trixie "$root" "$mirror" >"$top/build/trixie-debootstrap.log" 2>&1; then
    tail -n 20 "$top/build/trixie-debootstrap.log"
    # Exit 100: the mirror could not be reached, which says nothing about the code.
    grep -qE 'Could not resolve|Temporary failure resolving|Failed getting release file|Network is unreachable|No route to host|Connection (refused|timed out)' \
      "$top/build/trixie-debootstrap.log" && exit 100
    exit 1
  fi
  # shellcheck disable=SC2086
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends $packages >"$top/build/trixie-apt.log" 2>&1 ||
    { tail -n 20 "$top/build/trixie-apt.log"; exit 1; }
  touch "$root/.complete"
  say "root ready in $(($(date +%s) - start)) s"
fi
# A root kept from an earlier run may lack packages added to the list since.
missing=""
for p in $packages; do
  # shellcheck disable=SC2016
  chroot "$root" dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing into the kept root:$missing"
  # shellcheck disable=SC2086
  { chroot "$root" apt-get update -qq &&
    chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends $missing; } >"$top/build/trixie-apt.log" 2>&1 || {
    tail -n 20 "$top/build/trixie-apt.log"
    grep -qE 'Could not resolve|Temporary failure resolving|Network is unreachable|No route to host|Connection (refused|timed out)' \
      "$top/build/trixie-apt.log" && exit 100
    exit 1
  }
fi
# shellcheck disable=SC2016
say "$(chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' libtorch-dev g++ cmake | tr '\n' ';')"

mounted=()
# shellcheck disable=SC2317
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc dev dev/shm tmp; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    tmp) mount -t tmpfs tmpfs "$root/tmp" ;;
    *) mount --bind "/$m" "$root/$m" ;;
  esac
  mounted+=("$root/$m")
done

# The source tree as committed plus the working tree's changes, without build folders.
rm -rf "$root/src" && mkdir -p "$root/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$root/src" 2>/dev/null ||
  true
build_start=$(date +%s)
chroot "$root" sh -c "cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON \
  -DDDPRUN_UNITY_BUILD=ON >/build-configure.log 2>&1 && cmake --build /build -j $(nproc) --target \
  ddprun ddp-train worker_tests worker_torch_tests train_tests train_torch_tests \
  worker_integration_tests worker_preemption_tests >/build.log 2>&1" ||
  { tail -n 30 "$root/build-configure.log" "$root/build.log" 2>/dev/null; say "build failed"; exit 1; }
say "built in $(($(date +%s) - build_start)) s"

# Runs one test program in the root; its summary line goes to build/trixie-$t.result.
run_tests() {
  local t=$1 t0 rc=0
  t0=$(date +%s)
  chroot "$root" timeout "${TEST_TIMEOUT:-600}" "/build/tests/$t" >"$top/build/trixie-$t.log" 2>&1 ||
    rc=$?
  {
    say "$t: exit $rc in $(($(date +%s) - t0)) s: $(grep -E '^\[  (PASSED|FAILED)  \]' \
      "$top/build/trixie-$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] .*\(' "$top/build/trixie-$t.log" | head -n 20 || true
  } >"$top/build/trixie-$t.result"
  return "$rc"
}
failed=0
# The quick programs one after another, then the two that run whole jobs side by side, as
# ctest -j 2 runs them beside other tests (they took 56 and 76 s one after the other).
for t in worker_tests train_tests worker_torch_tests train_torch_tests; do
  run_tests "$t" || failed=1
  cat "$top/build/trixie-$t.result"
done
run_tests worker_integration_tests &
integration=$!
run_tests worker_preemption_tests || failed=1
wait "$integration" || failed=1
cat "$top/build/trixie-worker_integration_tests.result" "$top/build/trixie-worker_preemption_tests.result"
say "done in $(($(date +%s) - start)) s: $([ $failed -eq 0 ] && echo "all passed" || echo FAILURES)"
exit $failed
