#!/usr/bin/env python3
"""examples/gan built against an installed tower with pkg-config alone, then trained: 2 ranks equal
1 rank on the same global batch (replicated and parameter-server), fp16 with a dedicated server
keeps three loss scales and writes its picture and metrics (which tower plot draws), a run killed
with SIGKILL resumes from its checkpoint to the bits of an uninterrupted run, and bad options are
an error on every rank.

Usage: gan_test.py BUILD_DIR SOURCE_DIR MPIRUN"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

build, source, mpirun = sys.argv[1:4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from installed import build_gan  # noqa: E402


def fail(message):
    sys.exit(f"FAIL: {message}")


def gan(np, out, *args, check=True):
    cmd = [mpirun, "-np", str(np), "-x", "LD_LIBRARY_PATH", BINARY, "--out", out, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=ENV)
    if check and r.returncode != 0:
        fail(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}")
    return r


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r["event"] == "step"], rows[-1]


with tempfile.TemporaryDirectory(prefix="tower-gan-test-") as tmp:
    try:
        BINARY, ENV, root = build_gan(build, source, tmp)
    except RuntimeError as e:
        fail(str(e))

    # 2 ranks take the halves of the 1-rank run's global batches: the same losses, to float rounding.
    for strategy in ("replicated", "parameter-server"):
        runs = {}
        for np in (1, 2):
            out = os.path.join(tmp, f"{strategy}-np{np}")
            gan(np, out, "--steps", "40", "--batch", "32", "--log-every", "1", "--r1-every", "8",
                "--strategy", strategy)
            runs[np], _ = metrics(out)
        if len(runs[1]) != 40 or len(runs[2]) != 40:
            fail(f"{strategy}: expected 40 step lines, got {len(runs[1])} and {len(runs[2])}")
        worst = max(abs(a[k] - b[k]) for a, b in zip(runs[1], runs[2]) for k in ("loss_G", "loss_D", "r1"))
        if worst > 1e-5:
            fail(f"{strategy}: 2 ranks differ from 1 rank by {worst} in a loss (more than 1e-5)")
        if abs(runs[1][-1]["loss_D"] - runs[1][0]["loss_D"]) < 1e-3:
            fail(f"{strategy}: loss_D did not move in 40 steps: nothing trained")
        print(f"gan {strategy}: 2 ranks equal 1 rank over 40 steps (largest loss difference {worst:.2e})")

    # fp16 with a dedicated server: three loss scales of their own, a picture, metrics tower plot draws.
    out = os.path.join(tmp, "fp16")
    gan(3, out, "--steps", "30", "--batch", "32", "--log-every", "10", "--precision", "fp16",
        "--strategy", "parameter-server", "--ps-ranks", "1")
    steps, summary = metrics(out)
    last = steps[-1]
    for key in ("loss_scale_log2_G", "loss_scale_log2_D", "loss_scale_log2_D_reg"):
        if not 8 <= last[key] <= 17:
            fail(f"fp16: {key} is {last[key]}, not near the 2^16 it starts at")
    if summary.get("workers") != 2 or summary.get("precision") != "fp16":
        fail(f"fp16: summary says {summary}")
    with open(os.path.join(out, "samples.png"), "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            fail("samples.png is not a PNG")
    plot = subprocess.run([os.path.join(root, "bin", "tower"), "plot", os.path.join(out, "metrics.jsonl"),
                           "-o", os.path.join(out, "plot.png")], capture_output=True, text=True, env=ENV)
    if plot.returncode != 0 or "loss_G" not in plot.stdout or "loss_scale_log2_D_reg" not in plot.stdout:
        fail(f"tower plot did not draw the GAN's losses and scales: {plot.stdout} {plot.stderr}")
    print("gan fp16: three loss scales, samples.png, and tower plot draws both losses and all scales")

    # SIGKILL after the step-200 checkpoint, resume: the bits of the run that was never stopped.
    common = ["--steps", "400", "--batch", "32", "--log-every", "100", "--checkpoint-every", "100"]
    whole = os.path.join(tmp, "whole")
    gan(2, whole, *common)
    _, expected = metrics(whole)
    cut = os.path.join(tmp, "cut")
    job = subprocess.Popen([mpirun, "-np", "2", "-x", "LD_LIBRARY_PATH", BINARY, "--out", cut, *common],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    manifest = os.path.join(cut, "checkpoints", "step-0000000200", "manifest.tck")
    deadline = time.time() + 120
    while not os.path.exists(manifest) and job.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    if os.path.exists(os.path.join(cut, "metrics.jsonl")):
        fail("the run finished before it was killed; the resume was not tested")
    if not os.path.exists(manifest):
        fail(f"no checkpoint of step 200 appeared in {cut}/checkpoints before the kill")
    started = gan(2, cut, *common, "--resume").stdout
    first = [line for line in started.splitlines() if "steps " in line and "..400" in line]
    if not first or int(first[0].rsplit("steps ", 1)[1].split("..")[0]) < 200:
        fail(f"the resumed run did not start from the checkpoint of step 200 or later: {started}")
    _, resumed = metrics(cut)
    for key in ("G_hash", "D_hash"):
        if resumed[key] != expected[key]:
            fail(f"resumed after SIGKILL: {key} {resumed[key]}, uninterrupted {expected[key]}")
    print(f"gan: killed after step 200, resumed to G {expected['G_hash']} D {expected['D_hash']}, bit for bit")

    r = gan(2, os.path.join(tmp, "bad"), "--batch", "33", check=False)
    if r.returncode == 0 or r.stderr.count("does not split evenly over 2 workers") != 2:
        fail(f"--batch 33 at 2 ranks: expected an error on each rank, got {r.returncode}: {r.stderr}")
    print("gan: --batch that does not split is an error on every rank")
