#!/usr/bin/python3
"""A byte-level GPT in PyTorch, trained data-parallel through tower.torch (Horovod's API).

The model is tower's `--model gpt` written as a torch module (pre-LayerNorm blocks, causal
attention, tanh GELU, the head tied to the token embedding); torch differentiates it, torch's
AdamW applies the update, and tower reduces the gradients while backward runs. Launch:

    mpirun -np 2 /usr/bin/python3 examples/torch/gpt.py --steps 200

(with PYTHONPATH=build/python for a build tree). Every rank trains on windows of its own from
Debian's fortunes; rank 0 prints the loss, tokens/s and the communication that backward did not hide.
--strategy moves it between tower's strategies with nothing else changed; --checkpoint-every K
saves through tower.torch.Checkpoints every K steps (under async and sync-replicas, whose ranks do
not step together, once at the end), which `tower elastic --checkpoint-dir D -- ...` resumes.
"""
import argparse
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tower.torch as hvd


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x, mask):
        B, T, C = x.shape
        H = self.heads
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // H)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln2, self.mlp = nn.LayerNorm(width), Mlp(width)

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """Parameter names follow tower's GPT (h0.attn.qkv.weight, ...), with wte and wpe as embeddings."""

    def __init__(self, layers=4, width=256, heads=4, context=128, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleDict({f"h{i}": Block(width, heads) for i in range(layers)})
        self.lnf = nn.LayerNorm(width)
        # A plain attribute, not a buffer: nothing to keep alike across ranks (and gloo, DDP's
        # backend here, cannot broadcast booleans).
        self.mask = torch.ones(context, context, dtype=torch.bool).tril()
        for name, p in self.named_parameters():  # GPT-2's initialization, as tower's GPT
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        """The mean cross-entropy of predicting each window's next bytes."""
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        T = inputs.shape[1]
        x = self.wte(inputs) + self.wpe.weight[:T]
        for block in self.h.values():
            x = block(x, self.mask[:T, :T])
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        # "h.h0.ln1.weight" -> "h0.ln1.weight": tower's names
        for name, p in super().named_parameters(prefix, recurse):
            yield name[2:] if name.startswith("h.") else name, p


def fortunes(path="/usr/share/games/fortunes"):
    """The bytes of Debian's fortunes (the first 90%: tower's training split), as int64 tokens."""
    files = []
    for root, _, names in os.walk(path):
        files += [os.path.join(root, n) for n in names
                  if not n.endswith(".dat") and not os.path.islink(os.path.join(root, n))]
    data = b"".join(open(f, "rb").read() + b"\n" for f in sorted(files))
    return torch.frombuffer(bytearray(data[: len(data) * 9 // 10]), dtype=torch.uint8).long()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8, help="windows per rank per step")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--fusion-mb", type=float, default=4.0,
                   help="replicated only: bucket size (tower.torch's default): 4 buckets, the last layers' reduced "
                        "during backward")
    p.add_argument("--allreduce", default="auto", help="replicated only: auto, ring, hierarchical or naive")
    p.add_argument("--strategy", default="replicated",
                   help="replicated (torch's AdamW applies the reduced gradients on every rank), parameter-server "
                        "(each variable's owner applies torch's AdamW rule), sync-replicas or async (the owners "
                        "apply the gradients as they arrive), local-sgd (each rank applies torch's AdamW rule "
                        "alone; every 50 steps, and once at the end, the ranks' mean move goes through DiLoCo's "
                        "Nesterov outer step)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="save every K steps (0: never)")
    p.add_argument("--checkpoint-dir", default=None, help="default: $TOWER_CHECKPOINT_DIR (tower elastic sets it)")
    p.add_argument("--resume", action="store_true", help="resume the latest checkpoint (tower elastic: automatic)")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    args = p.parse_args()

    hvd.init()
    # Open MPI binds each rank to a core: one torch thread per rank fills them without contention.
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = Gpt(args.layers, args.width, args.heads, args.context)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    # The all-reduce's options are the replicated strategy's; async and sync-replicas plan the run's
    # tokens from its length.
    detached = args.strategy in ("async", "sync-replicas")
    options = ({"fusion_mb": args.fusion_mb, "allreduce": args.allreduce} if args.strategy == "replicated"
               else {"steps": args.steps} if detached else {})
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), strategy=args.strategy, **options)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    checkpoints = None
    first = 0
    if args.checkpoint_every or args.resume:
        checkpoints = hvd.Checkpoints(opt, args.checkpoint_dir, resume=True if args.resume else None)
        first, _ = checkpoints.restore()

    text = fortunes(args.data)
    width = args.context + 1
    gen = torch.Generator().manual_seed(1000 + hvd.rank())
    for _ in range(first):  # a resumed run goes on with the windows it had not seen
        torch.randint(0, len(text) // width, (args.batch,), generator=gen)
    tokens = args.batch * args.context * hvd.size()
    start, exposed = time.perf_counter(), 0.0
    step = first
    loss, stats = torch.zeros(()), {"allreduce_s": 0.0, "hidden_fraction": 0.0, "buckets": 0}
    # Under async and sync-replicas the chief ends the run: loop while it grants steps.
    while opt.more() if detached else step < args.steps:
        step += 1
        starts = torch.randint(0, len(text) // width, (args.batch,), generator=gen) * width
        batch = torch.stack([text[s:s + width] for s in starts])
        opt.zero_grad()
        loss = model(batch)
        loss.backward()
        opt.step()
        stats = opt.tower_stats()
        exposed += stats["allreduce_s"] * (1 - stats["hidden_fraction"])
        if checkpoints and not detached and args.checkpoint_every and step % args.checkpoint_every == 0:
            checkpoints.save(step)
        # The ranks of async and sync-replicas do not step together: no collective until the end.
        if not detached and (step % args.log_every == 0 or step == args.steps):
            report(hvd.allreduce(loss.detach(), name="loss").item(), step, args, tokens, start, first, exposed,
                   stats)
    if detached:
        # (every rank reports, having stepped or not: the all-reduce is collective)
        mean_loss = hvd.allreduce(loss.detach(), name="loss").item()
        if step > first:
            report(mean_loss, step, args, tokens, start, first, exposed, stats)
        if checkpoints and args.checkpoint_every:
            checkpoints.save(args.steps)  # the run is over: every rank is at its end
    # Under local-sgd the ranks hold their own values since the last sync: one more brings every rank
    # to the one synced model (nothing under the other strategies).
    opt.settle_replicas()
    if checkpoints:
        checkpoints.wait()
    hvd.shutdown()


def report(mean_loss, step, args, tokens, start, first, exposed, stats):
    elapsed = time.perf_counter() - start
    done = max(step - first, 1)
    if hvd.rank() == 0:
        print(f"step {step}/{args.steps}  loss {mean_loss:.4f}  {tokens * done / elapsed:.0f} tokens/s  "
              f"exposed communication {1e3 * exposed / done:.2f} ms/step  {stats['buckets']} buckets  "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
