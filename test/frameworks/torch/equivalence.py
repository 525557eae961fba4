"""Run under mpirun by torch_test.py: a PyTorch model trained through tower.torch on N ranks ends
where plain PyTorch in one process ends on the same global batches (every all-reduce mode, with and
without overlap, 16-bit compression, accumulation, Sum), a bucket's reduction finishes while
backward still runs, and the losses follow DDP's (gloo) on the same batches. Exits non-zero on the
first failure, with what differed. Usage: equivalence.py [--ddp] [--quick]"""
import socket
import sys

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say


hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
GLOBAL_BATCH, STEPS = 24, 20


def make_model():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 5))


def batches(steps):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(GLOBAL_BATCH, 12, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g))
            for _ in range(steps)]


def shard(t, parts=1, part=0):
    """This rank's share of a global batch, cut into `parts` micro-batches: micro-batch `part`."""
    per = t.shape[0] // N
    mine = t[R * per:(R + 1) * per]
    step = per // parts
    return mine[part * step:(part + 1) * step]


def reference(data, passes=1, op="mean", clip=None, schedule=False):
    """Plain PyTorch in this one process on the whole global batch, with tower.torch's meaning:
    each rank sums `passes` micro-batch means, and the ranks' sums are averaged (or summed)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5) if schedule else None
    micro = GLOBAL_BATCH // (N * passes)
    for x, y in data:
        opt.zero_grad()
        losses = [F.cross_entropy(model(x[i:i + micro]), y[i:i + micro]) for i in range(0, GLOBAL_BATCH, micro)]
        loss = sum(losses) / (N if op == "mean" else 1)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if scheduler:
            scheduler.step()
    return model


def through_tower(data, passes=1, op=hvd.Average, set_to_none=False, clip=None, schedule=False, closure=False,
                  **options):
    """The same training through tower.torch; `clip` clips the reduced gradients between
    synchronize() and step(); `schedule` makes a StepLR before wrapping; `closure` steps with one."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5) if schedule else None
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), backward_passes_per_step=passes,
                                   op=op, **options)
    losses = []
    for x, y in data:
        if closure:
            def evaluate():
                opt.zero_grad()
                loss = F.cross_entropy(model(shard(x)), shard(y))
                loss.backward()
                return loss
            loss = opt.step(evaluate)
        else:
            opt.zero_grad(set_to_none=set_to_none)
            for part in range(passes):
                loss = F.cross_entropy(model(shard(x, passes, part)), shard(y, passes, part))
                loss.backward()
            if clip:
                opt.synchronize()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        if scheduler:
            scheduler.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    opt.tower_close()
    return model, losses


def relative_difference(a, b):
    worst = 0.0
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        worst = max(worst, ((p - q).abs().max() / q.abs().max()).item())
    return worst


def check(what, got, want, bound):
    d = relative_difference(got, want)
    verdict = "ok" if d <= bound else "FAIL"
    say(f"rank {R}/{N}: {what}: largest difference {d:.2e} of the largest value (bound {bound:g}) {verdict}")
    if d > bound:
        sys.exit(1)


def overlap_seen(overlap):
    """Whether the last layer's reduced gradient arrives while backward is still in the first layer."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), fusion_mb=0, overlap=overlap)
    last, first = model[4].weight, model[0].weight
    local = {}
    last.register_hook(lambda g: local.__setitem__("last", g.detach().clone()))
    seen = {}

    def in_first_layer(g):
        # Autograd reaches the first layer after the last one's gradient was accumulated and its
        # bucket handed to the communication thread; wait here (backward has not returned) for
        # the bucket, reduced in place, to hold the ranks' mean instead of this rank's value.
        import time
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and torch.equal(last.grad, local["last"]):
            time.sleep(0.001)
        seen["reduced"] = not torch.equal(last.grad, local["last"])
        return g

    first.register_hook(in_first_layer)
    x, y = batches(1)[0]
    opt.zero_grad()
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.step()
    opt.tower_close()
    return seen["reduced"]


def ddp_losses(data):
    """DDP over gloo on the same model and batches: its losses, as tower's are taken."""
    import torch.distributed as dist
    port = hvd.broadcast_object(_free_port() if R == 0 else None, 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=R, world_size=N)
    model = torch.nn.parallel.DistributedDataParallel(make_model(), gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(shard(x)), shard(y))
        loss.backward()
        opt.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        losses.append(reduced.item() / N)
    dist.destroy_process_group()
    return losses


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


data = batches(STEPS)
want = reference(data)
modes = ["ring", "hierarchical", "naive"] if "--quick" not in sys.argv else ["hierarchical"]
for mode in modes:
    for overlap in (True, False):
        got, _ = through_tower(data, allreduce=mode, overlap=overlap, fusion_mb=0.002)
        check(f"{mode} all-reduce, overlap {overlap}", got, want, 1e-5)
# 16-bit gradients: each reduced gradient is rounded to 8 (bf16) or 11 (fp16) significant bits
# before the update, so parameters move by lr x that rounding per step at most.
for name, compression, bound in (("fp16", hvd.Compression.fp16, 2e-3), ("bf16", hvd.Compression.bf16, 1e-2)):
    got, _ = through_tower(data, compression=compression)
    check(f"{name} compression", got, want, bound)
got, _ = through_tower(data, passes=2)
check("backward_passes_per_step=2", got, reference(data, passes=2), 1e-5)
got, _ = through_tower(data, op=hvd.Sum)
check("op=Sum", got, reference(data, op="sum"), 1e-5)
# zero_grad(set_to_none=True): autograd hands over gradients of its own, copied into the buckets.
got, _ = through_tower(data, set_to_none=True)
check("zero_grad(set_to_none=True)", got, want, 1e-5)
# Clipping the reduced gradients between synchronize() and step() under skip_synchronize().
got, _ = through_tower(data, clip=0.05)
check("clip_grad_norm_ between synchronize() and step()", got, reference(data, clip=0.05), 1e-5)
# A scheduler made before wrapping still counts the steps and moves the rate.
got, _ = through_tower(data, schedule=True)
check("StepLR made before wrapping", got, reference(data, schedule=True), 1e-5)
got, _ = through_tower(data, closure=True)
check("step(closure)", got, want, 1e-5)

if N > 1:
    for overlap in (True, False):
        seen = overlap_seen(overlap)
        say(f"rank {R}/{N}: overlap {overlap}: the last layer's reduced gradient arrived during backward: {seen}")
        if seen != overlap:
            sys.exit(1)

if "--ddp" in sys.argv:
    steps = batches(50)
    _, tower_losses = through_tower(steps)
    ddp = ddp_losses(steps)
    worst = max(abs(a - b) for a, b in zip(tower_losses, ddp))
    say(f"rank {R}/{N}: 50 steps against DDP (gloo): largest loss difference {worst:.2e} (bound 1e-4) "
          f"{'ok' if worst <= 1e-4 else 'FAIL'}; losses {tower_losses[0]:.4f} -> {tower_losses[-1]:.4f}")
    if worst > 1e-4:
        sys.exit(1)
say(f"rank {R}/{N}: all passed")
hvd.shutdown()
