#!/usr/bin/env python3
"""Submits scripts/slurm/train.sbatch and bench.sbatch to a one-node Slurm on this machine, waits for
them and checks what they wrote: the training job's metrics summary and the bench table and rows.
Starts the cluster with scripts/slurm/local-cluster (and stops it again when it was not running).
Exits 77 (skip) only where Slurm is not installed or cannot be started, saying why.
Usage: slurm_test.py SCRIPTS_SLURM_DIR TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

slurm_dir, tower = sys.argv[1], sys.argv[2]
failures = []


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def expect(cond, what):
    if not cond:
        failures.append(what)


missing = [t for t in ("sbatch", "srun", "sinfo", "slurmctld", "slurmd", "munged") if shutil.which(t) is None]
if missing:
    skip(f"Slurm is not installed ({', '.join(missing)} missing): run scripts/setup-deps slurm")
if os.geteuid() != 0:
    skip("the one-node cluster's daemons must be started as root")

cluster = os.path.join(slurm_dir, "local-cluster")
was_running = subprocess.run([cluster, "status"], capture_output=True).returncode == 0
started = subprocess.run([cluster, "start"], capture_output=True, text=True)
if started.returncode != 0:
    skip(f"Slurm could not be started: {(started.stderr or started.stdout).strip()}")

tmp = tempfile.mkdtemp(prefix="tower-slurm-test-")
# srun --mpi=pmix needs Slurm's pmix plugin; without it the scripts' mpirun variant is used.
mpi_list = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True)
launcher = "srun" if "pmix" in mpi_list.stdout + mpi_list.stderr else "mpirun"
if launcher == "mpirun":
    print("srun has no pmix plugin here: the jobs launch with mpirun (TOWER_LAUNCHER=mpirun)")


def submit(script, name, **env):
    """Runs sbatch --wait from tmp (the submit directory, where runs/ goes); it returns when the job
    ends, with the job's exit status."""
    full_env = dict(os.environ, TOWER=tower, TOWER_LAUNCHER=launcher, **env)
    r = subprocess.run(["sbatch", "--wait", "--parsable", "--job-name", name,
                        "--output", os.path.join(tmp, f"{name}-%j.out"), os.path.join(slurm_dir, script)],
                       capture_output=True, text=True, env=full_env, cwd=tmp, timeout=240)
    job = r.stdout.strip().split(";")[0]
    out_path = os.path.join(tmp, f"{name}-{job}.out")
    output = open(out_path).read() if os.path.exists(out_path) else ""
    expect(r.returncode == 0, f"{script} ({name}) job {job} exited {r.returncode}: {r.stderr[-1500:]}\n{output[-3000:]}")
    return job, output


def rows_of(path):
    return [json.loads(x) for x in open(path)] if os.path.exists(path) else []


try:
    job, out = submit("train.sbatch", "train", TOWER_MAX_STEPS="20", TOWER_ARGS="--log-every 10 --hidden 256")
    metrics = rows_of(os.path.join(tmp, "runs", f"train-{job}", "metrics.jsonl"))
    summary = metrics[-1] if metrics else {}
    expect(summary.get("event") == "summary", f"train: no summary in the job's metrics: {metrics[-1:]}")
    expect(summary.get("steps") == 20 and summary.get("world_size") == 2,
           f"train: summary says {summary.get('steps')} steps on {summary.get('world_size')} rank(s), not 20 on 2")
    expect((summary.get("test_accuracy") or 0) > 0.5, f"train: test accuracy {summary.get('test_accuracy')}")
    expect("done: 20 steps" in out, f"train: no done line in the job's output: {out[-1500:]}")

    # A resubmitted job that finds its checkpoint directory resumes from it (as a requeued job,
    # which keeps its id and so its run directory, does): 10 steps, then 10 more from step 10.
    shared = os.path.join(tmp, "runs", "resumed")
    small = dict(TOWER_RUN_DIR=shared, TOWER_CHECKPOINT_EVERY="5", TOWER_ARGS="--log-every 5 --hidden 64")
    job, out = submit("train.sbatch", "first", TOWER_MAX_STEPS="10", **small)
    expect("resuming" not in out and "done: 10 steps" in out, f"first: not a fresh 10-step run: {out[-1500:]}")
    job, out = submit("train.sbatch", "again", TOWER_MAX_STEPS="20", **small)
    expect("train.sbatch: resuming from" in out, f"again: the script did not resume: {out[-1500:]}")
    steps = [r["step"] for r in rows_of(os.path.join(shared, "metrics.jsonl")) if r.get("event") == "step"]
    expect(steps and min(steps) > 10 and max(steps) == 20,
           f"again: logged steps {steps}, expected only steps after the checkpoint of step 10, up to 20")

    # A PyTorch program on tower.torch in place of tower train, where this build has tower.torch.
    python_dir = os.path.join(os.path.dirname(os.path.abspath(tower)), "python")
    if os.path.isdir(os.path.join(python_dir, "tower", "torch")):
        example = os.path.join(slurm_dir, "..", "..", "examples", "torch", "gpt.py")
        job, out = submit("train.sbatch", "torch", PYTHONPATH=python_dir,
                          TOWER_PROGRAM=f"/usr/bin/python3 {example} --steps 4 --log-every 2 --layers 1 --width 32 "
                                        "--heads 2 --context 16 --batch 2")
        expect("step 4/4  loss" in out, f"torch: the PyTorch program did not train 4 steps: {out[-1500:]}")
        print("torch:", next((line for line in out.splitlines() if line.startswith("step 4/4")), "no step 4 line"))

    job, out = submit("bench.sbatch", "bench", TOWER_BENCH_MAX="1M", TOWER_BENCH_FACTOR="32", TOWER_BENCH_ITERS="5")
    # (The memory-copy row that precedes the tables on one host is not an all-reduce row.)
    rows = [r for r in rows_of(os.path.join(tmp, "runs", f"bench-{job}", "bench.jsonl")) if r.get("collective") == "allreduce"]
    modes = sorted({r["mode"] for r in rows})
    expect(modes == ["hierarchical", "naive", "ring"], f"bench: modes in the rows: {modes}")
    expect(rows and all(r["ranks"] == 2 and r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in rows),
           f"bench: rows with wrong elements, no bandwidth or not 2 ranks: {rows[:3]}")
    # 8 B .. 1 MiB by 32: 4 sizes (8 B to 256 KiB), out of place and in place, in each of 3 modes.
    expect(len(rows) == 4 * 2 * 3, f"bench: {len(rows)} rows, expected 24")
    for mode in ("ring", "hierarchical", "naive"):
        expect(f"# allreduce mode {mode} on 2 ranks" in out, f"bench: no {mode} table in the output: {out[-1500:]}")
    expect("wrong element(s) in total: ok" in out, f"bench: the output does not end ok: {out[-500:]}")
finally:
    if not was_running:
        subprocess.run([cluster, "stop"], capture_output=True)

if failures:
    print("\n".join(f"FAIL: {f}" for f in failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print(f"slurm: train and bench jobs ran under Slurm ({launcher}) and wrote what they should")
