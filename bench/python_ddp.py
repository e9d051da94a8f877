"""The Python DDP peer of ddp-train for bench/train.py and bench/gpu.py: same models, data,
optimizer, batch and threads, torch.nn.parallel.DistributedDataParallel over gloo (or over
NCCL on the rank's GPU with --device cuda, as ddp-train's runtime.backend "nccl"). Started by ddprun (it
only needs torchrun's environment). Prints one line per epoch:
"epoch N samples/s X" counting all ranks' training samples over rank 0's training time."""
import argparse
import contextlib
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training pixels, as the C++ worker uses


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def models(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    return nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--synthetic", type=int, default=4096)
    parser.add_argument("--limit", type=int, default=0,
                        help="train on the first N samples only (ddp-train's data.train_limit)")
    parser.add_argument("--no-sync", action="store_true",
                        help="every step under model.no_sync(): no gradient communication "
                             "(benchmarks the compute alone; ranks diverge)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--autocast", default="none", choices=["none", "bf16", "fp16"],
                        help="as ddp-train's runtime.autocast: the forward and loss under "
                             "torch.autocast; fp16 with torch.amp.GradScaler")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else None
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.model == "toy":
        g = torch.Generator().manual_seed(7)
        x = torch.randn(args.synthetic, 10, generator=g)
        y = torch.randn(args.synthetic, 5, generator=g)
        loss_fn = F.mse_loss
    else:
        root = "/usr/share/datasets/fashion-mnist"
        images = idx(f"{root}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
        x = (torch.from_numpy(images).unsqueeze(1) - MEAN) / STD
        y = torch.from_numpy(idx(f"{root}/train-labels-idx1-ubyte.gz").astype(np.int64))
        loss_fn = F.cross_entropy
    if args.limit > 0:
        x, y = x[:args.limit], y[:args.limit]
    torch.manual_seed(1)
    if cuda:  # as ddp-train: the batch is gathered on the CPU and copied to the GPU
        model = nn.parallel.DistributedDataParallel(models(args.model).to(device),
                                                    device_ids=[device.index])
    else:
        model = nn.parallel.DistributedDataParallel(models(args.model))
    opt = (torch.optim.Adam(model.parameters(), lr=args.lr) if args.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9))
    sampler = DistributedSampler(range(len(x)), num_replicas=world, rank=rank, seed=1)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.autocast)
    scaler = torch.amp.GradScaler(args.device) if args.autocast == "fp16" else None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        start, samples = time.perf_counter(), 0
        for b in range(0, len(order), args.batch):
            batch = order[b:b + args.batch]
            opt.zero_grad()
            with model.no_sync() if args.no_sync else contextlib.nullcontext():
                inputs, labels = x[batch], y[batch]
                if cuda:
                    inputs, labels = inputs.to(device), labels.to(device)
                with (torch.autocast(args.device, dtype=half) if half
                      else contextlib.nullcontext()):
                    loss = loss_fn(model(inputs).float(), labels)
                (scaler.scale(loss) if scaler else loss).backward()
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            if cuda:
                loss.item()  # as ddp-train, which reads every step's loss (a GPU sync)
            samples += len(batch)
        if cuda:
            torch.cuda.synchronize()  # the GPU's queue drained: all the epoch's work counted
        seconds = time.perf_counter() - start
        if rank == 0:
            print(f"epoch {epoch + 1} samples/s {samples * world / seconds:.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
