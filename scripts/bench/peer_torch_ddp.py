#!/usr/bin/python3
"""peer_torch_ddp: the PyTorch DDP peer tower's throughput is compared with.

Trains the same MLP (784-1024-1024-10, SGD momentum 0.9, lr 0.05) on Fashion-MNIST with
DistributedDataParallel over gloo, one CPU thread per rank. Launch with
    mpirun -np N /usr/bin/python3 scripts/bench/peer_torch_ddp.py --batch 128 --epochs 1 [--steps K]
Rank and world size come from Open MPI's environment; rank 0 prints one JSON line.
"""

import argparse
import gzip
import json
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

WARMUP_STEPS = 5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on localhost (default: MASTER_PORT)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def read_idx(path, rank):
    """Reads a gzip IDX file of unsigned bytes, checking the magic and the length."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0:3] != b"\x00\x00\x08" or raw[3] != rank:
        sys.exit(f"peer_torch_ddp: {path} is not a {rank}-d IDX file of unsigned bytes")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank)
    if data.size != int(np.prod(dims)):
        sys.exit(f"peer_torch_ddp: {path} holds {data.size} bytes of data, dimensions {dims} need {np.prod(dims)}")
    return data.reshape(dims)


def load(directory, split):
    images = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), 1)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 784)
    return x, torch.from_numpy(labels.astype(np.int64))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def rendezvous_port(args, rank):
    if args.port:
        return args.port
    if "MASTER_PORT" in os.environ:
        return int(os.environ["MASTER_PORT"])
    if rank != 0:
        sys.exit("peer_torch_ddp: give --port or MASTER_PORT when running more than one rank")
    with socket.socket() as s:  # one rank: any free port will do
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def main():
    args = parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{rendezvous_port(args, rank)}", rank=rank,
                            world_size=world)
    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")

    model = DistributedDataParallel(Mlp())  # broadcasts rank 0's initial weights
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    global_batch = args.batch * world
    steps_per_epoch = len(train_x) // global_batch

    steps, timed_samples, start = 0, 0, None
    for epoch in range(args.epochs):
        # Same global order on every rank; each takes its contiguous slice of each global batch.
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        for step in range(steps_per_epoch):
            if args.steps and steps >= args.steps:
                break
            if steps == WARMUP_STEPS:
                dist.barrier()
                start = time.perf_counter()
            first = step * global_batch + rank * args.batch
            idx = order[first:first + args.batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(train_x[idx]), train_y[idx]).backward()
            opt.step()
            steps += 1
            if start is not None:
                timed_samples += global_batch
    dist.barrier()
    elapsed = time.perf_counter() - start if start is not None else 0.0
    if rank == 0:
        print(json.dumps({
            "peer": "torch_ddp",
            "world_size": world,
            "samples_per_s": timed_samples / elapsed if elapsed > 0 else None,
            "steps": steps,
            "test_accuracy": accuracy(model.module, test_x, test_y),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
