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

components="main"
tool=check-libtorch2
. "$top/scripts/debian-apt.sh"

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
files=$(grep -lE '#include [<"](torch/|ATen/|c10/|ddprun/worker/(ddp|communicator|checkpoint|sampler)\.h|(torch_compat|communicator_impl)\.h|(models|data|trainer|trainer_parts|recovery|straggler_watch|objective|evaluation|stop_check|checkpointing|diagnostics)\.h)' \
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
