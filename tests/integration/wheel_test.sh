#!/usr/bin/env bash
# The launcher's wheel (pyproject.toml, setup.py): built from a clean clone with Debian's
# tools and no network (python3 -m build --wheel --no-isolation), tagged for the glibc its
# ddprun needs, installed into a fresh venv with pip --no-index; the venv's ddprun prints
# its version, runs a 2-worker job and reads the topology (hwloc and libcrypto linked in), and
# `python -m ddprun` works. Needs python3-build, python3-venv and git: without them the test
# is skipped (exit 77), and fails under CI=true.
set -euo pipefail
source_dir=$1
python=/usr/bin/python3
source "$(dirname "$0")/script_test_lib.sh"
if ! "$python" -c 'import build, venv, setuptools, wheel' 2>/dev/null || ! command -v git >/dev/null; then
  cannot_run "python3-build, python3-venv, python3-setuptools, python3-wheel or git is missing"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$source_dir" "$work/src"
(cd "$work/src" && "$python" -m build --wheel --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1) ||
  { tail -30 "$work/build.log" >&2; fail "the wheel did not build"; }
wheels=("$work"/dist/*.whl)
((${#wheels[@]} == 1)) || fail "expected one wheel, got: ${wheels[*]}"
wheel=${wheels[0]}
name=$(basename "$wheel")
[[ $name =~ ^ddprun-[0-9.]+-py3-none-manylinux_2_([0-9]+)_$(uname -m)\.whl$ ]] ||
  fail "$name: not tagged py3-none-manylinux_2_N_$(uname -m)"
needed=$(objdump -T "$work/src/build-wheel/bin/ddprun" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -1)
[[ $needed == "GLIBC_2.${BASH_REMATCH[1]}" ]] || fail "$name is tagged for glibc 2.${BASH_REMATCH[1]}, ddprun needs $needed"
libs=$(ldd "$work/src/build-wheel/bin/ddprun")
[[ $libs != *libstdc++* && $libs != *libhwloc* && $libs != *libcrypto* ]] ||
  fail "the wheel's ddprun links libstdc++, hwloc or libcrypto dynamically: $libs"

"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --no-index "$wheel" || fail "pip install --no-index failed"
version=$(awk '/^project\(ddprun VERSION/ {print $3}' "$source_dir/CMakeLists.txt")
[[ $("$work/venv/bin/ddprun" --version) == "ddprun $version" ]] || fail "the venv's ddprun --version"
[[ $("$work/venv/bin/python" -m ddprun --version) == "ddprun $version" ]] || fail "python -m ddprun --version"
[[ -f $work/venv/share/man/man1/ddprun.1 && -f $work/venv/share/bash-completion/completions/ddprun ]] ||
  fail "the man page or the completion is missing from the venv"
out=$("$work/venv/bin/ddprun" -q --nproc-per-node 2 --tag-output -- sh -c 'echo "rank $RANK of $WORLD_SIZE"' 2>&1) ||
  fail "the venv's ddprun did not run 2 workers: $out"
[[ $out == *"rank 0 of 2"* && $out == *"rank 1 of 2"* ]] || fail "no 2-worker output: $out"
plan=$("$work/venv/bin/ddprun" --numa-binding node --dry-run -- true 2>&1) || fail "--numa-binding with the wheel's hwloc: $plan"
[[ $plan == *"CPUs "* ]] || fail "no placement in the dry run: $plan"
echo "wheel: 7 passed, 0 failed ($name, $(du -k "$wheel" | cut -f1) KiB)"
