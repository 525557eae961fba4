#!/usr/bin/env python3
"""tower elastic across real hosts: scripts/fake-cluster makes 3 hosts (network, UTS and mount
namespaces on this machine) with one slot each and a checkpoint directory they all see; the launcher
runs on host0. A rank killed with SIGKILL on host2 (replicated, sync-replicas) and host2's link
taken down (parameter-server): the launcher leaves host2 out and resumes on host0 and host1 with no
person (at 3 hosts where mpirun itself dies of SIGSEGV before it names the killed rank). The run
completes its epochs, resumes from a checkpoint no older than the newest complete one when the
fault came and counts the steps lost from there, the restart time is measured, and the final
accuracy is within 0.5 points of an uninterrupted run. SKIP (77) where namespaces are not permitted.

Usage: elastic_hosts_test.py SOURCE_DIR BUILD_DIR MPIRUN"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from jobs import elastic_summary, metrics_summary, newest_checkpoint, resume_problem, skip_unless_namespaces  # noqa: E402

source, build, mpirun = sys.argv[1:4]
tower = os.path.join(build, "tower")
cluster = os.path.join(source, "scripts", "fake-cluster")
EVERY = 25
TRAIN = ["train", "--model", "mlp", "--hidden", "256", "--depth", "2", "--batch", "64", "--epochs", "3",
         "--schedule", "warmup_cosine", "--eval-every", "3", "--log-every", "200", "--checkpoint-every", str(EVERY)]
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def towers_on(host):
    pids = subprocess.run(["ip", "netns", "pids", f"twre-{host}"], capture_output=True, text=True).stdout.split()
    out = []
    for p in pids:
        try:
            if open(f"/proc/{p}/comm").read().strip() == "tower":
                out.append(int(p))
        except OSError:
            pass
    return out


def elastic(name, strategy, fault, extra=()):
    """tower elastic -np 3 on the three hosts; `fault` is applied once step 3 * EVERY is checkpointed."""
    ckpt = os.path.join(tmp, name)
    metrics = os.path.join(tmp, f"{name}.jsonl")
    job = subprocess.Popen([cluster, "elastic", tower, "-np", "3", "--min-np", "2", "--hostfile", hostfile,
                            "--probe-timeout", "10", "-x", "OMP_NUM_THREADS", "--", *TRAIN, "--checkpoint-dir", ckpt,
                            "--metrics", metrics, *strategy, *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    manifest = os.path.join(ckpt, f"step-{3 * EVERY:010d}", "manifest.tck")
    deadline = time.time() + 120
    while not os.path.exists(manifest) and job.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    fault()
    newest = newest_checkpoint(ckpt)
    try:
        out = job.communicate(timeout=240)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out = job.communicate()[0].decode(errors="replace")
        failures.append(f"{name}: tower elastic did not end within 240 s")
    return job.returncode, out, elastic_summary(out), metrics_summary(metrics), newest


def kill_on_host2():
    pids = towers_on("host2")
    expect(bool(pids), "no tower rank on host2 to kill")
    for p in pids:
        os.kill(p, signal.SIGKILL)


def cut_host2():
    subprocess.run([cluster, "cut", "host2"], check=True, env=ENV, timeout=30)


skip_unless_namespaces()
signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated (timeout?)"))
with tempfile.TemporaryDirectory(prefix="tower-elastic-hosts-test-") as tmp:
    ENV = dict(os.environ, TOWER_CLUSTER_DIR=os.path.join(tmp, "cluster"), TOWER_CLUSTER_NAME="twre",
               OMP_NUM_THREADS="1")
    hostfile = os.path.join(tmp, "hostfile")
    with open(hostfile, "w") as f:
        f.write("host0 slots=1\nhost1 slots=1\nhost2 slots=1\n")
    reference_metrics = os.path.join(tmp, "reference.jsonl")
    r = subprocess.run([mpirun, "--oversubscribe", "-np", "3", tower, *TRAIN, "--checkpoint-dir",
                        os.path.join(tmp, "reference"), "--metrics", reference_metrics], capture_output=True, text=True,
                       timeout=300, env=ENV)
    reference = metrics_summary(reference_metrics).get("test_accuracy")
    expect(r.returncode == 0 and reference is not None, f"the uninterrupted run: {r.stderr[-1500:]}")
    up = subprocess.run([cluster, "up", "3"], capture_output=True, text=True, env=ENV, timeout=60)
    try:
        if up.returncode != 0:
            sys.exit(f"FAIL: fake-cluster up 3: {up.stdout} {up.stderr}")
        cases = (("replicated", ["--strategy", "replicated"], kill_on_host2, "killed by signal 9", []),
                 ("sync-replicas", ["--strategy", "sync-replicas"], kill_on_host2, "killed by signal 9", []),
                 ("parameter-server", ["--strategy", "parameter-server"], cut_host2, "",
                  ["--stall-warn", "3", "--stall-abort", "6"]))
        for name, strategy, fault, ended, extra in cases:
            rc, out, launcher, s, newest = elastic(name, strategy, fault, extra)
            subprocess.run([cluster, "mend", "host2"], env=ENV, timeout=30)
            history = launcher.get("history", [])
            # Open MPI 4.1's mpirun has been seen to die of SIGSEGV (exit 139) while it handles the
            # kill, before it names the rank: with no loss named and every host answering, the
            # launcher relaunches at 3 hosts, and that run must complete as well.
            crashed = (fault is kill_on_host2 and len(history) == 2 and history[0].get("status") == 139 and
                       history[0].get("ended") == "exit status 139")
            size = 3 if crashed else 2
            expect(rc == 0 and launcher.get("generations") == 2 and launcher.get("world_size") == size,
                   f"{name}: not one restart to {size} hosts (exit {rc}): {out[-3000:]}")
            expect(len(history) == 2 and (crashed or ended in history[0].get("ended", "")),
                   f"{name}: how it ended: {history}")
            expect("host2 does not answer" in out or fault is kill_on_host2,
                   f"{name}: the launcher did not leave the cut host out: {out[-2000:]}")
            problem = resume_problem(history, newest, 3 * EVERY)
            expect(problem is None, f"{name}: {problem}")
            lost = history[0].get("steps_lost") if history else None
            accuracy = s.get("test_accuracy")
            expect(s.get("world_size") == size and accuracy is not None and reference is not None and
                   abs(accuracy - reference) <= 0.005,
                   f"{name}: final summary at {s.get('world_size')} ranks, accuracy {accuracy} against {reference}")
            restart = history[1].get("restart_s", -1) if len(history) == 2 else -1
            print(f"{name}: 3 -> {size} hosts after {history[0].get('ended') if history else '?'}: {lost} step(s) lost, "
                  f"first step {restart:.1f} s after the failure was seen, accuracy {accuracy} (uninterrupted "
                  f"{reference})")
    finally:
        subprocess.run([cluster, "down"], capture_output=True, env=ENV, timeout=60)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("elastic hosts test: all checks passed")
