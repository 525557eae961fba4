#!/usr/bin/env python3
"""Kills `tower train` with SIGKILL and resumes it: the resumed run ends on the parameters of an
uninterrupted one, bit for bit, in the replicated and parameter-server strategies at 2 and 3 ranks.
Also a kill in the middle of writing, a corrupt latest checkpoint, and the resume errors.
Usage: checkpoint_test.py MPIRUN TOWER"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from jobs import rank_pid  # noqa: E402

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-checkpoint-test-")
STEPS = 300
# Each checkpoint file takes at least this long to write: the run cannot finish its last checkpoint
# within this long after step 200's is complete, so the kill lands before the end.
SLOW_WRITE_MS = 1500


def expect(cond, what):
    if not cond:
        failures.append(what)


def command(np, name, *args):
    steps = [] if "--max-steps" in args else ["--max-steps", str(STEPS)]
    return [mpirun, "-np", str(np), tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1",
            "--batch", "16", "--epochs", "1", "--eval-every", "0", "--log-every", "100", *steps,
            "--metrics", os.path.join(tmp, f"{name}.jsonl"), *args]


def summary(name):
    path = os.path.join(tmp, f"{name}.jsonl")
    if not os.path.exists(path):
        return {}
    return [json.loads(x) for x in open(path)][-1]


def run(np, name, *args, env=None):
    return subprocess.run(command(np, name, *args), capture_output=True, text=True, timeout=300,
                          env=env or os.environ)


def kill_when(np, name, ready, rank, args, env):
    """Starts a run, waits until ready() holds, then kills one rank with SIGKILL. True when the
    kill landed (the run had not finished)."""
    p = subprocess.Popen(command(np, name, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 240
    while not ready() and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    pid = rank_pid(args[args.index("--checkpoint-dir") + 1], rank) if p.poll() is None else None
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    out = p.communicate(timeout=120)[0].decode(errors="replace")
    expect(pid is not None and p.returncode != 0, f"{name}: the kill did not land (exit {p.returncode}): {out[-1500:]}")
    return pid is not None


def manifest(ckpt, step):
    return os.path.join(ckpt, f"step-{step:010d}", "manifest.tck")


slow = dict(os.environ, TOWER_TEST_CHECKPOINT_WRITE_DELAY_MS=str(SLOW_WRITE_MS))
reference = {}
for strategy in ("replicated", "parameter-server"):
    for np in (2, 3):
        tag = f"{strategy}-np{np}"
        s_args = ["--strategy", strategy]
        r = run(np, f"{tag}-whole", *s_args)
        expect(r.returncode == 0, f"{tag}: uninterrupted run failed: {r.stderr[-1500:]}")
        whole = summary(f"{tag}-whole").get("replica_hash")
        reference[tag] = whole

        # Checkpoints every 100 steps; rank np-1 is killed once step 200's checkpoint is complete.
        ckpt = os.path.join(tmp, tag)
        c_args = s_args + ["--checkpoint-dir", ckpt, "--checkpoint-every", "100"]
        if not kill_when(np, f"{tag}-killed", lambda: os.path.exists(manifest(ckpt, 200)), np - 1, c_args, slow):
            continue
        expect(not os.path.exists(manifest(ckpt, 300)), f"{tag}: step 300's checkpoint exists: the kill came late")
        r = run(np, f"{tag}-resumed", *c_args, "--resume")
        expect(r.returncode == 0, f"{tag}: resume failed: {r.stderr[-1500:]}")
        expect("resumed from" in r.stdout and "step-0000000200" in r.stdout, f"{tag}: did not resume at 200: {r.stdout[-800:]}")
        resumed = summary(f"{tag}-resumed")
        expect(resumed.get("steps") == STEPS, f"{tag}: resumed run ended at step {resumed.get('steps')}")
        expect(whole is not None and resumed.get("replica_hash") == whole,
               f"{tag}: resumed hash {resumed.get('replica_hash')} != uninterrupted {whole}")

# A kill while step 200's file is being written: step 200 never becomes valid, 100 is used.
ckpt = os.path.join(tmp, "mid-write")
c_args = ["--checkpoint-dir", ckpt, "--checkpoint-every", "100"]
writing = lambda: os.path.exists(os.path.join(ckpt, "step-0000000200", "rank-00000.tck.tmp"))
if kill_when(2, "mid-write-killed", writing, 0, c_args, slow):
    expect(not os.path.exists(manifest(ckpt, 200)), "mid-write: step 200 has a manifest")
    expect(not os.path.exists(os.path.join(ckpt, "step-0000000200", "rank-00000.tck")),
           "mid-write: a half-written file took the final name")
    r = run(2, "mid-write-resumed", *c_args, "--resume")
    expect(r.returncode == 0, f"mid-write: resume failed: {r.stderr[-1500:]}")
    expect("step-0000000200 is not valid" in r.stdout and "no manifest" in r.stdout,
           f"mid-write: no warning about step 200: {r.stdout[-1500:]}")
    expect("resumed from" in r.stdout and "step-0000000100" in r.stdout, f"mid-write: not resumed at 100: {r.stdout[-800:]}")
    expect(summary("mid-write-resumed").get("replica_hash") == reference.get("replicated-np2"),
           "mid-write: resumed hash differs from the uninterrupted run's")

# A corrupt latest checkpoint: a warning naming the file and the tensor, then the previous one.
ckpt = os.path.join(tmp, "replicated-np2")
latest = os.path.join(ckpt, "step-0000000300", "rank-00000.tck")
if os.path.exists(latest):
    with open(latest, "r+b") as f:
        f.seek(4096)
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 1]))
    r = run(2, "corrupt-resumed", "--checkpoint-dir", ckpt, "--resume")
    expect(r.returncode == 0, f"corrupt: resume failed: {r.stderr[-1500:]}")
    expect(f"{latest}: CRC mismatch in tensor" in r.stdout, f"corrupt: no warning naming the file: {r.stdout[-1500:]}")
    expect("step-0000000200 at step 200" in r.stdout, f"corrupt: not resumed at 200: {r.stdout[-800:]}")
    expect(summary("corrupt-resumed").get("replica_hash") == reference.get("replicated-np2"), "corrupt: hash differs")

    # Errors on every rank: options that must agree and a directory with no valid checkpoint
    # (another world size is no error: resume_across_test.py).
    def expect_error(r, text, what):
        expect(r.returncode != 0 and text in r.stderr, f"{what}: no error saying '{text}': {r.stderr[-1500:]}")

    expect_error(run(2, "lr", "--checkpoint-dir", ckpt, "--resume", "--lr", "0.1"), "--lr: 0.05 in the checkpoint, 0.1 now",
                 "changed --lr")
    r = run(3, "replicated-world", "--checkpoint-dir", ckpt, "--resume", "--max-steps", "310")
    expect(r.returncode == 0 and "each variable is cut anew" in r.stdout,
           f"replicated at another world size: {r.stdout[-800:]} {r.stderr[-800:]}")
    expect_error(run(2, "groups", "--checkpoint-dir", os.path.join(tmp, "groups"), "--groups", "0;1"),
                 "a checkpoint saves rank 0's replica only", "checkpoints with --groups")
    empty = os.path.join(tmp, "empty")
    os.makedirs(os.path.join(empty, "step-0000000100"))
    expect_error(run(2, "none", "--checkpoint-dir", empty, "--resume"), "none of the 1 checkpoint(s)", "no valid checkpoint")

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("checkpoint test: all checks passed")
