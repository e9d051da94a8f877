#!/usr/bin/env bash
# cmake --install gives ddprun, ddp-train, the man page, bash completion, and a CMake
# package with which the 30-line example in docs/example builds, then trains under ddprun.
set -euo pipefail
build=$1 source=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/ddprun bin/ddp-train share/man/man1/ddprun.1 share/bash-completion/completions/ddprun \
         include/ddprun/contract/env_names.h include/ddprun/contract/version.h \
         include/ddprun/common/files.h include/ddprun/worker/ddp.h lib/cmake/ddprun/ddprunConfig.cmake; do
  [[ -e $prefix/$f ]] || fail "$f not installed"
done
# The program's own headers are not the library's: they are not installed.
for f in trainer.h config.h cli.h models.h; do
  [[ ! -e $prefix/include/ddprun/worker/$f ]] || fail "include/ddprun/worker/$f installed: it is ddp-train's, not the library's"
done
cmake -S "$source/docs/example" -B "$prefix/example" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/example" -j 2 >/dev/null
out=$("$prefix/bin/ddprun" -q --nproc-per-node 2 "$prefix/example/linear_ddp")
[[ $out =~ ^w=(2\.[6-9]|3\.[0-3])[0-9]*\ b=(0\.[89]|1\.[0-2])[0-9]*$ ]] || fail "example did not fit y = 3x + 1: $out"
bash -c "source '$prefix/share/bash-completion/completions/ddprun'; complete -p ddprun" >/dev/null ||
  fail "completion does not load"
echo "install: 5 passed, 0 failed ($out)"
