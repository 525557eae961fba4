#!/usr/bin/python3
"""peer_torch_gpt: the PyTorch DDP peer of tower's GPT (scripts/bench/gpt_vs_peer).

The same byte-level GPT as models/gpt.cpp (pre-LayerNorm blocks, causal attention, tanh GELU, head tied
to the token embedding), AdamW, on windows of Debian's fortunes, with DistributedDataParallel over gloo
and one CPU thread per rank. Launch with
    mpirun -np N /usr/bin/python3 scripts/bench/peer_torch_gpt.py --batch 8 --steps 30
Rank 0 prints one JSON line: tokens/s, the step time and its compute part (steps under no_sync, which
skip the all-reduce), and the peak resident memory of rank 0.
"""

import argparse
import json
import math
import os
import resource
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

WARMUP_STEPS = 3


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x, mask):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        self.mask = torch.ones(context, context, dtype=torch.bool).tril()  # not a buffer: gloo broadcasts no bool
        self.start_as_gpt2(layers)

    def start_as_gpt2(self, layers):
        """GPT-2's initial values, as tower's GPT draws them (docs/transformer.md): PyTorch's defaults
        (an embedding of Normal(0, 1) read back through the tied head) start the loss near 150 where
        tower's starts near 5.5, and the validation losses the benches compare would differ by that."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                    continue
                if ".ln" in name or name.startswith("lnf"):
                    continue  # LayerNorm gains 1: PyTorch's default
                into_residual = name.endswith("proj.weight")
                p.normal_(0.0, 0.01 if name == "wpe.weight" else 0.02 / math.sqrt(2 * layers) if into_residual else 0.02)

    def forward(self, tokens):
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        T = inp.shape[1]
        x = self.wte(inp) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x, self.mask[:T, :T])
        logits = self.lnf(x) @ self.wte.weight.T  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def corpus_bytes(path):
    """Every fortune file's bytes, each followed by a newline, in the order tower reads them."""
    files = []
    for root, _, names in os.walk(path):
        files += [os.path.join(root, n) for n in names if not n.endswith(".dat")
                  and not os.path.islink(os.path.join(root, n))]
    data = b"".join(open(f, "rb").read() + b"\n" for f in sorted(files))
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))


def corpus(path):
    """The training text: the first 90% (tower keeps the last 10% for validation)."""
    data = corpus_bytes(path)
    return data[: len(data) * 9 // 10]


def port(rank):
    if "MASTER_PORT" in os.environ:
        return int(os.environ["MASTER_PORT"])
    if rank != 0:
        sys.exit("peer_torch_gpt: set MASTER_PORT when running more than one rank")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_job_arguments(p):
    """The job both GPT peers take: windows per step, steps, the model's shape, AdamW's rate and the text."""
    p.add_argument("--batch", type=int, default=8, help="windows per rank per step")
    p.add_argument("--steps", type=int, default=30, help="timed steps (after 3 warm-up steps)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default="/usr/share/games/fortunes")


def start_rank():
    """This rank and the world's size under mpirun; one torch thread per rank (each bound to its
    core) and the seed every rank's model starts from."""
    torch.set_num_threads(1)
    torch.manual_seed(1)
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")), int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(p)
    args = p.parse_args()
    rank, world = start_rank()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port(rank)}", rank=rank, world_size=world)
    text = corpus(args.data)
    model = DistributedDataParallel(Gpt(args.layers, args.width, args.heads, args.context))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(1000 + rank)
    width = args.context + 1

    def batch():
        starts = torch.randint(0, len(text) // width, (args.batch,), generator=gen) * width
        return torch.stack([text[s:s + width] for s in starts])

    def step(sync):
        opt.zero_grad(set_to_none=True)
        if sync:
            model(batch()).backward()
        else:
            with model.no_sync():
                model(batch()).backward()
        opt.step()

    for _ in range(WARMUP_STEPS):
        step(True)
    timings = {}
    for sync in (False, True):  # compute alone (no all-reduce), then whole steps
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step(sync)
        dist.barrier()
        timings[sync] = (time.perf_counter() - start) / args.steps
    if rank == 0:
        tokens = args.batch * args.context * world
        print(json.dumps({
            "peer": "torch_ddp_gpt", "world_size": world, "tokens_per_s": tokens / timings[True],
            "step_ms": 1e3 * timings[True], "compute_ms": 1e3 * timings[False],
            "exposed_comm_ms": 1e3 * max(timings[True] - timings[False], 0.0),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
