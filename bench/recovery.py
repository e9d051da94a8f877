#!/usr/bin/env python3
"""A lost rank: how long from its loss to the next new step, how many steps are lost, and
whether the run still ends where an uninterrupted one does.

One rank (rank 1, and separately rank 0) of the Fashion-MNIST MLP (Adam, batch 64 per rank,
one thread per rank, 2 epochs) dies by SIGKILL in the middle of epoch 2, at the same step in
every row:
  spare    as peer, with ddprun --warm-spare: the replacement is a ddp-train started ahead
           (LibTorch and the data loaded), given the lost rank's environment;
  peer     ddp-train, runtime.recovery "peer", under ddprun --restart-scope rank: the
           survivors keep running and send the replacement (a new process) their state;
  restart  ddp-train, a checkpoint every epoch, under ddprun --max-restarts 1: every rank
           restarts and resumes from the checkpoint of epoch 1;
  torchrun Python DDP (torch DDP, gloo), a checkpoint every epoch, under torchrun
           --max-restarts 1 (Debian's, through tests/support/torchrun_wrapper.py).
The rank kills itself at the start of step K (ddp-train: diagnostics.kill_*; Python: the
same hook), in its job's first process only. "Loss to next step" is the time from rank 0's
line for step K-1 (the last before the loss) to its line for step K (the next new one), as
the launcher relays them; "steps lost" the steps done again; "max diff" the largest
difference of the final parameters from the same program's uninterrupted run.

Usage: bench/recovery.py [--worlds 2 4] [--out bench/results/recovery.json]
As the Python worker (started by torchrun): bench/recovery.py --worker ...
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCHRUN_WRAPPER = os.path.join(ROOT, "tests", "support", "torchrun_wrapper.py")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 2


def worker(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DistributedSampler
    sys.path.insert(0, HERE)
    from python_ddp import MEAN, STD, idx, models

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    images = idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    x = (torch.from_numpy(images).unsqueeze(1) - MEAN) / STD
    y = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(models("mlp"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(range(len(x)), world, rank, seed=1)
    ckpt = os.path.join(args.dir, "ckpt.pt")
    start_epoch, step = 0, 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_epoch, step = state["epoch"], state["step"]
        if rank == 0:
            print(f"resuming at step {step}", flush=True)
    first_process = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        for b in range(0, len(order), 64):
            if first_process and rank == args.kill_rank and step + 1 == args.kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            batch = order[b:b + 64]
            opt.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
            step += 1
            if rank == 0:
                print(f"epoch {epoch + 1}/{EPOCHS}  step {b // 64 + 1}/{-(-len(order) // 64)}",
                      flush=True)
        if rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                        "epoch": epoch + 1, "step": step}, tmp)
            os.replace(tmp, ckpt)
        dist.barrier()
    if rank == 0:
        params = {k: v.flatten().tolist() for k, v in model.module.state_dict().items()}
        with open(os.path.join(args.dir, "final.json"), "w") as out:
            json.dump({"params": {k: {"values": v} for k, v in params.items()}}, out)
    dist.destroy_process_group()


# A progress line, as ddp-train prints them and the Python worker copies: "epoch 2/2  step
# 17/469 ...", the step counted within its epoch.
STEP = re.compile(r"^epoch (\d+)/\d+\s+step (\d+)/(\d+)\b")


def run(command, kill_at_step):
    """Runs `command`; returns (seconds from step K-1's line to step K's first line after it,
    the whole output)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=ROOT)
    before = after = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = STEP.search(line)
        if not m:
            continue
        step = (int(m.group(1)) - 1) * int(m.group(3)) + int(m.group(2))
        now = time.perf_counter()
        if step == kill_at_step - 1 and before is None:
            before = now
        elif step == kill_at_step and before is not None and after is None:
            after = now
    if proc.wait() != 0 or before is None or after is None:
        raise RuntimeError(f"{command[0]} failed or never passed step {kill_at_step}:\n" +
                           "".join(lines[-20:]))
    return after - before, "".join(lines)


def max_diff(a_file, b_file):
    with open(a_file) as a, open(b_file) as b:
        pa, pb = json.load(a)["params"], json.load(b)["params"]
    worst = 0.0
    for name, values in pa.items():
        for u, v in zip(values["values"], pb[name]["values"]):
            worst = max(worst, abs(u - v))
    return worst


def ddp_train(world, folder, name, kind, kill_rank, kill_at_step):
    recovery = "peer" if kind == "spare" else kind
    config = {
        "model": {"name": "mlp"},
        "data": {"name": "fashion_mnist", "path": DATA},
        "optimizer": {"name": "adam", "lr": 0.001},
        "train": {"epochs": EPOCHS, "batch_size_per_rank": 64, "seed": 1},
        "runtime": {"threads": 1, "backend": "gloo", "recovery": recovery},
        "progress": {"log_every": 1},
        "diagnostics": {"final_params_file": os.path.join(folder, name + ".params")},
    }
    steps_per_epoch = -(-60000 // world // 64)
    if recovery == "restart":
        config["checkpoint"] = {"dir": os.path.join(folder, name + ".ckpt"),
                                "interval_steps": steps_per_epoch}
    if kill_rank >= 0:
        config["diagnostics"].update(kill_rank=kill_rank, kill_at_step=kill_at_step)
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as out:
        json.dump(config, out)
    scope = ["--restart-scope", "rank"] if recovery == "peer" else []
    if kind == "spare":
        scope.append("--warm-spare")
    return ["build/bin/ddprun", "--nproc-per-node", str(world), "--max-restarts", "1", *scope,
            "--", "build/bin/ddp-train", "--config", path]


def torchrun(world, folder, kill_rank, kill_at_step):
    os.makedirs(folder, exist_ok=True)
    return ["/usr/bin/python3", TORCHRUN_WRAPPER, "--standalone", "--monitor_interval", "0.01",
            "--max_restarts", "1", "--nproc_per_node", str(world), os.path.abspath(__file__),
            "--worker", "--dir", folder, "--kill-rank", str(kill_rank), "--kill-at-step",
            str(kill_at_step)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--dir", default="")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-at-step", type=int, default=0)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--no-torchrun", action="store_true")
    parser.add_argument("--out", default="bench/results/recovery.json")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    folder = tempfile.mkdtemp(prefix="ddprun-recovery-bench-")
    rows = []
    try:
        for world in args.worlds:
            steps_per_epoch = -(-60000 // world // 64)
            kill_at = steps_per_epoch + steps_per_epoch // 2  # mid epoch 2
            run(ddp_train(world, folder, f"base{world}", "peer", -1, kill_at), kill_at)
            if not args.no_torchrun:
                run(torchrun(world, os.path.join(folder, f"pybase{world}"), -1, kill_at), kill_at)
            for kill_rank in (1, 0):
                for kind in ("spare", "peer", "restart", "torchrun"):
                    if kind == "torchrun" and args.no_torchrun:
                        continue
                    name = f"{kind}{world}-{kill_rank}"
                    if kind == "torchrun":
                        sub = os.path.join(folder, name)
                        seconds, out = run(torchrun(world, sub, kill_rank, kill_at), kill_at)
                        diff = max_diff(os.path.join(sub, "final.json"),
                                        os.path.join(folder, f"pybase{world}", "final.json"))
                        resumed = re.search(r"resuming at step (\d+)", out)
                    else:
                        seconds, out = run(
                            ddp_train(world, folder, name, kind, kill_rank, kill_at), kill_at)
                        diff = max_diff(os.path.join(folder, name + ".params"),
                                        os.path.join(folder, f"base{world}.params"))
                        resumed = re.search(r"resuming from \S+ at step (\d+)", out)
                    lost = kill_at - 1 - int(resumed.group(1)) if resumed else 0
                    row = {"world": world, "killed_rank": kill_rank, "kind": kind,
                           "transport": "gloo + shared memory" if kind != "torchrun" else "gloo",
                           "loss_to_next_step_s": seconds, "steps_lost": lost,
                           "max_param_diff": diff, "killed_at_step": kill_at}
                    rows.append(row)
                    print(f"world {world} rank {kill_rank} killed, {kind:8s}: "
                          f"{seconds:6.2f} s to the next step, {lost:4d} steps lost, "
                          f"max diff {diff:.3g}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = {"benchmark": "recovery", "date": time.strftime("%Y-%m-%d"),
              "machine": platform.node(), "cpus": os.cpu_count(),
              "model": "Fashion-MNIST MLP, Adam, batch 64 per rank, 2 epochs", "rows": rows}
    # Each row against the live recoveries of the same run: with a warm spare, and without.
    for row in rows:
        for peer_kind in ("spare", "peer"):
            if row["kind"] == peer_kind or (row["kind"] == "spare" and peer_kind == "peer"):
                continue
            peer = next(r for r in rows if r["kind"] == peer_kind and r["world"] == row["world"]
                        and r["killed_rank"] == row["killed_rank"])
            ratio = row["loss_to_next_step_s"] / peer["loss_to_next_step_s"]
            row["vs_" + peer_kind] = ratio
            print(f"world {row['world']} rank {row['killed_rank']}: {row['kind']} takes "
                  f"{ratio:.1f}x the time of a recovery by {peer_kind}")
    os.makedirs(os.path.dirname(os.path.join(ROOT, args.out)), exist_ok=True)
    with open(os.path.join(ROOT, args.out), "w") as out:
        json.dump(result, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
