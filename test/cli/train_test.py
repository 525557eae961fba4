#!/usr/bin/env python3
"""Runs `tower train` under mpirun and checks its metrics and its errors. Usage: train_test.py MPIRUN TOWER"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-train-test-")


def run(np, *args, hidden=64, batch=32):
    return subprocess.run([mpirun, "-np", str(np), tower, "train", "--device", "cpu", "--model", "mlp", "--hidden", str(hidden),
                           "--depth", "1", "--batch", str(batch), *args],
                          capture_output=True, text=True, timeout=300)


def summary_of(path):
    return json.loads(open(path).read().splitlines()[-1])


def lines_of(path):
    return [json.loads(x) for x in open(path)]


def done_mb(stdout):
    """The MB per step of the final 'done:' line."""
    found = re.search(r"^done: .*\(([0-9.]+) MB per step, ", stdout, re.MULTILINE)
    return float(found.group(1)) if found else None


def expect(cond, what):
    if not cond:
        failures.append(what)


def expect_error_on_every_rank(r, np, texts, what):
    """Each rank's error line must hold every one of `texts` (a string or a tuple of them)."""
    texts = (texts,) if isinstance(texts, str) else texts
    expect(r.returncode != 0, f"{what}: exit status 0")
    for rank in range(np):
        mine = [x for x in r.stderr.splitlines() if x.startswith(f"[rank {rank}] error:")]
        expect(any(all(t in x for t in texts) for x in mine),
               f"{what}: rank {rank} did not report {texts}: {r.stderr[-2000:]}")


# A short run: step lines, an evaluation, and a summary with the documented fields.
metrics = os.path.join(tmp, "m.jsonl")
r = run(2, "--max-steps", "40", "--log-every", "10", "--check-every", "10", "--metrics", metrics)
expect(r.returncode == 0, f"short run failed: {r.stderr[-2000:]}")
if r.returncode == 0:
    lines = [json.loads(x) for x in open(metrics)]
    steps = [x for x in lines if x["event"] == "step"]
    evals = [x for x in lines if x["event"] == "eval"]
    expect([x["step"] for x in steps] == [10, 20, 30, 40], f"step lines: {steps}")
    expect(all({"step", "epoch", "loss", "lr", "samples_per_s", "allreduce_ms"} <= set(x) for x in steps),
           "step line fields")
    expect(len(evals) == 1 and 0.3 < evals[0]["test_accuracy"] <= 1.0, f"eval line: {evals}")
    summary = lines[-1]
    expect(summary["event"] == "summary", "last line is not the summary")
    for key in ("test_accuracy", "samples_per_s", "steps", "world_size", "replica_hash"):
        expect(key in summary, f"summary lacks {key}")
    expect(summary.get("steps") == 40 and summary.get("world_size") == 2, f"summary: {summary}")
    expect(summary.get("sharded_update") is True, f"2 CPU ranks did not shard the update: {summary}")
    expect(steps[-1]["loss"] < steps[0]["loss"], "loss did not fall")
    expect(not os.path.exists(metrics + ".partial"), "a .partial file was left behind")

    expect(done_mb(r.stdout) == round(summary["allreduce_bytes_per_step"] / 1e6, 2),
           f"done line MB {done_mb(r.stdout)} vs summary {summary['allreduce_bytes_per_step']}")
    expect(all(x["allreduce_bytes"] == summary["allreduce_bytes_per_step"] for x in steps),
           f"step lines' allreduce_bytes: {steps}")

# The same global batch on 1 rank gives the same replica hash only if arithmetic matched bit for
# bit, which is not promised; the logged losses (the mean over ranks of each rank's mean) must
# agree closely, which a sum in place of the mean would not.
one = os.path.join(tmp, "one.jsonl")
r1 = subprocess.run([mpirun, "-np", "1", tower, "train", "--device", "cpu", "--model", "mlp", "--hidden", "64", "--depth", "1",
                     "--batch", "64", "--max-steps", "40", "--log-every", "10", "--metrics", one],
                    capture_output=True, text=True, timeout=300)
expect(r1.returncode == 0, f"1-rank run failed: {r1.stderr[-2000:]}")
if r1.returncode == 0 and r.returncode == 0:
    a = [x["loss"] for x in lines_of(metrics) if x["event"] == "step"]
    b = [x["loss"] for x in lines_of(one) if x["event"] == "step"]
    expect(len(a) == 4 and len(b) == 4, f"step lines: {a} vs {b}")
    expect(all(abs(x - y) <= 1e-4 * max(1.0, abs(y)) for x, y in zip(a, b)),
           f"2x32 and 1x64 losses differ: {a} vs {b}")

# --shard-update false gives the same training, bit for bit, at 2 ranks.
whole = os.path.join(tmp, "whole.jsonl")
r2 = run(2, "--max-steps", "40", "--shard-update", "false", "--metrics", whole)
expect(r2.returncode == 0, f"--shard-update false run failed: {r2.stderr[-2000:]}")
if r2.returncode == 0 and r.returncode == 0:
    a, b = summary_of(metrics), summary_of(whole)
    expect(b["sharded_update"] is False, f"--shard-update false still sharded: {b}")
    expect(a["replica_hash"] == b["replica_hash"], f"sharded and whole updates differ: {a} vs {b}")

# Bad inputs: a clear error on every rank, and no hang.
r = run(2, "--data", os.path.join(tmp, "nowhere"), "--max-steps", "1")
expect_error_on_every_rank(r, 2, "nowhere", "missing data directory")
r = run(2, "--metrics", os.path.join(tmp, "no-such-dir", "m.jsonl"), "--max-steps", "1")
expect_error_on_every_rank(r, 2, "cannot write metrics file", "unwritable metrics path")
r = run(2, "--groups", "0,1;2", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "group", "bad group assignment")
r = run(2, "--allreduce", "butterfly", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "butterfly", "unknown all-reduce mode")
r = run(2, "--optimizer", "lion", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "lion", "unknown optimizer")
# The library's "none" (the framework applies the update: tower.torch) is no trainer's optimizer.
r = run(2, "--optimizer", "none", "--max-steps", "1")
expect(r.returncode != 0 and "'none' leaves the update to another framework" in r.stderr,
       f"--optimizer none was not refused: {r.stderr[-2000:]}")

r = run(2, "--precision", "fp8", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "fp8", "unknown precision")
r = run(2, "--compress", "int8", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "int8", "unknown compression")
r = run(2, "--loss-scale", "dynamic:fast", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "dynamic:fast", "unknown loss-scale policy")
r = run(2, "--inject-nonfinite", "3:7", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "--inject-nonfinite '3:7'", "injection on a rank outside the job")
r = run(2, "--groups", "0,a", "--max-steps", "1")
expect_error_on_every_rank(r, 2, ("--groups '0,a': 'a' is not a rank number", "e.g. '0,1;2,3'"), "non-numeric groups")
for bad in ("x", "2:", "0", "3:1x"):
    r = run(2, "--inject-nonfinite", bad, "--max-steps", "1")
    expect_error_on_every_rank(r, 2, (f"--inject-nonfinite '{bad}'", "write STEP[:RANK] with STEP >= 1"),
                               f"malformed --inject-nonfinite {bad}")
r = run(2, "--reduce", "max", "--max-steps", "1")
expect_error_on_every_rank(r, 2, ("--reduce max", "mean or sum"), "--reduce max")
# 60000 samples in global batches of 2 x 10000: 3 micro-batches an epoch, fewer than 4.
r = run(2, "--accumulate", "4", "--max-steps", "1", batch=10000)
expect_error_on_every_rank(r, 2, ("--accumulate 4 needs 4 micro-batches per update but an epoch has only 3",
                                  "lower --accumulate or --batch"), "--accumulate past the epoch")

# Five epochs of 3 steps each (global batch 20000 of 60000), evaluated every second epoch and at
# the end: the step count and the epoch of each line carry over the epoch boundaries.
epochs = os.path.join(tmp, "epochs.jsonl")
r = run(2, "--epochs", "5", "--eval-every", "2", "--log-every", "1", "--metrics", epochs, hidden=16, batch=10000)
expect(r.returncode == 0, f"five-epoch run failed: {r.stderr[-2000:]}")
if r.returncode == 0:
    lines = lines_of(epochs)
    steps = [x for x in lines if x["event"] == "step"]
    evals = [x for x in lines if x["event"] == "eval"]
    expect([(x["step"], x["epoch"]) for x in steps] == [(s, (s - 1) // 3 + 1) for s in range(1, 16)],
           f"steps and epochs: {[(x['step'], x['epoch']) for x in steps]}")
    expect([(x["epoch"], x["step"]) for x in evals] == [(2, 6), (4, 12), (5, 15)], f"eval lines: {evals}")
    expect(steps[-1]["loss"] < 0.7 * steps[0]["loss"], f"loss did not fall over the epochs: {steps}")
    expect(summary_of(epochs).get("steps") == 15, f"summary: {summary_of(epochs)}")

# --schedule step: the logged lr halves every 3 steps.
sched = os.path.join(tmp, "sched.jsonl")
r = run(2, "--schedule", "step", "--step-size", "3", "--gamma", "0.5", "--lr", "0.1", "--max-steps", "7",
        "--log-every", "1", "--eval-every", "0", "--metrics", sched)
expect(r.returncode == 0, f"step-schedule run failed: {r.stderr[-2000:]}")
if r.returncode == 0:
    lrs = [x["lr"] for x in lines_of(sched) if x["event"] == "step"]
    want = [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025]
    expect(len(lrs) == 7 and all(abs(x - y) <= 1e-7 for x, y in zip(lrs, want)), f"lr by step: {lrs}")

# --compress bf16: gradients travel in half the bytes, and the metrics say so.
comp = os.path.join(tmp, "comp.jsonl")
r = run(2, "--compress", "bf16", "--max-steps", "40", "--log-every", "10", "--eval-every", "0", "--metrics", comp)
expect(r.returncode == 0, f"--compress bf16 run failed: {r.stderr[-2000:]}")
if r.returncode == 0 and os.path.exists(metrics):
    plain, low = summary_of(metrics), summary_of(comp)
    steps = [x for x in lines_of(comp) if x["event"] == "step"]
    expect(low.get("compress") == "bf16", f"summary: {low}")
    expect(low["allreduce_bytes_per_step"] * 2 == plain["allreduce_bytes_per_step"],
           f"bf16 moves {low['allreduce_bytes_per_step']} bytes a step, f32 {plain['allreduce_bytes_per_step']}")
    expect(all(x["allreduce_bytes"] == low["allreduce_bytes_per_step"] for x in steps), f"step lines: {steps}")
    expect(done_mb(r.stdout) == round(low["allreduce_bytes_per_step"] / 1e6, 2),
           f"done line MB {done_mb(r.stdout)} vs summary {low['allreduce_bytes_per_step']}")
    expect(steps[-1]["loss"] < steps[0]["loss"], f"bf16-compressed loss did not fall: {steps}")

# Injected NaN at step 3 on rank 1, bf16 with dynamic loss scaling: one skipped step, counted.
inj = os.path.join(tmp, "inj.jsonl")
r = run(2, "--precision", "bf16", "--loss-scale", "dynamic", "--inject-nonfinite", "3:1", "--accumulate", "2",
        "--max-steps", "20", "--log-every", "5", "--eval-every", "0", "--metrics", inj)
expect(r.returncode == 0, f"bf16 run with injection failed: {r.stderr[-2000:]}")
if r.returncode == 0:
    lines = [json.loads(x) for x in open(inj)]
    summary = lines[-1]
    expect(summary.get("skipped_steps") == 1, f"skipped_steps: {summary}")
    expect(summary.get("precision") == "bf16" and summary.get("accumulate") == 2, f"summary: {summary}")
    expect(summary.get("global_batch") == 32 * 2 * 2, f"global batch with accumulation: {summary}")
    first = [x for x in lines if x["event"] == "step"][0]
    expect(first["overflow_frequency"] == 0.2 and first["skipped_steps"] == 1, f"first window: {first}")
    for key in ("grad_norm", "loss_scale_log2", "peak_memory_bytes", "allreduce_bytes", "hidden_fraction"):
        expect(key in first, f"step line lacks {key}")

for f in failures:
    print("FAIL:", f)
print("train_test:", "ok" if not failures else f"{len(failures)} failure(s)")
if failures:
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
