#!/usr/bin/env python3
"""`tower train --deterministic` at 3 and 4 ranks: ring, hierarchical (on every simulated node
layout) and naive end on the same parameter hash, and a run repeats bit for bit.
Usage: deterministic_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-deterministic-test-")


def expect(cond, what):
    if not cond:
        failures.append(what)


def final_hash(np, name, *args):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    r = subprocess.run([mpirun, "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1",
                        "--batch", "16", "--max-steps", "30", "--eval-every", "0", "--metrics", metrics, *args],
                       capture_output=True, text=True, timeout=300)
    expect(r.returncode == 0, f"{name}: failed: {r.stderr[-1500:]}")
    return [json.loads(x) for x in open(metrics)][-1]["replica_hash"] if r.returncode == 0 else None


for np in (3, 4):
    runs = {"ring": ["--allreduce", "ring"], "naive": ["--allreduce", "naive"],
            "hierarchical": ["--allreduce", "hierarchical"]}
    for per_node in range(1, np):
        if np % per_node == 0:
            runs[f"hierarchical-{per_node}-per-node"] = ["--allreduce", "hierarchical", "--ranks-per-node", str(per_node)]
    hashes = {name: final_hash(np, f"np{np}-{name}", *args, "--deterministic") for name, args in runs.items()}
    expect(len(set(hashes.values())) == 1 and None not in hashes.values(), f"{np} ranks: modes differ: {hashes}")
    again = final_hash(np, f"np{np}-ring-again", *runs["ring"], "--deterministic")
    expect(again == hashes["ring"], f"{np} ranks: a repeated run differs: {again} vs {hashes['ring']}")
    # Without the flag the modes sum in different orders (at 3 ranks on this machine, hierarchical
    # ends on another hash than ring and naive); not asserted: it depends on the MPI library.
    plain = {m: final_hash(np, f"np{np}-{m}-plain", "--allreduce", m) for m in ("ring", "hierarchical")}
    print(f"{np} ranks without --deterministic: {plain}")

r = subprocess.run([mpirun, "-np", "2", tower, "train", "--strategy", "parameter-server", "--deterministic",
                    "--max-steps", "1"], capture_output=True, text=True, timeout=300)
expect(r.returncode != 0 and "--deterministic" in r.stderr and "replicated" in r.stderr,
       f"parameter-server accepted --deterministic: {r.stderr[-800:]}")

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("deterministic test: all checks passed")
