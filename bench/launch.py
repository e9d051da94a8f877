#!/usr/bin/env python3
"""Launch benchmark: wall time to start N workers that exit at once (/bin/true) and wait.

ddprun against the floor (a shell loop that forks N and waits) and, when installed,
mpirun and torchrun (Debian's, through tests/support/torchrun_wrapper.py), measured in the same run; reports medians with min and max and ratios.
Usage: bench/launch.py [--ddprun build/bin/ddprun] [--reps 15] [--n 1 8 32]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from waited import run_waited  # noqa: E402 (bench/, beside this file)
# Debian's torchrun through the tests' wrapper (tests/support), which the benchmarks share.
TORCHRUN_WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "support", "torchrun_wrapper.py")


def measure(command, reps, timeout_s=20):
    """Median, min and max wall time of successful runs; hung or failed runs are counted."""
    times, failures = [], 0
    for _ in range(reps):
        start = time.perf_counter()
        try:
            code, _ = run_waited(command, timeout_s, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            elapsed = time.perf_counter() - start
        except subprocess.TimeoutExpired:
            code = None  # mpirun -np 32 --oversubscribe hangs now and then on 2 cores
        if code == 0:
            times.append(elapsed)
        else:
            failures += 1
    if not times:
        return {"median_ms": float("nan"), "min_ms": float("nan"), "max_ms": float("nan"),
                "failures": failures}
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "max_ms": max(times) * 1e3, "failures": failures}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", default="build/bin/ddprun")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--n", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--skip-torchrun", action="store_true")
    parser.add_argument("--out", default="bench/results/launch.json")
    args = parser.parse_args()

    peers = {
        "floor": lambda n: ["sh", "-c", f"for i in $(seq {n}); do /bin/true & done; wait"],
        "ddprun": lambda n: [args.ddprun, "--nproc-per-node", str(n), "/bin/true"],
    }
    wrapper = TORCHRUN_WRAPPER
    if os.path.exists("/usr/bin/python3") and not args.skip_torchrun:
        # Its default monitor interval (5 s in 1.13) dominates; a short one is its best case.
        peers["torchrun_fast_monitor"] = lambda n: [
            "/usr/bin/python3", wrapper, "--standalone", "--monitor_interval", "0.01",
            "--nproc_per_node", str(n), "--no_python", "/bin/true"]
    if shutil.which("mpirun"):
        peers["mpirun"] = lambda n: ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "/bin/true"]
    rows = []
    for n in args.n:
        row = {"n": n}
        for name, make in peers.items():
            row[name] = measure(make(n), args.reps)
        for peer in ("floor", "mpirun", "torchrun_fast_monitor"):
            if peer in row:
                row[f"ddprun_vs_{peer}"] = row["ddprun"]["median_ms"] / row[peer]["median_ms"]
        rows.append(row)
        cells = "  ".join(f"{k} {v['median_ms']:.1f} ms" for k, v in row.items() if isinstance(v, dict))
        print(f"N={n:3d}  {cells}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "launch", "date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
                   "cpus": os.cpu_count(), "reps": args.reps, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
