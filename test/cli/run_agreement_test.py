#!/usr/bin/env python3
"""Ranks started with different options (an MPMD launch) get one error naming each difference on
every rank; --debug-collectives trains as usual. Usage: run_agreement_test.py MPIRUN TOWER"""
import subprocess
import sys

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
BASE = [tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1", "--max-steps", "6", "--eval-every", "0",
        "--log-every", "3", "--stall-abort", "60"]


def expect(cond, what):
    if not cond:
        failures.append(what)


def mpmd(*per_rank):
    """One rank per argument list: mpirun -np 1 tower train ARGS : -np 1 tower train ARGS ..."""
    command = [mpirun]
    for i, args in enumerate(per_rank):
        command += ([":"] if i else []) + ["-np", "1", *BASE, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


# --lr 0.05 on rank 0 and 0.01 on rank 1 used to train and report "replicas identical".
r = mpmd(["--lr", "0.05"], ["--lr", "0.01"])
expect(r.returncode != 0, "different --lr: exit status 0")
for rank in range(2):
    mine = [x for x in r.stderr.splitlines() if x.startswith(f"[rank {rank}] error:")]
    expect(any("--lr is 0.05 on rank 0 and 0.01 on rank 1" in x for x in mine),
           f"rank {rank} did not name --lr: {r.stderr[-2000:]}")

# Three ranks, two differences, ranks with the same value named together.
r = mpmd(["--batch", "32"], ["--batch", "32", "--optimizer", "adam"], ["--batch", "64"])
expect(r.returncode != 0, "different --batch and --optimizer: exit status 0")
for rank in range(3):
    mine = [x for x in r.stderr.splitlines() if x.startswith(f"[rank {rank}] error:")]
    expect(any("--batch is 32 on ranks 0, 1 and 64 on rank 2" in x and
               "--optimizer is momentum on ranks 0, 2 and adam on rank 1" in x for x in mine),
           f"rank {rank} did not name both differences: {r.stderr[-2000:]}")

# A model option the command line alone knows is compared before any data is loaded.
r = mpmd(["--precision", "fp32"], ["--precision", "bf16"])
expect(r.returncode != 0 and "--precision is fp32 on rank 0 and bf16 on rank 1" in r.stderr,
       f"different --precision: {r.returncode} {r.stderr[-2000:]}")

# Options that may differ do not stop a run.
r = mpmd(["--stall-warn", "30"], ["--stall-warn", "40"])
expect(r.returncode == 0, f"different --stall-warn stopped the run: {r.stderr[-2000:]}")

# Collective fingerprints on: the run trains as usual (every collective matched).
for strategy in ("replicated", "parameter-server"):
    r = subprocess.run([mpirun, "-np", "2", *BASE, "--strategy", strategy, "--debug-collectives"],
                       capture_output=True, text=True, timeout=120)
    expect(r.returncode == 0 and "done:" in r.stdout, f"--debug-collectives {strategy}: {r.stderr[-2000:]}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("run agreement test passed")
