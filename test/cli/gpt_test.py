#!/usr/bin/env python3
"""`tower train --model gpt` and `tower sample` under mpirun: N ranks equal 1 rank on the same global
batch, parameter-server agrees with replicated, bf16 trains (and says where its products are
widened), a resume ends on the uninterrupted run's hash, sampling a checkpoint prints text, and bad
options fail on every rank.
Usage: gpt_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-gpt-test-")
SMALL = ["--layers", "2", "--width", "32", "--heads", "2", "--context", "32"]


def run(np, *args, batch=8, model=SMALL, env=None):
    return subprocess.run([mpirun, "-np", str(np), tower, "train", "--device", "cpu", "--model", "gpt", *model,
                           "--optimizer", "adamw", "--lr", "3e-3", "--batch", str(batch), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def metrics(name, np, *args, batch=8):
    path = os.path.join(tmp, name + ".jsonl")
    r = run(np, "--metrics", path, *args, batch=batch)
    expect(r.returncode == 0, f"{name}: {r.stderr[-2000:]}")
    return [json.loads(x) for x in open(path)] if r.returncode == 0 else []


def expect(cond, what):
    if not cond:
        failures.append(what)


def close(a, b, tol):
    return abs(a - b) <= tol * max(abs(a), abs(b))


common = ["--max-steps", "24", "--log-every", "4", "--eval-every", "1"]
one = metrics("one", 1, *common, batch=8)
two = metrics("two", 2, *common, batch=4)
ps = metrics("ps", 2, *common, "--strategy", "parameter-server", batch=4)
if one and two and ps:
    losses = lambda m: [x["loss"] for x in m if x["event"] == "step"]
    summary = lambda m: m[-1]
    expect(all(close(a, b, 1e-5) for a, b in zip(losses(one), losses(two))), f"2 ranks {losses(two)} != 1 rank {losses(one)}")
    expect(all(close(a, b, 1e-5) for a, b in zip(losses(one), losses(ps))), f"parameter-server {losses(ps)} != {losses(one)}")
    expect(losses(one)[-1] < losses(one)[0] - 0.5, f"the loss did not fall: {losses(one)}")
    s = summary(two)
    for key in ("tokens_per_s", "test_loss", "test_perplexity", "test_bits_per_token"):
        expect(key in s, f"the summary lacks {key}: {sorted(s)}")
    if "test_bits_per_token" in s:
        expect(close(s["test_bits_per_token"] * 0.6931471805599453, s["test_loss"], 1e-9), "bits per token != loss / ln 2")
        expect(close(s["tokens_per_s"], s["samples_per_s"] * 32, 1e-9), "tokens_per_s != samples_per_s * context")
        expect(close(summary(one)["test_loss"], s["test_loss"], 1e-5), "test loss differs between 1 and 2 ranks")

bf16 = metrics("bf16", 2, "--max-steps", "24", "--log-every", "4", "--eval-every", "0", "--precision", "bf16", batch=4)
if bf16:
    l = [x["loss"] for x in bf16 if x["event"] == "step"]
    expect(l[-1] < l[0] - 0.5, f"bf16 did not train: {l}")

# With oneDNN held to AVX2 (no bf16 matrix kernels) a bf16 run says once, at its start, that its products
# run in f32 on widened copies; an fp32 run there says nothing of the kind.
avx2 = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
widened = lambda r: [line for line in r.stdout.splitlines() if "widens its operands to f32" in line]
r = run(2, "--max-steps", "1", "--eval-every", "0", "--precision", "bf16", batch=4, env=avx2)
expect(r.returncode == 0 and len(widened(r)) == 1 and widened(r)[0].startswith("bf16: oneDNN ")
       and "running its avx2 kernels here, has no matrix kernels for this type" in widened(r)[0],
       f"bf16 on AVX2 kernels: {r.returncode} {widened(r)} {r.stdout[-1000:]} {r.stderr[-1000:]}")
r = run(2, "--max-steps", "1", "--eval-every", "0", batch=4, env=avx2)
expect(r.returncode == 0 and not widened(r), f"fp32 on AVX2 kernels: {r.returncode} {widened(r)} {r.stderr[-1000:]}")

# Accumulating 2 micro-batches of 4 is one batch of 8.
acc = metrics("acc", 1, *common, "--accumulate", "2", batch=4)
if one and acc:
    la, lo = [x["loss"] for x in acc if x["event"] == "step"], [x["loss"] for x in one if x["event"] == "step"]
    expect(all(close(a, b, 1e-5) for a, b in zip(la, lo)), f"--accumulate 2 {la} != batch 8 {lo}")

# The other options a model meets in tower train: each run trains and ends with a summary.
timeline = os.path.join(tmp, "trace.json")
# (fp16 starts its dynamic scale at 2^10: the default 2^64 overflows for the first ~50 steps, skipped.)
for name, extra in (("fp16-dynamic", ["--precision", "fp16", "--loss-scale", "dynamic", "--loss-scale-init", "10"]),
                    ("compress", ["--compress", "bf16"]),
                    ("ema", ["--ema-decay", "0.9", "--eval-every", "1"]),
                    ("async", ["--strategy", "async"]),
                    ("sync-replicas", ["--strategy", "sync-replicas"]),
                    ("timeline", ["--timeline", timeline])):
    m = metrics(name, 2, "--max-steps", "16", "--log-every", "8", *(["--eval-every", "0"] if name != "ema" else []),
                *extra, batch=4)
    if m:
        l = [x["loss"] for x in m if x["event"] == "step"]
        expect(m[-1]["event"] == "summary" and l and l[-1] < 5.0, f"{name}: losses {l}")
expect(os.path.exists(timeline) and os.path.getsize(timeline) > 0, "--timeline wrote no trace")

# Checkpoint at step 12, resume to 24: the same hash as one run of 24 steps.
ck = os.path.join(tmp, "ck")
full = metrics("full", 2, "--max-steps", "24", "--eval-every", "0", batch=4)
half = metrics("half", 2, "--max-steps", "12", "--eval-every", "0", "--checkpoint-dir", ck, batch=4)
resumed = metrics("resumed", 2, "--max-steps", "24", "--eval-every", "0", "--checkpoint-dir", ck, "--resume", batch=4)
if full and resumed:
    expect(full[-1]["replica_hash"] == resumed[-1]["replica_hash"],
           f"resume ended on {resumed[-1]['replica_hash']}, the whole run on {full[-1]['replica_hash']}")

r = subprocess.run([tower, "sample", "--checkpoint", ck, "--prompt", "The ", "--tokens", "40", "--seed", "3"],
                   capture_output=True, timeout=120)
expect(r.returncode == 0 and r.stdout.startswith(b"The ") and len(r.stdout) == 4 + 40 + 1,
       f"tower sample: {r.returncode} {r.stdout!r} {r.stderr[-500:]!r}")
again = subprocess.run([tower, "sample", "--checkpoint", ck, "--prompt", "The ", "--tokens", "40", "--seed", "3"],
                       capture_output=True, timeout=120)
expect(again.stdout == r.stdout, "tower sample with one seed gave two texts")
# A parameter-server checkpoint holds the owners' slices: tower sample assembles the whole weights.
ck_ps = os.path.join(tmp, "ck-ps")
metrics("ps-ck", 2, "--max-steps", "28", "--eval-every", "0", "--checkpoint-dir", ck_ps, "--resume", ck,
        "--strategy", "parameter-server", batch=4)
r = subprocess.run([tower, "sample", "--checkpoint", ck_ps, "--prompt", "The ", "--tokens", "40", "--seed", "3"],
                   capture_output=True, timeout=120)
expect(r.returncode == 0 and len(r.stdout) == 4 + 40 + 1,
       f"tower sample of a parameter-server checkpoint: {r.returncode} {r.stdout!r} {r.stderr[-500:]!r}")

# Bad options and data: an error on every rank that names the problem.
for model, text in ((["--layers", "1", "--width", "32", "--heads", "3"], "--heads 3 must divide --width 32"),
                    (SMALL + ["--data", os.path.join(tmp, "missing")], "missing")):
    r = run(2, "--max-steps", "2", batch=4, model=model)
    args = model
    expect(r.returncode != 0, f"{args}: exit status 0")
    for rank in (0, 1):
        expect(any(x.startswith(f"[rank {rank}] error:") and text in x for x in r.stderr.splitlines()),
               f"{args}: rank {rank} did not say '{text}': {r.stderr[-1500:]}")

for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
if failures:
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
