#!/usr/bin/env python3
"""Runs `tower plot` on metrics and bench files written here: the series it draws per panel, the legend
taken from the options that differ between runs, an unfinished run's .partial file with a line cut
short, the bench modes, and its errors. Skips (77) where /usr/bin/python3 has no matplotlib.
Usage: plot_test.py TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

tower = sys.argv[1]
failures = []

if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode != 0:
    print("SKIP: /usr/bin/python3 has no matplotlib: run scripts/setup-deps (python3-matplotlib)")
    sys.exit(77)
tmp = tempfile.mkdtemp(prefix="tower-plot-test-")


def expect(cond, what):
    if not cond:
        failures.append(what)


def plot(*args):
    return subprocess.run([tower, "plot", *args], capture_output=True, text=True, timeout=120)


def write_run(path, allreduce, steps, evals, summary=True, cut=False):
    lines = [{"event": "step", "step": s, "loss": 2.0 / s, "samples_per_s": 1000 + s, "allreduce_ms": 1.5}
             for s in steps]
    lines += [{"event": "eval", "step": s, "test_accuracy": 0.8} for s in evals]
    if summary:
        lines.append({"event": "summary", "model": "mlp", "strategy": "replicated", "allreduce": allreduce,
                      "world_size": 2, "precision": "fp32"})
    text = "".join(json.dumps(x) + "\n" for x in lines)
    with open(path, "w") as f:
        f.write(text + ('{"event": "step", "st' if cut else ""))


def is_png(path):
    return os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 10000


ring, hier = os.path.join(tmp, "ring.jsonl"), os.path.join(tmp, "hier.jsonl")
write_run(ring, "ring", [10, 20, 30], [30])
write_run(hier, "hierarchical", [10, 20, 30, 40], [20, 40])
out = os.path.join(tmp, "runs.png")
r = plot(ring, hier, "-o", out)
expect(r.returncode == 0, f"two runs: failed: {r.stderr[-1500:]}")
expect(is_png(out), "two runs: no PNG written")
# Only the option that differs names the runs.
expect("training loss: ring (3 points), hierarchical (4 points)" in r.stdout, f"two runs, loss: {r.stdout}")
expect("test accuracy: ring (1 points), hierarchical (2 points)" in r.stdout, f"two runs, accuracy: {r.stdout}")
expect("throughput: ring (3 points)" in r.stdout and "gradient communication time: ring (3 points)" in r.stdout,
       f"two runs, throughput and communication panels: {r.stdout}")
# Panels for what the runs hold: no loss scaling, no loss-scale panel; accuracy from a floor that
# shows a tenth of a point as the small change it is (0.8 throughout: 70% to 82%).
expect("loss scale: not drawn" in r.stdout, f"two runs without loss scaling got a loss-scale panel: {r.stdout}")
expect("test accuracy axis: 70% to 82.0%" in r.stdout, f"two runs, accuracy axis: {r.stdout}")
scaled = os.path.join(tmp, "scaled.jsonl")
with open(scaled, "w") as f:
    for step, scale in ((10, 16.0), (20, 15.0), (30, 15.0)):
        f.write(json.dumps({"event": "step", "step": step, "loss": 1.0, "loss_scale_log2": scale}) + "\n")
r = plot(scaled, "-o", os.path.join(tmp, "scaled.png"))
expect(r.returncode == 0 and "loss scale: scaled.jsonl (unfinished) (3 points)" in r.stdout,
       f"a run with dynamic loss scaling: no loss-scale panel: {r.stdout} {r.stderr[-1000:]}")
expect("test accuracy: not drawn" in r.stdout, f"a run without evaluations got an accuracy panel: {r.stdout}")

# One run, still running or killed: its .partial file, last line cut short; the default output name.
unfinished = os.path.join(tmp, "unfinished.jsonl")
write_run(unfinished + ".partial", "ring", [10, 20], [], summary=False, cut=True)
r = plot(unfinished)
expect(r.returncode == 0, f"unfinished run: failed: {r.stderr[-1500:]}")
expect("training loss: unfinished.jsonl (unfinished) (2 points)" in r.stdout, f"unfinished run: {r.stdout}")
expect(is_png(os.path.join(tmp, "unfinished.png")), "unfinished run: no PNG beside the input")

bench = os.path.join(tmp, "bench.jsonl")
with open(bench, "w") as f:
    for mode in ("ring", "naive"):
        for size in (8, 1024, 1 << 20):
            for in_place in (False, True):
                f.write(json.dumps({"collective": "allreduce", "mode": mode, "dtype": "f32", "op": "sum", "ranks": 2,
                                    "bytes": size, "busbw_gbps": size / 1e5, "in_place": in_place, "wrong": 0}) + "\n")
out = os.path.join(tmp, "bench.png")
r = plot("--bench", bench, "-o", out)
expect(r.returncode == 0 and is_png(out), f"bench: failed or no PNG: {r.stderr[-1500:]}")
for label in ("ring", "ring (in place)", "naive", "naive (in place)"):
    expect(f"busbw: {label} (3 points)" in r.stdout, f"bench: no '{label}' series with 3 points: {r.stdout}")

r = plot()
expect(r.returncode != 0 and "not both or neither" in r.stderr, f"no input: {r.returncode} {r.stderr}")
r = plot(os.path.join(tmp, "missing.jsonl"))
expect(r.returncode != 0 and "does not exist" in r.stderr, f"missing input: {r.returncode} {r.stderr}")
r = plot(bench)
expect(r.returncode != 0 and "holds no step lines" in r.stderr, f"bench rows given as a run: {r.stderr}")

if failures:
    print("\n".join(f"FAIL: {f}" for f in failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("plot: runs, an unfinished run and bench rows drawn; errors reported")
