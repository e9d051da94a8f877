#!/usr/bin/env python3
"""Training throughput: ddp-train against Python DDP (bench/python_ddp.py) on the same
model, data, optimizer, batch and threads, both started by ddprun, world sizes 1 and 2,
in the same run. Reports each side's median epoch samples/s over --reps runs and the ratio.
Usage: bench/train.py [--reps 3] [--out bench/results/train.json]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time

CASES = [  # name, ddp-train config and overrides, python_ddp.py arguments
    ("toy batch 20", "configs/toy.json", ["--batch-size", "20"],
     ["--model", "toy", "--batch", "20", "--optimizer", "sgd", "--lr", "0.05"]),
    ("mlp batch 64", "configs/fashion_mlp.json", [], ["--model", "mlp", "--batch", "64"]),
    ("cnn batch 64", "configs/fashion_cnn.json", [], ["--model", "cnn", "--batch", "64"]),
]


def rate(command):
    # One thread per rank on both sides (ddprun would give a lone rank both cores).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    rates = [float(m) for m in re.findall(r"samples/s (\d+)", out)]
    return statistics.median(rates)  # per-epoch figures of one run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="bench/results/train.json")
    args = parser.parse_args()
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    print(f"BLAS behind libblas.so.3: {blas}")
    rows = []
    for name, config, overrides, py_args in CASES:
        for world in args.worlds:
            launch = ["build/bin/ddprun", "-q", "--nproc-per-node", str(world), "--"]
            cpp = launch + ["build/bin/ddp-train", "--config", config, "--epochs", "1", "--quiet",
                            "--threads", "1"] + overrides
            py = launch + ["/usr/bin/python3", "bench/python_ddp.py", "--epochs", "1"] + py_args
            cpp_rates, py_rates = [], []
            for _ in range(args.reps):  # interleaved, so drift hits both alike
                cpp_rates.append(rate(cpp))
                py_rates.append(rate(py))
            row = {"case": name, "world": world,
                   "ddp_train": {"median": statistics.median(cpp_rates), "min": min(cpp_rates),
                                 "max": max(cpp_rates)},
                   "python_ddp": {"median": statistics.median(py_rates), "min": min(py_rates),
                                  "max": max(py_rates)}}
            row["ratio"] = row["ddp_train"]["median"] / row["python_ddp"]["median"]
            rows.append(row)
            print(f"{name:14s} world {world}: ddp-train {row['ddp_train']['median']:8.0f}  "
                  f"python DDP {row['python_ddp']['median']:8.0f} samples/s  "
                  f"ratio {row['ratio']:.2f}x", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "train", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "blas": blas,
                   "reps": args.reps, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
