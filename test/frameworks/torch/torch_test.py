#!/usr/bin/env python3
"""tower.torch under mpirun with Debian's PyTorch: a model trained at 1, 2 and 3 ranks equals plain
PyTorch in one process (equivalence.py: every all-reduce mode, overlap on and off, 16-bit
compression, accumulation, Sum; overlap seen during backward; DDP's losses at 2 ranks), the
example GPT (examples/torch/gpt.py) at 2 ranks follows tower's own GPT from the same weights
(gpt_example.py), a program written for Horovod runs with only its import changed
(examples/torch/horovod_mnist.py), the owner strategies match plain PyTorch (strategies.py),
checkpoints resume at another size under the other strategy (checkpoints.py), the GAN example
(examples/torch/gan.py) at 1 and 2 ranks equals plain PyTorch, and each mistake in mistakes.py ends
with its clear error on every rank within seconds, or trains.
Usage: torch_test.py MPIRUN PYTHON GPT_DUMP CORPUS"""
import os
import re
import subprocess
import sys
import tempfile
import time

mpirun, python, gpt_dump, corpus = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
failures = []


def launch(ranks, script, *args, timeout=120):
    start = time.monotonic()
    r = subprocess.run([mpirun, "-np", str(ranks), python, os.path.join(here, script), *args],
                       capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - start


for ranks, args in ((1, ["--quick"]), (2, ["--ddp"]), (3, [])):
    r, seconds = launch(ranks, "equivalence.py", *args)
    passed = r.returncode == 0 and r.stdout.count("all passed") == ranks
    print(f"equivalence at {ranks} rank(s): {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"equivalence at {ranks} rank(s)\n{r.stdout}\n{r.stderr}")

# parameter-server with the owners applying torch's rules, and deterministic=True (strategies.py).
for ranks in (2, 3):
    r, seconds = launch(ranks, "strategies.py")
    passed = r.returncode == 0 and r.stdout.count("all passed") == ranks
    print(f"strategies at {ranks} ranks: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"strategies at {ranks} ranks\n{r.stdout}\n{r.stderr}")

# Checkpoints (checkpoints.py): saved at one size under one strategy, resumed at another size under
# another, bit for bit, and the optimizer state with it (sync-replicas last: it saves again at its
# end). (ranks, strategy, ranks that only serve)
for save, resumes in (((3, "replicated", 0), ((2, "parameter-server", 0), (2, "sync-replicas", 0))),
                      ((3, "parameter-server", 1), ((1, "replicated", 0), (3, "parameter-server", 1))),
                      ((2, "local-sgd", 0), ((2, "local-sgd", 0),)),
                      ((2, "local-sgd-overlap", 0), ((2, "local-sgd-overlap", 0),))):
    with tempfile.TemporaryDirectory() as tmp:
        saved, seconds = launch(save[0], "checkpoints.py", "save", tmp, save[1], str(save[2]))
        for ranks, strategy, servers in resumes:
            r, more = launch(ranks, "checkpoints.py", "resume", tmp, strategy, str(servers)) \
                if saved.returncode == 0 else (saved, 0.0)
            passed = r.returncode == 0 and r.stdout.count(" ok") == ranks
            what = (f"checkpoint at {save[0]} ranks under {save[1]} ({save[2]} servers), resumed at {ranks} under "
                    f"{strategy} ({servers} servers)")
            print(f"{what}: {'ok' if passed else 'FAILED'} ({seconds + more:.1f} s)")
            if not passed:
                failures.append(f"{what}\n{r.stdout}\n{r.stderr}")

# The StyleGAN2-style GAN (examples/torch/gan.py: R1 through autograd, D_reg sharing D's Adam state)
# on the same global batches: tower at 1 rank is plain PyTorch's run bit for bit (both under mpirun,
# whose binding decides torch's kernels), and 2 ranks are bit for bit plain PyTorch taking each
# gradient as the mean over the batch's two halves (--parts 2: the same sums in the same order).
# Against the one-part run they differ by rounding that 40 Adam steps of a GAN amplify: within
# 2e-8 on one machine, 4e-4 on another, so no tolerance there would mean anything.
gan_sums = {}
for ranks, extra in ((1, ("--plain",)), (1, ()), (2, ()), (1, ("--plain", "--parts", "2"))):
    r, seconds = launch(ranks, "../../../examples/torch/gan.py", "--steps", "40", "--log-every", "20", *extra)
    m = re.search(r"final parameter sums G (\S+) D (\S+)", r.stdout)
    gan_sums[(ranks, extra)] = (float(m.group(1)), float(m.group(2))) if r.returncode == 0 and m else None
plain, one, two, halves = (gan_sums[(1, ("--plain",))], gan_sums[(1, ())], gan_sums[(2, ())],
                           gan_sums[(1, ("--plain", "--parts", "2"))])
passed = plain is not None and one == plain and halves is not None and two == halves
print(f"gan example, 40 steps: plain PyTorch {plain}, tower at 1 rank {one}; plain PyTorch in two halves {halves}, "
      f"tower at 2 ranks {two}: {'ok' if passed else 'FAILED'}")
if not passed:
    failures.append(f"gan example: {gan_sums}\n{r.stdout}\n{r.stderr}")

with tempfile.TemporaryDirectory() as tmp:
    dump = os.path.join(tmp, "gpt")
    subprocess.run([gpt_dump, "--layers", "2", "--width", "64", "--heads", "2", "--context", "32", "--batch", "8",
                    "--steps", "20", "--lr", "1e-3", "--eval-windows", "0", "--data", corpus, "--out", dump],
                   check=True, capture_output=True)
    r, seconds = launch(2, "gpt_example.py", dump)
    passed = r.returncode == 0 and r.stdout.count(" ok") == 2
    print(f"gpt example at 2 ranks against tower's GPT: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"gpt example\n{r.stdout}\n{r.stderr}")

# A program written for Horovod, its import changed and nothing else.
example = os.path.join(here, "../../../examples/torch/horovod_mnist.py")
start = time.monotonic()
r = subprocess.run([mpirun, "-np", "2", python, example, "--epochs", "1", "--max-batches", "30"],
                   capture_output=True, text=True, timeout=120)
passed = r.returncode == 0 and "accuracy" in r.stdout
print(f"a Horovod program (examples/torch/horovod_mnist.py) at 2 ranks: {'ok' if passed else 'FAILED'} "
      f"({time.monotonic() - start:.1f} s)")
if not passed:
    failures.append(f"horovod_mnist\n{r.stdout}\n{r.stderr}")

# mistake: the words every rank's error must hold (None: it must train, exit 0)
mistakes = {
    "different-model": "'a.weight f32 [8, 4]' on rank 0",
    "different-optimizer": "param_groups[0].lr is 0.1 on rank 0 and 0.2 on rank 1",
    "horovod-name-outside": "tower.torch does not provide 'Adasum'",
    "detached-without-steps": "strategy= async needs the run's length, steps=",
    "local-sgd-option-under-replicated": "sync_every= belongs to strategy= local-sgd, not replicated",
    "local-sgd-fusion": "fusion_mb= belongs to strategy='replicated' (its all-reduce); strategy='local-sgd' sends one",
    "share-with-options-of-its-own": "share= reduces through the shared optimizer's buckets, with its options: drop op=",
    "checkpoint-amsgrad": "param_groups[0] amsgrad=True: the owners' rule matches torch's only with amsgrad=False",
    "owner-optimizer-class": "RMSprop: under an owner strategy and local-sgd tower applies the update with torch's",
    "owner-amsgrad": "param_groups[0] amsgrad=True: the owners' rule matches torch's only with amsgrad=False",
    "owner-synchronize": "synchronize() under an owner strategy",
    "owner-replicated-option": "groups= belongs to strategy='replicated' (its all-reduce)",
    "owner-scheduled-momentum": "param_groups[0] changed ['momentum'] after wrapping",
    "forgot-step": "got a gradient 2 times before step()",
    "zero-grad-before-step": "zero_grad() was called after loss.backward()",
    "collectives-out-of-order": "allreduce('a' f32[3]) op=mean on rank 0 and broadcast('b' f32[3]) root=0 on rank 1",
    "missing-parameter-on-one-rank": "is missing from named_parameters",
    "optimizer-state": None,
    "step-on-the-torch-optimizer": None,
    "unused-on-one-rank": None,
    "unused-everywhere": None,
}
for mistake, words in mistakes.items():
    r, seconds = launch(2, "mistakes.py", mistake, timeout=60)
    if words is None:
        passed = r.returncode == 0
    else:
        # (mpirun may join two ranks' lines into one: look for each rank's words anywhere.)
        passed = r.returncode != 0 and all(re.search(rf"rank {k}: [^\n]*?{re.escape(words)}", r.stdout)
                                           for k in range(2))
    print(f"{mistake}: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"{mistake}: exit {r.returncode}, expected {words!r} on both ranks\n{r.stdout}\n{r.stderr}")

# check_every: a rank whose weights were changed behind the optimizer's back is named at the next check.
r, seconds = launch(2, "mistakes.py", "replicas-differ", timeout=60)
passed = r.returncode != 0 and all(re.search(rf"rank {k}: AgreedError: [^\n]*rank 1", r.stdout) for k in range(2))
print(f"replicas-differ: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
if not passed:
    failures.append(f"replicas-differ: exit {r.returncode}\n{r.stdout}\n{r.stderr}")

# init(timeline=...): every rank's all-reduces and torch optimizer steps in one trace.
with tempfile.TemporaryDirectory() as tmp:
    r, seconds = launch(2, "mistakes.py", "timeline", os.path.join(tmp, "trace.json"), timeout=60)
    passed = r.returncode == 0 and "timeline spans missing: []" in r.stdout
    print(f"timeline: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"timeline: exit {r.returncode}\n{r.stdout}\n{r.stderr}")

# A rank that stops: the one waiting for it names it, and the job ends after the stall limit.
r, seconds = launch(2, "mistakes.py", "stalled-rank", timeout=60)
passed = (r.returncode != 0 and "not arrived: rank 1" in r.stderr and "aborting the job" in r.stderr
          and seconds < 20)
print(f"stalled-rank: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
if not passed:
    failures.append(f"stalled-rank: exit {r.returncode} after {seconds:.1f} s\n{r.stdout}\n{r.stderr}")

# A server that trains, and workers that take different numbers of steps: the ranks would pair the
# wrong broadcasts, so the job ends at once, saying which rank did what.
for ranks, mistake, words in ((2, "server-steps", "rank 0 only serves variables (ps_ranks= 1): it runs serve()"),
                              (3, "uneven-workers", "rank 2 closed its optimizer while the first worker")):
    r, seconds = launch(ranks, "mistakes.py", mistake, timeout=60)
    passed = r.returncode != 0 and words in r.stderr and seconds < 20
    print(f"{mistake}: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
    if not passed:
        failures.append(f"{mistake}: exit {r.returncode} after {seconds:.1f} s\n{r.stdout}\n{r.stderr}")

# An exception one rank does not catch, while the others wait for it: the job ends at once.
r, seconds = launch(2, "mistakes.py", "uncaught-on-one-rank", timeout=60)
passed = r.returncode != 0 and "ValueError: rank 1 fails alone" in r.stderr and seconds < 20
print(f"uncaught-on-one-rank: {'ok' if passed else 'FAILED'} ({seconds:.1f} s)")
if not passed:
    failures.append(f"uncaught-on-one-rank: exit {r.returncode} after {seconds:.1f} s\n{r.stdout}\n{r.stderr}")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("tower.torch: every check passed")
