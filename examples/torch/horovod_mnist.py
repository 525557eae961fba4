#!/usr/bin/python3
"""A program written for Horovod, run by tower: only its import names tower.

    import horovod.torch as hvd   ->   import tower.torch as hvd

A convolutional network on Debian's Fashion-MNIST, in the shape Horovod's own PyTorch examples take
(init, a DistributedSampler over size() and rank(), the learning rate scaled by size(), parameters
and optimizer state broadcast from rank 0, fp16 gradient compression, metrics averaged by
allreduce). Launch: mpirun -np 2 /usr/bin/python3 examples/torch/horovod_mnist.py --epochs 1
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data

import tower.torch as hvd


def idx(path):
    """An IDX file of Fashion-MNIST: images [N, 1, 28, 28] scaled to [0, 1], or labels [N]."""
    raw = gzip.open(path).read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    values = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    if dims == 1:
        return torch.from_numpy(values.astype(np.int64))
    return torch.from_numpy(values.astype(np.float32) / 255.0).unsqueeze(1)


def fashion_mnist(root, split):
    prefix = "train" if split == "train" else "t10k"
    return data.TensorDataset(idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz")),
                              idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many batches (0: all)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)  # one rank per core
    train = fashion_mnist(args.data, "train")
    test = fashion_mnist(args.data, "test")
    train_sampler = data.distributed.DistributedSampler(train, num_replicas=hvd.size(), rank=hvd.rank())
    test_sampler = data.distributed.DistributedSampler(test, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = data.DataLoader(train, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = data.DataLoader(test, batch_size=1000, sampler=test_sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.fp16, op=hvd.Average)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(train_loader):
            if args.max_batches and i == args.max_batches:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if i % 100 == 0 and hvd.rank() == 0:
                print(f"epoch {epoch} batch {i}/{len(train_loader)} loss {loss.item():.4f}", flush=True)
        model.eval()
        loss_sum, correct = 0.0, 0.0
        with torch.no_grad():
            for x, y in test_loader:
                out = model(x)
                loss_sum += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
        loss_avg = metric_average(loss_sum / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test loss {loss_avg:.4f}, accuracy {100 * accuracy:.2f}% on {hvd.size()} rank(s)",
                  flush=True)


if __name__ == "__main__":
    main()
