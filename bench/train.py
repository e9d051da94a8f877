#!/usr/bin/env python3
"""Training throughput: ddp-train against Python DDP (bench/python_ddp.py) on the same
model, data, optimizer, batch and threads, both started by ddprun, world sizes 1 and 2,
in the same run. Reports each side's median epoch samples/s over --reps runs and the ratio;
each run trains 2 epochs and only the second counts (the first is warm-up).
With more than one rank ddp-train also runs with runtime.shared_memory false (gloo only,
like Python DDP), to show what the shared-memory all-reduce is worth.
Usage: bench/train.py [--reps 3] [--out bench/results/train.json]
The binaries are build/bin's unless the environment names others: DDPRUN, DDP_TRAIN.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time

# The binaries: build/bin's unless DDPRUN / DDP_TRAIN name others (another build folder).
DDPRUN = os.environ.get("DDPRUN", os.path.join("build", "bin", "ddprun"))
DDP_TRAIN = os.environ.get("DDP_TRAIN", os.path.join("build", "bin", "ddp-train"))

CASES = [  # name, ddp-train config and overrides, python_ddp.py arguments
    ("toy batch 20", "configs/toy.json", ["--batch-size", "20"],
     ["--model", "toy", "--batch", "20", "--optimizer", "sgd", "--lr", "0.05"]),
    ("mlp batch 64", "configs/fashion_mlp.json", [], ["--model", "mlp", "--batch", "64"]),
    ("cnn batch 64", "configs/fashion_cnn.json", [], ["--model", "cnn", "--batch", "64"]),
]


EPOCHS = 2  # per run; the first is warm-up (first allocations, lazy initialisation) and
WARMUP_EPOCHS = 1  # is left out of the figures on both sides


def variant_config(base, tmp, name, runtime=None, diagnostics=None):
    """A copy of config `base` in `tmp` with `runtime` and `diagnostics` entries replaced."""
    with open(base) as f:
        config = json.load(f)
    config.setdefault("runtime", {}).update(runtime or {})
    config.setdefault("diagnostics", {}).update(diagnostics or {})
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def stats(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def rate(command):
    # One thread per rank on both sides (ddprun would give a lone rank both cores).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    rates = [float(m) for m in re.findall(r"samples/s (\d+)", out)]
    assert len(rates) == EPOCHS, out
    return statistics.median(rates[WARMUP_EPOCHS:])  # per-epoch figures after the warm-up


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="bench/results/train.json")
    args = parser.parse_args()
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    print(f"BLAS behind libblas.so.3: {blas}")
    rows = []
    tmp = tempfile.mkdtemp()
    for name, config, overrides, py_args in CASES:
        for world in args.worlds:
            launch = [DDPRUN, "-q", "--nproc-per-node", str(world), "--"]
            train_args = ["--epochs", str(EPOCHS), "--quiet", "--threads", "1"] + overrides
            commands = {
                "ddp_train": launch + [DDP_TRAIN, "--config", config] + train_args,
                "python_ddp": launch + ["/usr/bin/python3", "bench/python_ddp.py", "--epochs",
                                        str(EPOCHS)] + py_args}
            if world > 1:
                gloo = variant_config(config, tmp, name.split()[0] + "-gloo",
                                      {"shared_memory": False})
                commands["ddp_train_gloo"] = launch + [DDP_TRAIN, "--config", gloo] + train_args
            rates = {k: [] for k in commands}
            for _ in range(args.reps):  # interleaved, so drift hits all alike
                for k, command in commands.items():
                    rates[k].append(rate(command))
            row = {"case": name, "world": world}
            row.update({k: stats(v) for k, v in rates.items()})
            row["ratio"] = row["ddp_train"]["median"] / row["python_ddp"]["median"]
            line = (f"{name:14s} world {world}: ddp-train {row['ddp_train']['median']:8.0f}  "
                    f"python DDP {row['python_ddp']['median']:8.0f} samples/s  "
                    f"ratio {row['ratio']:.2f}x")
            if "ddp_train_gloo" in row:
                row["ratio_gloo"] = row["ddp_train_gloo"]["median"] / row["python_ddp"]["median"]
                line += (f"  (ddp-train over gloo only {row['ddp_train_gloo']['median']:8.0f}, "
                         f"{row['ratio_gloo']:.2f}x)")
            rows.append(row)
            print(line, flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump({"benchmark": "train", "date": time.strftime("%Y-%m-%d"),
                   "machine": platform.node(), "cpus": os.cpu_count(), "blas": blas,
                   "reps": args.reps, "rows": rows}, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
