"""What the tests of whole tower jobs share: finding a rank's process to kill, reading a run's
metrics summary and tower elastic's summary, and skipping where namespaces are not permitted."""
import glob
import json
import os
import subprocess
import sys

SKIP = 77


def rank_pid(marker, rank):
    """The pid of the tower process of `rank` whose command line holds `marker`, or None."""
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            cmdline = open(f"{proc}/cmdline", "rb").read().split(b"\0")
            if not cmdline or not cmdline[0].endswith(b"tower") or marker.encode() not in b" ".join(cmdline):
                continue
            environ = open(f"{proc}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(os.path.basename(proc))
    return None


def newest_checkpoint(directory):
    """The step of the newest complete checkpoint (its manifest written last) in `directory`, or -1."""
    names = [os.path.basename(os.path.dirname(m)) for m in glob.glob(os.path.join(directory, "step-*", "manifest.tck"))]
    # Only "step-<digits>", as the library reads them (runtime/checkpoint/checkpoint_files.h).
    return max((int(n[len("step-"):]) for n in names if n[len("step-"):].isdigit()), default=-1)


def resume_problem(history, newest, at_least):
    """What is wrong with a relaunch after a kill, or None: tower elastic's second generation must
    resume from a checkpoint no older than `newest` (the newest complete one right after the kill)
    nor than step `at_least`, and the first generation's steps lost must be its steps after that.
    Not "fewer than the checkpoint interval": checkpoints are written in the background, and steps
    of a fraction of a millisecond can run past the next interval before its files are complete
    (a local-sgd MLP killed at step 109 with the step-100 checkpoint unfinished lost 34 at 25)."""
    lost = history[0].get("steps_lost") if history else None
    start = history[1].get("start_step", -1) if len(history) == 2 else -1
    if lost is None or start < max(newest, at_least) or lost != max(0, history[0].get("last_step", -1) - start):
        return (f"resumed from step {start} (the newest complete checkpoint after the kill: {newest}), "
                f"steps lost {lost}: {history}")
    return None


def metrics_summary(path):
    """The summary line of a --metrics file, or {} when the run wrote none."""
    lines = [json.loads(x) for x in open(path)] if os.path.exists(path) else []
    return lines[-1] if lines and lines[-1].get("event") == "summary" else {}


def elastic_summary(out):
    """The JSON of the "tower elastic: summary" line in tower elastic's output, or {}."""
    for line in out.splitlines():
        if line.startswith("tower elastic: summary "):
            return json.loads(line[len("tower elastic: summary "):])
    return {}


def skip_unless_namespaces():
    """Exits with SKIP, saying why, unless this process may make network, UTS and mount namespaces."""
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
        sys.exit(SKIP)
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: this machine does not permit namespaces: {probe.stderr.strip()}")
        sys.exit(SKIP)
