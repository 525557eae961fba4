#!/usr/bin/env python3
"""Stops one rank of a training job with SIGSTOP and checks the stall watchdog: the waiting ranks
name the stopped rank, use little CPU while they wait, and abort the job soon after --stall-abort.
Usage: stall_test.py MPIRUN TOWER"""
import os
import signal
import subprocess
import sys
import time

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
NP, STOPPED, WARN, ABORT = 3, 1, 2, 8


def expect(cond, what):
    if not cond:
        failures.append(what)


def rank_pids(launcher):
    """World rank -> pid of the ranks mpirun started (its children), from their environments."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        ranks = [x for x in env if x.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if parent == launcher and ranks:
            pids[int(ranks[0].split(b"=")[1])] = int(entry)
    return pids


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alive(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


job = subprocess.Popen([mpirun, "-np", str(NP), tower, "train", "--model", "mlp", "--hidden", "64", "--depth", "1",
                        "--batch", "32", "--max-steps", "1000000", "--eval-every", "0", "--log-every", "20",
                        "--stall-warn", str(WARN), "--stall-abort", str(ABORT)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
# Wait for the first step line: every rank is training.
first = job.stdout.readline()
pids = rank_pids(job.pid)
expect(len(pids) == NP, f"found the ranks' processes {pids} (first line {first!r})")
if len(pids) == NP:
    os.kill(pids[STOPPED], signal.SIGSTOP)
    stopped_at = time.monotonic()
    # Past the spinning and yielding phases (2 s for MPI requests), the waiting ranks should be
    # nearly idle.
    time.sleep(WARN + 1)
    others = [p for r, p in pids.items() if r != STOPPED]
    before = [cpu_seconds(p) for p in others]
    time.sleep(3)
    used = [cpu_seconds(p) - b for p, b in zip(others, before)]
    expect(all(u < 0.15 for u in used), f"waiting ranks used {used} s of CPU in 3 s (5% of a core allowed); a stalled wait should sleep")
    try:
        out, err = job.communicate(timeout=ABORT + 60)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
        failures.append("the job did not end after --stall-abort")
    ended = time.monotonic() - stopped_at
    expect(job.returncode != 0, "a stalled job exited with status 0")
    # The abort comes once a waiting rank has waited ABORT seconds: within a few seconds of it.
    expect(ABORT - 0.5 <= ended <= ABORT + 6, f"the job ended {ended:.1f} s after the stop; --stall-abort is {ABORT}")
    for r in pids:
        if r == STOPPED:
            continue
        warned = [x for x in err.splitlines() if x.startswith(f"[rank {r}] warning: stall:")]
        expect(any(f"not arrived: rank {STOPPED} (its process is stopped" in x for x in warned),
               f"rank {r} did not warn naming the stopped rank {STOPPED}: {err[-3000:]}")
    aborted = [x for x in err.splitlines() if "error: stall:" in x and "aborting the job after --stall-abort" in x]
    expect(len(aborted) >= 1 and f"not arrived: rank {STOPPED}" in aborted[0], f"no abort message naming rank {STOPPED}: {err[-3000:]}")
    time.sleep(1)
    left = [r for r, p in pids.items() if alive(p)]
    expect(not left, f"ranks {left} still run after the job ended")
    for p in pids.values():
        if alive(p):
            os.kill(p, signal.SIGKILL)
else:
    job.kill()
    job.communicate()

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("stall test passed")
