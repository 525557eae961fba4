#!/usr/bin/env python3
"""Runs `tower train --timeline FILE` under mpirun and reads the Chrome trace it writes: one track per
rank, forward, backward, each bucket's all-reduce with its bytes and mode, the optimizer step, waits and
evaluation; the parameter-server strategy's pushes, applies, publishes and fetches; and a killed run's
per-rank parts, readable as they are. Usage: timeline_test.py MPIRUN TOWER"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-timeline-test-")
small = ["--device", "cpu", "--model", "mlp", "--hidden", "64", "--depth", "1", "--batch", "32"]


def expect(cond, what):
    if not cond:
        failures.append(what)


def train(name, *args):
    trace, metrics = os.path.join(tmp, f"{name}.json"), os.path.join(tmp, f"{name}.jsonl")
    r = subprocess.run([mpirun, "-np", "2", tower, "train", *small, "--epochs", "1", "--timeline", trace, "--metrics",
                        metrics, *args],
                       capture_output=True, text=True, timeout=300)
    expect(r.returncode == 0, f"{name}: failed: {r.stderr[-2000:]}")
    if r.returncode != 0:
        return [], {}
    expect(not [f for f in os.listdir(tmp) if f.startswith(f"{name}.json.rank")], f"{name}: part files left behind")
    # The merged file is strict JSON: a complete array.
    events = json.load(open(trace))
    summary = [json.loads(x) for x in open(metrics)][-1]
    return events, summary


def spans(events, rank, name):
    return [e for e in events if e["pid"] == rank and e["name"] == name and e["ph"] == "X"]


def thread_names(events, rank):
    return {e["tid"]: e["args"]["name"] for e in events if e["pid"] == rank and e["name"] == "thread_name"}


# Replicated, two buckets, overlap on: the buckets' all-reduces run on the communication thread.
steps = 4
events, summary = train("replicated", "--max-steps", str(steps), "--log-every", "2", "--fusion-mb", "0.05")
if events:
    buckets = summary["buckets"]
    expect(buckets >= 2, f"replicated: {buckets} bucket(s); the test needs at least 2")
    for rank in (0, 1):
        names = [e["args"]["name"] for e in events if e["pid"] == rank and e["name"] == "process_name"]
        expect(names == [f"rank {rank}"], f"rank {rank}: process names {names}")
        for name in ("step", "load batch", "forward", "backward", "wait for all-reduce", "optimizer step"):
            n = len(spans(events, rank, name))
            expect(n == steps, f"rank {rank}: {n} '{name}' span(s), expected {steps}")
        expect(len(spans(events, rank, "evaluate")) == 1, f"rank {rank}: no evaluate span")
        expect(len(spans(events, rank, "metrics sync")) == 2, f"rank {rank}: metrics sync spans")
        reduces = spans(events, rank, "all-reduce")
        expect(len(reduces) == steps * buckets, f"rank {rank}: {len(reduces)} all-reduce spans, expected {steps * buckets}")
        per_step = collections.Counter()
        for e in reduces:
            per_step[e["args"]["bucket"]] += e["args"]["bytes"]
            expect(e["args"]["mode"] == summary["allreduce"], f"rank {rank}: all-reduce mode {e['args']}")
        expect(sum(per_step.values()) == steps * summary["allreduce_bytes_per_step"],
               f"rank {rank}: all-reduce bytes {dict(per_step)} != {steps} x {summary['allreduce_bytes_per_step']}")
        threads = thread_names(events, rank)
        expect({threads.get(e["tid"]) for e in reduces} == {"communication"},
               f"rank {rank}: all-reduce rows {[threads.get(e['tid']) for e in reduces][:3]}")
        # Each forward lies inside a step on the same row.
        outer = spans(events, rank, "step")
        for f in spans(events, rank, "forward"):
            expect(any(s["tid"] == f["tid"] and s["ts"] <= f["ts"] and f["ts"] + f["dur"] <= s["ts"] + s["dur"] + 0.2
                       for s in outer), f"rank {rank}: forward at {f['ts']} outside every step")

# Parameter server with one dedicated server: rank 0 publishes and applies, rank 1 computes and fetches.
events, _ = train("ps", "--max-steps", "3", "--eval-every", "0", "--strategy", "parameter-server", "--ps-ranks", "1")
if events:
    for rank, want, absent in ((0, ("push", "apply", "publish"), ("forward", "fetch")),
                               (1, ("forward", "backward", "push", "apply", "fetch"), ("publish",))):
        for name in want:
            expect(len(spans(events, rank, name)) >= 3, f"ps rank {rank}: fewer than 3 '{name}' spans")
        for name in absent:
            expect(not spans(events, rank, name), f"ps rank {rank}: has '{name}' spans")
    pushes = spans(events, 1, "push")
    expect(pushes and pushes[0]["args"]["bytes"] > 0 and pushes[0]["args"]["dtype"] == "f32", f"ps push args {pushes[:1]}")

# A killed run: each rank's part holds whole events, one per line, and is a JSON array once closed.
trace = os.path.join(tmp, "killed.json")
job = subprocess.Popen([mpirun, "-np", "2", tower, "train", *small, "--epochs", "100000", "--eval-every", "0",
                        "--timeline", trace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
parts = [f"{trace}.rank{r}" for r in (0, 1)]
deadline = time.time() + 120
while time.time() < deadline and job.poll() is None:
    if all(os.path.exists(p) and open(p).read().count('"all-reduce"') >= 20 for p in parts):
        break
    time.sleep(0.3)
still_running = job.poll() is None
job.send_signal(signal.SIGTERM)
_, err = job.communicate(timeout=60)
expect(still_running, f"killed run: ended or never wrote 20 all-reduces per rank before it was killed: {err[-1500:]}")
expect(not os.path.exists(trace), "killed run: a merged file exists though the run never finished")
for rank, part in enumerate(parts):
    text = open(part).read() if os.path.exists(part) else ""
    lines = text.splitlines()
    expect(lines[:1] == ["["], f"killed run: part {rank} does not open the array")
    for line in lines[1:]:
        try:
            json.loads(line.removeprefix(","))
        except json.JSONDecodeError:
            failures.append(f"killed run: part {rank} holds a broken line: {line[:200]}")
            break
    closed = json.loads(text + "]") if lines else []
    expect(sum(e["name"] == "all-reduce" for e in closed) >= 20, f"killed run: part {rank} lost its all-reduces")

if failures:
    print("\n".join(f"FAIL: {f}" for f in failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("timeline: replicated, parameter-server and killed-run traces read back as expected")
