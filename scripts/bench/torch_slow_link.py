#!/usr/bin/python3
"""torch_slow_link: tower's GPT in PyTorch on a slow link (scripts/bench/slow_link), through DDP's
forms and through tower.torch.

The GPT of scripts/bench/peer_torch_gpt.py (AdamW, windows of Debian's fortunes, one CPU thread per
rank) in one of five forms:
    ddp              plain DDP over gloo: the whole gradient all-reduced every step
    powersgd         DDP with its PowerSGD communication hook (rank-R factors of each gradient
                     matrix, with error feedback; plain all-reduce for the first --powersgd-start steps)
    postlocal        torch 1.13's post-local SGD: DDP's post_localSGD_hook (no gradient all-reduce
                     after --local-start steps) with PostLocalSGDOptimizer averaging the parameters
                     every --period steps (PeriodicModelAverager)
    tower            tower.torch's DistributedOptimizer, replicated (the gradient all-reduced every
                     step, over MPI)
    tower_local_sgd  tower.torch's local-sgd: every worker steps alone and the workers average how
                     far they moved every --period steps (outer SGD at rate 1), the all-reduce run
                     during the next --period steps (outer_overlap=True)
Launch with mpirun, one rank per host; the DDP forms need MASTER_ADDR set to rank 0's address and
the tower forms tower.torch on PYTHONPATH:
    MASTER_ADDR=10.77.0.1 MASTER_PORT=29512 mpirun -np 2 ... /usr/bin/python3 torch_slow_link.py --form ddp
Rank 0 prints one JSON line: tokens/s over the steps after 3 warm-up steps, and the validation loss
after the last step on non-overlapping windows of the corpus' last 10% (as tower cuts it; local-sgd
settles its workers on one model first).
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_torch_gpt import Gpt, add_job_arguments, corpus_bytes, start_rank  # noqa: E402

WARMUP_STEPS = 3


def wrap_tower(model, args, optimizer_args):
    import tower.torch as hvd
    opt = torch.optim.AdamW(model.parameters(), **optimizer_args)
    options = ({"strategy": "local-sgd", "sync_every": args.period, "outer_optimizer": "sgd", "outer_lr": 1.0,
                "outer_overlap": True} if args.form == "tower_local_sgd" else {"strategy": "replicated"})
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **options)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return model, opt


def wrap(model, args, optimizer_args):
    if args.form.startswith("tower"):
        return wrap_tower(model, args, optimizer_args)
    ddp = DistributedDataParallel(model)
    if args.form == "ddp":
        return ddp, torch.optim.AdamW(ddp.parameters(), **optimizer_args)
    if args.form == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_start)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return ddp, torch.optim.AdamW(ddp.parameters(), **optimizer_args)
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.distributed.optim import PostLocalSGDOptimizer
    # Each rank alone in its subgroup: after the start no gradient is all-reduced at all. (Every
    # rank makes every group, in the same order; new_subgroups wants CUDA.)
    groups = [dist.new_group(ranks=[r]) for r in range(dist.get_world_size())]
    alone = groups[dist.get_rank()]
    state = PostLocalSGDState(process_group=None, subgroup=alone, start_localSGD_iter=args.local_start,
                              post_local_gradient_allreduce=False)
    ddp.register_comm_hook(state, post_localSGD_hook)
    averager = PeriodicModelAverager(period=args.period, warmup_steps=args.local_start)
    return ddp, PostLocalSGDOptimizer(optim=torch.optim.AdamW(ddp.parameters(), **optimizer_args), averager=averager)


def schedule(optimizer, args):
    """tower's warmup_cosine (optim/schedule.cpp): (s + 1) / warmup of the peak for the first steps,
    then half a cosine down to --min-lr at --total-steps; a constant rate when --total-steps is 0."""
    inner = getattr(optimizer, "optim", optimizer)

    def factor(s):
        if args.total_steps == 0:
            return 1.0
        if s < args.warmup_steps:
            return (s + 1) / args.warmup_steps
        progress = min(1.0, (s - args.warmup_steps) / (args.total_steps - args.warmup_steps))
        return (args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))) / args.lr
    return torch.optim.lr_scheduler.LambdaLR(inner, factor)


def sum_over_ranks(total, form):
    if form.startswith("tower"):
        import tower.torch as hvd
        return hvd.allreduce(total, op=hvd.Sum)
    dist.all_reduce(total)
    return total


def validation_loss(model, text, context, rank, world, form):
    windows = text[len(text) * 9 // 10:]
    width = context + 1
    count = len(windows) // width
    mine = range(rank * count // world, (rank + 1) * count // world)
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for first in range(mine.start, mine.stop, 64):
            batch = torch.stack([windows[w * width:(w + 1) * width] for w in range(first, min(first + 64, mine.stop))])
            total[0] += model(batch).item() * len(batch)
            total[1] += len(batch)
    total = sum_over_ranks(total, form)
    return (total[0] / total[1]).item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--form", choices=["ddp", "powersgd", "postlocal", "tower", "tower_local_sgd"], default="ddp")
    add_job_arguments(p)
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--period", type=int, default=50, help="postlocal and tower_local_sgd: steps between parameter averages")
    p.add_argument("--local-start", type=int, default=10, help="postlocal: steps of plain DDP first")
    p.add_argument("--evaluate", action="store_true", help="the validation loss after the last step")
    p.add_argument("--seed", type=int, default=1, help="the model's initial values and each rank's batches")
    p.add_argument("--total-steps", type=int, default=0, help="warm-up and cosine decay over this many steps (0: constant)")
    p.add_argument("--warmup-steps", type=int, default=40)
    p.add_argument("--min-lr", type=float, default=1e-4)
    args = p.parse_args()
    rank, world = start_rank()
    torch.manual_seed(args.seed)
    tower = args.form.startswith("tower")
    if tower:
        import tower.torch as hvd
        hvd.init()
    else:
        address = f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29512')}"
        dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
    barrier = hvd.barrier if tower else dist.barrier
    all_text = corpus_bytes(args.data)
    text = all_text[: len(all_text) * 9 // 10]
    model, opt = wrap(Gpt(args.layers, args.width, args.heads, args.context), args, {"lr": args.lr, "weight_decay": 0.0})
    rate = schedule(opt, args)
    gen = torch.Generator().manual_seed(1000 * args.seed + rank)
    width = args.context + 1

    def step():
        starts = torch.randint(0, len(text) // width, (args.batch,), generator=gen) * width
        opt.zero_grad(set_to_none=True)
        model(torch.stack([text[s:s + width] for s in starts])).backward()
        opt.step()
        rate.step()

    for _ in range(WARMUP_STEPS):
        step()
    barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    barrier()
    took = time.perf_counter() - start
    if args.form == "tower_local_sgd":
        opt.settle_replicas()  # one model to evaluate, as tower train's local-sgd ends
    if args.evaluate:
        loss = validation_loss(getattr(model, "module", model), all_text, args.context, rank, world, args.form)
    else:
        loss = None
    if rank == 0:
        print(json.dumps({"form": args.form, "world_size": world, "steps": args.steps + WARMUP_STEPS,
                          "tokens_per_s": args.batch * args.context * world * args.steps / took,
                          "validation_loss": loss, "torch": torch.__version__}), flush=True)
    if tower:
        hvd.shutdown()
    print(f"torch_slow_link: rank {rank} done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
