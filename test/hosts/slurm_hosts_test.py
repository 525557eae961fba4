#!/usr/bin/env python3
"""Slurm across hosts: scripts/fake-cluster puts 2 hosts in namespaces and runs a Slurm over them
(slurmctld on host0, a slurmd per host); `sbatch -N 2 scripts/slurm/train.sbatch` then trains with
`srun --mpi=pmix` across both, and must end on the replica hash of the same run on one host
(--deterministic); `srun -N 2 tower info` sees both hostnames. SKIP (77) where namespaces are not
permitted or Slurm is not installed, saying why.

Usage: slurm_hosts_test.py SOURCE_DIR BUILD_DIR MPIRUN"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

source, build, mpirun = sys.argv[1:4]
SKIP = 77
tower = os.path.join(build, "tower")
cluster = os.path.join(source, "scripts", "fake-cluster")
TRAIN = "--hidden 64 --depth 1 --eval-every 0 --deterministic" # and batch 32, TOWER_BATCH in the job


def fail(message):
    sys.exit(f"FAIL: {message}")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


if os.geteuid() != 0:
    skip("network namespaces need root")
if subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True).returncode != 0:
    skip("this machine does not permit namespaces")
missing = [t for t in ("slurmctld", "slurmd", "sbatch", "srun", "munged") if shutil.which(t) is None]
if missing:
    skip(f"{', '.join(missing)} not installed (scripts/setup-deps slurm)")

signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated (timeout?)"))
with tempfile.TemporaryDirectory(prefix="tower-slurm-hosts-") as tmp:
    env = dict(os.environ, TOWER_CLUSTER_DIR=os.path.join(tmp, "cluster"), TOWER_CLUSTER_NAME="twrs",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run = lambda *args, timeout=120: subprocess.run([cluster, *args], capture_output=True, text=True, env=env,
                                                    timeout=timeout)
    try:
        for step in (["up", "2"], ["slurm"]):
            r = run(*step)
            if r.returncode != 0:
                fail(f"fake-cluster {' '.join(step)}: {r.stdout} {r.stderr}")
        info = run("run", "srun", "-N", "2", "--ntasks-per-node=1", "--mpi=pmix", tower, "info", "--json")
        hosts = []
        if info.returncode == 0 and "{" in info.stdout:
            hosts = sorted({x["hostname"] for x in json.loads(info.stdout[info.stdout.index("{"):])["ranks"]})
        if hosts != ["host0", "host1"]:
            fail(f"srun -N 2 tower info: hostnames {hosts}: {info.stdout[-1000:]} {info.stderr[-1000:]}")
        print("srun -N 2: tower info sees host0 and host1")

        job_env = f"TOWER={tower} TOWER_MAX_STEPS=20 TOWER_BATCH=32 TOWER_EPOCHS=2 TOWER_RUN_DIR={tmp}/run TOWER_ARGS='{TRAIN}'"
        job = run("run", "sh", "-c", f"cd {tmp} && {job_env} sbatch --wait -N 2 --ntasks-per-node=1 "
                  f"{source}/scripts/slurm/train.sbatch", timeout=240)
        outs = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".out")]
        out = open(outs[0]).read() if outs else ""
        if job.returncode != 0 or "2 task(s) on 2 node(s)" not in out:
            fail(f"sbatch -N 2 train.sbatch: {job.stdout} {job.stderr} {out[-2000:]}")
        summary = json.loads(open(os.path.join(tmp, "run", "metrics.jsonl")).read().splitlines()[-1])
        here = subprocess.run([mpirun, "-np", "2", tower, "train", "--max-steps", "20", "--batch", "32", *TRAIN.split(),
                               "--metrics", os.path.join(tmp, "here.jsonl")], capture_output=True, text=True,
                              env=env, timeout=180)
        local = json.loads(open(os.path.join(tmp, "here.jsonl")).read().splitlines()[-1]) if here.returncode == 0 else {}
        if summary.get("world_size") != 2 or summary.get("replica_hash") != local.get("replica_hash"):
            fail(f"across 2 hosts under Slurm: world size {summary.get('world_size')}, hash "
                 f"{summary.get('replica_hash')}; on one host: {local.get('replica_hash')} {here.stderr[-500:]}")
        print(f"sbatch -N 2 train.sbatch (srun --mpi=pmix): 2 hosts, hash {summary['replica_hash']}, as on one host")
    finally:
        run("down", timeout=60)
