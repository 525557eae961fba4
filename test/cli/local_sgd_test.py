#!/usr/bin/env python3
"""Runs `tower train --strategy local-sgd` under mpirun: a run stopped at a checkpoint between syncs
resumes bit for bit at the same size, and loads at another (every worker restarting from the synced
values), with the outer all-reduce overlapped too; the summary's syncs and bytes; a NaN gradient skipped by its worker alone; bf16 and int8
outer all-reduces; the option errors on every rank. Usage: local_sgd_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-local-sgd-test-")


def expect(cond, what):
    if not cond:
        failures.append(what)


def run(np, name, *args):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    r = subprocess.run([mpirun, "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1",
                        "--batch", "16", "--epochs", "1", "--eval-every", "0", "--log-every", "10",
                        "--strategy", "local-sgd", "--sync-every", "4", "--optimizer", "adamw", "--lr", "0.002",
                        "--metrics", metrics, *args], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in open(metrics)] if r.returncode == 0 and os.path.exists(metrics) else []
    return r, lines


def ok(name, r, lines):
    expect(r.returncode == 0 and lines, f"{name}: failed ({r.returncode}): {r.stderr[-2000:]}")
    return lines[-1] if lines else {}


# The checkpoint at step 10 falls between syncs (every 4 steps): each worker's own parameters and
# inner AdamW state are saved. A run resumed from it ends on the hash of the run that never
# stopped. (The first run goes on to step 12, where it ends on a sync and saves again.)
ckpt = os.path.join(tmp, "ckpt")
whole = ok("whole", *run(2, "whole", "--max-steps", "30"))
ok("first part", *run(2, "first", "--max-steps", "12", "--checkpoint-dir", ckpt, "--checkpoint-every", "10"))
r, lines = run(2, "resumed", "--max-steps", "30", "--checkpoint-dir", os.path.join(tmp, "resumed"), "--checkpoint-every",
               "10", "--resume", os.path.join(ckpt, "step-0000000010"))
resumed = ok("resumed", r, lines)
expect("resumed from" in r.stdout and "step 10" in r.stdout, f"resumed: no resume line: {r.stdout[-1000:]}")
expect(whole.get("replica_hash") == resumed.get("replica_hash"),
       f"resume not bit for bit: {whole.get('replica_hash')} uninterrupted, {resumed.get('replica_hash')} resumed")
# 30 steps: 7 syncs every 4 steps and the one that ends the run on the synced model.
expect(whole.get("syncs") == 8 and whole.get("skipped_syncs") == 0, f"syncs: {whole}")
expect(whole.get("sync_bytes", 0) > 0 and whole.get("allreduce_bytes_per_step") == whole.get("sync_bytes", 0) // 4,
       f"bytes: {whole}")

# At another size the workers' own state cannot be matched: the run loads the synced values and says so.
r, lines = run(3, "grown", "--max-steps", "30", "--checkpoint-dir", os.path.join(tmp, "grown"),
              "--resume", os.path.join(ckpt, "step-0000000010"))
grown = ok("grown", r, lines)
expect("every worker restarts from its synced values" in r.stdout, f"grown: no restart line: {r.stdout[-1500:]}")
expect(grown.get("world_size") == 3, f"grown: {grown}")

# Under overlap the checkpoint at step 10 holds the mean of the sync at step 8, not yet applied,
# and where each worker's block started: resumed at the same size it ends on the uninterrupted
# run's hash; at another size the mean is applied and every worker restarts from the synced values.
overlap = ["--outer-overlap", "true"]
ockpt = os.path.join(tmp, "ockpt")
owhole = ok("overlap whole", *run(2, "owhole", "--max-steps", "30", *overlap))
ok("overlap first part", *run(2, "ofirst", "--max-steps", "12", "--checkpoint-dir", ockpt, "--checkpoint-every", "10",
                              *overlap))
oresumed = ok("overlap resumed", *run(2, "oresumed", "--max-steps", "30", "--resume",
                                      os.path.join(ockpt, "step-0000000010"), *overlap))
expect(owhole.get("outer_overlap") is True and owhole.get("syncs") == 8, f"overlap: {owhole}")
expect(owhole.get("replica_hash") == oresumed.get("replica_hash"),
       f"overlap resume not bit for bit: {owhole.get('replica_hash')} uninterrupted, "
       f"{oresumed.get('replica_hash')} resumed")
expect(owhole.get("replica_hash") != whole.get("replica_hash"), "overlap: the same model as without it")
r, lines = run(3, "ogrown", "--max-steps", "30", "--resume", os.path.join(ockpt, "step-0000000010"), *overlap)
ok("overlap grown", r, lines)
expect("every worker restarts from its synced values" in r.stdout, f"overlap grown: no restart line: {r.stdout[-1500:]}")
# Resumed without overlap, the mean still to be applied is not read: that sync is dropped, said.
r, lines = run(2, "ooff", "--max-steps", "30", "--resume", os.path.join(ockpt, "step-0000000010"))
ok("overlap checkpoint resumed without overlap", r, lines)
expect("that sync is dropped" in r.stdout, f"overlap off: no dropped-sync line: {r.stdout[-1500:]}")

# With --outer-delay 2 the mean of the sync at step 8 lands at step 10: a checkpoint at step 9 holds
# it in flight, one at step 10 right after it landed; both resume on the uninterrupted run's hash.
delayed = [*overlap, "--outer-delay", "2"]
dwhole = ok("delay whole", *run(2, "dwhole", "--max-steps", "30", *delayed))
expect(dwhole.get("outer_delay") == 2 and dwhole.get("syncs") == 8, f"delay: {dwhole}")
expect(dwhole.get("replica_hash") not in (owhole.get("replica_hash"), whole.get("replica_hash")),
       "delay: the same model as without it")
for stop in [9, 10]:
    dckpt = os.path.join(tmp, f"dckpt{stop}")
    # (to step 12: a run's last step settles the workers onto one model before its checkpoint)
    ok(f"delay first part {stop}", *run(2, f"dfirst{stop}", "--max-steps", "12", "--checkpoint-dir", dckpt,
                                        "--checkpoint-every", str(stop), *delayed))
    dresumed = ok(f"delay resumed {stop}", *run(2, f"dresumed{stop}", "--max-steps", "30", "--resume",
                                                os.path.join(dckpt, f"step-{stop:010d}"), *delayed))
    expect(dwhole.get("replica_hash") == dresumed.get("replica_hash"),
           f"delay: resume from step {stop} not bit for bit: {dwhole.get('replica_hash')} uninterrupted, "
           f"{dresumed.get('replica_hash')} resumed")

# A NaN in rank 0's gradient at step 5: rank 0 skips that inner step alone, and no sync is skipped.
nan = ok("nan", *run(2, "nan", "--max-steps", "12", "--inject-nonfinite", "5:0"))
expect(nan.get("skipped_inner_steps") == 1 and nan.get("skipped_syncs") == 0, f"nan: {nan}")

# Compressed outer all-reduces train too, and every rank ends on the same model.
for compress in ["bf16", "int8"]:
    r, lines = run(2, compress, "--max-steps", "20", "--outer-compress", compress)
    s = ok(compress, r, lines)
    expect(s.get("outer_compress", "").startswith(compress) and s.get("syncs") == 5, f"{compress}: {s}")
    losses = [x["loss"] for x in lines if x.get("event") == "step"]
    expect(len(losses) == 2 and losses[1] < losses[0], f"{compress}: step losses {losses}")

# Errors, on every rank.
for args, text in [
    (["--sync-every", "0"], "--sync-every"),
    (["--outer-optimizer", "adam"], "--outer-optimizer"),
    (["--outer-momentum", "1"], "--outer-momentum"),
    (["--compress", "bf16"], "--outer-compress"),
    (["--outer-compress", "fp8"], "--outer-compress"),
    (["--outer-delay", "2"], "--outer-delay"),  # without --outer-overlap
]:
    r, _ = run(2, "error", "--max-steps", "2", *args)
    expect(r.returncode != 0, f"{args}: exit status 0")
    # A value out of a row's range is refused by every process before MPI starts, without a rank.
    said = [x for x in r.stderr.splitlines() if "error:" in x and text in x]
    expect(len(said) >= 2, f"{args}: not every rank reported '{text}': {r.stderr[-1500:]}")
r = subprocess.run([mpirun, "-np", "2", tower, "train", "--model", "mlp", "--max-steps", "2", "--sync-every", "4"],
                   capture_output=True, text=True, timeout=60)
expect(r.returncode != 0 and "local-sgd" in r.stderr, f"--sync-every under replicated: {r.stderr[-1000:]}")

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print(f"local-sgd test: all checks passed (hash {whole.get('replica_hash')} whole and resumed)")
