"""tower.torch.DistributedOptimizer: any torch optimizer, its gradients reduced by tower."""
import contextlib

import torch

from . import _core
from .functions import Average, Compression, TowerError, _op_name


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


def _settings(optimizer):
    """What every rank's wrapped optimizer must hold alike."""
    fields = [("optimizer class", type(optimizer).__name__)]
    for i, group in enumerate(optimizer.param_groups):
        for key in sorted(k for k in group if k != "params"):
            fields.append((f"param_groups[{i}].{key}", repr(group[key])))
        fields.append((f"param_groups[{i}] parameters", str(len(group["params"]))))
    return fields


class _DistributedOptimizer:
    """Methods added to the wrapped optimizer's class (its state and settings stay its own)."""

    def _tower_init(self, named_parameters, arguments, base_step, check_every):
        self._tower_reducer = _core.GradientReducer(named_parameters, arguments)
        self._tower_check_every = check_every
        self._tower_steps = 0
        self._tower_should_synchronize = True
        self._tower_synchronized = False
        self._tower_last = {}
        # A learning-rate scheduler made before wrapping put a counting step() on the optimizer
        # itself; it is called in place of the class's, so the scheduler keeps its count.
        self._tower_base_step = base_step

    def synchronize(self):
        """Waits for every gradient's reduction (collective). Between synchronize() and step(),
        the gradients are reduced: clip or unscale them there, then step() inside
        skip_synchronize()."""
        self._tower_last = self._tower_reducer.synchronize()
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
        if self._tower_should_synchronize and not self._tower_synchronized:
            self.synchronize()
        self._tower_synchronized = False
        if self._tower_last.get("skipped"):
            # A reduced gradient was inf or NaN: every rank skips this step alike.
            return loss
        with _core.Span("torch optimizer step", "update"):
            if self._tower_base_step is not None:
                self._tower_base_step()
            else:
                super(self.__class__, self).step()
        self._tower_steps += 1
        if self._tower_check_every and self._tower_steps % self._tower_check_every == 0:
            # Collective: every rank holds the same parameters, or AgreedError names who differs.
            self._tower_last["replica_hash"] = f"{self._tower_reducer.check_replicas():016x}"
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._tower_reducer.gradients_pending():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(); the gradients are being "
                                 "reduced: call step() first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def tower_stats(self):
        """The last step's reduction: skipped, grad_norm, allreduce_s, hidden_fraction, buckets."""
        return dict(self._tower_last)

    def _tower_close(self):
        """Collective: what shutdown() does for this optimizer alone."""
        self._tower_reducer.close()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=None, *, allreduce="auto", fusion_mb=4.0,
                         overlap=True, strategy="replicated", name="", check_every=0):
    """Wraps `optimizer` (any torch.optim.Optimizer): gradients are reduced over the ranks as
    backward finalizes them, and step() applies the reduced ones (collective: every rank makes
    the same calls). Horovod's arguments, plus tower's own: allreduce= (auto, ring, hierarchical,
    naive), fusion_mb= (the bucket size, 4 MB so that a model of tens of MB overlaps its
    reduction with backward; 0 is one bucket per parameter), overlap=, groups=
    (replica subgroups), strategy= (replicated), name=, check_every= (every K steps, compare the
    ranks' parameters by hash: an error naming the ranks that differ)."""
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
    if hasattr(optimizer, "_tower_reducer"):
        problems.append("this optimizer is a DistributedOptimizer already: wrap the torch optimizer once")
    if not isinstance(check_every, int) or check_every < 0:
        problems.append(f"check_every={check_every!r}: a number of steps, 0 (never) or more")
        check_every = 0
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
                ordered.append((f"param_groups[{i}][{j}]", p))
            elif id(p) in by_tensor:
                ordered.append((by_tensor[id(p)], p))
            else:
                problems.append(f"a parameter of param_groups[{i}] (shape {tuple(p.shape)}) is missing from "
                                "named_parameters")
    if named_parameters is not None:
        # Autograd finalizes gradients roughly in reverse of the model's order: keep the model's.
        position = {key: k for k, (key, _) in enumerate(named)}
        ordered.sort(key=lambda item: position[item[0]])

    arguments = _core.ReducerArguments()
    arguments.name = name
    arguments.op = op_name
    arguments.compression = getattr(compression, "name", "none")
    arguments.allreduce = allreduce
    arguments.fusion_mb = float(fusion_mb)
    arguments.overlap = bool(overlap)
    arguments.groups = replica_groups
    arguments.backward_passes_per_step = int(backward_passes_per_step)
    arguments.strategy = strategy
    arguments.agreed = _settings(optimizer) + [("check_every", str(check_every))]
    arguments.problem = "; ".join(problems)

    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    wrapped = cls.__new__(cls)
    base_step = optimizer.__dict__.pop("step", None)
    wrapped.__dict__ = optimizer.__dict__  # the same state, settings and parameter groups
    wrapped._tower_init(ordered, arguments, base_step, check_every)
    return wrapped
