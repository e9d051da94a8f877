#!/bin/sh
# Re-runs Slurm 24.11's own hostlist parser (Debian trixie's scontrol) on every row of
# tests/schedulers/hostlist_cases.tsv, the table ddprun's parser follows: sites run Slurm
# 23.x-25.x, which accept text after a bracket group (`gpu[1-2]-ib`), and bookworm's
# scontrol 22.05 does not.
#
# Fetches slurm-client and the libraries it needs (trixie's C library included) with
# `apt-get download` through a private sources list (scripts/debian-apt.sh), unpacks them
# with dpkg-deb -x, and runs scontrol through trixie's own dynamic loader with a
# minimal slurm.conf: no daemon, nothing installed, bookworm's libraries not mixed in.
# Needs network access to a Debian mirror (exit 100 when it cannot be reached) and a
# build of scheduler_unit_tests (BUILD_DIR, default build).
#
# Usage: scripts/check-slurm-hostlist.sh [--fetch]   (--fetch: download and unpack only, so
#   that test.sh can fetch while it builds; the check then reuses what was fetched)
# Environment: DEBIAN_MIRROR, DEBIAN_SUITE (default trixie), SLURM24_DIR (default
#   build/slurm24; reused between runs), BUILD_DIR (default build).
set -eu

fetch_only=0
if [ "${1:-}" = "--fetch" ]; then fetch_only=1; fi
cd "$(dirname "$0")/.."
top=$(pwd)
dir=${SLURM24_DIR:-$top/build/slurm24}
suite=${DEBIAN_SUITE:-trixie}
build=${BUILD_DIR:-$top/build}

components="main"
tool=check-slurm-hostlist
. "$top/scripts/debian-apt.sh"

start=$(date +%s)
apt_get "$@" -qq update
version=$(apt-cache "$@" policy slurm-client | sed -n 's/^ *Candidate: //p')
case "$version" in
  "" | "(none)")
    echo "check-slurm-hostlist: $suite at $mirror has no slurm-client" >&2
    exit 1
    ;;
esac
root=$dir/root-$version
if [ ! -f "$root/.complete" ]; then
  rm -rf "$dir/debs"/*.deb "$dir"/root-*
  # scontrol, libslurmfull (in the plugins package), and what they link beyond bookworm's.
  libslurm=$(apt-cache "$@" depends slurm-client | sed -n 's/^ *Depends: \(libslurm[0-9a-z]*\)$/\1/p' | head -n 1)
  (cd "$dir/debs" && apt_get "$@" -qq download slurm-client slurm-wlm-basic-plugins \
    "${libslurm:-libslurm42t64}" libc6 libreadline8t64 libtinfo6)
  mkdir -p "$root"
  for deb in "$dir/debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  touch "$root/.complete"
fi
if [ "$fetch_only" = 1 ]; then
  echo "check-slurm-hostlist: fetched slurm-client $version ($(($(date +%s) - start)) s)"
  exit 0
fi

lib=$root/usr/lib/x86_64-linux-gnu
mkdir -p "$dir/bin"
printf 'ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost\nPartitionName=p Nodes=localhost\nPluginDir=%s\n' \
  "$lib/slurm-wlm" >"$dir/slurm.conf"
# The test gives scontrol a slurm.conf of its own; this one adds trixie's plugin folder.
cat >"$dir/bin/scontrol" <<EOF
#!/bin/sh
SLURM_CONF='$dir/slurm.conf' exec '$root/usr/lib64/ld-linux-x86-64.so.2' \\
  --library-path '$lib/slurm-wlm:$lib:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu' \\
  '$root/usr/bin/scontrol' "\$@"
EOF
chmod +x "$dir/bin/scontrol"
got=$("$dir/bin/scontrol" --version)
echo "check-slurm-hostlist: $got from $suite"
PATH="$dir/bin:$PATH" "$build/tests/scheduler_unit_tests" --gtest_filter='ScontrolTest.*' \
  --gtest_brief=1
echo "check-slurm-hostlist: the table agrees with $got ($(($(date +%s) - start)) s)"
