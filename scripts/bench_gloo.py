#!/usr/bin/env python3
"""Gloo's own collectives in torch 2.x against the forms ftbench's Comm uses on Gloo.

Two ranks on this host (Gloo over TCP loopback, as `parallel.local_collectives = "off"` runs
them), one thread each, a gradient-bucket-sized buffer. Timed, best of REPS after a warm-up:
- all-reduce of fp32; of bf16 natively (Gloo 2.x sums in bf16); of bf16 upcast to fp32 and
  cast back (what Comm does: reductions in fp32);
- reduce-scatter: Gloo's reduce_scatter_tensor against all_to_all_single + local sum (Comm's);
- all-gather: all_gather_into_tensor (Comm's) against the list form.
Prints one markdown table with the CPU model; every figure is measured here.
Usage: bench_gloo.py [MIB] [REPS]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import cpu_model  # noqa: E402


def best(fn, reps):
    fn()
    dist.barrier()
    ts = []
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def cases(n, world):
    f32 = torch.randn(n)
    b16 = f32.bfloat16()
    out_rs = torch.empty(n // world)
    recv = torch.empty(n)
    gathered = torch.empty(n)
    shard = torch.randn(n // world)
    parts = [torch.empty(n // world) for _ in range(world)]

    def bf16_upcast():
        w = b16.float()
        dist.all_reduce(w)
        b16.copy_(w)

    def a2a_sum():
        dist.all_to_all_single(recv, f32)
        torch.sum(recv.view(world, -1), 0, out=out_rs)

    return [
        ("all-reduce fp32", lambda: dist.all_reduce(f32), 4 * n),
        ("all-reduce bf16, Gloo native (bf16 sums)", lambda: dist.all_reduce(b16), 4 * n),
        ("all-reduce bf16 as fp32 (Comm)", bf16_upcast, 4 * n),
        ("reduce-scatter fp32, Gloo reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(out_rs, f32), 4 * n),
        ("reduce-scatter fp32, all_to_all_single + sum (Comm)", a2a_sum, 4 * n),
        ("all-gather fp32, all_gather_into_tensor (Comm)", lambda: dist.all_gather_into_tensor(gathered, shard), 4 * n),
        ("all-gather fp32, list form", lambda: dist.all_gather(parts, shard), 4 * n),
    ]


def worker(rank, world, port, mib, reps, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n = mib * 2**20 // 4 // world * world
    rows = [(name, best(fn, reps), nbytes) for name, fn, nbytes in cases(n, world)]
    if rank == 0:
        q.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    world = 2
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, mib, reps, q)) for r in range(world)]
    for p in procs:
        p.start()
    rows = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    print(f"# Gloo collectives in torch {torch.__version__}: Gloo's own against Comm's forms\n")
    print(f"CPU **{cpu_model()}**, {os.cpu_count()} online CPUs, world {world} on this host over "
          f"TCP loopback, 1 thread per rank, a {mib} MiB fp32 buffer (bf16 rows: the same "
          f"element count), best of {reps} after a warm-up (`scripts/bench.sh gloo`).\n")
    print("| collective | best time ms | fp32-equivalent GB/s of the buffer |")
    print("|---|---|---|")
    for name, t, nbytes in rows:
        print(f"| {name} | {1e3 * t:.1f} | {nbytes / t / 1e9:.2f} |")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"\n- load average (1, 5, 15 min) after: {' '.join(load)}")


if __name__ == "__main__":
    main()
