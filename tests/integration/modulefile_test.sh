#!/usr/bin/env bash
# cmake --install writes PREFIX/modulefiles/ddprun/VERSION; with Lmod, `module use
# PREFIX/modulefiles; module load ddprun` puts the installed ddprun first on PATH, its man
# page on MANPATH, and `module unload` takes them away again. Without Lmod the test is
# skipped (exit 77), and fails under CI=true.
set -euo pipefail
build=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
lmod=/usr/share/lmod/lmod/init/bash
if [[ ! -f $lmod ]]; then
  [[ ${CI:-} == true ]] && fail "Lmod is missing (apt-get install lmod)"
  echo "SKIP: Lmod is missing (apt-get install lmod)"
  exit 77
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
version=$("$build/bin/ddprun" --version | awk '{print $2}')
[[ -f $prefix/modulefiles/ddprun/$version ]] || fail "modulefiles/ddprun/$version not installed"
out=$(env -i HOME="$HOME" PATH=/usr/bin:/bin bash --norc -c "
  source $lmod
  module use '$prefix/modulefiles'
  module load ddprun
  echo \"which=\$(command -v ddprun)\"
  echo \"version=\$(ddprun --version)\"
  echo \"root=\$DDPRUN_ROOT\"
  echo \"man=\$MANPATH\"
  if command -v man >/dev/null; then echo \"ls_page=\$(man -w ls 2>/dev/null || echo none)\"; fi
  module unload ddprun
  echo \"after=\$(command -v ddprun || echo none)\"
" 2>&1) || { echo "$out" >&2; fail "module load failed"; }
grep -qx "which=$prefix/bin/ddprun" <<<"$out" || fail "ddprun is not the installed one: $out"
grep -qx "version=ddprun $version" <<<"$out" || fail "wrong version: $out"
grep -qx "root=$prefix" <<<"$out" || fail "DDPRUN_ROOT not set: $out"
grep -q "^man=.*$prefix/share/man" <<<"$out" || fail "MANPATH lacks the man page: $out"
grep -qx "after=none" <<<"$out" || fail "module unload left ddprun on PATH: $out"
! grep -qx "ls_page=none" <<<"$out" || fail "with the module loaded, man no longer finds the system's pages: $out"
echo "modulefile: 6 passed, 0 failed"
