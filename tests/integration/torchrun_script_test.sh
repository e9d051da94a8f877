#!/usr/bin/env bash
# An unmodified torchrun-style Python script under ddprun: ddprun exits 0, rank 1's
# all_reduce line arrives tagged, and no error line is printed.
set -euo pipefail
ddprun=$1 python=$2 script=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! "$python" -c 'import torch.distributed' 2>/dev/null; then
  [[ ${CI:-} == true ]] && fail "cannot run, and CI=true: $python has no torch (python3-torch)"
  echo "SKIP: $python has no torch (python3-torch)"
  exit 77
fi
rc=0
out=$("$ddprun" --nproc-per-node 2 --tag-output -- "$python" "$script" 2>&1) || rc=$?
echo "$out"
((rc == 0)) || fail "ddprun exited $rc"
grep -qE '^\[[^]]+:1\] all_reduce ok: world 2' <<<"$out" || fail "no all_reduce line from rank 1"
! grep -q 'ddprun: error' <<<"$out" || fail "an error line"
echo "torchrun script: 3 passed, 0 failed"
