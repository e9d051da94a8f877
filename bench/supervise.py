#!/usr/bin/env python3
"""Supervision benchmarks, ddprun against torchrun and mpirun in the same run:

failure: time from one worker's non-zero exit to the launcher's own exit, with N-1 idle
  workers (sleep) to tear down. The failing worker writes the time just before it exits.
footprint: the launcher's peak RSS and CPU time while supervising 8 workers that sleep for
  10 s. /usr/bin/time counts the workers' CPU too (starting 8 sleeps costs tens of ms), so
  a shell loop that starts and waits for the same sleeps is measured as the floor and the
  launcher's own share is its figure minus the floor's.

Usage: bench/supervise.py [--reps 5] [--n 8] [--out bench/results/supervise.json]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from waited import run_waited  # noqa: E402 (bench/, beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
# Debian's torchrun through the tests' wrapper (tests/support), which the benchmarks share.
TORCHRUN_WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "support", "torchrun_wrapper.py")


def launchers(ddprun, n):
    """Argv prefixes that start n copies of the program that follows."""
    found = {"ddprun": [ddprun, "-q", "--nproc-per-node", str(n), "--"]}
    if os.path.exists("/usr/bin/python3"):
        found["torchrun"] = ["/usr/bin/python3", TORCHRUN_WRAPPER,
                             "--standalone", "--monitor_interval", "0.01", "--nproc_per_node",
                             str(n), "--no_python"]
    if shutil.which("mpirun"):
        found["mpirun"] = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]
    return found


def rank_of_worker():
    # torchrun and ddprun set RANK, mpirun OMPI_COMM_WORLD_RANK.
    return "${RANK:-$OMPI_COMM_WORLD_RANK}"


def failure_once(prefix, marker):
    script = (f'if [ "{rank_of_worker()}" = 0 ]; then sleep 0.5; '
              f'date +%s.%N > {marker}; exit 3; else exec sleep 60; fi')
    _, ended = run_waited(prefix + ["/bin/sh", "-c", script], 120, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    with open(marker) as f:
        failed = float(f.read())
    os.unlink(marker)
    return (ended - failed) * 1e3


def footprint_once(prefix, seconds):
    out = subprocess.run(["/usr/bin/time", "-f", "%M %U %S"] + prefix + ["sleep", str(seconds)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=seconds + 120).stderr.strip().splitlines()[-1].split()
    return {"rss_mb": int(out[0]) / 1024.0, "cpu_ms": (float(out[1]) + float(out[2])) * 1e3}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", default="build/bin/ddprun")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", default="bench/results/supervise.json")
    args = parser.parse_args()
    peers = launchers(args.ddprun, args.n)
    result = {"benchmark": "supervise", "date": time.strftime("%Y-%m-%d"),
              "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
              "n": args.n, "failure_ms": {}, "footprint": {}}
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "failed-at")
        samples = {name: [] for name in peers}
        for _ in range(args.reps):  # interleaved, so drift hits every peer alike
            for name, prefix in peers.items():
                samples[name].append(failure_once(prefix, marker))
        for name, values in samples.items():
            result["failure_ms"][name] = summary(values)
            print(f"failure detection  {name:9s} {statistics.median(values):8.1f} ms", flush=True)
    floor = ["/bin/sh", "-c", 'for i in $(seq %d); do "$@" & done; wait' % args.n, "floor"]
    for name, prefix in dict(peers, floor=floor).items():
        runs = [footprint_once(prefix, args.seconds) for _ in range(max(1, args.reps // 2))]
        result["footprint"][name] = {key: summary([r[key] for r in runs])
                                     for key in ("rss_mb", "cpu_ms")}
        print(f"footprint          {name:9s} {result['footprint'][name]['rss_mb']['median']:8.1f} MB "
              f"{result['footprint'][name]['cpu_ms']['median']:8.0f} ms CPU", flush=True)
    floor_cpu = result["footprint"]["floor"]["cpu_ms"]["median"]
    for name in peers:
        result["footprint"][name]["cpu_over_floor_ms"] = (
            result["footprint"][name]["cpu_ms"]["median"] - floor_cpu)
    for peer in ("torchrun", "mpirun"):
        if peer in peers:
            result[f"{peer}_vs_ddprun"] = {
                "failure": result["failure_ms"][peer]["median"] /
                result["failure_ms"]["ddprun"]["median"],
                "rss": result["footprint"][peer]["rss_mb"]["median"] /
                result["footprint"]["ddprun"]["rss_mb"]["median"],
                "cpu_over_floor": result["footprint"][peer]["cpu_over_floor_ms"] /
                max(1.0, result["footprint"]["ddprun"]["cpu_over_floor_ms"])}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(result, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
