"""tower.torch.DistributedOptimizer: any torch optimizer, its gradients reduced by tower."""
import contextlib
import json

import torch

from . import _core
from .functions import Average, Compression, TowerError, _op_name, allgather, broadcast_object


def _groups_argument(groups):
    """tower's replica subgroups: [[0, 1], [2, 3]] or "0,1;2,3". Horovod's groups= (lists of
    tensors fused together) is refused by name."""
    if groups is None:
        return []
    if isinstance(groups, str):
        return [[int(r) for r in part.split(",") if r.strip()] for part in groups.split(";") if part.strip()]
    if isinstance(groups, int) or any(not isinstance(r, int) for group in groups for r in group):
        raise TowerError("groups= is tower's replica subgroups (lists of ranks, e.g. [[0, 1], [2, 3]]); Horovod's "
                         "groups of tensors are not supported: tower fuses by size (fusion_mb=)")
    return [list(group) for group in groups]


# Settings of torch's optimizers that the owners' rules cannot match, with the value they can.
_UNMATCHED = {"dampening": 0, "maximize": False, "amsgrad": False, "capturable": False, "differentiable": False,
              "fused": False}


def _owner_rule(kind, index, group):
    """The update rule the owners apply for one parameter group of a `kind` optimizer, as rows of
    tower's optimizer table, matching torch's SGD, Adam and AdamW; and what it cannot match."""
    problems = [f"param_groups[{index}] {key}={group[key]!r}: the owners' rule matches torch's only with "
                f"{key}={ok!r}" for key, ok in _UNMATCHED.items() if key in group and group[key] not in (ok, None)]
    if kind is torch.optim.SGD:
        momentum = float(group["momentum"])
        rule = [("optimizer", "momentum" if momentum else "sgd"), ("momentum", repr(momentum)),
                ("nesterov", "true" if group["nesterov"] else "false")]
    elif kind in (torch.optim.Adam, torch.optim.AdamW):
        beta1, beta2 = group["betas"]
        rule = [("optimizer", "adamw" if kind is torch.optim.AdamW else "adam"), ("beta1", repr(float(beta1))),
                ("beta2", repr(float(beta2))), ("epsilon", repr(float(group["eps"]))), ("pytorch_adam", "true")]
    else:
        return [], problems + [f"{kind.__name__}: under an owner strategy and local-sgd tower applies the update with torch's "
                               "SGD, Adam or AdamW rule exactly; other optimizers train under replicated"]
    return rule + [("weight_decay", repr(float(group["weight_decay"])))], problems


def _settings(optimizer):
    """What every rank's wrapped optimizer must hold alike."""
    fields = [("optimizer class", type(optimizer).__name__)]
    for i, group in enumerate(optimizer.param_groups):
        for key in sorted(k for k in group if k != "params"):
            fields.append((f"param_groups[{i}].{key}", repr(group[key])))
        fields.append((f"param_groups[{i}] parameters", str(len(group["params"]))))
    return fields


# The optimizer whose steps tower elastic hears of (a program's GAN has three): the one a
# Checkpoints was made for, else the first one made.
_launcher_optimizer = [None]


class _DistributedOptimizer:
    """Methods added to the wrapped optimizer's class (its state and settings stay its own)."""

    def _tower_init(self, reducers, check_every, strategy, named, group_names):
        # Under replicated one reducer, and the torch optimizer applies the update; under an owner
        # strategy one per parameter group (None for a group with nothing to train), and the
        # owners apply each group's rule with its learning rate.
        self._tower_reducers = reducers
        self._tower_owners_apply = any(r is not None and r.applies_update() for r in reducers)
        # async and sync-replicas: the ranks do not step together; each step() pushes and fetches.
        self._tower_detached = any(r is not None and r.detached() for r in reducers)
        self._tower_run = None
        self._tower_strategy = strategy
        # (name, parameter, group) in the model's order, and each group's name in checkpoints
        # (None for a group with nothing to train): what Checkpoints saves under which name.
        self._tower_named = named
        self._tower_group_names = group_names
        self._tower_checkpoints = []  # moved along at every step
        self._tower_position = 0      # the steps done, a resumed checkpoint's included
        if _launcher_optimizer[0] is None:
            _launcher_optimizer[0] = self
        self._tower_check_every = check_every
        self._tower_steps = 0
        self._tower_should_synchronize = True
        self._tower_synchronized = False
        self._tower_last = {}
        # The owners' rule of each group as made: a scheduler may change the learning rate, which
        # every step reads, but nothing else of it (_tower_owner_step checks).
        self._tower_rules = [_owner_rule(self._tower_kind(), i, g)[0] for i, g in enumerate(self.param_groups)]
        self._tower_route_step()

    def _tower_kind(self):
        """The torch optimizer class this one was made from."""
        return type(self).__mro__[1]

    def _tower_route_step(self):
        """Puts tower's step() in the state this object shares with the torch optimizer it wraps, so
        that a step() called on either runs tower's (a call on the torch optimizer would otherwise
        apply unreduced gradients on one rank). It counts steps as a scheduler's wrapper does
        (_with_counter): a scheduler made before or after wrapping then neither warns nor wraps it."""
        tower_step = type(self).step

        def step(closure=None):
            if "_step_count" in self.__dict__:
                self._step_count += 1  # what a scheduler's wrapper counts, made before or after wrapping
            return tower_step(self, closure)

        step._with_counter = True
        self.__dict__["step"] = step

    def synchronize(self):
        """Waits for every gradient's reduction (collective). Between synchronize() and step(),
        the gradients are reduced: clip or unscale them there, then step() inside
        skip_synchronize(). Under an owner strategy the owners apply the update as they reduce:
        there is no such point, and step() does it all."""
        if self._tower_owners_apply:
            raise TowerError("synchronize() under an owner strategy or local-sgd: tower applies the update as it "
                             "takes the gradients, so nothing can change them in between; call step()")
        self._tower_last = self._tower_reducers[0].synchronize()
        self._tower_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._tower_should_synchronize = False
        try:
            yield
        finally:
            self._tower_should_synchronize = True

    def step(self, closure=None):
        loss = None
        if closure is not None:
            # The closure's backward must finish, and be reduced, before the update reads .grad.
            with torch.enable_grad():
                loss = closure()
        if self._tower_owners_apply:
            self._tower_owner_step()
        else:
            self._tower_replicated_step()
        self._tower_position += 1
        if _launcher_optimizer[0] is self and self._tower_first().worker_index() == 0:
            _core.launcher_stepped(self._tower_position)  # under tower elastic, its line
        for checkpoints in self._tower_checkpoints:
            checkpoints.poll()
        return loss

    def _tower_replicated_step(self):
        if self._tower_should_synchronize and not self._tower_synchronized:
            self.synchronize()
        self._tower_synchronized = False
        if self._tower_last.get("skipped"):
            # A reduced gradient was inf or NaN: every rank skips this step alike.
            return
        with _core.Span("torch optimizer step", "update"):
            super(self.__class__, self).step()
        self._tower_steps += 1
        if self._tower_check_every and self._tower_steps % self._tower_check_every == 0:
            # Collective: every rank holds the same parameters, or AgreedError names who differs.
            self._tower_last["replica_hash"] = f"{self._tower_reducers[0].check_replicas():016x}"

    def _tower_owner_step(self):
        """Collective: each group's gradients to their owners, who apply the group's rule with its
        learning rate as param_groups holds it now (so torch's LR schedulers work); every rank
        then holds the new values. A group whose reduced gradient is inf or NaN skips its update."""
        for i, group in enumerate(self.param_groups):
            rule = _owner_rule(self._tower_kind(), i, group)[0]
            if rule != self._tower_rules[i]:
                changed = sorted({key for key, _ in set(rule) ^ set(self._tower_rules[i])})
                raise TowerError(f"param_groups[{i}] changed {changed} after wrapping: under an owner strategy or "
                                 "local-sgd tower keeps the rule it was given, and only the learning rate may change (a "
                                 "scheduler that cycles momentum or betas, e.g. OneCycleLR's cycle_momentum, needs "
                                 "strategy='replicated')")
        if self._tower_detached and not self.more():
            raise TowerError("step() after the run ended (its steps= spent): loop while optimizer.more()")
        results = []
        with _core.Span("owners' update", "update"):
            for reducer, group in zip(self._tower_reducers, self.param_groups):
                # Under async one group's tokens may run out a step before another's.
                if reducer is not None and (not self._tower_detached or reducer.more()):
                    results.append(reducer.synchronize(float(group["lr"])))
        self._tower_last = {"skipped": any(r["skipped"] for r in results),
                            "grad_norm": sum(r["grad_norm"] ** 2 for r in results) ** 0.5,
                            "allreduce_s": sum(r["allreduce_s"] for r in results),
                            "hidden_fraction": sum(r["allreduce_s"] * r["hidden_fraction"] for r in results) /
                            max(sum(r["allreduce_s"] for r in results), 1e-30),
                            "buckets": sum(r["buckets"] for r in results)}
        self._tower_steps += 1
        if self._tower_detached and not self.more():
            self._tower_finish_run()
        if self._tower_check_every and self._tower_steps % self._tower_check_every == 0:
            hashes = [r.check_replicas() for r in self._tower_reducers if r is not None]
            self._tower_last["replica_hash"] = ",".join(f"{h:016x}" for h in hashes)

    def _tower_finish_run(self):
        """Collective, on every rank once its run is over: the owners apply the last gradients and
        every rank's parameters take the final values. Idempotent."""
        if self._tower_run is None:
            self._tower_run = [json.loads(r.finish_run()) for r in self._tower_reducers if r is not None]

    def more(self):
        """Under async and sync-replicas: whether this worker takes another step (the chief granted
        it a token, and the parameters hold the owners' values for it). The loop is
        `while opt.more(): ...; opt.step()`. The step() that ends the run leaves every rank the
        final values. Always True under the lock-step strategies."""
        if not self._tower_detached:
            return True
        # Every group's run starts at its first more(): ask each, not only until one says yes.
        if any([r.more() for r in self._tower_reducers if r is not None]):
            return True
        # No step for this rank (none granted at all, or a run resumed at its end): the run's end
        # is collective, as after a last step().
        self._tower_finish_run()
        return False

    def use_averages(self, averaged=True):
        """Collective, with ema_decay= under an owner strategy: the parameters take the variables'
        moving averages (True) or the trained values back (False). Under async and sync-replicas,
        once the run is over."""
        for reducer in self._tower_reducers:
            if reducer is not None:
                reducer.use_averages(bool(averaged))

    def settle_replicas(self):
        """Collective, under strategy='local-sgd' (nothing under the others): the workers, which
        train apart between syncs, take a sync now, so that every rank holds the one synced model.
        Call it at the end of training, before the last checkpoint and the final evaluation."""
        for reducer in self._tower_reducers:
            if reducer is not None:
                reducer.settle_replicas()

    @contextlib.contextmanager
    def synced_values(self):
        """Under strategy='local-sgd': inside the block the parameters hold the synced values (the
        model of the last sync, the same on every rank), for an evaluation; this worker's own come
        back after it, and the training goes on as if nothing happened. Not collective."""
        for reducer in self._tower_reducers:
            if reducer is not None:
                reducer.use_synced_values(True)
        try:
            yield
        finally:
            for reducer in self._tower_reducers:
                if reducer is not None:
                    reducer.use_synced_values(False)

    def _tower_first(self):
        return next(r for r in self._tower_reducers if r is not None)

    def is_worker(self):
        """False on a rank that only serves variables (parameter-server with ps_ranks above 0)."""
        return self._tower_first().is_worker()

    def worker_rank(self):
        """This rank's place among the ranks that train (-1 on a server): what a data split uses,
        e.g. DistributedSampler(data, num_replicas=opt.worker_count(), rank=opt.worker_rank())."""
        return self._tower_first().worker_index()

    def worker_count(self):
        """The number of ranks that train: size() less the servers."""
        return self._tower_first().workers()

    def serve(self):
        """On a rank that only serves variables: applies the workers' updates, step after step, with
        the learning rates the first worker announces, until the workers end (their shutdown(), or
        the end of their program), and joins the checkpoints the workers save. Collective with the
        workers' step() and save() calls. Under async and sync-replicas the owners serve on a
        thread of their own; this waits for the run's end. Returns the steps served (the updates
        applied, under async and sync-replicas)."""
        live = [r for r in self._tower_reducers if r is not None]
        if self._tower_detached:
            # Every group's owner thread first (the workers ask each group's chief in turn), then
            # wait for each group's end.
            for reducer in live:
                reducer.more()
            for reducer in live:
                reducer.serve_step()
            self._tower_finish_run()
            return self._tower_run[0]["updates"]
        steps = 0
        while True:
            said, at = live[0].serve_step()  # 0: the end, 1: a step, 2: a checkpoint of step `at`
            if said == 2:
                if not self._tower_checkpoints:
                    raise TowerError(f"the workers save a checkpoint of step {at}, but this server (rank {_core.rank()}) "
                                     "made no tower.torch.Checkpoints: make them on every rank, before serve()")
                for checkpoints in self._tower_checkpoints:
                    checkpoints._serve_save(at)  # the workers are in the same save
                continue
            if said == 0 or not all(r.serve_step()[0] == 1 for r in live[1:]):
                break
            steps += 1
            if self._tower_check_every and steps % self._tower_check_every == 0:
                for r in live:
                    r.check_replicas()  # the workers compare theirs; a server joins in
        return steps

    def zero_grad(self, *args, **kwargs):
        if any(r is not None and r.gradients_pending() for r in self._tower_reducers):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(); the gradients are being "
                                 "reduced: call step() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def tower_stats(self):
        """The last step's reduction: skipped, grad_norm, allreduce_s, hidden_fraction, buckets (and
        replica_hash, with check_every=).
        Under async and sync-replicas, once the run is over, also "run": each group's totals from
        its chief (updates, gradients_applied, dropped_stale, dropped_nonfinite, staleness_mean, ...)."""
        stats = dict(self._tower_last)
        if self._tower_run is not None:
            stats["run"] = self._tower_run
        return stats

    def tower_close(self):
        """Collective: what shutdown() does for this optimizer alone. Under parameter-server with
        servers, the workers' close ends the servers' serve()."""
        for reducer in self._tower_reducers:
            if reducer is not None:
                reducer.close()


def serve(optimizer):
    """On a rank that only serves variables (parameter-server with ps_ranks above 0): what the rank
    runs instead of the training loop. Returns after the workers' last step, once they shut down."""
    return optimizer.serve()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=None, *, allreduce="auto", fusion_mb=4.0,
                         overlap=True, strategy="replicated", ps_ranks=0, deterministic=False, name="",
                         check_every=0, steps=0, replicas_to_aggregate=0, async_scale=True, max_staleness=None,
                         ema_decay=None, share=None, sync_every=None, local_start=None, outer_optimizer=None,
                         outer_lr=None, outer_momentum=None, outer_compress=None, outer_overlap=None,
                         outer_delay=None):
    """Wraps `optimizer` (any torch.optim.Optimizer): gradients are reduced over the ranks as
    backward finalizes them, and step() applies the reduced ones (collective: every rank makes
    the same calls). Horovod's arguments, plus tower's own: allreduce= (auto, ring, hierarchical,
    naive), fusion_mb= (the bucket size, 4 MB so that a model of tens of MB overlaps its
    reduction with backward; 0 is one bucket per parameter), overlap=, groups=
    (replica subgroups), deterministic= (one result whatever allreduce= and the node layout),
    strategy= (replicated: every rank's torch optimizer applies the reduced gradients;
    parameter-server: each variable's owner applies torch's SGD, Adam or AdamW rule and every
    rank receives the new values; with ps_ranks=0 every rank owns a share, with K > 0 ranks
    0..K-1 only serve: they run serve(), and the workers split the data by worker_rank() and
    worker_count()), name=, check_every=
    (every K steps, compare the ranks' parameters by hash: an error naming the ranks that
    differ). async and sync-replicas (owners that apply each gradient, or each N of them, as
    they come) need steps= (the run's length in lock-step steps) and a loop `while opt.more()`;
    their options: replicas_to_aggregate= (sync-replicas), async_scale= and max_staleness=
    (async); ema_decay= keeps moving averages on the owners (use_averages()). local-sgd: every
    worker applies torch's SGD, Adam or AdamW rule to its own gradients and the workers average
    how far they moved every sync_every= steps, with an outer optimizer (outer_optimizer=
    nesterov, DiLoCo's, or sgd; outer_lr=, outer_momentum=, outer_compress= none, bf16 or int8,
    outer_overlap=, outer_delay=, local_start=: tower train's options of the same names); call
    settle_replicas() at the end, and evaluate inside synced_values(). share=another
    (replicated): the StyleGAN2 seed's share=, a second optimizer over the same parameters whose
    steps move `another`'s state (a lazy regularizer's D_reg beside D); it reduces through the
    same buckets, and its own param_groups set its learning rate."""
    if share is not None:
        # The shared optimizer's reduction is the one: its own options would be ignored.
        defaults = {"compression": Compression.none, "backward_passes_per_step": 1, "op": Average,
                    "gradient_predivide_factor": 1.0, "num_groups": 0, "groups": None, "sparse_as_dense": False,
                    "process_set": None, "allreduce": "auto", "fusion_mb": 4.0, "overlap": True,
                    "strategy": "replicated", "ps_ranks": 0, "deterministic": False, "steps": 0,
                    "replicas_to_aggregate": 0, "async_scale": True, "max_staleness": None, "ema_decay": None,
                    "sync_every": None, "local_start": None, "outer_optimizer": None, "outer_lr": None,
                    "outer_momentum": None, "outer_compress": None, "outer_overlap": None,
                    "outer_delay": None}
        given = dict(compression=compression, backward_passes_per_step=backward_passes_per_step, op=op,
                     gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups, groups=groups,
                     sparse_as_dense=sparse_as_dense, process_set=process_set, allreduce=allreduce,
                     fusion_mb=fusion_mb, overlap=overlap, strategy=strategy, ps_ranks=ps_ranks,
                     deterministic=deterministic, steps=steps, replicas_to_aggregate=replicas_to_aggregate,
                     async_scale=async_scale, max_staleness=max_staleness, ema_decay=ema_decay,
                     sync_every=sync_every, local_start=local_start, outer_optimizer=outer_optimizer,
                     outer_lr=outer_lr, outer_momentum=outer_momentum, outer_compress=outer_compress,
                     outer_overlap=outer_overlap, outer_delay=outer_delay)
        ignored = sorted(k for k, v in given.items() if v is not defaults[k] and v != defaults[k])
        return _sharing(optimizer, share, name, check_every, ignored)
    # What is wrong on this rank goes to the reducer's agreement: an error on every rank, not a
    # rank that raises while the others wait for it.
    problems = []
    if gradient_predivide_factor != 1.0:
        problems.append("gradient_predivide_factor other than 1.0 is not supported: tower sums in float32 and "
                        "divides once")
    if num_groups:
        problems.append("num_groups is not supported: tower fuses gradients by size (fusion_mb=)")
    if sparse_as_dense or process_set is not None:
        problems.append("sparse_as_dense and process_set are not supported (docs/torch.md)")
    if not isinstance(compression, type(Compression.none)):
        problems.append(f"compression={compression!r}: use tower.torch.Compression.none, fp16 or bf16")
    if hasattr(optimizer, "_tower_reducers"):
        problems.append("this optimizer is a DistributedOptimizer already: wrap the torch optimizer once")
    if not isinstance(check_every, int) or check_every < 0:
        problems.append(f"check_every={check_every!r}: a number of steps, 0 (never) or more")
        check_every = 0
    detached = strategy in ("async", "sync-replicas")
    if detached and check_every:
        problems.append(f"check_every= under strategy={strategy!r}: its workers do not step together, so there is "
                        "no step at which to compare them; the run's end brings every rank the same values")
    if strategy != "replicated":
        # The all-reduce's own options mean nothing where the gradients go to their owners, or
        # (local-sgd, whose outer all-reduce takes allreduce=) nowhere.
        given = {"allreduce": allreduce != "auto" and strategy != "local-sgd", "fusion_mb": fusion_mb != 4.0,
                 "overlap": overlap is not True, "groups": bool(groups), "deterministic": bool(deterministic)}
        for key in (k for k, v in given.items() if v):
            problems.append(f"{key}= belongs to strategy='replicated' (its all-reduce); strategy={strategy!r} "
                            + ("sends one pseudo-gradient every sync_every= steps" if strategy == "local-sgd"
                               else "sends each gradient to its owner"))
    if isinstance(optimizer, torch.optim.LBFGS):
        problems.append("LBFGS evaluates its closure several times per step: not supported")
    op_name, replica_groups = "mean", []
    try:
        op_name = _op_name(op, None)
    except TowerError as e:
        problems.append(str(e))
    try:
        replica_groups = _groups_argument(groups)
    except (TowerError, TypeError, ValueError) as e:
        problems.append(f"groups={groups!r}: {e}")

    by_tensor = {}
    named = []
    if named_parameters is not None:
        named = list(named_parameters)  # a generator is read once
        for key, p in named:
            if id(p) in by_tensor:
                problems.append(f"named_parameters holds the parameter '{key}' twice")
            by_tensor[id(p)] = key
    ordered = []
    for i, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            if not p.requires_grad:
                continue  # frozen: no gradient to reduce, as in Horovod
            if named_parameters is None:
                ordered.append((f"param_groups[{i}][{j}]", p, i))
            elif id(p) in by_tensor:
                ordered.append((by_tensor[id(p)], p, i))
            else:
                problems.append(f"a parameter of param_groups[{i}] (shape {tuple(p.shape)}) is missing from "
                                "named_parameters")
    if named_parameters is not None:
        # Autograd finalizes gradients roughly in reverse of the model's order: keep the model's.
        position = {key: k for k, (key, _) in enumerate(named)}
        ordered.sort(key=lambda item: position[item[0]])

    def arguments(name, rule, agreed, problem):
        a = _core.ReducerArguments()
        a.name = name
        a.op = op_name
        a.compression = getattr(compression, "name", "none")
        a.allreduce = allreduce
        a.fusion_mb = float(fusion_mb)
        a.overlap = bool(overlap)
        a.groups = replica_groups
        a.backward_passes_per_step = int(backward_passes_per_step)
        a.strategy = strategy
        a.ps_ranks = ps_ranks if isinstance(ps_ranks, int) else -1
        a.deterministic = bool(deterministic)
        a.steps = steps if isinstance(steps, int) else -1
        a.strategy_rows = strategy_rows
        a.rule = rule
        a.agreed = agreed
        a.problem = problem
        return a

    # The owner strategies' own options, given only where the program gave them: the library
    # refuses each under a strategy that does not read it.
    strategy_rows = []
    if replicas_to_aggregate != 0:
        strategy_rows.append(("replicas_to_aggregate", str(replicas_to_aggregate)))
    if async_scale is not True:
        strategy_rows.append(("async_scale", "false" if async_scale is False else str(async_scale)))
    if max_staleness is not None:
        strategy_rows.append(("max_staleness", str(max_staleness)))
    if ema_decay is not None:
        strategy_rows.append(("ema_decay", repr(ema_decay)))
    local = {"sync_every": sync_every, "local_start": local_start, "outer_optimizer": outer_optimizer,
             "outer_lr": outer_lr, "outer_momentum": outer_momentum, "outer_compress": outer_compress,
             "outer_overlap": outer_overlap, "outer_delay": outer_delay}
    for key, value in local.items():
        if value is not None:
            strategy_rows.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    agreed = _settings(optimizer) + [("check_every", str(check_every))]
    # Each group's name, as its optimizer is named under an owner strategy and its variables in a
    # checkpoint under any; None for a group with nothing to train.
    group_names = [(f"{name}.param_groups[{i}]" if name else f"param_groups[{i}]")
                   if any(g == i for _, _, g in ordered) else None for i in range(len(optimizer.param_groups))]
    if strategy == "replicated":
        reducers = [_core.GradientReducer([(key, p) for key, p, _ in ordered],
                                          arguments(name, [], agreed, "; ".join(problems)))]
    else:
        reducers = _owner_reducers(optimizer, ordered, group_names, agreed, problems, arguments)

    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    wrapped = cls.__new__(cls)
    # A scheduler made before wrapping left a counting wrapper of the torch class's step() here;
    # tower's step() takes its place and keeps the count (_tower_route_step).
    optimizer.__dict__.pop("step", None)
    wrapped.__dict__ = optimizer.__dict__  # the same state, settings and parameter groups
    wrapped._tower_init(reducers, check_every, strategy, ordered, group_names)
    return wrapped


def _agree(problem):
    """Collective: raises TowerError on every rank when any rank has a problem, naming the first."""
    flags = allgather(torch.tensor([1 if problem else 0], dtype=torch.int32), name="tower.problems")
    failing = [r for r, f in enumerate(flags.tolist()) if f]
    if failing:
        text = broadcast_object(problem, root_rank=failing[0], name="tower.problem")
        raise _core.AgreedError(f"rank {failing[0]}: {text}")


def _sharing(optimizer, share, name, check_every, ignored):
    """A DistributedOptimizer over `share`'s parameters whose torch optimizer steps `share`'s state:
    the same reducer and buckets, torch's `state` the same object, the group settings its own."""
    problem = ""
    if ignored:
        problem = (f"share= reduces through the shared optimizer's buckets, with its options: drop "
                   f"{', '.join(k + '=' for k in ignored)}")
    elif not isinstance(check_every, int) or check_every < 0:
        problem = f"check_every={check_every!r}: a number of steps, 0 (never) or more"
    elif not hasattr(share, "_tower_reducers"):
        problem = "share= takes a tower.torch.DistributedOptimizer"
    elif share._tower_owners_apply:
        problem = (f"share= under strategy={share._tower_strategy!r}: only replicated shares an optimizer's state "
                   "for now")
    elif type(optimizer) is not share._tower_kind():
        problem = f"share=: a {type(optimizer).__name__} cannot share the state of a {share._tower_kind().__name__}"
    else:
        mine = [id(p) for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        theirs = [id(p) for _, p, _ in sorted(share._tower_named, key=lambda item: item[2])]
        if sorted(mine) != sorted(theirs):
            problem = "share=: the optimizer must update exactly the parameters of the one it shares with"
    _agree(problem)
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    wrapped = cls.__new__(cls)
    optimizer.__dict__.pop("step", None)
    optimizer.state = share.state  # one state: a step through either moves it
    wrapped.__dict__ = optimizer.__dict__
    by_tensor = {id(p): (key, g) for key, p, g in share._tower_named}
    named = [(by_tensor[id(p)][0], p, i) for i, group in enumerate(optimizer.param_groups) for p in group["params"]
             if id(p) in by_tensor]
    group_names = [f"{name}.param_groups[{i}]" if name else f"param_groups[{i}]"
                   for i in range(len(optimizer.param_groups))]
    wrapped._tower_init(share._tower_reducers, check_every, share._tower_strategy, named, group_names)
    return wrapped


def _owner_reducers(optimizer, ordered, group_names, agreed, problems, arguments):
    """One reducer per parameter group that has something to train, each with the group's rule.
    Every rank's problems go to the first one's agreement, so that all ranks fail there alike."""
    rules = []
    for i, group in enumerate(optimizer.param_groups):
        rule, unmatched = _owner_rule(type(optimizer), i, group)
        rules.append(rule)
        problems = problems + unmatched
    by_group = [[(key, p) for key, p, g in ordered if g == i] for i in range(len(rules))]
    if not any(by_group):
        # Nothing trains: the reducer's own check says so, on every rank.
        return [_core.GradientReducer([], arguments("", rules[0] if rules else [], agreed, "; ".join(problems)))]
    reducers = []
    for i, (rule, named) in enumerate(zip(rules, by_group)):
        if not named:
            reducers.append(None)  # nothing of this group trains
            continue
        first = all(r is None for r in reducers)
        reducers.append(_core.GradientReducer(named, arguments(group_names[i], rule, agreed if first else [],
                                                               "; ".join(problems) if first else "")))
    return reducers
