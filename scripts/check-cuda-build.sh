#!/bin/sh
# Compile-only check of the worker against a CUDA build of LibTorch 2.x (Debian trixie's
# libtorch-cuda-dev, contrib) with NCCL, so the code behind USE_C10D_NCCL (make_nccl in
# worker/lib/src/torch_compat.cc) and every other worker source compile the way they would
# on a GPU machine. CI has no CUDA LibTorch; this is the only place that code is compiled.
#
# Fetches libtorch-cuda-dev, libgloo-cuda-dev (contrib), libnccl-dev (contrib),
# nvidia-cuda-dev (non-free: the CUDA headers) and libcu++-dev (main: <nv/target>, which
# cuda_fp16.h includes) with `apt-get download` through a private sources list and private
# state folders (the system's apt configuration is not touched). Only the header trees are
# unpacked (nvidia-cuda-dev is about 0.9 GB, almost all static libraries; its headers come
# first in its data archive, so tar stops reading there), then the .deb files are deleted and
# the headers kept for the next run. The compile definitions are those LibTorch's CMake
# package gives its consumers (INTERFACE_COMPILE_DEFINITIONS in Caffe2Targets.cmake and
# TORCH_CXX_FLAGS in TorchConfig.cmake), read from the package itself. Then g++
# -fsyntax-only -std=c++20 with the project's warnings as errors runs on every worker source
# that includes LibTorch (a library's sources as one unit, as the CI build compiles them),
# and on torch_compat.cc once more without USE_C10D_NCCL (the branches a CPU LibTorch takes; scripts/check-libtorch2.sh's CPU headers add nothing else,
# and .ci/run builds and runs everything against the CPU LibTorch 2.6). Needs network access to a Debian mirror; nothing is installed.
# Nothing is linked: that would take libtorch-cuda-2.6 (0.5 GB) and the CUDA libraries it
# needs (about 1.2 GB more), and cuDNN, which it also needs, is not in the archive at all
# (nvidia-cudnn only downloads it from NVIDIA when installed).
#
# Usage: scripts/check-cuda-build.sh [-j N | --fetch]   (--fetch: download and unpack only,
#   so that test.sh can fetch while it builds; the check then reuses what was fetched)
# Environment: DEBIAN_MIRROR (default: the mirror of the system's sources, else
#   http://deb.debian.org/debian), DEBIAN_SUITE (default trixie), CUDA_CHECK_DIR (default
#   build/cuda-check; reused between runs), CXX (default g++).
# Exit status: 0 all files compile; 100 the mirror cannot be reached (test.sh warns);
#   anything else a failure (apt's included).
set -eu

jobs=$(nproc)
fetch_only=0
case "${1:-}" in
  -j) jobs=$2 ;;
  --fetch) fetch_only=1 ;;
esac

cd "$(dirname "$0")/.."
top=$(pwd)
dir=${CUDA_CHECK_DIR:-$top/build/cuda-check}
suite=${DEBIAN_SUITE:-trixie}
cxx=${CXX:-g++}
packages="libtorch-cuda-dev libgloo-cuda-dev libnccl-dev nvidia-cuda-dev libcu++-dev"

components="main contrib non-free"
tool=check-cuda-build
. "$top/scripts/debian-apt.sh"

# Unpacks the regular files under usr/include of .deb $1 into $2. The list comes from the
# package's md5sums (none of these packages has links under usr/include), so tar can stop
# once it has them all instead of decompressing the rest of the archive; dpkg-deb then dies
# of SIGPIPE, which is expected. Every listed file must be there afterwards.
unpack_headers() {
  list=$dir/headers.list
  dpkg-deb -I "$1" md5sums | awk '$2 ~ /^usr\/include\// { print "./" $2 }' >"$list"
  if [ ! -s "$list" ]; then
    echo "check-cuda-build: $(basename "$1") has no headers" >&2
    exit 1
  fi
  { dpkg-deb --fsys-tarfile "$1" 2>"$dir/dpkg-deb.err" || true; } |
    tar -x -C "$2" --occurrence -T "$list"
  missing=$(sed 's|^\./||' "$list" | while read -r f; do [ -f "$2/$f" ] || echo "$f"; done)
  if [ -n "$missing" ]; then
    cat "$dir/dpkg-deb.err" >&2
    echo "check-cuda-build: $(basename "$1") did not unpack:" >&2
    printf '%s\n' "$missing" >&2
    exit 1
  fi
}

start=$(date +%s)
echo "check-cuda-build: $suite (main contrib non-free) from $mirror into $dir"
apt_get "$@" -qq update
versions=""
for p in $packages; do
  v=$(apt-cache "$@" policy "$p" | sed -n 's/^ *Candidate: //p')
  case "$v" in
    "" | "(none)")
      echo "check-cuda-build: $suite at $mirror has no $p" >&2
      exit 1
      ;;
  esac
  versions="$versions $p=$v"
done
torch_version=$(echo "$versions" | tr ' ' '\n' | sed -n 's/^libtorch-cuda-dev=//p')
root=$dir/root-$torch_version
if [ ! -f "$root/.complete" ] || [ "$(cat "$root/.complete")" != "$versions" ]; then
  rm -rf "$dir/debs"/*.deb "$dir"/root-*
  fetch_start=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$dir/debs" && apt_get "$@" -qq download $packages)
  echo "check-cuda-build: downloaded $(du -cm "$dir/debs"/*.deb | tail -n 1 | cut -f 1) MiB" \
    "in $(($(date +%s) - fetch_start)) s"
  mkdir -p "$root"
  for deb in "$dir/debs"/*.deb; do unpack_headers "$deb" "$root"; done
  # LibTorch's CMake package, for the definitions it gives its consumers.
  dpkg-deb --fsys-tarfile "$dir/debs"/libtorch-cuda-dev_*.deb |
    tar -x -C "$root" --wildcards './usr/lib/*/cmake/Caffe2/Caffe2Targets.cmake' \
      './usr/lib/*/cmake/Torch/TorchConfig.cmake'
  rm -f "$dir/debs"/*.deb
  echo "$versions" >"$root/.complete"
fi
if [ "$fetch_only" = 1 ]; then
  echo "check-cuda-build: fetched$versions ($(($(date +%s) - start)) s)"
  exit 0
fi
inc=$root/usr/include
echo "check-cuda-build:$versions"

# The definitions every consumer of the torch target compiles with: the plain (non-generator)
# INTERFACE_COMPILE_DEFINITIONS of the imported targets, and TORCH_CXX_FLAGS.
defs=$({
  sed -n 's/^ *INTERFACE_COMPILE_DEFINITIONS "\([^"$]*\)"$/\1/p' \
    "$root"/usr/lib/*/cmake/Caffe2/Caffe2Targets.cmake | tr ';' '\n' | sed 's/^/-D/'
  sed -n 's/^ *set(TORCH_CXX_FLAGS "\([^"]*\)")$/\1/p' "$root"/usr/lib/*/cmake/Torch/TorchConfig.cmake
} | sort -u | tr '\n' ' ' | sed 's/ $//')
case " $defs " in
  *" -DUSE_C10D_NCCL "*) ;;
  *)
    echo "check-cuda-build: libtorch-cuda-dev does not define USE_C10D_NCCL (got: $defs)" >&2
    exit 1
    ;;
esac
echo "check-cuda-build: consumer definitions: $defs"

# Worker sources that include LibTorch, directly or through the library's headers (the same
# selection as check-libtorch2.sh, plus the documentation's example program).
files=$(grep -lE '#include [<"](torch/|ATen/|c10/|ddprun/worker/(ddp|communicator|checkpoint|sampler)\.h|(torch_compat|communicator_impl)\.h|(models|data|trainer|trainer_parts|recovery|straggler_watch|objective|evaluation|stop_check|checkpointing|diagnostics)\.h)' \
  worker/lib/src/*.cc worker/train/*.cc bench/*.cc docs/example/*.cc 2>/dev/null || true)
case "$files" in
  *torch_compat.cc*) ;;
  *)
    echo "check-cuda-build: worker/lib/src/torch_compat.cc not selected" >&2
    exit 1
    ;;
esac
# cmake/Warnings.cmake's flags, with -Werror.
flags="-std=c++20 -fsyntax-only $defs -Wall -Wextra -Wpedantic -Wshadow"
flags="$flags -Wconversion -Wsign-conversion -Wold-style-cast -Wnon-virtual-dtor"
flags="$flags -Woverloaded-virtual -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough"
flags="$flags -Werror -isystem $inc -isystem $inc/torch/csrc/api/include"
flags="$flags -Iworker/lib/include -Iworker/lib/src -Iworker/train -Icontract/include"
flags="$flags -Icommon/include -Ibuild/contract/include"
# The library sources compile as the CI build compiles them, one unit per folder (each
# LibTorch unit costs ~10 s of headers even when nearly empty); a program (a main) alone.
rm -f "$dir"/unity-*.cc
units=""
for f in $files; do
  unity=$dir/unity-$(dirname "$f" | tr / -).cc
  case "$f" in
    worker/lib/src/* | worker/train/*) library=$(grep -q "int main(" "$f" && echo no || echo yes) ;;
    *) library=no ;;
  esac
  if [ "$library" = yes ]; then
    [ -f "$unity" ] || units="$units $unity"
    echo "#include \"$top/$f\"" >>"$unity"
  else
    units="$units $f"
  fi
done
# shellcheck disable=SC2086
printf '%s\n' $units | xargs -P "$jobs" -I{} sh -c \
  "echo '  {}'; $cxx $flags {} || { echo 'check-cuda-build: FAILED {}' >&2; exit 255; }"
# The branches a LibTorch without NCCL takes (trixie's CPU libtorch-dev ships the same
# headers): torch_compat.cc, the one file that tests USE_C10D_NCCL, once more without it.
# shellcheck disable=SC2086
$cxx $flags -UUSE_C10D_NCCL worker/lib/src/torch_compat.cc ||
  { echo 'check-cuda-build: FAILED worker/lib/src/torch_compat.cc without USE_C10D_NCCL' >&2; exit 1; }
echo "check-cuda-build: $(echo "$files" | wc -w) files ($(echo "$units" | wc -w) units) compile against CUDA LibTorch" \
  "$torch_version with NCCL, and torch_compat.cc without it ($(($(date +%s) - start)) s)"
