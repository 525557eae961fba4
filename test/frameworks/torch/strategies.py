"""Run under mpirun by torch_test.py: a PyTorch program under parameter-server and under
sync-replicas (one gradient per worker per update), whose owners apply torch's own SGD (momentum,
Nesterov, weight decay), Adam and AdamW rules per parameter group with the learning rate a
scheduler sets, ends within 1e-5 of plain PyTorch in one process on the same global batches, with
every rank an owner and (at 3 ranks) with rank 0 a server that runs serve(); async trains, applying
one update per gradient; local-sgd syncing after every step with outer SGD at rate 1 and torch's
SGD is plain PyTorch too, as is a local-sgd warm-up (local_start=) with AdamW, and every H steps with AdamW (with the outer all-reduce overlapped or not)
ends on one synced model on every rank; and deterministic=True gives one result, bit for bit,
whatever allreduce= is.
Exits non-zero on the first failure. Usage: strategies.py"""
import sys
import warnings

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say


hvd.init(stall_warn_s=5, stall_abort_s=30)
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
    steps = 0
    # Under async and sync-replicas the chief decides when the run ends: loop while more().
    detached = distributed is not None and distributed.get("strategy") in ("async", "sync-replicas")
    while opt.more() if detached else steps < len(data):
        x, y = data[steps % len(data)]
        opt.zero_grad()
        F.cross_entropy(model(x[first:first + per]), y[first:first + per]).backward()
        opt.step()
        scheduler.step()
        steps += 1
    if distributed is not None:
        model.tower_stats = opt.tower_stats()
        model.tower_steps = steps
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
# sync-replicas aggregates one gradient of every worker per update, which is the global batch's
# step; its learning rate travels with the gradients, so the workers' StepLR sets it.
owner_runs = [("parameter-server", {"check_every": 10}), ("sync-replicas", {"steps": STEPS})]
for servers in (0, 1) if N == 3 else (0,):
    for strategy, extra in owner_runs:
        for kind in ("sgd", "adam", "adamw"):
            expected = train(kind, data)
            got = train(kind, data, {"strategy": strategy, "ps_ranks": servers, **extra})
            if got is None:
                continue
            worst = worst_relative(got, expected)
            ok = worst <= 1e-5 and got.tower_steps == STEPS
            failed = failed or not ok
            say(f"rank {R}: {strategy} with {servers} server(s), torch {kind} with two groups and StepLR, "
                f"{N} rank(s), {got.tower_steps} steps: worst relative difference {worst:.2e} "
                f"{'ok' if ok else 'FAILED'}")

# async: every gradient is one update, as it arrives (scaled by 1/workers), STEPS per worker in
# all; the run's end leaves every rank the same values, and the loss on the whole data went down by
# at least half as much as plain PyTorch's did.
got = train("sgd", data, {"strategy": "async", "steps": STEPS})


def loss_of(model):
    with torch.no_grad():
        return sum(F.cross_entropy(model(x), y).item() for x, y in data) / len(data)


before, after, plain = loss_of(make_model()), loss_of(got), loss_of(train("sgd", data))
run = got.tower_stats["run"]
same = torch.equal(hvd.allgather(flat(got)[None])[0], flat(got))  # rank 0's against this rank's
ok = all(r["updates"] == STEPS * N for r in run) and before - after >= 0.5 * (before - plain) and same
failed = failed or not ok
say(f"rank {R}: async, torch sgd with two groups, {N} rank(s): updates per group {[r['updates'] for r in run]} "
    f"(planned {STEPS * N}), this worker's steps {got.tower_steps}, loss {before:.4f} -> {after:.4f} "
    f"(plain PyTorch: {plain:.4f}), "
    f"{'the same values on every rank' if same else 'DIFFERENT values'} {'ok' if ok else 'FAILED'}")

# local-sgd, syncing after every step with outer SGD at rate 1: every worker restarts from the mean
# each step, and SGD's rule (momentum, Nesterov, weight decay) is linear in the gradient, so the
# mean of the workers' moves is plain PyTorch's move on the global batch.
expected = train("sgd", data)
got = train("sgd", data, {"strategy": "local-sgd", "sync_every": 1, "outer_optimizer": "sgd", "outer_lr": 1.0})
worst = worst_relative(got, expected)
ok = worst <= 1e-5
failed = failed or not ok
say(f"rank {R}: local-sgd syncing every step, outer SGD at rate 1, torch sgd with two groups and StepLR, {N} rank(s): "
    f"worst relative difference {worst:.2e} against plain PyTorch {'ok' if ok else 'FAILED'}")

# local-sgd whose warm-up (local_start=) spans the run: its steps average the gradients, so under
# torch's AdamW too (whose steps, each worker's own averaged afterwards, would not be) it is plain
# PyTorch's training on the global batch.
expected = train("adamw", data)
got = train("adamw", data, {"strategy": "local-sgd", "sync_every": 4, "local_start": STEPS})
worst = worst_relative(got, expected)
ok = worst <= 1e-5
failed = failed or not ok
say(f"rank {R}: local-sgd with local_start={STEPS}, torch adamw with two groups and StepLR, {N} rank(s): "
    f"worst relative difference {worst:.2e} against plain PyTorch {'ok' if ok else 'FAILED'}")

# local-sgd every 4 steps with AdamW, DiLoCo's outer Nesterov, the outer all-reduce overlapped or
# not: between syncs the workers differ, inside synced_values() every rank holds the same synced
# model, and after settle_replicas() every rank holds one model whose loss on the whole data went
# down by at least half as much as plain PyTorch's did.
def alike(model):
    """Every rank holds the parameters rank 0 holds."""
    rows = hvd.allgather(flat(model)[None])
    return all(torch.equal(rows[0], row) for row in rows)


def local_run(overlap, delay):
    model = make_model()
    opt, scheduler = make_optimizer(model, "adamw")
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), strategy="local-sgd",
                                   sync_every=4, outer_overlap=overlap, outer_delay=delay,
                                   check_every=4)
    per = GLOBAL_BATCH // N
    apart = synced = True
    initial = flat(model)
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        F.cross_entropy(model(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per]).backward()
        opt.step()
        scheduler.step()
        if step == 8:
            # After the syncs of steps 4 and 8 (under overlap the first mean lands at step 8, or at
            # step 6 with a delay of 2):
            # the synced values moved from the start and are the same everywhere.
            apart = not alike(model)
            with opt.synced_values():
                synced = alike(model) and not torch.equal(flat(model), initial)
    opt.settle_replicas()
    same = alike(model)
    opt.tower_close()
    return model, apart or N == 1, synced, same


plain_loss = loss_of(train("adamw", data))
start_loss = loss_of(make_model())
for overlap, delay in ((False, None), (True, None), (True, 2)):
    model, apart, synced, same = local_run(overlap, delay)
    after = loss_of(model)
    ok = apart and synced and same and start_loss - after >= 0.5 * (start_loss - plain_loss)
    failed = failed or not ok
    say(f"rank {R}: local-sgd every 4 steps, outer_overlap={overlap}, outer_delay={delay}, torch adamw, {N} rank(s): workers apart between "
        f"syncs {apart}, synced values alike {synced}, one model after settle_replicas() {same}, loss "
        f"{start_loss:.4f} -> {after:.4f} (plain PyTorch: {plain_loss:.4f}) {'ok' if ok else 'FAILED'}")

# ema_decay= under parameter-server: the owners keep v <- 0.9 v + 0.1 value after each update;
# use_averages(True) puts them into the parameters (against the same average kept here over the
# values every rank holds after each step) and use_averages(False) the trained values back.
model = make_model()
opt, scheduler = make_optimizer(model, "sgd")
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), strategy="parameter-server",
                               ema_decay=0.9)
averages = [p.detach().clone() for p in model.parameters()]
per = GLOBAL_BATCH // N
for x, y in data:
    opt.zero_grad()
    F.cross_entropy(model(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per]).backward()
    opt.step()
    scheduler.step()
    for a, p in zip(averages, model.parameters()):
        a.mul_(0.9).add_(p.detach(), alpha=0.1)
trained = flat(model)
opt.use_averages(True)
worst = max(((p.detach() - a).norm() / a.norm()).item() for p, a in zip(model.parameters(), averages))
opt.use_averages(False)
back = torch.equal(flat(model), trained)
opt.tower_close()
ok = worst <= 1e-6 and back
failed = failed or not ok
say(f"rank {R}: ema_decay=0.9 under parameter-server: averages within {worst:.2e} of the same average kept "
    f"in Python, {'the trained values back bit for bit' if back else 'NOT the trained values back'} "
    f"{'ok' if ok else 'FAILED'}")

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
