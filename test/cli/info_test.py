#!/usr/bin/env python3
"""Runs `tower info` under mpirun and checks what it reports. Usage: info_test.py MPIRUN TOWER"""
import json
import os
import subprocess
import sys

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []


def run(np, *args, env=None):
    return subprocess.run([mpirun, "-np", str(np), tower, "info", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def expect(cond, what):
    if not cond:
        failures.append(what)


# 4 ranks as 2 simulated nodes of 2: JSON rows must show the grid.
r = run(4, "--ranks-per-node", "2", "--json")
expect(r.returncode == 0, f"info --json failed: {r.stderr}")
if r.returncode == 0:
    info = json.loads(r.stdout)
    ranks = info["ranks"]
    expect([x["rank"] for x in ranks] == [0, 1, 2, 3], f"rows not in rank order: {ranks}")
    expect([x["node"] for x in ranks] == [0, 0, 1, 1], f"nodes wrong: {ranks}")
    expect([x["local_rank"] for x in ranks] == [0, 1, 0, 1], f"local ranks wrong: {ranks}")
    expect(len({x["pid"] for x in ranks}) == 4, "pids are not distinct processes")
    expect(all(set(x) == {"rank", "node", "local_rank", "hostname", "pid", "device", "gpu"} for x in ranks),
           "row keys differ from the documented ones")
    expect(all(x["device"] == "cpu" and x.get("gpu") == "" for x in ranks), f"--device cpu rows name a GPU: {ranks}")
    expect(info["build"]["mpi_thread_level"] == "MPI_THREAD_MULTIPLE", "thread level not reported")

# The table names both nodes.
r = run(4, "--ranks-per-node", "2")
expect(r.returncode == 0 and "4 ranks on 2 node(s)" in r.stdout, f"table header wrong: {r.stdout}")

# A grouping that does not divide the world fails on every rank with a clear message.
r = run(4, "--ranks-per-node", "3")
expect(r.returncode != 0, "--ranks-per-node 3 at 4 ranks should fail")
for rank in range(4):
    expect(f"[rank {rank}] error: --ranks-per-node 3 does not divide the 4 ranks" in r.stderr,
           f"rank {rank} did not report the divisor error: {r.stderr}")

# The CPU kernels: oneDNN's version, the instruction set its kernels use (which
# ONEDNN_MAX_CPU_ISA caps), and one thread per rank unless OMP_NUM_THREADS asks for more.
def build(env):
    r = run(1, "--json", env=env)
    expect(r.returncode == 0, f"info --json failed: {r.stderr}")
    return json.loads(r.stdout)["build"] if r.returncode == 0 else {}


base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "ONEDNN_MAX_CPU_ISA")}
b = build(base)
expect(b.get("onednn_version", "").count(".") == 2, f"no oneDNN version reported: {b}")
expect(b.get("onednn_isa", "unknown") != "unknown", f"no oneDNN instruction set reported: {b}")
expect(b.get("cpu_threads") == 1, f"a rank should run its kernels on 1 thread by default: {b}")
expect(build(dict(base, OMP_NUM_THREADS="3")).get("cpu_threads") == 3, "OMP_NUM_THREADS=3 was not honoured")
flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
if "avx2" in flags:
    capped = build(dict(base, ONEDNN_MAX_CPU_ISA="AVX2")).get("onednn_isa")
    expect(capped == "avx2", f"ONEDNN_MAX_CPU_ISA=AVX2 gave the {capped} kernels")

for f in failures:
    print("FAIL:", f)
print("info_test:", "ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
