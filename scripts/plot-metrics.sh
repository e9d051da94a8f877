#!/usr/bin/env bash
# Draws train loss, test accuracy and samples/s per epoch from ddp-train metrics files
# (JSON lines, one object per epoch), one curve per file, as PNG or SVG (from the output's
# extension). Needs gnuplot (Debian: gnuplot-nox) and python3.
# Usage: scripts/plot-metrics.sh -o curves.png RUN.jsonl [RUN2.jsonl ...]
set -euo pipefail

die() { echo "plot-metrics: error: $*" >&2; exit 2; }
out=""
files=()
while (($#)); do
  case $1 in
    -o) [[ $# -ge 2 ]] || die "-o needs a file name"; out=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
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
plots=()
for i in "${!files[@]}"; do
  file=${files[$i]}
  [[ -r $file ]] || die "$file: cannot read it"
  # One row per epoch: epoch, train_loss, test_accuracy, samples_per_s.
  python3 - "$file" >"$work/$i.tsv" <<'PY' || exit 2
import json, sys
path = sys.argv[1]
with open(path) as f:
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            print(row["epoch"], row["train_loss"], row["test_accuracy"], row["samples_per_s"], sep="\t")
        except (ValueError, KeyError, TypeError) as e:
            sys.exit(f"plot-metrics: error: {path}:{number}: not a ddp-train metrics line ({e})")
PY
  [[ -s $work/$i.tsv ]] || die "$file: no epochs in it"
  plots+=("$i")
done

title() { basename "${files[$1]}" .jsonl | tr -d "'"; }
curves() {  # $1: column
  local sep="" spec=""
  for i in "${plots[@]}"; do
    spec+="$sep'$work/$i.tsv' using 1:$1 with linespoints lw 2 title '$(title "$i")'"
    sep=", "
  done
  echo "$spec"
}
gnuplot <<GP
set terminal $terminal
set output '$out'
set multiplot layout 1,3
set termoption noenhanced
set grid
set xlabel 'epoch'
set xtics 1
set key bottom right box opaque
set title 'train loss'
plot $(curves 2)
set title 'test accuracy'
plot $(curves 3)
set title 'samples/s'
plot $(curves 4)
unset multiplot
GP
echo "wrote $out"
