"""tower.torch's process and collectives on a program's own tensors, under Horovod's names."""
import atexit
import io
import pickle
import sys

import torch

from . import _core

TowerError = _core.TowerError


class _Op:
    def __init__(self, horovod_name, tower_name):
        self.horovod_name, self.tower_name = horovod_name, tower_name

    def __repr__(self):
        return self.horovod_name


Average = _Op("Average", "mean")
Sum = _Op("Sum", "sum")
Min = _Op("Min", "min")
Max = _Op("Max", "max")


class _Compressor:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return f"Compression.{self.name}"


class Compression:
    """How gradients travel: none (their own type), fp16 or bf16 (tower's addition)."""
    none = _Compressor("none", None)
    fp16 = _Compressor("fp16", torch.float16)
    bf16 = _Compressor("bf16", torch.bfloat16)


_exit_registered = False
# An exception nobody caught ends this rank: the job must end, not wait for it. Its exit status:
# 2 for an AgreedError (every rank has it: a restart under tower elastic would fail the same way,
# and the launcher does not restart on 2), 1 for anything else.
_failed = 0


def _note_failure(hook):
    def excepthook(kind, value, traceback):
        global _failed
        _failed = 2 if issubclass(kind, _core.AgreedError) else 1
        hook(kind, value, traceback)
    return excepthook


def init(comm=None, process_sets=None, *, stall_warn_s=60.0, stall_abort_s=600.0, timeline=None):
    """Starts MPI and learns the topology (collective). Idempotent. tower's own: a rank waiting
    stall_warn_s seconds for others prints where it waits and which ranks have not arrived; after
    stall_abort_s (0: never) it ends the job with that report. timeline="trace.json" records a
    Chrome trace of every rank (buckets' all-reduces, waits, updates) until shutdown()."""
    global _exit_registered
    if comm is not None or process_sets is not None:
        raise TowerError("tower.torch.init() takes no comm or process_sets: it runs over every rank of mpirun")
    if not (0 <= stall_warn_s and 0 <= stall_abort_s and (stall_abort_s == 0 or stall_warn_s <= stall_abort_s)):
        raise TowerError(f"stall_warn_s={stall_warn_s}, stall_abort_s={stall_abort_s}: seconds, 0 or more, the "
                         "warning first (stall_abort_s=0 never aborts)")
    first = not _core.is_initialized()
    _core.init()
    _core.set_stall_limits(float(stall_warn_s), float(stall_abort_s))
    if timeline and first:
        _core.record_timeline(str(timeline))
    if not _exit_registered:
        atexit.register(_at_exit)
        sys.excepthook = _note_failure(sys.excepthook)
        _exit_registered = True


def shutdown():
    """Collective: closes every DistributedOptimizer and Checkpoints (in the order they were made,
    alike on every rank; a checkpoint still being written is finished first), then MPI. Gradients
    that were views of tower's buckets get memory of their own."""
    _core.shutdown()


def _at_exit():
    if _failed and _core.is_initialized():
        # This rank ends on an error the others may never see: they could be waiting for it in a
        # collective, or in the collective close of the buckets. End the job, as mpirun would if
        # the process died.
        sys.stderr.flush()
        _core.abort(_failed)
    shutdown()


is_initialized = _core.is_initialized
size = _core.size
rank = _core.rank
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size


def mpi_built():
    return True


def mpi_enabled():
    return True


def mpi_threads_supported():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    """Whether tower was built with NCCL. tower.torch itself reduces CPU tensors in this version."""
    return _core.cuda_built()


def _op_name(op, average, default=Average):
    if average is not None and op is not None:
        raise TowerError("allreduce: pass op= or the older average=, not both")
    if average is not None:
        op = Average if average else Sum
    op = default if op is None else op
    if not isinstance(op, _Op):
        raise TowerError(f"op={op!r}: use tower.torch.Average, Sum, Min or Max")
    return op.tower_name


def _name(name):
    return "" if name is None else str(name)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               compression=Compression.none):
    """Reduces `tensor` over the ranks in place and returns it (collective)."""
    op_name = _op_name(op, average)
    with torch.no_grad():
        if prescale_factor != 1.0:
            tensor.mul_(prescale_factor)
        if compression.dtype is not None and tensor.is_floating_point() and tensor.dtype != compression.dtype:
            low = tensor.to(compression.dtype)
            _core.allreduce_(low, op_name, _name(name))
            tensor.copy_(low)
        else:
            _core.allreduce_(tensor, op_name, _name(name))
        if postscale_factor != 1.0:
            tensor.mul_(postscale_factor)
    return tensor


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """A new tensor: `tensor` reduced over the ranks (collective)."""
    return allreduce_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor, compression)


def allgather(tensor, name=None):
    """Every rank's tensor concatenated along the first dimension, which may differ (collective)."""
    return _core.allgather(tensor.detach(), _name(name))


def broadcast_(tensor, root_rank, name=None):
    """Root's values into `tensor` on every rank; returns it (collective)."""
    with torch.no_grad():
        _core.broadcast_(tensor, int(root_rank), _name(name))
    return tensor


def broadcast(tensor, root_rank, name=None):
    return broadcast_(tensor.detach().clone(), root_rank, name)


class _Handle:
    """tower runs a collective when it is called; the handle holds its result."""

    def __init__(self, result):
        self.result = result


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    return _Handle(allreduce(tensor, average, name, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    return _Handle(allreduce_(tensor, average, name, op, prescale_factor, postscale_factor))


def allgather_async(tensor, name=None):
    return _Handle(allgather(tensor, name))


def broadcast_async(tensor, root_rank, name=None):
    return _Handle(broadcast(tensor, root_rank, name))


def broadcast_async_(tensor, root_rank, name=None):
    return _Handle(broadcast_(tensor, root_rank, name))


def poll(handle):
    return True


def synchronize(handle):
    return handle.result


def barrier():
    _core.barrier()


def join(device=-1):
    raise TowerError("join() is not supported: tower matches collectives by the order of the calls, so every "
                     "rank must make the same ones; give every rank the same number of batches (docs/torch.md)")


def broadcast_object(obj, root_rank=0, name=None):
    """Root's `obj` on every rank, pickled (collective)."""
    if rank() == root_rank:
        buffer = io.BytesIO()
        pickle.dump(obj, buffer)
        payload = buffer.getvalue()
        length = torch.tensor([len(payload)], dtype=torch.int64)
    else:
        payload, length = b"", torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, f"{_name(name)}.length" if name else "broadcast_object.length")
    n = int(length.item())
    words = (n + 7) // 8
    data = torch.zeros(words, dtype=torch.int64)
    if rank() == root_rank:
        data.view(torch.uint8)[:n] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    broadcast_(data, root_rank, f"{_name(name)}.data" if name else "broadcast_object.data")
    if rank() == root_rank:
        return obj
    return pickle.loads(data.view(torch.uint8)[:n].numpy().tobytes())


def broadcast_parameters(params, root_rank=0):
    """Root's values into every tensor of `params` (a state_dict, or (name, tensor) pairs)."""
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    for name, tensor in items:
        if tensor is None:
            continue
        if not torch.is_tensor(tensor):
            raise TowerError(f"broadcast_parameters: '{name}' is a {type(tensor).__name__}, not a tensor")
        broadcast_(tensor, root_rank, name)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Root's optimizer state and settings on every rank (collective). The state travels as root's
    state_dict and is loaded with load_state_dict: an optimizer whose state torch creates lazily gets
    it without a step, so no weight moves (Horovod takes a step with zero gradients instead)."""
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None, root_rank,
                             "broadcast_optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)
