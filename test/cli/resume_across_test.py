#!/usr/bin/env python3
"""A checkpoint resumes at any world size and under any strategy: the parameters after the load
equal those saved, bit for bit, and the optimizer state carries over whole.

Every run that goes on training here has two workers (2 ranks, or 3 with one server), so the
replicated, parameter-server and sync-replicas strategies compute the same sums and their hashes
can be compared bit for bit; the variables' placements differ (whole on rank 0; sliced over 1, 2
or 3 owners). An async checkpoint (no two runs of it are alike) is checked by its loads.
Usage: resume_across_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-resume-across-test-")

REPLICATED = ["--strategy", "replicated"]
PS = ["--strategy", "parameter-server"]
PS_SERVER = ["--strategy", "parameter-server", "--ps-ranks", "1"]
SYNC = ["--strategy", "sync-replicas"]
SYNC_SERVER = ["--strategy", "sync-replicas", "--ps-ranks", "1"]
ASYNC = ["--strategy", "async"]


def expect(cond, what):
    if not cond:
        failures.append(what)


def train(name, np, strategy, steps, *args):
    """Runs tower train and returns (summary, stdout, stderr, returncode)."""
    metrics = os.path.join(tmp, f"{name}.jsonl")
    cmd = [mpirun, "--oversubscribe", "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64",
           "--depth", "1", "--batch", "16", "--epochs", "1", "--eval-every", "0", "--log-every", "100",
           "--max-steps", str(steps), "--metrics", metrics, *strategy, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    summary = [json.loads(x) for x in open(metrics)][-1] if os.path.exists(metrics) else {}
    if r.returncode != 0:
        failures.append(f"{name}: exit {r.returncode}: {r.stderr[-1500:]}")
    return summary, r.stdout, r.stderr, r.returncode


def ckpt(name, step=None):
    d = os.path.join(tmp, name)
    return d if step is None else os.path.join(d, f"step-{step:010d}")


# References: the parameters at steps 20 and 40 of one uninterrupted run.
at20 = train("ref20", 2, REPLICATED, 20)[0].get("replica_hash")
at40 = train("ref40", 2, REPLICATED, 40)[0].get("replica_hash")
expect(at20 and at40 and at20 != at40, f"references: {at20} {at40}")

# Checkpoints of step 20 written in three placements: whole on rank 0, sliced over two owners
# that also train, and held by one dedicated server.
for name, np, strategy in (("whole", 2, REPLICATED), ("two-owners", 2, PS), ("one-server", 3, PS_SERVER),
                           ("sync", 2, SYNC)):
    s = train(f"write-{name}", np, strategy, 40, "--checkpoint-dir", ckpt(name), "--checkpoint-every", "20")[0]
    expect(s.get("replica_hash") == at40, f"{name}: the uninterrupted run differs from the reference")

# Loads with no step after them: the parameters are those saved, whatever the new placement.
loads = [("whole", 3, PS), ("whole", 3, PS_SERVER), ("whole", 1, REPLICATED), ("two-owners", 3, REPLICATED),
         ("one-server", 2, PS), ("sync", 3, PS), ("whole", 3, SYNC)]
for source, np, strategy in loads:
    name = f"load-{source}-np{np}-{'-'.join(strategy[1::2])}"
    s, out, _, _ = train(name, np, strategy, 20, "--checkpoint-dir", ckpt(name), "--resume", ckpt(source, 20))
    expect(s.get("replica_hash") == at20, f"{name}: parameters after the load {s.get('replica_hash')}, saved {at20}")
    expect("each variable is cut anew" in out or np == 2, f"{name}: no word of the new placement: {out[-800:]}")

# Loads that go on training with two workers: the optimizer state (momentum) came across too, or
# the run would leave the reference.
for source, np, strategy in (("whole", 2, PS), ("two-owners", 2, REPLICATED), ("two-owners", 3, PS_SERVER),
                             ("one-server", 2, PS), ("whole", 2, SYNC), ("sync", 2, REPLICATED),
                             ("sync", 3, SYNC_SERVER)):
    name = f"continue-{source}-np{np}-{'-'.join(strategy[1::2])}"
    s = train(name, np, strategy, 40, "--checkpoint-dir", ckpt(name), "--resume", ckpt(source, 20))[0]
    expect(s.get("replica_hash") == at40, f"{name}: ended on {s.get('replica_hash')}, the reference on {at40}")

# An async checkpoint of its last update (3 ranks, 90 updates), loaded with no update after it.
s = train("write-async", 3, ASYNC, 30, "--checkpoint-dir", ckpt("async"), "--checkpoint-every", "40")[0]
saved = s.get("replica_hash")
for np, strategy, steps in ((2, ASYNC, 30), (1, REPLICATED, 20)):
    name = f"load-async-np{np}-{'-'.join(strategy[1::2])}"
    s, out, _, _ = train(name, np, strategy, steps, "--checkpoint-dir", ckpt(name), "--resume", ckpt("async", 90))
    expect(s.get("replica_hash") == saved and s.get("steps") == 90,
           f"{name}: parameters after the load {s.get('replica_hash')} at step {s.get('steps')}, saved {saved} at 90")

# A file of the previous format is refused with a word on what to do.
old = ckpt("old")
subprocess.run(["cp", "-r", ckpt("whole"), old], check=True)
for root, _, files in os.walk(old):
    for f in files:
        with open(os.path.join(root, f), "r+b") as h:
            h.seek(8)
            h.write((1).to_bytes(4, "little"))
r = subprocess.run(
    [mpirun, "-np", "2", tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1", "--batch", "16",
     "--epochs", "1", "--eval-every", "0", "--max-steps", "40", "--checkpoint-dir", old, "--resume"],
    capture_output=True, text=True, timeout=300)
expect(r.returncode != 0 and "format version 1; this tower reads version 2" in r.stdout + r.stderr
       and "start it over" in r.stdout + r.stderr, f"version 1 files: {r.stdout[-800:]} {r.stderr[-800:]}")

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("resume-across test: all checks passed")
