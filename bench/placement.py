#!/usr/bin/env python3
"""What binding buys here: 2 ranks trained with --numa-binding exclusive (each rank on a
core of its own) against the same run unbound (the kernel places them), in the same run,
interleaved rep by rep so that drift hits both alike. Rows: ddp-train (mlp, cnn) and Python
DDP (cnn), all over gloo on one node (loopback and shared memory), one thread per rank.
Reports each side's median epoch samples/s, the ratio bound/unbound, and the spread between
runs (coefficient of variation: stdev / mean).
Usage: bench/placement.py [--reps 5] [--out bench/results/placement.json]
The binaries are build/bin's unless the environment names others: DDPRUN, DDP_TRAIN.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time

DDPRUN = os.environ.get("DDPRUN", os.path.join("build", "bin", "ddprun"))
DDP_TRAIN = os.environ.get("DDP_TRAIN", os.path.join("build", "bin", "ddp-train"))
EPOCHS = 2  # the first is warm-up and is left out
CASES = [  # name, the worker command (after ddprun's options)
    ("ddp-train mlp batch 64",
     [DDP_TRAIN, "--config", "configs/fashion_mlp.json", "--epochs", str(EPOCHS), "--quiet",
      "--threads", "1"]),
    ("ddp-train cnn batch 64",
     [DDP_TRAIN, "--config", "configs/fashion_cnn.json", "--epochs", str(EPOCHS), "--quiet",
      "--threads", "1"]),
    ("python DDP cnn batch 64",
     ["/usr/bin/python3", "bench/python_ddp.py", "--epochs", str(EPOCHS), "--model", "cnn",
      "--batch", "64"]),
]
MODES = {"unbound": [], "exclusive": ["--numa-binding", "exclusive"]}


def rate(command):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    rates = [float(m) for m in re.findall(r"samples/s (\d+)", out)]
    assert len(rates) == EPOCHS, out
    return statistics.median(rates[1:])


def summary(values):
    mean = statistics.mean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean > 0 else 0.0
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "cv": round(cv, 4), "runs": values}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default="bench/results/placement.json")
    args = parser.parse_args()
    rows = []
    for name, worker in CASES:
        rates = {mode: [] for mode in MODES}
        for _ in range(args.reps):
            for mode, flags in MODES.items():
                rates[mode].append(rate([DDPRUN, "-q", "--nproc-per-node", "2", *flags, "--",
                                         *worker]))
        row = {"case": name, "world": 2, "transport": "gloo on one node",
               "peer": "the same run unbound"}
        row.update({mode: summary(values) for mode, values in rates.items()})
        row["ratio"] = row["exclusive"]["median"] / row["unbound"]["median"]
        rows.append(row)
        print(f"{name:24s} exclusive {row['exclusive']['median']:8.0f}  unbound "
              f"{row['unbound']['median']:8.0f} samples/s  ratio {row['ratio']:.3f}x  "
              f"(spread between runs: {100 * row['exclusive']['cv']:.1f} % bound, "
              f"{100 * row['unbound']['cv']:.1f} % unbound)", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "placement", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
