#!/usr/bin/python3
"""torch_gpt_runtime: one side of scripts/bench/torch_vs_ddp. The PyTorch GPT of examples/torch/gpt.py,
AdamW, N windows per rank, trained data-parallel by tower.torch or by DDP (gloo), one thread per rank.
Launch under mpirun: `torch_gpt_runtime.py tower|ddp [options]`. Rank 0 prints one JSON line:
tokens/s from the median step time, the same step of plain PyTorch without a distributed wrapper (the compute both
runtimes share, timed in turn with it), the exposed communication (the median of their differences),
and rank 0's peak resident memory with the runtime's model alone."""
import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../examples/torch"))
from gpt import Gpt, fortunes  # noqa: E402

import tower.torch as hvd  # noqa: E402

WARMUP = 3


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("runtime", choices=["tower", "ddp"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--fusion-mb", type=float, default=4.0, help="tower.torch's bucket size")
    p.add_argument("--allreduce", default="auto", help="tower.torch's all-reduce mode")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (its default)")
    args = p.parse_args()
    hvd.init()  # tower's MPI world names the ranks for both sides
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(1)
    text = fortunes()
    width = 129
    gen = torch.Generator().manual_seed(1000 + rank)
    batches = []
    for _ in range(WARMUP + args.steps):
        starts = torch.randint(0, len(text) // width, (args.batch,), generator=gen) * width
        batches.append(torch.stack([text[s:s + width] for s in starts]))

    def one_step(model, opt, batch):
        opt.zero_grad()
        model(batch).backward()
        opt.step()

    torch.manual_seed(1)
    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    if args.runtime == "tower":
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), fusion_mb=args.fusion_mb,
                                       allreduce=args.allreduce)
        barrier = hvd.barrier
    else:
        import torch.distributed as dist
        address, port = hvd.broadcast_object(_rank0_address() if rank == 0 else None, 0)
        dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=size)
        model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True,
                                                          bucket_cap_mb=args.bucket_cap_mb)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        barrier = dist.barrier
    for batch in batches[:WARMUP]:
        one_step(model, opt, batch)
    # The runtime's memory with its model alone, before the plain copy below exists.
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # The compute both runtimes share: the same step in plain PyTorch without a distributed wrapper,
    # timed in turn with the runtime's step, so that the machine's drift weighs on both alike.
    torch.manual_seed(1)
    plain = Gpt()
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, weight_decay=0.0)
    steps, plains = [], []
    for batch in batches[WARMUP:]:
        start = time.perf_counter()
        one_step(plain, plain_opt, batch)
        plains.append(time.perf_counter() - start)
        barrier()
        start = time.perf_counter()
        one_step(model, opt, batch)
        steps.append(time.perf_counter() - start)
    buckets = opt.tower_stats()["buckets"] if args.runtime == "tower" else None
    if args.runtime == "ddp":
        dist.destroy_process_group()
    step = statistics.median(steps)
    compute = statistics.median(plains)
    exposed = statistics.median(s - p for s, p in zip(steps, plains))
    if rank == 0:
        print(json.dumps({"runtime": args.runtime, "world_size": size,
                          "tokens_per_s": args.batch * 128 * size / step, "step_ms": 1e3 * step,
                          "compute_ms": 1e3 * compute, "exposed_comm_ms": 1e3 * exposed,
                          "peak_rss_bytes": peak_rss,
                          "buckets": buckets, "fusion_mb": args.fusion_mb, "allreduce": args.allreduce, "bucket_cap_mb": args.bucket_cap_mb}),
              flush=True)
    hvd.shutdown()


def _rank0_address():
    """Where DDP's rendezvous listens: this host's address (a namespace host's, across hosts), and
    a free port there."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    with socket.socket() as s:
        s.bind((address, 0))
        return address, s.getsockname()[1]


if __name__ == "__main__":
    main()
