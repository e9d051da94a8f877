#!/usr/bin/env bash
# scripts/plot-metrics.sh draws PNG and SVG from metrics files and rejects bad input clearly.
set -euo pipefail
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '{"epoch":1,"train_loss":0.5,"test_accuracy":0.85,"samples_per_s":28000}\n{"epoch":2,"train_loss":0.35,"test_accuracy":0.867,"samples_per_s":30000}\n' >"$work/a.jsonl"
printf '{"epoch":1,"train_loss":0.6,"test_accuracy":0.8,"samples_per_s":10000}\n' >"$work/b.jsonl"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$script" -o "$work/c.png" "$work/a.jsonl" "$work/b.jsonl" >/dev/null
[[ $(head -c 8 "$work/c.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "not a PNG"
"$script" -o "$work/c.svg" "$work/a.jsonl" >/dev/null
grep -q '<svg' "$work/c.svg" || fail "not an SVG"
grep -q 'test accuracy' "$work/c.svg" || fail "SVG lacks the accuracy panel"

# Step lines (metrics.every_steps) between epoch lines: curves against the step.
printf '%s\n' '{"kind":"step","step":10,"epoch":0.5,"loss":0.9,"samples_per_s":20000,"lr":0.001}' \
  '{"kind":"step","step":20,"epoch":1,"loss":0.6,"samples_per_s":21000,"lr":0.001}' \
  '{"epoch":1,"step":20,"train_loss":0.7,"test_accuracy":0.8,"test_loss":0.65,"samples_per_s":20500}' \
  >"$work/steps.jsonl"
err=$("$script" -o "$work/s.svg" "$work/steps.jsonl" "$work/a.jsonl" 2>&1 >/dev/null) || fail "step lines: $err"
[[ -z $err ]] || fail "gnuplot complained: $err"
grep -q '>step<' "$work/s.svg" && fail "mixed files must fall back to the epoch axis"
"$script" -o "$work/t.svg" "$work/steps.jsonl" >/dev/null
grep -q '>step<' "$work/t.svg" || fail "step lines not drawn against the step"
grep -q 'steps, per epoch' "$work/t.svg" || fail "epoch points not drawn over the step curve"

printf '{"epoch":1,"train_loss":0.5}\n' >"$work/bad.jsonl"
if err=$("$script" -o "$work/x.png" "$work/bad.jsonl" 2>&1); then fail "bad metrics accepted"; fi
[[ $err == *"bad.jsonl:1: not a ddp-train metrics line"* ]] || fail "unclear error: $err"
if err=$("$script" -o "$work/x.gif" "$work/a.jsonl" 2>&1); then fail "gif accepted"; fi
[[ $err == *"must end in .png or .svg"* ]] || fail "unclear error: $err"
[[ ! -e $work/x.png ]] || fail "output written despite the error"
echo "plot-metrics: 9 passed, 0 failed"
