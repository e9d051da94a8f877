#!/usr/bin/env bash
# --report FILE (docs/report.md), checked against docs/report.schema.json with Debian's
# python3-jsonschema:
#  1. rank 1 fails once (exit 3, with an error file), --max-restarts 1: the report names the
#     root cause, both rounds and every rank's exit, pid, memory and last step; the report
#     read during round 0 holds the job and no round, read during round 1 it holds round 0
#     (it is rewritten at every restart);
#  2. rank 1 fails every round: the job's root cause, exit 3, and why no round followed;
#  3. a report that cannot be written stops the job before any worker starts;
#  4. the start-up's first step: the last rank to write one is named, with --quiet too.
set -euo pipefail
ddprun=$1
schema=$2
python=$3
source "$(dirname "$0")/script_test_lib.sh"
[[ -x $python ]] || cannot_run "$python is missing (Debian: python3)"
"$python" -c 'import jsonschema' 2>/dev/null ||
  cannot_run "the JSON Schema validator is missing (Debian: python3-jsonschema)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/worker.sh" <<'WORKER'
#!/bin/sh
: >"$WORK/started"
count=$TORCHELASTIC_RESTART_COUNT
echo $(( (count + 1) * 100 + RANK )) >"$DDPRUN_PROGRESS_FILE"
if [ "$RANK" = 0 ] && [ "$count" = 0 ]; then
  # Still running when rank 1 fails: ddprun stops it (SIGTERM).
  [ -n "${FAIL_ALWAYS:-}" ] || cp "$REPORT" "$WORK/report-during-round-0.json"
  : >"$WORK/rank0-ready"
  exec sleep 60
fi
if [ "$RANK" = 1 ] && { [ "$count" = 0 ] || [ -n "${FAIL_ALWAYS:-}" ]; }; then
  # Fails once rank 0 has written its step.
  while [ ! -e "$WORK/rank0-ready" ]; do sleep 0.02; done
  printf '{"message": "RuntimeError: rank 1 lost its shard"}' >"$TORCHELASTIC_ERROR_FILE"
  echo "rank 1 fails now" >&2
  exit 3
fi
if [ "$RANK" = 0 ] && [ "$count" = 1 ] && [ -z "${FAIL_ALWAYS:-}" ]; then
  cp "$REPORT" "$WORK/report-during-round-1.json"
fi
exit 0
WORKER
chmod +x "$work/worker.sh"

run_job() {  # REPORT, then extra environment; sets rc and out
  local report=$1
  shift
  rm -f "$work/rank0-ready"
  rc=0
  out=$(env WORK="$work" REPORT="$report" "$@" "$ddprun" --nproc-per-node 2 --max-restarts 1 \
    --run-id report-test --log-dir "$work/logs" --report "$report" -- "$work/worker.sh" 2>&1) ||
    rc=$?
}

# Checks the reports named on the command line against the schema, then runs the Python
# assertions given on stdin with `docs` holding them in order.
check() {
  "$python" - "$schema" "$@" 3<&0 <<'PYTHON'
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
docs = []
for path in sys.argv[2:]:
    doc = json.load(open(path))
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    docs.append(doc)
checks = open(3).read()
exec(compile(checks, "checks", "exec"), {"docs": docs})
PYTHON
}

# 1. Fails once, then succeeds.
run_job "$work/report.json"
[[ $rc -eq 0 ]] || fail "ddprun exited $rc: $out"
for round in 0 1; do
  [[ -s $work/report-during-round-$round.json ]] ||
    fail "rank 0 found no report during round $round: $out"
done
check "$work/report.json" "$work/report-during-round-"{1,0}.json <<'CHECKS' || fail "report 1: $out"
doc, during, before = docs
assert doc["schema"] == 1 and doc["run_id"] == "report-test", doc
assert doc["state"] == "ended" and doc["exit_code"] == 0 and doc["restarts"] == 1, doc
assert doc["root_cause"] is None, doc["root_cause"]
assert len(doc["rounds"]) == 2, doc["rounds"]
first, second = doc["rounds"]
assert first["outcome"] == "failed" and first["restarted"] and first["decision"] == "restart 1 of 1", first
cause = first["root_cause"]
assert cause["kind"] == "failure" and cause["rank"] == 1 and cause["exit_code"] == 3, cause
assert cause["message"] == "RuntimeError: rank 1 lost its shard", cause
assert "lost its shard" in cause["error_file_text"], cause
assert "rank 1 fails now" in cause["stderr_tail"], cause
ranks = {r["rank"]: r for r in first["ranks"]}
assert ranks[0]["signal"] == "SIGTERM" and ranks[0]["exit_code"] is None, ranks[0]
assert ranks[1]["exit_code"] == 3 and ranks[1]["signal"] is None, ranks[1]
assert ranks[1]["error_message"] == "RuntimeError: rank 1 lost its shard", ranks[1]
assert [ranks[r]["last_step"] for r in (0, 1)] == [100, 101], ranks
assert second["outcome"] == "succeeded" and not second["restarted"], second
assert second["root_cause"] is None, second
for rank in second["ranks"]:
    assert rank["exit_code"] == 0 and rank["last_step"] == 200 + rank["rank"], rank
for rank in first["ranks"] + second["ranks"]:
    assert rank["kind"] == "worker" and rank["host"] and rank["pid"] > 0, rank
    assert rank["max_rss_kb"] > 0 and rank["run_seconds"] >= 0, rank
assert [p["phase"] for p in doc["startup"]] == ["inputs", "prepare", "spawn"], doc["startup"]
# What a job killed during round 1 would have left: round 0, and no end yet.
assert during["state"] == "running" and during["exit_code"] is None, during
assert len(during["rounds"]) == 1 and during["rounds"][0]["restarted"], during["rounds"]
assert during["rounds"][0]["root_cause"]["rank"] == 1, during["rounds"][0]
# Written before round 0: the job, no rounds yet.
assert before["state"] == "running" and before["rounds"] == [], before
assert before["run_id"] == "report-test" and before["nodes"][0]["host"], before
CHECKS

# 2. Fails every round: no restart left.
run_job "$work/failed.json" FAIL_ALWAYS=1
[[ $rc -eq 3 ]] || fail "ddprun exited $rc, not 3: $out"
check "$work/failed.json" <<'CHECKS' || fail "report 2: $out"
doc = docs[0]
assert doc["exit_code"] == 3 and len(doc["rounds"]) == 2, doc
assert doc["end"] == "not restarting: no restart left (--max-restarts 1)", doc["end"]
cause = doc["root_cause"]
assert cause["round"] == 1 and cause["rank"] == 1 and cause["code"] == 3, cause
assert cause["message"] == "RuntimeError: rank 1 lost its shard", cause
assert not doc["rounds"][1]["restarted"], doc["rounds"][1]
CHECKS

# 3. A report nobody can write: an error before any worker starts.
rm -f "$work/started"
run_job "$work/no-such-folder/report.json"
[[ $rc -eq 125 ]] || fail "ddprun exited $rc, not 125: $out"
grep -q "ddprun: error: --report $work/no-such-folder/report.json: cannot write" <<<"$out" ||
  fail "no error naming the report: $out"
[[ ! -e $work/started ]] || fail "a worker started: $out"
# 4. The start-up's first step, under --quiet (no console line, still in the report): rank 1
#    takes 1.5 s to its first step, rank 0 none.
cat >"$work/steps.sh" <<'WORKER'
#!/bin/sh
[ "$RANK" = 1 ] && sleep 1.5
echo 1 >"$DDPRUN_PROGRESS_FILE"
WORKER
chmod +x "$work/steps.sh"
rc=0
out=$("$ddprun" --quiet --nproc-per-node 2 --log-dir "$work/logs" --report "$work/steps.json" \
  -- "$work/steps.sh" 2>&1) || rc=$?
[[ $rc -eq 0 ]] || fail "ddprun exited $rc: $out"
[[ $out != *"first step"* ]] || fail "--quiet showed the first steps: $out"
check "$work/steps.json" <<'CHECKS' || fail "report 4: $out"
doc = docs[0]
phases = {p["phase"]: p for p in doc["startup"]}
last = phases["first_step"]
assert last["rank"] == 1 and last["host"] and last["seconds"] >= 1.5, doc["startup"]
ranks = {r["rank"]: r for r in doc["rounds"][0]["ranks"]}
assert ranks[1]["first_step_seconds"] == last["seconds"], ranks
assert 0 <= ranks[0]["first_step_seconds"] <= last["seconds"], ranks
CHECKS
echo "PASS: a failed round and its restart, a failed job, an unwritable report, the first steps"
