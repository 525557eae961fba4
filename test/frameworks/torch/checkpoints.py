"""Run under mpirun by torch_test.py: tower.torch.Checkpoints. `save DIR STRATEGY` trains a model
with two parameter groups (Adam, StepLR) for 10 steps, saves, writes what it saved
(DIR/saved.pt) and what 10 more steps give (DIR/uninterrupted.pt). `resume DIR STRATEGY`, at any
world size and under any strategy, restores: the parameters must be those saved bit for bit,
and 10 more steps must end within 1e-5 of the uninterrupted run (the same global batches; only
the rounding of the split and of the reduction differ), which needs the optimizer state back.
Under sync-replicas the run of 20 planned steps goes on from the restored update, and saves
again once it is over.
With PS_RANKS above 0 (parameter-server), ranks 0..PS_RANKS-1 only serve: they restore, then run
serve(), which joins the workers' saves. STRATEGY local-sgd (or local-sgd-overlap, with the outer
all-reduce overlapped) syncs every 4 steps: the checkpoint at step 10 falls between syncs, and
each worker's own parameters and state come back (resumed at the same size).
Exits non-zero on a failure. Usage: checkpoints.py save|resume DIR STRATEGY [PS_RANKS]"""
import os
import sys

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say

mode, directory, strategy = sys.argv[1], sys.argv[2], sys.argv[3]
servers = int(sys.argv[4]) if len(sys.argv) > 4 else 0
hvd.init(stall_warn_s=5, stall_abort_s=30)
R = hvd.rank()
torch.set_num_threads(1)
GLOBAL_BATCH = 24

torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
opt = torch.optim.Adam([{"params": model[0].parameters(), "weight_decay": 1e-2, "eps": 1e-3},
                        {"params": model[2].parameters(), "lr": 3e-3, "betas": (0.8, 0.99)}], lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
detached = strategy in ("async", "sync-replicas")
local = {"sync_every": 4, "outer_overlap": strategy.endswith("overlap")} if strategy.startswith("local-sgd") else {}
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                               strategy="local-sgd" if local else strategy, **local,
                               **({"steps": 20} if detached else {}), **({"ps_ranks": servers} if servers else {}))
checkpoints = hvd.Checkpoints(opt, os.path.join(directory, "ckpt"), resume=mode == "resume",
                              identity={"model": "two layers"})
g = torch.Generator().manual_seed(9)
data = [(torch.randn(GLOBAL_BATCH, 12, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g))
        for _ in range(20)]
per = GLOBAL_BATCH // opt.worker_count()
first = opt.worker_rank() * per


def flat():
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(steps):
    steps = iter(steps)
    # Under sync-replicas the chief ends the run, at the planned 20 updates.
    while opt.more() if detached else True:
        x, y = next(steps, (None, None))
        if x is None:
            break
        opt.zero_grad()
        F.cross_entropy(model(x[first:first + per]), y[first:first + per]).backward()
        opt.step()
        scheduler.step()


failed = False
step, totals = checkpoints.restore()
# Under local-sgd each worker holds parameters of its own: each keeps its own files.
first_worker = opt.worker_rank() == 0 or bool(local)
mine = f"-{R}" if local else ""
if not opt.is_worker():
    hvd.serve(opt)  # joins the workers' saves, until they end
    if detached and mode == "resume":
        checkpoints.save(20)  # the workers' save at the run's end, which every rank makes
        checkpoints.wait()
    say(f"rank {R}: served ok")
elif mode == "save":
    train(data[:10])
    checkpoints.save(10, seconds=1.5)
    checkpoints.wait()
    if first_worker:
        torch.save(flat(), os.path.join(directory, f"saved{mine}.pt"))
    train(data[10:])
    if first_worker:
        torch.save(flat(), os.path.join(directory, f"uninterrupted{mine}.pt"))
    opt.tower_close()  # the servers' serve() returns
    say(f"rank {R}: saved step 10 under {strategy} at {hvd.size()} rank(s)")
else:
    same = step == 10 and totals == {"seconds": 1.5} and torch.equal(flat(), torch.load(os.path.join(directory, f"saved{mine}.pt")))
    scheduler.last_epoch = step  # the program's scheduler follows the restored step
    for group in opt.param_groups:
        group["lr"] = group["initial_lr"] * 0.5 ** (step // 4)
    train(data[10:])
    expected = torch.load(os.path.join(directory, f"uninterrupted{mine}.pt"))
    worst = ((flat() - expected).abs().max() / expected.abs().max()).item()
    # Under local-sgd at the same size nothing is split or reduced differently: bit for bit.
    ok = same and (worst == 0 if local else worst <= 1e-5)
    if detached:
        # Once the run is over, every rank is at its end: a checkpoint may be saved again.
        checkpoints.save(20)
        checkpoints.wait()
        saved = os.path.exists(os.path.join(directory, "ckpt", "step-0000000020", "manifest.tck"))
        ok = ok and saved
    opt.tower_close()
    failed = not ok
    say(f"rank {R}: resumed step {step} under {strategy} at {hvd.size()} rank(s): parameters "
        f"{'bit for bit as saved' if same else 'NOT as saved'}; after 10 more steps the largest difference from "
        f"the uninterrupted run is {worst:.2e} of the largest parameter {'ok' if ok else 'FAILED'}")
hvd.shutdown()
sys.exit(1 if failed else 0)
