#!/usr/bin/env python3
"""Gradient sync overhead with 2 ranks: DDP step time / no-communication step time
(= no-comm samples/s over DDP samples/s) for ddp-train with overlap, ddp-train averaging
after backward (runtime.overlap false), ddp-train over gloo only (runtime.shared_memory
false), and Python DDP (its no-comm time: every step under
model.no_sync()). ddp-train's no-comm time comes from diagnostics.no_gradient_sync. Same
cases, threads and launcher as bench/train.py; all variants interleaved in every rep.
Usage: bench/sync_overhead.py [--reps 3] [--out bench/results/sync_overhead.json]
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import CASES, rate, stats, variant_config  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--out", default="bench/results/sync_overhead.json")
    args = parser.parse_args()
    launch = ["build/bin/ddprun", "-q", "--nproc-per-node", str(args.world), "--"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, overrides, py_args in CASES:
            key = name.split()[0]
            configs = {
                "overlap": variant_config(config, tmp, key + "-overlap", {"overlap": True}),
                "after_backward": variant_config(config, tmp, key + "-after", {"overlap": False}),
                "overlap_gloo": variant_config(config, tmp, key + "-overlap-gloo",
                                               {"overlap": True, "shared_memory": False}),
                "no_comm": variant_config(config, tmp, key + "-nocomm",
                                          diagnostics={"no_gradient_sync": True}),
            }
            commands = {
                f"ddp_train_{v}": launch + ["build/bin/ddp-train", "--config", path, "--epochs",
                                            "1", "--quiet", "--threads", "1"] + overrides
                for v, path in configs.items()}
            py = launch + ["/usr/bin/python3", "bench/python_ddp.py", "--epochs", "1"] + py_args
            commands["python_ddp"] = py
            commands["python_no_comm"] = py + ["--no-sync"]
            rates = {k: [] for k in commands}
            for _ in range(args.reps):  # interleaved, so drift hits all alike
                for k, command in commands.items():
                    rates[k].append(rate(command))
            # Per rep, so each ratio compares runs made moments apart.
            def ratios(ddp, no_comm):
                return stats([n / d for n, d in zip(rates[no_comm], rates[ddp])])
            row = {"case": name, "world": args.world,
                   "samples_per_s": {k: stats(v) for k, v in rates.items()},
                   "overhead": {
                       "ddp_train_overlap": ratios("ddp_train_overlap", "ddp_train_no_comm"),
                       "ddp_train_after_backward": ratios("ddp_train_after_backward",
                                                          "ddp_train_no_comm"),
                       "ddp_train_overlap_gloo": ratios("ddp_train_overlap_gloo",
                                                        "ddp_train_no_comm"),
                       "python_ddp": ratios("python_ddp", "python_no_comm")}}
            rows.append(row)
            o = row["overhead"]
            print(f"{name:14s} world {args.world}: step time / no-comm step time: ddp-train "
                  f"overlap {o['ddp_train_overlap']['median']:.2f}x, after backward "
                  f"{o['ddp_train_after_backward']['median']:.2f}x, gloo only "
                  f"{o['ddp_train_overlap_gloo']['median']:.2f}x, Python DDP "
                  f"{o['python_ddp']['median']:.2f}x", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "sync_overhead", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
