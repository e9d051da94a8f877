#!/bin/sh
# Compile-only check of the worker against LibTorch 2.x headers (Debian trixie's
# libtorch-dev), so worker/lib/src/torch_compat.{h,cc} keeps covering both 1.13 and 2.x.
#
# Fetches libtorch-dev and libgloo-dev with `apt-get download` through a private sources
# list and private state folders (the system's apt configuration is not touched), unpacks
# them with dpkg-deb -x and runs g++ -fsyntax-only -std=c++20 with the project's warnings
# as errors on every worker source that includes LibTorch. Needs network access to a
# Debian mirror; nothing is installed.
#
# Usage: scripts/check-libtorch2.sh [-j N]
# Environment: DEBIAN_MIRROR (default: the mirror of the system's sources, else
#   http://deb.debian.org/debian), DEBIAN_SUITE (default trixie), LIBTORCH2_DIR (default
#   build/libtorch2; reused between runs), CXX (default g++).
set -eu

jobs=$(nproc)
if [ "${1:-}" = "-j" ]; then jobs=$2; fi

cd "$(dirname "$0")/.."
top=$(pwd)
dir=${LIBTORCH2_DIR:-$top/build/libtorch2}
suite=${DEBIAN_SUITE:-trixie}
cxx=${CXX:-g++}

# The mirror the system already uses (deb822 or one-line format), if it has one.
detect_mirror() {
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    [ -r "$f" ] || continue
    m=$(sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' \
      -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\)[[:space:]].*/\2/p' \
      "$f" | head -n 1)
    if [ -n "$m" ]; then
      echo "$m"
      return
    fi
  done
  echo http://deb.debian.org/debian
}
mirror=${DEBIAN_MIRROR:-$(detect_mirror)}

mkdir -p "$dir/etc/preferences.d" "$dir/state/lists/partial" "$dir/cache/archives/partial" \
  "$dir/debs"
: >"$dir/state/status"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] $mirror $suite main" >"$dir/etc/sources.list"
set -- -o "Dir::Etc::sourcelist=$dir/etc/sources.list" -o "Dir::Etc::sourceparts=-" \
  -o "Dir::Etc::preferencesparts=$dir/etc/preferences.d" -o "Dir::State=$dir/state" \
  -o "Dir::State::status=$dir/state/status" -o "Dir::Cache=$dir/cache" \
  -o "APT::Architecture=$(dpkg --print-architecture)" -o "Debug::NoLocking=1" \
  -o "APT::Sandbox::User=root" -o "Acquire::Languages=none"

# Runs apt-get with the private configuration. Exits 100 (test.sh turns that into a warning)
# only when the mirror cannot be reached at all; any other apt failure fails the check.
apt_get() {
  if out=$(apt-get "$@" 2>&1); then
    [ -z "$out" ] || printf '%s\n' "$out"
    return 0
  fi
  printf '%s\n' "$out" >&2
  if printf '%s' "$out" | grep -qE 'Could not resolve|Temporary failure resolving|Could not connect|Connection timed out|Network is unreachable|No route to host|Connection refused'; then
    echo "check-libtorch2: the mirror $mirror cannot be reached" >&2
    exit 100
  fi
  echo "check-libtorch2: apt-get $* failed (the mirror answered)" >&2
  exit 1
}

start=$(date +%s)
echo "check-libtorch2: $suite from $mirror into $dir"
apt_get "$@" -qq update
version=$(apt-cache "$@" policy libtorch-dev | sed -n 's/^ *Candidate: //p')
case "$version" in
  "" | "(none)")
    echo "check-libtorch2: $suite at $mirror has no libtorch-dev" >&2
    exit 1
    ;;
esac
root=$dir/root-$version
if [ ! -f "$root/.complete" ]; then
  rm -rf "$dir/debs"/*.deb "$dir"/root-*
  (cd "$dir/debs" && apt_get "$@" -qq download libtorch-dev libgloo-dev)
  mkdir -p "$root"
  for deb in "$dir/debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  touch "$root/.complete"
fi
inc=$root/usr/include
echo "check-libtorch2: libtorch-dev $version"

# Worker sources that include LibTorch, directly or through the library's headers.
files=$(grep -lE '#include [<"](torch/|ATen/|c10/|ddprun/worker/(ddp|communicator|checkpoint|sampler)\.h|torch_compat\.h|(models|data|trainer|objective|evaluation|stop_check|checkpointing|diagnostics)\.h)' \
  worker/lib/src/*.cc worker/train/*.cc bench/*.cc 2>/dev/null || true)
flags="-std=c++20 -fsyntax-only -DUSE_C10D_GLOO -Wall -Wextra -Wpedantic -Wshadow"
flags="$flags -Wconversion -Wsign-conversion -Wold-style-cast -Wnon-virtual-dtor"
flags="$flags -Woverloaded-virtual -Werror -isystem $inc -isystem $inc/torch/csrc/api/include"
flags="$flags -Iworker/lib/include -Iworker/lib/src -Iworker/train -Icontract/include"
flags="$flags -Icommon/include -Ibuild/contract/include"
# shellcheck disable=SC2086
printf '%s\n' $files | xargs -P "$jobs" -I{} sh -c \
  "echo '  {}'; $cxx $flags {} || { echo 'check-libtorch2: FAILED {}' >&2; exit 255; }"
echo "check-libtorch2: $(echo "$files" | wc -w) files compile against LibTorch $version" \
  "($(($(date +%s) - start)) s)"
