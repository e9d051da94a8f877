#!/usr/bin/env bash
# Draws ddp-train metrics files (JSON lines) as PNG or SVG (from the output's extension):
# loss, samples/s and test accuracy against the step, one colour per file. Step lines
# (metrics.every_steps) are drawn as curves, the epochs' evaluations as points on top;
# files with epoch lines only are drawn per epoch. Needs gnuplot (gnuplot-nox) and python3.
# Usage: scripts/plot-metrics.sh -o curves.png RUN.jsonl [RUN2.jsonl ...]
set -euo pipefail

die() { echo "plot-metrics: error: $*" >&2; exit 2; }
out=""
files=()
while (($#)); do
  case $1 in
    -o) [[ $# -ge 2 ]] || die "-o needs a file name"; out=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ -n $out ]] || die "no output file: give -o curves.png (or .svg)"
((${#files[@]})) || die "no metrics file given"
case $out in
  *.png) terminal="pngcairo size 1500,450 font ',11'" ;;
  *.svg) terminal="svg size 1500,450 font ',11'" ;;
  *) die "$out: the output must end in .png or .svg" ;;
esac
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Per file: $i.steps.tsv (step, loss, samples/s) and $i.epochs.tsv (x, train loss, test
# accuracy, samples/s, test loss; "?" where a value is missing); $i.axis holds "step" when
# every epoch line names its step, else "epoch".
for i in "${!files[@]}"; do
  file=${files[$i]}
  [[ -r $file ]] || die "$file: cannot read it"
  python3 - "$file" "$work/$i" <<'PY' || exit 2
import json, sys
path, base = sys.argv[1], sys.argv[2]
steps, epochs = [], []
with open(path) as f:
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if row.get("kind") == "step":
                steps.append((row["step"], row["loss"], row["samples_per_s"]))
            else:
                epochs.append((row.get("step"), row["epoch"], row["train_loss"],
                               row["test_accuracy"], row["samples_per_s"], row.get("test_loss")))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            sys.exit(f"plot-metrics: error: {path}:{number}: not a ddp-train metrics line ({e})")
if not steps and not epochs:
    sys.exit(f"plot-metrics: error: {path}: no epochs or steps in it")
by_step = all(e[0] is not None for e in epochs)
with open(base + ".axis", "w") as f:
    f.write("step" if by_step else "epoch")
with open(base + ".steps.tsv", "w") as f:
    for s in steps:
        print(*s, sep="\t", file=f)
with open(base + ".epochs.tsv", "w") as f:
    for step, epoch, loss, accuracy, rate, test_loss in epochs:
        x = step if by_step else epoch
        print(x, loss, accuracy, rate, "?" if test_loss is None else test_loss, sep="\t", file=f)
PY
done

axis=step
for i in "${!files[@]}"; do [[ $(<"$work/$i.axis") == step ]] || axis=epoch; done
title() { basename "${files[$1]}" .jsonl | tr -d "'"; }
# The plot specification of one panel: each file's step curve (column $1 of steps.tsv,
# when it has steps and the axis is the step) and its epoch points (column $2 of
# epochs.tsv), in the file's colour; $3 adds test loss points (column 5).
panel() {
  local sep="" spec="" i
  for i in "${!files[@]}"; do
    local colour="lc $((i + 1))" name
    name=$(title "$i")
    if [[ $axis == step && -n $1 && -s $work/$i.steps.tsv ]]; then
      spec+="$sep'$work/$i.steps.tsv' using 1:$1 with lines lw 2 $colour title '$name'"
      sep=", "
      name="$name, per epoch"
    fi
    if [[ -s $work/$i.epochs.tsv ]]; then
      spec+="$sep'$work/$i.epochs.tsv' using 1:$2 with linespoints pt 7 ps 1.3 lw 1 dt 2 $colour title '$name'"
      sep=", "
      if [[ -n ${3:-} ]] && awk -F'\t' '$5 != "?" { found = 1 } END { exit !found }' "$work/$i.epochs.tsv"; then
        spec+="$sep'$work/$i.epochs.tsv' using 1:5 with points pt 6 ps 1.5 $colour title '$(title "$i"), test loss'"
      fi
    fi
  done
  echo "$spec"
}
gnuplot <<GP
set terminal $terminal
set output '$out'
set datafile missing '?'
set multiplot layout 1,3
set termoption noenhanced
set grid
set xlabel '$axis'
set xrange [0:*]
set key top right box opaque
set title 'loss (train; circles: test)'
plot $(panel 2 2 test)
set key center right box opaque  # between a fast run's curve and a slow one's
set title 'samples/s'
set yrange [0:*]
plot $(panel 3 4)
set autoscale y
set key bottom right box opaque
set title 'test accuracy'
plot $(panel "" 3)
unset multiplot
GP
echo "wrote $out"
