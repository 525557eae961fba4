"""tower.torch: tower's data-parallel runtime for PyTorch programs, under Horovod's names.

A Horovod program runs with `import horovod.torch as hvd` changed to `import tower.torch as hvd`,
for the names this module provides (docs/torch.md lists them); a Horovod name it does not provide
is an AttributeError that names it. Launch with `mpirun -np N /usr/bin/python3 prog.py`.
"""
import ctypes

# Open MPI loads its plugins with dlopen and they look for libmpi's symbols globally, which a
# library loaded by a Python extension does not provide unless it was loaded globally first.
for _library in ("libmpi.so.40", "libmpi.so"):
    try:
        ctypes.CDLL(_library, mode=ctypes.RTLD_GLOBAL)
        break
    except OSError:
        pass

import torch  # noqa: E402,F401  (torch's libraries before the extension that links them)

from ._core import AgreedError, TowerError  # noqa: E402,F401
from .functions import (  # noqa: E402,F401
    Average, Compression, Max, Min, Sum, allgather, allgather_async, allreduce, allreduce_, allreduce_async,
    allreduce_async_, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object,
    broadcast_optimizer_state, broadcast_parameters, cross_rank, cross_size, gloo_built, gloo_enabled, init,
    is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll,
    rank, shutdown, size, synchronize)
from .checkpoints import Checkpoints  # noqa: E402,F401
from .optimizer import DistributedOptimizer, serve  # noqa: E402,F401


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tower.torch does not provide '{name}' (a Horovod name outside the subset it "
                         f"implements; docs/torch.md lists what it provides and what it refuses)")
