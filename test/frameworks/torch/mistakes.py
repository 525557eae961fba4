"""Run under mpirun at 2 ranks by torch_test.py: one mistake a PyTorch program can make (argv[1]).
Each must end with a clear error on every rank, or (unused-on-one-rank) train without one."""
import sys

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say


mistake = sys.argv[1]
if mistake == "stalled-rank":
    hvd.init(stall_warn_s=1, stall_abort_s=4)
elif mistake == "timeline":
    hvd.init(timeline=sys.argv[2])
else:
    hvd.init()
R = hvd.rank()


def model(hidden=8, branch=False):
    torch.manual_seed(3)
    m = torch.nn.ModuleDict({"a": torch.nn.Linear(4, hidden), "b": torch.nn.Linear(hidden, 3)})
    if branch:
        m["extra"] = torch.nn.Linear(hidden, 3)
    return m


def forward(m, x, use_extra=False):
    h = torch.tanh(m["a"](x))
    out = m["b"](h)
    return out + m["extra"](h) if use_extra else out


def wrap(m, lr=0.1, **options):
    return hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=lr), named_parameters=m.named_parameters(),
                                    **options)


def report(error):
    say(f"rank {R}: {type(error).__name__}: {error}")
    sys.exit(3)


x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
try:
    if mistake == "different-model":
        wrap(model(hidden=8 if R == 0 else 9))
    elif mistake == "different-optimizer":
        wrap(model(), lr=0.1 if R == 0 else 0.2)
    elif mistake == "horovod-name-outside":
        opt = wrap(model(), op=hvd.Adasum)
    elif mistake == "detached-without-steps":
        wrap(model(), strategy="async")
    elif mistake == "local-sgd-option-under-replicated":
        wrap(model(), sync_every=4)
    elif mistake == "local-sgd-fusion":
        wrap(model(), strategy="local-sgd", fusion_mb=1.0)
    elif mistake == "share-with-options-of-its-own":
        m = model()
        first = wrap(m)
        wrap(m, op=hvd.Sum, share=first)
    elif mistake == "checkpoint-amsgrad":
        m = model()
        opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True),
                                       named_parameters=m.named_parameters())
        hvd.Checkpoints(opt, "/nonexistent-dir-never-written")
    elif mistake == "owner-optimizer-class":
        m = model()
        hvd.DistributedOptimizer(torch.optim.RMSprop(m.parameters(), lr=0.01), named_parameters=m.named_parameters(),
                                 strategy="parameter-server")
    elif mistake == "owner-amsgrad":
        m = model()
        hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True),
                                 named_parameters=m.named_parameters(), strategy="parameter-server")
    elif mistake in ("server-steps", "uneven-workers"):
        # Rank 0 only serves. server-steps: it trains as the workers do, calling step(). uneven-workers
        # (3 ranks): the last worker stops one step early. Either ends the job, saying why.
        m = model()
        opt = wrap(m, strategy="parameter-server", ps_ranks=1)
        if mistake == "uneven-workers" and not opt.is_worker():
            hvd.serve(opt)
        else:
            steps = 2 if mistake == "uneven-workers" and R == hvd.size() - 1 else 3
            for _ in range(steps):
                opt.zero_grad()
                F.cross_entropy(forward(m, x), y).backward()
                opt.step()
        hvd.shutdown()
        say(f"rank {R}: no error")
        sys.exit(0)
    elif mistake == "owner-scheduled-momentum":
        m = model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       named_parameters=m.named_parameters(), strategy="parameter-server")
        scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10, base_momentum=0.8,
                                                        max_momentum=0.9)
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(forward(m, x), y).backward()
            opt.step()
            scheduler.step()
    elif mistake == "owner-replicated-option":
        wrap(model(), strategy="parameter-server", groups=[[0], [1]])
    elif mistake == "owner-synchronize":
        m = model()
        opt = wrap(m, strategy="parameter-server")
        F.cross_entropy(forward(m, x), y).backward()
        opt.synchronize()
    elif mistake == "forgot-step":
        m = model()
        opt = wrap(m)
        for _ in range(2):
            F.cross_entropy(forward(m, x), y).backward()
    elif mistake == "zero-grad-before-step":
        m = model()
        opt = wrap(m)
        F.cross_entropy(forward(m, x), y).backward()
        opt.zero_grad()
    elif mistake == "collectives-out-of-order":
        t = torch.ones(3)
        hvd.allreduce(t, name="a") if R == 0 else hvd.broadcast(t, 0, name="b")
    elif mistake == "missing-parameter-on-one-rank":
        # Rank 1 leaves a parameter out of named_parameters: every rank gets the error.
        m = model()
        named = list(m.named_parameters())
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 named_parameters=named if R == 0 else named[1:])
    elif mistake == "uncaught-on-one-rank":
        # Rank 1 fails with an exception nobody catches while rank 0 waits for it in a collective:
        # the job ends at once, not after the stall limit.
        m = model()
        opt = wrap(m)
        if R == 1:
            raise ValueError("rank 1 fails alone")
        hvd.allreduce(torch.ones(1), name="never answered")
    elif mistake == "replicas-differ":
        # Rank 1's weights are changed behind the optimizer's back: check_every names it.
        m = model()
        opt = wrap(m, check_every=2)
        for step in range(4):
            if R == 1 and step == 1:
                with torch.no_grad():
                    m["b"].bias.add_(1.0)
            opt.zero_grad()
            F.cross_entropy(forward(m, x), y).backward()
            opt.step()
    elif mistake == "timeline":
        # Two steps recorded: each rank's buckets' all-reduces and its torch optimizer steps.
        import json
        m = model()
        opt = wrap(m, fusion_mb=0)
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(forward(m, x), y).backward()
            opt.step()
        hvd.shutdown()  # writes the merged trace
        if R == 0:
            events = json.load(open(sys.argv[2]))
            names = {(e.get("pid"), e.get("name")) for e in events if e.get("ph") == "X"}
            wanted = {(r, n) for r in (0, 1) for n in ("all-reduce", "torch optimizer step")}
            say(f"rank {R}: timeline spans missing: {sorted(wanted - names)}")
            sys.exit(0 if wanted <= names else 1)
        sys.exit(0)
    elif mistake == "stalled-rank":
        # Rank 1 stops before its second backward: rank 0, waiting in step(), names it and ends the job.
        import time
        m = model()
        opt = wrap(m)
        for step in range(2):
            if R == 1 and step == 1:
                time.sleep(30)
            opt.zero_grad()
            F.cross_entropy(forward(m, x), y).backward()
            opt.step()
    elif mistake == "optimizer-state":
        # Root's Adam state, made by a step of its own, reaches rank 1, whose state torch has not
        # created yet, without moving rank 1's weights.
        m = model()
        adam = torch.optim.Adam(m.parameters(), lr=0.1)
        if R == 0:
            F.cross_entropy(forward(m, x), y).backward()
            adam.step()
        before = [p.detach().clone() for p in m.parameters()]
        hvd.broadcast_optimizer_state(adam, root_rank=0)
        state = adam.state_dict()["state"]
        moments = torch.cat([state[k]["exp_avg"].flatten() for k in sorted(state)]) if state else torch.zeros(1)
        spread = (hvd.allreduce(moments, op=hvd.Max) - hvd.allreduce(moments, op=hvd.Min)).abs().max().item()
        unmoved = all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
        say(f"rank {R}: state of {len(state)} parameters, moments differ by {spread}, weights unmoved {unmoved}")
        sys.exit(0 if len(state) == 4 and spread == 0 and unmoved else 1)
    elif mistake == "step-on-the-torch-optimizer":
        # The program keeps the torch optimizer it wrapped and steps that one, with a scheduler made
        # after wrapping: tower's step runs all the same (each rank's own batch, yet equal replicas),
        # and the scheduler neither warns nor loses its count.
        import warnings
        warnings.filterwarnings("error", message=r".*lr_scheduler|.*optimizer.step")
        m = model()
        sgd = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        opt = hvd.DistributedOptimizer(sgd, named_parameters=m.named_parameters(), check_every=1)
        scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=2, gamma=0.5)
        for step in range(4):
            opt.zero_grad()
            F.cross_entropy(forward(m, x[R::2]), y[R::2]).backward()
            sgd.step()
            scheduler.step()
        flat = torch.cat([p.detach().flatten() for p in m.parameters()])
        spread = (hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)).abs().max().item()
        lr = sgd.param_groups[0]["lr"]
        say(f"rank {R}: stepped through the torch optimizer; replicas differ by {spread}, lr {lr}")
        sys.exit(0 if spread == 0 and lr == 0.025 else 1)
    elif mistake == "unused-on-one-rank":
        # Rank 0 uses the extra branch, rank 1 does not: rank 1 adds zeros for it, nobody hangs,
        # and both ranks end on the same parameters.
        m = model(branch=True)
        opt = wrap(m)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(forward(m, x, use_extra=(R == 0)), y).backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in m.parameters()])
        spread = (hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)).abs().max().item()
        say(f"rank {R}: trained; replicas differ by {spread}")
        sys.exit(0 if spread == 0 else 1)
    elif mistake == "unused-everywhere":
        # No rank uses the extra branch: torch's optimizer leaves it alone (no gradient), as alone.
        m = model(branch=True)
        before = m["extra"].weight.detach().clone()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=0.1),
                                       named_parameters=m.named_parameters())
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(forward(m, x), y).backward()
            opt.step()
        moved = not torch.equal(before, m["extra"].weight)
        say(f"rank {R}: unused parameter moved: {moved}; grad {m['extra'].weight.grad}")
        sys.exit(1 if moved or m["extra"].weight.grad is not None else 0)
    else:
        raise SystemExit(f"unknown mistake {mistake}")
except (hvd.TowerError, AttributeError, AssertionError, RuntimeError) as e:
    if mistake == "uncaught-on-one-rank":
        raise
    report(e)
say(f"rank {R}: no error")
sys.exit(0)
