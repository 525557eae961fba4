#!/usr/bin/env python3
"""Async training converges: 3 ranks, 2 epochs of Fashion-MNIST, the default MLP, async with its
staleness bounded to one update (--max-staleness 1) reaches >= 84% test accuracy. One run;
docs/stragglers.md gives the distribution this threshold was set against (the unbounded default
averages about 84% and falls below it in about one run in four, so it is not what this asserts). Usage: async_accuracy_test.py MPIRUN TOWER"""
import json
import os
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
metrics = os.path.join(tempfile.mkdtemp(prefix="tower-async-accuracy-test-"), "async.jsonl")
r = subprocess.run([mpirun, "-np", "3", tower, "train", "--device", "cpu", "--model", "mlp", "--strategy", "async",
                    "--max-staleness", "1", "--epochs", "2", "--check-every", "0", "--metrics", metrics],
                   capture_output=True, text=True, timeout=240)
if r.returncode != 0:
    print(f"tower train failed ({r.returncode}):\n{r.stderr[-3000:]}")
    sys.exit(1)
s = json.loads(open(metrics).read().splitlines()[-1])
what = (f"async --max-staleness 1, 3 ranks, 2 epochs: test accuracy {100 * s['test_accuracy']:.2f}%, staleness mean "
        f"{s['staleness_mean']:.2f} max {s['staleness_max']}, {s['updates']} updates")
print(what)
if s["strategy"] != "async" or s["updates"] != 936 or s["dropped_stale"] != 0:
    print(f"FAIL: not the planned async run: {s}")
    sys.exit(1)
if s["test_accuracy"] < 0.84:
    print("FAIL: below 84% test accuracy")
    sys.exit(1)
print("OK")
