# Sourced by the shell tests here: how they fail, and how a test that cannot run reports it
# (ctest's SKIP_RETURN_CODE 77 outside CI; a failure under CI=true, never a pass).
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cannot_run() {
  [[ ${CI:-} == true ]] && fail "cannot run, and CI=true: $*"
  echo "SKIP: $*"
  exit 77
}
