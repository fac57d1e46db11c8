#!/usr/bin/env python3
"""A stock PyTorch 2.x DDP training script (Gloo, env://), as a user writes it for torchrun.

It trains a small MLP for a few steps under torch.nn.parallel.DistributedDataParallel on
rank-dependent data and prints one line per rank:
  DDP rank=R world=W checksum=C
Every rank must end with the same parameters (DDP's gradient all-reduce), so C agrees.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts them)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(5):
        x = torch.randn(8, 16, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"DDP rank={rank} world={world} local_rank={os.environ['LOCAL_RANK']} "
          f"checksum={checksum:.12e}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
