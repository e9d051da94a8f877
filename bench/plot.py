#!/usr/bin/env python3
"""One chart of the suite's ratios (bench/results/*.json): how many times faster, smaller or
cheaper ddprun and ddp-train are than each peer measured in the same run (> 1: ddprun
ahead). Writes bench/results/summary.svg with gnuplot (log scale).
Usage: bench/plot.py [--out bench/results/summary.svg]
"""
import argparse
import json
import os
import subprocess
import tempfile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(name):
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def ratios():
    rows = []
    launch = load("launch")
    if launch:
        for row in launch["rows"]:
            ms = row["ddprun"]["median_ms"]
            for peer in ("torchrun_fast_monitor", "mpirun"):
                if peer in row:
                    rows.append((f"launch {row['n']}: {peer.split('_')[0]}",
                                 row[peer]["median_ms"] / ms))
    supervise = load("supervise")
    if supervise:
        for peer in ("torchrun", "mpirun"):
            if f"{peer}_vs_ddprun" in supervise:
                r = supervise[f"{peer}_vs_ddprun"]
                rows += [(f"failure detection: {peer}", r["failure"]),
                         (f"peak RSS: {peer}", r["rss"]), (f"CPU: {peer}", r["cpu_over_floor"])]
    first = load("first_step")
    if first:
        rows.append(("first step: torchrun+Python", first["torchrun_vs_ddprun_first_step"]))
    train = load("train")
    if train:
        for row in train["rows"]:
            rows.append((f"train {row['case'].split()[0]} w{row['world']}: Python DDP", row["ratio"]))
    hierarchy = load("hierarchy")
    if hierarchy:
        for row in hierarchy["rows"]:
            if row["link"] == "none":
                rows.append((f"train {row['case'].split()[0]} 2x2 nodes: Python DDP",
                             row["ratio_vs_python_ddp"]))
    shm, gloo = load("allreduce"), load("allreduce_gloo")
    if shm and gloo:
        speed = {r["bytes"]: r["allreduce_gb_per_s"]["median"] for r in shm["rows"]}
        for row in gloo["rows"]:
            if row["bytes"] in (4 << 10, 1 << 20, 100 << 20) and row["bytes"] in speed:
                size = f"{row['bytes'] >> 20} MiB" if row["bytes"] >= 1 << 20 else "4 KiB"
                rows.append((f"all-reduce {size}: gloo", speed[row["bytes"]] /
                             row["allreduce_gb_per_s"]["median"]))
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(RESULTS, "summary.svg"))
    args = parser.parse_args()
    rows = ratios()
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as data:
        for i, (label, value) in enumerate(rows):
            data.write(f'{i} {value:.4f} "{label}"\n')
    script = f"""
set terminal svg size 900,{120 + 22 * len(rows)} dynamic font "sans,11"
set output "{args.out}"
set title "ddprun and ddp-train against peers measured in the same run (times better; > 1: ahead)"
set logscale x 10
set xrange [0.3:1000]
set yrange [-1:{len(rows)}]
set lmargin 34
set grid xtics
set key off
set style fill solid 0.6
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb "black"
plot "{data.name}" using (1):1:(1):2:($1-0.35):($1+0.35):ytic(3) with boxxyerrorbars \\
       lc rgb "#4477aa", \\
     "" using ($2 * 1.15):1:($2 >= 10 ? sprintf("%.0fx", $2) : sprintf("%.2fx", $2)) \\
       with labels left font ",10"
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data.name)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
