#!/usr/bin/env python3
"""`tower elastic` restarting a PyTorch program: rank 1 of 3 is killed with SIGKILL once the
checkpoint of step 20 is complete; the launcher relaunches the program at 2 ranks with
TOWER_RESUME=1, its tower.torch.Checkpoints resume the latest checkpoint, and the run completes
with fewer steps lost than the checkpoint interval, ending within 1e-6 of an uninterrupted run at
3 ranks (the same global batches; only the reduction's rounding differs).
Usage: elastic_test.py MPIRUN TOWER PYTHON"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

mpirun, tower, python = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
program = os.path.join(here, "elastic_program.py")
STEPS, EVERY = 60, 10
failures = []


def final_sum(out):
    m = re.search(r"final: (\d+) ranks from step (\d+), parameter sum (\S+)", out)
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


with tempfile.TemporaryDirectory() as tmp:
    reference_pids, pids = os.path.join(tmp, "reference-pids"), os.path.join(tmp, "pids")
    os.mkdir(reference_pids)
    os.mkdir(pids)
    env = dict(os.environ, TOWER_CHECKPOINT_DIR=os.path.join(tmp, "reference"))
    r = subprocess.run([mpirun, "-np", "3", python, program, reference_pids, str(STEPS), str(EVERY)],
                       capture_output=True, text=True, timeout=120, env=env)
    reference = final_sum(r.stdout)
    if r.returncode != 0 or reference is None:
        failures.append(f"the uninterrupted run failed ({r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}")

    ckpt = os.path.join(tmp, "ckpt")
    start = time.monotonic()
    p = subprocess.Popen([tower, "elastic", "-np", "3", "--min-np", "2", "--mpirun", mpirun, "--checkpoint-dir", ckpt,
                          "--", python, program, pids, str(STEPS), str(EVERY)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    manifest = os.path.join(ckpt, "step-0000000020", "manifest.tck")
    deadline = time.time() + 120
    while not os.path.exists(manifest) and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    try:
        os.kill(int(open(os.path.join(pids, "rank-1")).read()), signal.SIGKILL)
    except (OSError, ValueError) as e:
        failures.append(f"could not kill rank 1: {e}")
    out = p.communicate(timeout=240)[0].decode(errors="replace")
    seconds = time.monotonic() - start
    summary = next((json.loads(line[len("tower elastic: summary "):]) for line in out.splitlines()
                    if line.startswith("tower elastic: summary ")), {})
    history = summary.get("history", [])
    got = final_sum(out)
    lost = summary.get("steps_lost")
    print(f"tower elastic -- python: exit {p.returncode}, {summary.get('generations')} generation(s), ended at "
          f"{summary.get('world_size')} ranks, steps lost {lost}, final {got}, uninterrupted {reference} "
          f"({seconds:.1f} s)")
    if p.returncode != 0 or summary.get("generations") != 2 or summary.get("world_size") != 2:
        failures.append(f"not one restart to 2 ranks (exit {p.returncode}): {out[-3000:]}")
    elif not history or "killed by signal 9" not in history[0].get("ended", ""):
        failures.append(f"the first generation's end is not the kill: {history}")
    elif lost is None or not 0 <= lost < EVERY:
        failures.append(f"steps lost {lost}, checkpoints every {EVERY}: {history}")
    elif got is None or got[0] != 2 or got[1] < 20 or reference is None or \
            abs(got[2] - reference[2]) > 1e-6 * abs(reference[2]):
        failures.append(f"the resumed run ended at {got}, the uninterrupted one at {reference}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("tower elastic restarted the PyTorch program: ok")
