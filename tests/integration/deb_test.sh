#!/usr/bin/env bash
# The Debian packages (cmake/Install.cmake): cpack builds `ddprun` (the launcher alone) and
# `ddprun-worker`; the launcher's package depends on nothing of LibTorch; both install
# with dpkg into an empty root; the installed ddprun prints its version and runs the
# installed ddp-train on 2 ranks. Needs dpkg-shlibdeps (dpkg-dev): without it the test is
# skipped (exit 77), and fails under CI=true.
set -euo pipefail
build=$1 config=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! command -v dpkg-shlibdeps >/dev/null; then
  [[ ${CI:-} == true ]] && fail "dpkg-shlibdeps is missing (apt-get install dpkg-dev)"
  echo "SKIP: dpkg-shlibdeps is missing (apt-get install dpkg-dev)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" >cpack.log 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
version=$("$build/bin/ddprun" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
launcher=$work/ddprun_${version}_${arch}.deb
worker=$work/ddprun-worker_${version}_${arch}.deb
[[ -f $launcher && -f $worker ]] || fail "expected $(basename "$launcher") and $(basename "$worker"), got: $(cd "$work" && ls ./*.deb)"

depends=$(dpkg-deb -f "$launcher" Depends)
[[ -n $depends && $depends != *torch* && $depends != *gloo* && $depends != *openblas* ]] ||
  fail "the launcher's package must depend on no LibTorch library: Depends: $depends"
# The launchers' rendezvous proves its secret with libcrypto: dpkg-shlibdeps names its package.
[[ $depends == *libssl3* ]] || fail "the launcher's package does not depend on libssl3: $depends"
[[ $(dpkg-deb -f "$worker" Depends) == *"ddprun (= $version)"* ]] || fail "ddprun-worker does not depend on ddprun (= $version)"
# Each listing read whole first: `... | grep -q` under pipefail fails when grep stops
# reading early and the writer gets SIGPIPE.
contents() { dpkg-deb -c "$1" | awk '{print $NF}'; }
launcher_files=$(contents "$launcher")
worker_files=$(contents "$worker")
for f in ./usr/bin/ddprun ./usr/share/man/man1/ddprun.1; do
  grep -qx "$f" <<<"$launcher_files" || fail "$f is not in the launcher's package"
done
for f in ./usr/bin/ddp-train ./usr/include/ddprun/worker/ddp.h ./usr/lib/cmake/ddprun/ddprunConfig.cmake; do
  grep -qx "$f" <<<"$worker_files" || fail "$f is not in ddprun-worker"
done
! grep -q 'ddp-train\|include/' <<<"$launcher_files" || fail "the launcher's package holds worker files"
! grep -q modulefiles <<<"$worker_files$launcher_files" || fail "a package holds the modulefile"

# An empty root: dpkg's own database and nothing else. The host's libraries stand in for
# the dependencies (--force-depends), so the binaries that run are the packaged ones.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --log="$work/dpkg.log" --force-depends -i "$launcher" "$worker" >"$work/dpkg.out" 2>&1 ||
  { cat "$work/dpkg.out" >&2; fail "dpkg -i failed"; }
[[ $(dpkg --root="$root" -s ddprun | grep '^Status:') == "Status: install ok installed" ]] ||
  fail "dpkg does not list ddprun as installed in the root"
[[ $("$root/usr/bin/ddprun" --version) == "ddprun $version" ]] || fail "installed ddprun --version"
out=$("$root/usr/bin/ddprun" -q --nproc-per-node 2 "$root/usr/bin/ddp-train" --config "$config" --quiet 2>&1) ||
  { echo "$out" >&2; fail "the installed ddprun and ddp-train did not train on 2 ranks"; }
[[ $out == *"world 2"* && $out == *"done after"* ]] || { echo "$out" >&2; fail "no 2-rank training in the output"; }
echo "deb: 5 passed, 0 failed ($(basename "$launcher"), $(basename "$worker"))"
