#!/usr/bin/env python3
"""Stragglers: what progress.stragglers costs and what it finds. ddp-train on this machine,
started by ddprun over shared memory, 3 ranks:
- overhead: samples/s with progress.stragglers on against off (the peer: the same run without
  the per-window all-reduce), toy (tiny steps: the worst case) and MLP on Fashion-MNIST;
- detection: rank 1 slowed by the delay hook (--delay-ms a step): its compute per step over
  the median's, the step by which it was named, and whether any other rank was named.
Medians of --reps runs, interleaved. Usage: bench/straggler.py [--reps 5]
[--out bench/results/straggler.json]   (DDPRUN, DDP_TRAIN name other binaries)
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile

from train import DDPRUN, DDP_TRAIN

CASES = [("toy", "configs/toy.json", 3), ("mlp", "configs/fashion_mlp.json", 1)]


def config_with(base, tmp, name, stragglers, delay_ms=0):
    with open(base) as f:
        config = json.load(f)
    config.setdefault("progress", {})["stragglers"] = stragglers
    config["runtime"]["threads"] = 1
    if config["data"].get("name") != "synthetic":
        config["data"]["train_limit"] = 12800
    if delay_ms:
        config.setdefault("diagnostics", {}).update({"delay_rank": 1, "delay_ms": delay_ms})
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def run(world, config, epochs):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([DDPRUN, "-q", "--nproc-per-node", str(world), "--", DDP_TRAIN,
                          "--config", config, "--epochs", str(epochs)],
                         check=True, capture_output=True, text=True, env=env).stdout
    rates = [float(r) for r in re.findall(r"epoch \d+/\d+ .*samples/s (\d+)", out)]
    return statistics.median(rates[1:] or rates), out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=5)
    parser.add_argument("--cases", nargs="+", default=[c[0] for c in CASES])
    parser.add_argument("--out", default="bench/results/straggler.json")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    rows = []
    for name, base, epochs in [c for c in CASES if c[0] in args.cases]:
        on = config_with(base, tmp, name + "-on", True)
        off = config_with(base, tmp, name + "-off", False)
        rates = {True: [], False: []}
        for _ in range(args.reps):
            for flag, path in ((False, off), (True, on)):
                rates[flag].append(run(args.world, path, epochs + 1)[0])
        on_rate, off_rate = statistics.median(rates[True]), statistics.median(rates[False])
        rows.append({"case": f"{name}: samples/s with stragglers on / off", "transport": "shared memory",
                     "peer": "progress.stragglers off, same run", "on": on_rate, "off": off_rate,
                     "ratio": on_rate / off_rate, "on_runs": rates[True], "off_runs": rates[False]})
        print(rows[-1], flush=True)
    for name, base, epochs in CASES[:1]:
        slow = config_with(base, tmp, name + "-slow", True, args.delay_ms)
        ratios, steps, others = [], [], 0
        for _ in range(args.reps):
            out = run(args.world, slow, 2)[1]
            named = re.findall(r"straggler: rank (\d+) on \S+ computes ([\d.]+) ms a step, ([\d.]+)x "
                               r"the median .*window ending at step (\d+)", out)
            others += sum(1 for r in named if r[0] != "1")
            mine = [r for r in named if r[0] == "1"]
            if mine:
                ratios.append(float(mine[0][2]))
                steps.append(int(mine[0][3]))
        rows.append({"case": f"{name}: rank 1 slowed by {args.delay_ms} ms a step",
                     "transport": "shared memory", "peer": "the median rank, same run",
                     "named_in_runs": f"{len(steps)}/{args.reps}",
                     "compute_ratio_to_median": statistics.median(ratios) if ratios else None,
                     "named_by_step": max(steps) if steps else None,
                     "other_ranks_named": others})
        print(rows[-1], flush=True)
    with open(args.out, "w") as f:
        json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "world": args.world,
                   "reps": args.reps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
