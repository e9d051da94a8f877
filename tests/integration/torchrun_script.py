"""A script written for torchrun, unmodified: ddprun must give it everything it needs."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"])
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
assert local_rank == rank and int(os.environ["LOCAL_WORLD_SIZE"]) == world

value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
if value.item() != expected:
    print(f"all_reduce wrong: {value.item()} != {expected}", file=sys.stderr)
    sys.exit(1)
dist.barrier()
print(f"all_reduce ok: world {world} rank {rank} sum {value.item():g}")
dist.destroy_process_group()
