#!/usr/bin/env python3
"""Runs `tower train` under mpirun and checks its metrics and its errors. Usage: train_test.py MPIRUN TOWER"""
import json
import os
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-train-test-")


def run(np, *args):
    return subprocess.run([mpirun, "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64",
                           "--depth", "1", "--batch", "32", *args],
                          capture_output=True, text=True, timeout=300)


def summary_of(path):
    return json.loads(open(path).read().splitlines()[-1])


def expect(cond, what):
    if not cond:
        failures.append(what)


def expect_error_on_every_rank(r, np, text, what):
    expect(r.returncode != 0, f"{what}: exit status 0")
    for rank in range(np):
        expect(f"[rank {rank}] error:" in r.stderr and text in r.stderr,
               f"{what}: rank {rank} did not report '{text}': {r.stderr[-2000:]}")


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

# The same global batch on 1 rank gives the same replica hash only if arithmetic matched bit for
# bit, which is not promised; it must give nearly the same accuracy and the same step count.
one = os.path.join(tmp, "one.jsonl")
r1 = subprocess.run([mpirun, "-np", "1", tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1",
                     "--batch", "64", "--max-steps", "40", "--metrics", one], capture_output=True, text=True,
                    timeout=300)
expect(r1.returncode == 0, f"1-rank run failed: {r1.stderr[-2000:]}")
if r1.returncode == 0 and r.returncode == 0:
    a, b = summary_of(metrics)["test_accuracy"], summary_of(one)["test_accuracy"]
    expect(abs(a - b) < 0.01, f"2x32 and 1x64 accuracies differ: {a} vs {b}")

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

r = run(2, "--precision", "fp8", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "fp8", "unknown precision")
r = run(2, "--compress", "int8", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "int8", "unknown compression")
r = run(2, "--loss-scale", "dynamic:fast", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "dynamic:fast", "unknown loss-scale policy")
r = run(2, "--inject-nonfinite", "3:7", "--max-steps", "1")
expect_error_on_every_rank(r, 2, "--inject-nonfinite '3:7'", "injection on a rank outside the job")

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
sys.exit(1 if failures else 0)
