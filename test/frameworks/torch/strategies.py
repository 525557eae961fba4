"""Run under mpirun by torch_test.py: a PyTorch program under parameter-server, whose owners apply
torch's own SGD (momentum, Nesterov, weight decay), Adam and AdamW rules per parameter group with
the learning rate a scheduler sets, ends within 1e-5 of plain PyTorch in one process on the same
global batches, with every rank an owner and (at 3 ranks) with rank 0 a server that runs serve();
and deterministic=True gives one result, bit for bit, whatever allreduce= is.
Exits non-zero on the first failure. Usage: strategies.py"""
import sys
import warnings

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say


hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)
GLOBAL_BATCH, STEPS = 24, 20


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))


def batches():
    g = torch.Generator().manual_seed(9)
    return [(torch.randn(GLOBAL_BATCH, 12, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g))
            for _ in range(STEPS)]


def make_optimizer(model, kind):
    """Two parameter groups (the first layer's and the last's) with settings of their own, and a
    scheduler that halves every group's learning rate every 5 steps."""
    first, last = list(model[0].parameters()), list(model[2].parameters())
    if kind == "sgd":
        opt = torch.optim.SGD([{"params": first, "lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
                               {"params": last, "lr": 0.05, "momentum": 0.5}], lr=0.1)
    elif kind == "adam":
        opt = torch.optim.Adam([{"params": first, "weight_decay": 1e-2, "eps": 1e-3},
                                {"params": last, "lr": 3e-3, "betas": (0.8, 0.99)}], lr=1e-2)
    else:
        opt = torch.optim.AdamW([{"params": first, "weight_decay": 0.1},
                                 {"params": last, "lr": 3e-3, "weight_decay": 0.0, "eps": 1e-6}], lr=1e-2)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)


def train(kind, data, distributed=None):
    """Plain PyTorch on the whole global batch (distributed None), or this worker's share through
    tower.torch with `distributed` as DistributedOptimizer's keywords. A rank that only serves
    returns None after the workers closed their optimizer."""
    model = make_model()
    opt, scheduler = make_optimizer(model, kind)
    per, first = GLOBAL_BATCH, 0
    if distributed is not None:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **distributed)
        if not opt.is_worker():
            hvd.serve(opt)
            opt.tower_close()
            return None
        per = GLOBAL_BATCH // opt.worker_count()
        first = opt.worker_rank() * per
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x[first:first + per]), y[first:first + per]).backward()
        opt.step()
        scheduler.step()
    if distributed is not None:
        opt.tower_close()
    return model


def worst_relative(a, b):
    """The largest |got - expected| / |expected| over the parameter tensors (norms over each)."""
    worst = 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        worst = max(worst, ((p.detach() - q.detach()).norm() / q.detach().norm()).item())
    return worst


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


data = batches()
failed = False
# The schedulers here are made before wrapping: torch must not think step() was replaced behind
# them, nor that the scheduler stepped first.
warnings.filterwarnings("error", message=r"Seems like `optimizer.step\(\)` has been overridden")
warnings.filterwarnings("error", message=r"Detected call of `lr_scheduler.step\(\)` before")
# Every rank an owner; and at 3 ranks, rank 0 a server with 2 workers (a global batch of 24 splits
# into 12 each, as into 8 each over 3).
for servers in (0, 1) if N == 3 else (0,):
    for kind in ("sgd", "adam", "adamw"):
        expected = train(kind, data)
        got = train(kind, data, {"strategy": "parameter-server", "ps_ranks": servers, "check_every": 10})
        if got is None:
            continue
        worst = worst_relative(got, expected)
        ok = worst <= 1e-5
        failed = failed or not ok
        say(f"rank {R}: parameter-server with {servers} server(s), torch {kind} with two groups and StepLR, "
            f"{N} rank(s): worst relative difference {worst:.2e} {'ok' if ok else 'FAILED'}")

# deterministic=True: every all-reduce mode sums in one order, so the bits agree.
if N > 1:
    results = {mode: flat(train("sgd", data, {"allreduce": mode, "deterministic": True}))
               for mode in ("ring", "hierarchical", "naive")}
    same = all(torch.equal(results["ring"], r) for r in results.values())
    failed = failed or not same
    say(f"rank {R}: deterministic=True, ring, hierarchical and naive: "
        f"{'one result, bit for bit' if same else 'DIFFERENT results'}")

hvd.shutdown()
if failed:
    sys.exit(1)
say(f"rank {R}: all passed")
