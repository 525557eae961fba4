#!/usr/bin/env python3
"""`tower info` and `tower train` on one GPU against the CPU; exits 77 (SKIP) without a GPU.
Usage: gpu_test.py TOWER [DATA_DIR]   (one rank, started directly: the GPU machine may have no mpirun)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

tower = sys.argv[1]
data = ["--data", sys.argv[2]] if len(sys.argv) > 2 else []
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def run(*args):
    return subprocess.run([tower, *args], capture_output=True, text=True, timeout=600)


probe = run("info", "--device", "auto", "--json")
if probe.returncode != 0:
    print(f"gpu_test: tower info failed: {probe.stderr}")
    sys.exit(1)
if json.loads(probe.stdout)["build"]["gpu_count"] == 0:
    print("SKIP: no GPU visible")
    sys.exit(77)
tmp = tempfile.mkdtemp(prefix="tower-gpu-test-")

r = run("info", "--device", "cuda", "--json")
expect(r.returncode == 0, f"info --device cuda failed: {r.stderr}")
if r.returncode == 0:
    row = json.loads(r.stdout)["ranks"][0]
    expect(row["device"] == "cuda:0", f"one rank should get cuda:0: {row}")
    expect(row["gpu"].startswith("PCI ") and ", GPU-" in row["gpu"], f"no physical GPU named: {row}")


# The same short MLP run on both devices: the GPU's losses follow the CPU's (f32, different
# summation order: close, not equal), and the GPU's metrics say where it ran.
def losses(device):
    path = os.path.join(tmp, f"{device}.jsonl")
    r = run("train", "--device", device, "--model", "mlp", "--hidden", "64", "--depth", "1", "--batch", "32",
            "--max-steps", "40", "--log-every", "10", "--metrics", path, *data)
    expect(r.returncode == 0, f"train --device {device} failed: {r.stderr[-2000:]}")
    if r.returncode != 0:
        return []
    return [x["loss"] for x in map(json.loads, open(path)) if x["event"] == "step"]


cpu, gpu = losses("cpu"), losses("cuda")
expect(len(cpu) == 4 and len(gpu) == 4, f"step lines: cpu {cpu}, gpu {gpu}")
expect(all(abs(a - b) <= 1e-3 * max(1.0, abs(a)) for a, b in zip(cpu, gpu)), f"losses differ: cpu {cpu}, gpu {gpu}")

if failures:
    print("gpu_test: FAILED\n  " + "\n  ".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("gpu_test: ok")
