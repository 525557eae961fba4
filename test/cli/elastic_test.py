#!/usr/bin/env python3
"""tower elastic on one host, with real kills: a rank killed with SIGKILL mid-run (replicated,
parameter-server, sync-replicas, local-sgd at 3 ranks) and the launcher resumes at 2 ranks from the latest
checkpoint with no person; the run completes its epochs, resumes from a checkpoint no older than
the newest complete one when the rank died, counts the steps lost from there, and its final
accuracy is within 0.5 points of an uninterrupted run. Also:
it gives up below --min-np and after --max-restarts, naming why, does not restart a job that
fails for a reason a restart cannot fix, and stops the job without a restart on SIGTERM.
Usage: elastic_test.py MPIRUN TOWER"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from jobs import elastic_summary, metrics_summary, newest_checkpoint, rank_pid, resume_problem  # noqa: E402

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-elastic-test-")
EVERY = 25  # checkpoint interval, in steps
# Three epochs with a cosine schedule: the final accuracy of runs of 2 and 3 ranks lies within a few
# hundredths of a point (87.31% and 87.29% on the development machine; with two epochs, 86.35% and
# 86.51%, and a run resized after step 75 ended 0.38 points above the uninterrupted one).
TRAIN = ["train", "--model", "mlp", "--hidden", "256", "--depth", "2", "--batch", "64", "--epochs", "3",
         "--schedule", "warmup_cosine", "--eval-every", "3", "--log-every", "200",
         "--checkpoint-every", str(EVERY)]


def expect(cond, what):
    if not cond:
        failures.append(what)


def elastic(name, np, strategy, launcher_args=(), kill_after=None, kill_rank=1, train_args=()):
    """Runs tower elastic; with kill_after, SIGKILLs rank kill_rank once that step's checkpoint is
    complete. Returns (returncode, output, launcher summary, metrics summary, the newest complete
    checkpoint's step right after the kill)."""
    ckpt = os.path.join(tmp, name)
    metrics = os.path.join(tmp, f"{name}.jsonl")
    cmd = [tower, "elastic", "-np", str(np), "--mpirun", mpirun, "--oversubscribe", *launcher_args, "--",
           *TRAIN, "--checkpoint-dir", ckpt, "--metrics", metrics, *strategy, *train_args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if kill_after is not None:
        manifest = os.path.join(ckpt, f"step-{kill_after:010d}", "manifest.tck")
        deadline = time.time() + 120
        while not os.path.exists(manifest) and p.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        pid = rank_pid(ckpt, kill_rank)
        expect(pid is not None, f"{name}: no rank {kill_rank} to kill after step {kill_after}")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    newest = newest_checkpoint(ckpt)
    out = p.communicate(timeout=400)[0].decode(errors="replace")
    return p.returncode, out, elastic_summary(out), metrics_summary(metrics), newest


def expect_resumed_from_newest(name, history, newest):
    problem = resume_problem(history, newest, 3 * EVERY)
    expect(problem is None, f"{name}: {problem}")
    return history[0].get("steps_lost") if history else None


def uninterrupted_accuracy():
    metrics = os.path.join(tmp, "reference.jsonl")
    r = subprocess.run([mpirun, "--oversubscribe", "-np", "3", tower, *TRAIN, "--checkpoint-dir",
                        os.path.join(tmp, "reference"), "--metrics", metrics], capture_output=True, text=True,
                       timeout=400)
    expect(r.returncode == 0, f"reference run: {r.stderr[-1500:]}")
    return metrics_summary(metrics).get("test_accuracy")


reference = uninterrupted_accuracy()
expect(reference is not None and reference > 0.8, f"reference accuracy {reference}")

# A rank killed mid-run: the launcher finds 2 slots left and resumes there.
for strategy in (["--strategy", "replicated"], ["--strategy", "parameter-server"], ["--strategy", "sync-replicas"]):
    name = strategy[1]
    rc, out, launcher, s, newest = elastic(name, 3, strategy, ["--min-np", "2"], kill_after=3 * EVERY)
    history = launcher.get("history", [])
    expect(rc == 0 and launcher.get("generations") == 2 and launcher.get("world_size") == 2,
           f"{name}: not one restart to 2 ranks (exit {rc}): {out[-2500:]}")
    expect(len(history) == 2 and "killed by signal 9" in history[0].get("ended", ""),
           f"{name}: the first generation's end is not the kill: {history}")
    lost = expect_resumed_from_newest(name, history, newest)
    expect(launcher.get("steps_lost") == lost and len(history) == 2 and history[1].get("restart_s", 0) > 0,
           f"{name}: the launcher's steps lost or restart time: {launcher}")
    expect(s.get("world_size") == 2 and s.get("elastic", {}).get("generation") == 2,
           f"{name}: the final summary is not the second generation's at 2 ranks: {s}")
    accuracy = s.get("test_accuracy")
    expect(accuracy is not None and reference is not None and abs(accuracy - reference) <= 0.005,
           f"{name}: final accuracy {accuracy} against {reference} uninterrupted")
    print(f"{name}: 3 -> 2 ranks, {lost} step(s) lost, restart {history[1].get('restart_s', 0):.1f} s, "
          f"accuracy {accuracy} (uninterrupted {reference})" if len(history) == 2 else f"{name}: {history}")

# local-sgd: the relaunch at 2 ranks cannot match 3 workers' own drift, so every worker restarts
# from the synced values (and says so); the run completes, trained.
rc, out, launcher, s, newest = elastic("local-sgd", 3, ["--strategy", "local-sgd", "--sync-every", "10",
                                                        "--outer-optimizer", "sgd", "--outer-lr", "1"], ["--min-np", "2"],
                                       kill_after=3 * EVERY)
history = launcher.get("history", [])
expect(rc == 0 and launcher.get("generations") == 2 and launcher.get("world_size") == 2,
       f"local-sgd: not one restart to 2 ranks (exit {rc}): {out[-2500:]}")
lost = expect_resumed_from_newest("local-sgd", history, newest)
expect("every worker restarts from its synced values" in out, f"local-sgd: no word of the restart: {out[-2500:]}")
expect((s.get("test_accuracy") or 0) > 0.8, f"local-sgd: final accuracy {s.get('test_accuracy')}")
print(f"local-sgd: 3 -> 2 ranks, {lost} step(s) lost, accuracy {s.get('test_accuracy')}")

# Gives up, naming why: too few ranks left, too many restarts, and a failure a restart cannot fix.
rc, out, launcher, _, _ = elastic("min-np", 2, [], ["--min-np", "2"], kill_after=EVERY)
expect(rc != 0 and "not restarting: 1 rank(s) left, fewer than --min-np 2" in out and launcher.get("generations") == 1,
       f"below --min-np: exit {rc}: {out[-1500:]}")
rc, out, launcher, _, _ = elastic("max-restarts", 3, [], ["--max-restarts", "0"], kill_after=EVERY)
expect(rc != 0 and "not restarting: --max-restarts 0 reached" in out and launcher.get("generations") == 1,
       f"--max-restarts 0: exit {rc}: {out[-1500:]}")
rc, out, launcher, _, _ = elastic("bad-data", 3, [], train_args=["--data", os.path.join(tmp, "no-such-data")])
expect(rc == 2 and "not restarting: every rank stopped on the same error" in out and launcher.get("generations") == 1,
       f"missing data: exit {rc}: {out[-1500:]}")
rc, out, launcher, _, _ = elastic("bad-option", 3, [], train_args=["--optimizer", "no-such-optimizer"])
expect(rc != 0 and "not restarting: every rank stopped on the same error" in out and launcher.get("generations") == 1,
       f"a bad option: exit {rc}: {out[-1500:]}")
# SIGTERM to the launcher (scancel, Ctrl-C) stops the job and is not restarted; no rank is left.
stopped = os.path.join(tmp, "stopped")
longer = [("50" if a == "3" and TRAIN[i - 1] == "--epochs" else a) for i, a in enumerate(TRAIN)]
p = subprocess.Popen([tower, "elastic", "-np", "2", "--mpirun", mpirun, "--", *longer, "--checkpoint-dir", stopped],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
deadline = time.time() + 120
while not os.path.exists(os.path.join(stopped, f"step-{EVERY:010d}", "manifest.tck")) and time.time() < deadline:
    time.sleep(0.01)
p.send_signal(signal.SIGTERM)
out = p.communicate(timeout=60)[0].decode(errors="replace")
expect(p.returncode == 128 + signal.SIGTERM and "the launcher was told to stop" in out and
       elastic_summary(out).get("generations") == 1, f"SIGTERM to the launcher: exit {p.returncode}: {out[-1500:]}")
expect(rank_pid(stopped, 0) is None and rank_pid(stopped, 1) is None, "ranks left after the launcher stopped")
r = subprocess.run([tower, "elastic", "-np", "2", "--", "train", "--epochs", "1"], capture_output=True, text=True)
expect(r.returncode == 2 and "no --checkpoint-dir" in r.stderr, f"no --checkpoint-dir: {r.stderr}")

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("elastic test: all checks passed")
