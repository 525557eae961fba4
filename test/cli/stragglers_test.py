#!/usr/bin/env python3
"""Runs `tower train` with the async and sync-replicas strategies under mpirun: backup workers
dropping a straggler's gradients, async with a dedicated server, owners dropping a NaN gradient,
the metrics they log, a clean end whatever the delay, and the errors of their options. Usage: stragglers_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-stragglers-test-")


def run(np, *args):
    return subprocess.run([mpirun, "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64",
                           "--depth", "1", "--batch", "32", "--epochs", "1", *args],
                          capture_output=True, text=True, timeout=120)


def expect(cond, what):
    if not cond:
        failures.append(what)


def expect_error_on_every_rank(r, np, text, what):
    expect(r.returncode != 0, f"{what}: exit status 0")
    for rank in range(np):
        expect(f"[rank {rank}] error:" in r.stderr and text in r.stderr,
               f"{what}: rank {rank} did not report '{text}': {r.stderr[-2000:]}")


def train(np, name, *args):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    r = run(np, "--max-steps", "30", "--log-every", "10", "--metrics", metrics, *args)
    expect(r.returncode == 0, f"{name}: failed: {r.stderr[-2000:]}")
    if r.returncode != 0:
        return [], r.stdout
    return [json.loads(x) for x in open(metrics)], r.stdout


# Backup worker: one of two workers sleeps 30 ms a step, N = 1, so most of its gradients are stale.
lines, out = train(2, "sync-replicas", "--strategy", "sync-replicas", "--replicas-to-aggregate", "1",
                   "--inject-delay", "1:30")
if lines:
    steps = [x for x in lines if x["event"] == "step"]
    s = lines[-1]
    expect(s["event"] == "summary" and s["strategy"] == "sync-replicas", f"summary: {s}")
    expect(s["updates"] == 30 and s["steps"] == 30, f"updates {s['updates']}, steps {s['steps']}")
    expect(s["gradients_per_update"] == 1.0 and s["gradients_applied"] == 30, f"applied: {s}")
    expect(s["dropped_stale"] > 0 and s["gradients_received"] == 30 + s["dropped_stale"], f"dropped: {s}")
    expect([x["step"] for x in steps] == [10, 20, 30], f"windows at {[x['step'] for x in steps]}")
    expect(all(k in steps[0] for k in ["updates", "dropped_stale", "gradients_per_update", "staleness_mean",
                                       "staleness_max", "updates_per_s"]), f"window fields: {steps[0]}")
    # Gradients still arriving after the last update are dropped too; only the summary sees those.
    expect(sum(x["dropped_stale"] for x in steps) <= s["dropped_stale"], "windows' drops exceed the total")
    expect(steps[-1]["loss"] < steps[0]["loss"], f"loss did not fall: {[x['loss'] for x in steps]}")
    expect(s["test_accuracy"] is not None and "done:" in out, "no final evaluation or done line")

# Async with a dedicated server and a straggler: 2 workers x 30 planned steps = 60 gradients, none dropped.
lines, out = train(3, "async", "--strategy", "async", "--ps-ranks", "1", "--inject-delay", "2:20")
if lines:
    s = lines[-1]
    expect(s["strategy"] == "async" and s["workers"] == 2, f"summary: {s}")
    expect(s["updates"] == 60 and s["gradients_applied"] == 60 and s["dropped_stale"] == 0, f"counts: {s}")
    # The fast worker pushes several gradients while the straggler computes one on older variables.
    expect(s["staleness_max"] >= 1 and s["staleness_mean"] > 0, f"staleness: {s}")
    expect(s["owners"][0]["owner_cpu_s"] < s["owners"][0]["owner_wall_s"], f"owner CPU: {s['owners']}")

# A worker's bad batch: its NaN gradient is dropped by every owner, counted, named in a warning, and
# its token granted again; the run applies every planned update and ends in the accuracy band of
# the same run without it (one epoch, 2 workers). Async runs lock-step here (--max-staleness 0,
# which also hangs if the dropped gradient's token is not granted again): with a gradient up to one
# update late, how many arrive late depends on the machine's load, and on a loaded 2-core machine a
# clean run ended 7 points below the run with the NaN (76.3% against 83.7%). Lock-step on a loaded
# machine: clean runs 83.0-84.1%, with the NaN 80.2-84.7% (the order in which the two workers'
# updates land still varies, and one epoch's last updates move the accuracy by a few points).
for strategy, bound in [("sync-replicas", []), ("async", ["--max-staleness", "0"])]:
    accuracy = {}
    for injected in [False, True]:
        name = f"{strategy}-nonfinite" if injected else f"{strategy}-clean"
        metrics = os.path.join(tmp, f"{name}.jsonl")
        r = run(2, "--strategy", strategy, *bound, "--metrics", metrics,
                *(["--inject-nonfinite", "5:1"] if injected else []))
        expect(r.returncode == 0, f"{name}: failed: {r.stderr[-2000:]}")
        if r.returncode != 0:
            continue
        s = [json.loads(x) for x in open(metrics)][-1]
        accuracy[injected] = s["test_accuracy"]
        expect(s["dropped_nonfinite"] == (1 if injected else 0), f"{name}: dropped_nonfinite {s['dropped_nonfinite']}")
        expect(all(o["dropped_nonfinite"] == s["dropped_nonfinite"] for o in s["owners"]), f"{name}: owners {s['owners']}")
        expect(s["gradients_received"] == s["gradients_applied"] + s["dropped_stale"] + s["dropped_nonfinite"],
               f"{name}: counts {s}")
        warned = "warning: dropped a non-finite gradient from worker 1 (rank 1)" in r.stderr
        expect(warned == injected, f"{name}: warning {'missing' if injected else 'unexpected'}: {r.stderr[-1000:]}")
    if len(accuracy) == 2:
        print(f"{strategy}: test accuracy {100 * accuracy[False]:.2f}% clean, {100 * accuracy[True]:.2f}% with one "
              "NaN gradient")
        # One epoch's accuracy moves by a few points with the batches the redone step shifts (up to
        # 4 points apart above; the band is twice that); a NaN applied would leave the model at
        # chance (10%).
        expect(accuracy[True] > 0.7 and abs(accuracy[True] - accuracy[False]) < 0.08,
               f"{strategy}: accuracy {accuracy[True]} with a NaN gradient against {accuracy[False]} without")

# Errors, on every rank.
for np, args, text in [
    (2, ["--strategy", "sync-replicas", "--replicas-to-aggregate", "0"], "at least 1 gradient"),
    (2, ["--strategy", "async", "--replicas-to-aggregate", "2"], "belongs to --strategy sync-replicas"),
    (2, ["--strategy", "sync-replicas", "--async-scale", "false"], "belongs to --strategy async"),
    (2, ["--strategy", "sync-replicas", "--async-staleness", "scale"], "belongs to --strategy async"),
    (2, ["--strategy", "async", "--async-staleness", "half"], "write none"),
    (2, ["--strategy", "parameter-server", "--max-staleness", "2"], "belongs to --strategy async"),
    (2, ["--strategy", "async", "--max-staleness", "-1"], "give S >= 0"),
    (2, ["--strategy", "async", "--max-staleness", "2x"], "give S >= 0"),
    (2, ["--strategy", "async", "--inject-delay", "1"], "write RANK:MS"),
    (2, ["--strategy", "async", "--inject-delay", "1:x"], "write RANK:MS"),
    (2, ["--strategy", "async", "--inject-delay", "1:-5"], "write RANK:MS"),
    (2, ["--strategy", "sync-replicas", "--inject-delay", "2:10"], "rank 2 is outside"),
    (2, ["--strategy", "async", "--accumulate", "2"], "--accumulate 2"),
    (2, ["--strategy", "sync-replicas", "--compress", "fp16"], "--compress"),
    (3, ["--strategy", "async", "--ps-ranks", "1", "--inject-nonfinite", "3:0"], "rank 0 is a server"),
]:
    r = run(np, "--max-steps", "2", *args)
    expect_error_on_every_rank(r, np, text, " ".join(args))

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("stragglers test: all checks passed")
