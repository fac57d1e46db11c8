#!/usr/bin/env python3
"""A stock torch.distributed script (Gloo, env://): runs unchanged under torchrun or launcher.

Every rank contributes rank+1; after all_reduce every rank must hold w(w+1)/2. Also checks an
all_gather of the ranks and prints one line per rank:
  ALLREDUCE ok rank=R world=W local_rank=L group_rank=G sum=S master=ADDR:PORT
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    t = torch.tensor([float(rank + 1)] * 1000)
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(t == expected))
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    ok = ok and [int(g.item()) for g in gathered] == list(range(world))
    dist.barrier()
    dist.destroy_process_group()
    print(f"ALLREDUCE {'ok' if ok else 'WRONG'} rank={rank} world={world} "
          f"local_rank={os.environ['LOCAL_RANK']} group_rank={os.environ['GROUP_RANK']} "
          f"sum={t[0].item()} master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
