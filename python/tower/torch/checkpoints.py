"""tower.torch.Checkpoints: a PyTorch program's parameters and optimizer state in tower's
checkpoints, written whole or not at all, resumed at any world size and under another strategy."""
import json
import os

import torch

from . import _core
from . import optimizer as _optimizer_module
from .functions import TowerError, broadcast_object


def _group_state(optimizer, index, counters):
    """Group `index`'s parameters and its torch optimizer's state, named as tower's owners name
    theirs (momentum, adam_m, adam_v), so that parameter-server resumes it and it resumes
    parameter-server's. torch makes the state at the first step; made here, zeros act the same."""
    kind = optimizer._tower_kind()
    group = optimizer.param_groups[index]
    pairs, parameters = [], []
    for key, p, g in optimizer._tower_named:
        if g != index:
            continue
        parameters.append(key)
        pairs.append((key, p.data))
        state = optimizer.state[p]
        if kind is torch.optim.SGD:
            if group["momentum"]:
                if state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = torch.zeros_like(p.data)
                pairs.append((key + "/momentum", state["momentum_buffer"]))
        elif kind in (torch.optim.Adam, torch.optim.AdamW):
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p.data)
                state["exp_avg_sq"] = torch.zeros_like(p.data)
            pairs += [(key + "/adam_m", state["exp_avg"]), (key + "/adam_v", state["exp_avg_sq"])]
    pairs += list(counters.items())
    return pairs, parameters


class Checkpoints:
    """Collective. A program's checkpoints in `directory` (default: $TOWER_CHECKPOINT_DIR, which
    `tower elastic --checkpoint-dir` sets): a step directory per save(), a file per saving rank,
    the manifest last, the newest `keep` kept. restore() loads the newest valid one when `resume`
    (default: $TOWER_RESUME is 1, as `tower elastic` sets it on a relaunch; a path resumes that
    checkpoint). Under replicated rank 0 saves the parameters and torch's SGD, Adam or AdamW state;
    under parameter-server, async and sync-replicas each owner saves its slices and moments; under
    local-sgd the synced values and each worker's own (docs/torch.md). Any of them resumes
    another's, at any world size. `identity` (a dict) must be the same on resume."""

    def __init__(self, optimizer, directory=None, keep=3, resume=None, identity=None):
        if not hasattr(optimizer, "_tower_reducers"):
            raise TowerError("Checkpoints(optimizer) takes a tower.torch.DistributedOptimizer")
        directory = directory if directory is not None else os.environ.get("TOWER_CHECKPOINT_DIR", "")
        if resume is None:
            resume = os.environ.get("TOWER_RESUME") == "1"
        resume_path = resume if isinstance(resume, str) else ""
        kind = optimizer._tower_kind()
        if not optimizer._tower_owners_apply and kind not in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
            raise TowerError(f"checkpoints of a {kind.__name__} program: tower saves torch's SGD, Adam and AdamW "
                             "state, under names any strategy reads")
        if not optimizer._tower_owners_apply:
            # The state any strategy can hold: torch's SGD, Adam and AdamW without the settings the
            # owners' rules cannot match (amsgrad keeps a state of its own; dampening changes what
            # a first step makes of the momentum).
            problems = [p for i, g in enumerate(optimizer.param_groups)
                        for p in _optimizer_module._owner_rule(kind, i, g)[1]]
            if problems:
                raise TowerError("checkpoints save torch's SGD, Adam and AdamW state under names every strategy "
                                 "reads: " + "; ".join(problems))
        self._optimizer = optimizer
        self._states = []
        reducers = [r for r in optimizer._tower_reducers if r is not None]
        if not optimizer._tower_owners_apply:
            reducers = []
            for i, name in enumerate(optimizer._tower_group_names):
                if name is not None:
                    pairs, parameters = _group_state(optimizer, i, self._counters(0, i))
                    self._states.append((i, _core.TorchState(name, pairs, parameters)))
        self._core = _core.Checkpoints(directory, int(keep), bool(resume), resume_path, json.dumps(identity or {}),
                                       f"torch {optimizer._tower_strategy}", reducers,
                                       [state for _, state in self._states])
        # With ranks that only serve, a save completes before the servers go back to serving: they
        # cannot join a later wait() the workers make on their own.
        self._with_servers = optimizer._tower_strategy == "parameter-server" and optimizer.worker_count() != _core.size()
        optimizer._tower_checkpoints.append(self)
        _optimizer_module._launcher_optimizer[0] = optimizer  # its steps are what a restart resumes

    def _counters(self, step, index):
        """Group `index`'s counters as tower's own optimizers keep them beside their state: the
        steps its optimizer took (torch's Adam keeps that count per parameter), and a loss scale
        of 1."""
        applied = self._optimizer._tower_steps
        if self._optimizer._tower_kind() is not torch.optim.SGD:
            # (0: a state made here for a parameter torch has not stepped, which takes no part)
            steps = {int(self._optimizer.state[p]["step"]) for key, p, g in self._optimizer._tower_named
                     if g == index and "step" in self._optimizer.state[p]} - {0}
            if len(steps) > 1:
                raise TowerError(f"param_groups[{index}]: torch's {self._optimizer._tower_kind().__name__} took "
                                 f"{sorted(steps)} steps for different parameters; tower's checkpoints keep one count "
                                 "per group")
            applied = steps.pop() if steps else 0
        return {"optimizer/step": torch.tensor([applied], dtype=torch.int64),
                "strategy/global_step": torch.tensor([step], dtype=torch.int64),
                "loss_scale/log2": torch.zeros(1, dtype=torch.float32),
                "loss_scale/clean_steps": torch.zeros(1, dtype=torch.int64)}

    def _check_not_running(self, what):
        if any(r.running() for r in self._optimizer._tower_reducers if r is not None):
            raise TowerError(f"{what} under strategy={self._optimizer._tower_strategy!r} while its run goes on: its "
                             "owners apply updates on threads of their own, with no step every rank is at; "
                             f"{what} before the first more() or after the last step")

    def save(self, step, **totals):
        """Collective, between steps: the checkpoint of `step` (the steps done), with the program's
        own running totals (numbers), given back by restore(). Returns the seconds training paused:
        the files are written behind, and complete before the next save() or at wait(). Under
        async and sync-replicas: before the run begins or once it is over."""
        self._check_not_running("save()")
        if self._optimizer._tower_strategy == "parameter-server" and not self._optimizer.is_worker():
            raise TowerError("save() on a rank that only serves: its serve() joins the workers' saves")
        # Ranks that only serve are inside serve(): the first worker's word brings them to the save.
        first = next(r for r in self._optimizer._tower_reducers if r is not None)
        first.announce_checkpoint(int(step))
        if self._with_servers:
            self._share_totals(totals)
        return self._save(step, totals)

    def _share_totals(self, totals):
        """The first worker's totals to every rank: the manifest, which rank 0 writes, holds them
        even where rank 0 only serves."""
        return broadcast_object(totals, root_rank=_core.size() - self._optimizer.worker_count(),
                                name="checkpoint totals")

    def _serve_save(self, step):
        """A server's part of the workers' save (its serve() calls it)."""
        return self._save(step, self._share_totals(None))

    def _save(self, step, totals):
        counters = [self._counters(step, i) for i, _ in self._states]
        for (i, state), c in zip(self._states, counters):
            state.update(_group_state(self._optimizer, i, c)[0])
        paused = self._core.save(int(step), {k: float(v) for k, v in totals.items()})
        if self._with_servers:
            self._core.wait()
        return paused

    def restore(self):
        """Collective: where resuming, the newest valid checkpoint (or the path given as resume=)
        into the parameters and the optimizer state of every rank; returns (step, totals). Not
        resuming: (0, {}). Under async and sync-replicas: before the first more()."""
        self._check_not_running("restore()")
        counters = [self._counters(0, i) for i, _ in self._states]
        for (i, state), c in zip(self._states, counters):
            state.update(_group_state(self._optimizer, i, c)[0])
        position = self._core.restore()
        says = self._optimizer.worker_rank() == 0  # the first worker speaks to tower elastic
        if position is None:
            if says:
                _core.launcher_started(0, False)
            return 0, {}
        step, totals = position
        for (i, _), c in zip(self._states, counters):
            applied = int(c["optimizer/step"][0])
            if self._optimizer._tower_kind() is not torch.optim.SGD:
                for key, p, g in self._optimizer._tower_named:
                    if g == i:
                        self._optimizer.state[p]["step"] = torch.tensor(float(applied))
            self._optimizer._tower_steps = applied
        self._optimizer._tower_position = step
        if says:
            _core.launcher_started(step, True)
        return step, dict(totals)

    def wait(self):
        """Collective: the checkpoint in progress is complete on disk (an error on every rank if a
        rank could not write its part). With ranks that only serve, every save completed already."""
        if not self._with_servers:
            self._core.wait()

    def poll(self):
        self._core.poll()
