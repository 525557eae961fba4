#!/usr/bin/env python3
"""Installs tower into a temporary prefix, builds examples/torch/fit.cpp (a libtorch program) against
it with nothing but `pkg-config --cflags --libs tower-torch`, and trains it under mpirun at 2 ranks,
under replicated, parameter-server and sync-replicas: its loss must fall below 0.01 with the replicas identical.
At 1 rank, parameter-server (the owner applies tower's rule for torch's Adam) must end where
replicated (torch's own Adam) ends, within 1e-5.
Usage: cpp_example_test.py BUILD_DIR SOURCE_DIR MPIRUN"""
import os
import subprocess
import sys
import tempfile

build, source, mpirun = sys.argv[1:4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness"))
from installed import install  # noqa: E402


def fail(message):
    sys.exit(f"FAIL: {message}")


with tempfile.TemporaryDirectory(prefix="tower-torch-example-") as tmp:
    _, libdir, pkgconfig = install(build, os.path.join(tmp, "install"))
    env = dict(os.environ, LD_LIBRARY_PATH=libdir, PKG_CONFIG_PATH=pkgconfig)
    made = subprocess.run(["make", "-s", "-C", os.path.join(source, "examples", "torch"), f"OUT={tmp}"],
                          capture_output=True, text=True, env=env)
    if made.returncode != 0:
        fail(f"examples/torch/fit.cpp does not build against the installed tower-torch: {made.stdout} {made.stderr}")
    binary = os.path.join(tmp, "fit")
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, env=env).stdout
    line = next((x for x in ldd.splitlines() if "libtower_torch" in x), "")
    if tmp not in line:
        fail(f"the example does not load the installed libtower_torch: {line or ldd}")

    def fit(ranks, strategy):
        r = subprocess.run([mpirun, "-np", str(ranks), "-x", "LD_LIBRARY_PATH", binary, "300", strategy],
                           capture_output=True, text=True, env=env, timeout=120)
        result = next((x for x in r.stdout.splitlines() if x.startswith("fit:")), "")
        print(result)
        if r.returncode != 0 or not result:
            fail(f"fit {strategy} at {ranks} rank(s) failed ({r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}")
        return float(result.rsplit(" ", 1)[1])

    for strategy in ("replicated", "parameter-server", "sync-replicas"):
        fit(2, strategy)
    torch_adam, owners = fit(1, "replicated"), fit(1, "parameter-server")
    if abs(owners - torch_adam) > 1e-5 * abs(torch_adam):
        fail(f"at 1 rank the owners' Adam ends at {owners!r}, torch's own at {torch_adam!r}")
