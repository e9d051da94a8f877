#!/usr/bin/env python3
"""Gradient sync overhead with 2 ranks: DDP step time / no-communication step time
(= no-comm samples/s over DDP samples/s), and the milliseconds sync adds to a step, for
ddp-train with overlap and with all-reduce after backward (runtime.overlap false), each
through shared memory, over gloo only (runtime.shared_memory false), and over gloo with
small buckets (runtime.bucket_cap_mb 0.05: the MLP's and CNN's gradients then fill 4 and 3
buckets instead of one, so overlap has something to overlap); and for Python DDP (its
no-comm time: every step under model.no_sync()). ddp-train's no-comm time comes from
diagnostics.no_gradient_sync. Same cases, threads and launcher as bench/train.py; all
variants interleaved in every rep.
Usage: bench/sync_overhead.py [--reps 3] [--out bench/results/sync_overhead.json]
                              [--cases toy mlp cnn] [--variants overlap_gloo ...]
--cases and --variants run only some cases and ddp-train variants (the no-comm runs and
Python's always run). The binaries are build/bin's unless DDPRUN / DDP_TRAIN name others.
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import CASES, DDP_TRAIN, DDPRUN, EPOCHS, rate, stats, variant_config  # noqa: E402

SMALL_BUCKET_MB = 0.05
GLOO = {"shared_memory": False}
SMALL_BUCKETS = {"shared_memory": False, "bucket_cap_mb": SMALL_BUCKET_MB}
RUNTIME_VARIANTS = {  # ddp-train variant -> runtime entries of its config
    "overlap": {"overlap": True},
    "after_backward": {"overlap": False},
    "overlap_gloo": {"overlap": True, **GLOO},
    "after_backward_gloo": {"overlap": False, **GLOO},
    "overlap_gloo_small_buckets": {"overlap": True, **SMALL_BUCKETS},
    "after_backward_gloo_small_buckets": {"overlap": False, **SMALL_BUCKETS},
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--out", default="bench/results/sync_overhead.json")
    parser.add_argument("--cases", nargs="+", choices=[c[0].split()[0] for c in CASES],
                        default=[c[0].split()[0] for c in CASES])
    parser.add_argument("--variants", nargs="+", choices=list(RUNTIME_VARIANTS),
                        default=list(RUNTIME_VARIANTS))
    args = parser.parse_args()
    launch = [DDPRUN, "-q", "--nproc-per-node", str(args.world), "--"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, overrides, py_args in CASES:
            key = name.split()[0]
            if key not in args.cases:
                continue
            configs = {v: variant_config(config, tmp, f"{key}-{v}", runtime)
                       for v, runtime in RUNTIME_VARIANTS.items() if v in args.variants}
            configs["no_comm"] = variant_config(config, tmp, key + "-no_comm",
                                                diagnostics={"no_gradient_sync": True})
            # Epochs as bench/train.py: rate() counts those after its warm-up epoch.
            epochs = ["--epochs", str(EPOCHS)]
            commands = {
                f"ddp_train_{v}": launch + [DDP_TRAIN, "--config", path, "--quiet", "--threads",
                                            "1"] + epochs + overrides
                for v, path in configs.items()}
            py = launch + ["/usr/bin/python3", "bench/python_ddp.py"] + epochs + py_args
            commands["python_ddp"] = py
            commands["python_no_comm"] = py + ["--no-sync"]
            rates = {k: [] for k in commands}
            for _ in range(args.reps):  # interleaved, so drift hits all alike
                for k, command in commands.items():
                    rates[k].append(rate(command))
            # Per rep, so each figure compares runs made moments apart. The ratio hides how
            # fast the step is without communication, so the time sync adds to each step
            # (all ranks' samples per step over the rate, DDP minus no-comm) comes with it.
            samples_per_step = int(py_args[py_args.index("--batch") + 1]) * args.world

            def overhead(ddp, no_comm):
                pairs = list(zip(rates[ddp], rates[no_comm]))
                return {"ratio": stats([n / d for d, n in pairs]),
                        "added_ms_per_step": stats([1e3 * samples_per_step * (1 / d - 1 / n)
                                                    for d, n in pairs])}
            row = {"case": name, "world": args.world, "samples_per_step": samples_per_step,
                   "samples_per_s": {k: stats(v) for k, v in rates.items()},
                   "runs_samples_per_s": rates,
                   "overhead": {k: overhead(k, "ddp_train_no_comm") for k in rates
                                if k.startswith("ddp_train_") and k != "ddp_train_no_comm"}}
            row["overhead"]["python_ddp"] = overhead("python_ddp", "python_no_comm")
            rows.append(row)
            print(f"{name:14s} world {args.world}: step time / no-comm step time (ms added per "
                  "step): " + ", ".join(
                      f"{k} {v['ratio']['median']:.2f}x ({v['added_ms_per_step']['median']:.2f})"
                      for k, v in row["overhead"].items()), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "sync_overhead", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "reps": args.reps,
                   "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
