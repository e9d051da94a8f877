#!/usr/bin/env bash
# The RPMs (cmake/Install.cmake, for EL-family sites): cpack builds `ddprun` (the launcher
# alone) and `ddprun-worker`; rpm reads their headers, file lists and requirements; both
# install with rpm into an empty root, and the installed ddprun prints its version and runs
# the installed ddp-train on 2 ranks. Needs rpmbuild (Debian package rpm): without it the
# test is skipped (exit 77), and fails under CI=true.
set -euo pipefail
build=$1 config=$2
source "$(dirname "$0")/script_test_lib.sh"
command -v rpmbuild >/dev/null || cannot_run "rpmbuild is missing (apt-get install rpm)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && cpack -G RPM --config "$build/CPackConfig.cmake" >cpack.log 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
version=$("$build/bin/ddprun" --version | awk '{print $2}')
arch=$(uname -m)
launcher=$work/ddprun-${version}-1.${arch}.rpm
worker=$work/ddprun-worker-${version}-1.${arch}.rpm
[[ -f $launcher && -f $worker ]] || fail "expected $(basename "$launcher") and $(basename "$worker"), got: $(cd "$work" && ls ./*.rpm)"

# Each listing read whole first: `rpm ... | grep -q` under pipefail fails when grep stops
# reading early and rpm gets SIGPIPE.
[[ $(rpm -qp --queryformat '%{NAME} %{VERSION}' "$launcher") == "ddprun $version" ]] || fail "rpm -qip: name and version"
requires=$(rpm -qRp "$launcher")
[[ $requires == *"libc.so.6"* && $requires != *torch* && $requires != *gloo* ]] ||
  fail "the launcher's RPM must require libc and no LibTorch library: $requires"
[[ $requires == *"libcrypto.so.3"* ]] || fail "the launcher's RPM does not require libcrypto.so.3: $requires"
grep -qx "ddprun = $version" <<<"$(rpm -qRp "$worker")" || fail "ddprun-worker does not require ddprun = $version"
launcher_files=$(rpm -qlp "$launcher")
worker_files=$(rpm -qlp "$worker")
for f in /usr/bin/ddprun /usr/share/man/man1/ddprun.1 /usr/share/bash-completion/completions/ddprun; do
  grep -qx "$f" <<<"$launcher_files" || fail "$f is not in the launcher's RPM"
done
for f in /usr/bin/ddp-train /usr/include/ddprun/worker/ddp.h /usr/lib/cmake/ddprun/ddprunConfig.cmake; do
  grep -qx "$f" <<<"$worker_files" || fail "$f is not in ddprun-worker"
done
! grep -q 'ddp-train\|include/\|build-id' <<<"$launcher_files" || fail "the launcher's RPM holds worker or build-id files"
! grep -qx '/usr\|/usr/bin\|/usr/share/man' <<<"$launcher_files" || fail "the launcher's RPM owns system folders"

# An empty root with its own rpm database. The host's libraries stand in for the
# requirements (--nodeps), so the binaries that run are the packaged ones.
root=$work/root
in_root=(--root "$root" --dbpath /var/lib/rpm)  # Debian's rpm keeps its own under ~
rpm "${in_root[@]}" --initdb 2>/dev/null
rpm "${in_root[@]}" -i --nodeps --noscripts "$launcher" "$worker" >"$work/rpm.out" 2>&1 ||
  { cat "$work/rpm.out" >&2; fail "rpm -i failed"; }
rpm "${in_root[@]}" -q ddprun ddprun-worker >/dev/null 2>&1 ||
  fail "rpm does not list both packages as installed in the root"
[[ $("$root/usr/bin/ddprun" --version) == "ddprun $version" ]] || fail "installed ddprun --version"
out=$("$root/usr/bin/ddprun" -q --nproc-per-node 2 "$root/usr/bin/ddp-train" --config "$config" --quiet 2>&1) ||
  { echo "$out" >&2; fail "the installed ddprun and ddp-train did not train on 2 ranks"; }
[[ $out == *"world 2"* && $out == *"done after"* ]] || { echo "$out" >&2; fail "no 2-rank training in the output"; }
echo "rpm: 6 passed, 0 failed ($(basename "$launcher") $(du -k "$launcher" | cut -f1) KiB, $(basename "$worker"))"
