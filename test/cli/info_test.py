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

# OpenBLAS kernels: an explicit OPENBLAS_CORETYPE wins; without one, an AVX-512 CPU gets an
# AVX-512 kernel set even where this OpenBLAS release does not know the CPU model.
def kernel(env):
    r = run(1, "--json", env=env)
    expect(r.returncode == 0, f"info --json failed: {r.stderr}")
    return json.loads(r.stdout)["build"]["openblas_kernel"] if r.returncode == 0 else None


forced = dict(os.environ, OPENBLAS_CORETYPE="Haswell")
expect(kernel(forced) == "Haswell", "OPENBLAS_CORETYPE=Haswell was not honoured")
unset = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
chosen = kernel(unset)
if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
    expect(chosen in ("SkylakeX", "Cooperlake", "SapphireRapids"),
           f"AVX-512 CPU but OpenBLAS runs the {chosen} kernels")
else:
    expect(chosen is not None and chosen != "", "no OpenBLAS kernel name reported")

for f in failures:
    print("FAIL:", f)
print("info_test:", "ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
