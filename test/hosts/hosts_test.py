#!/usr/bin/env python3
"""tower across real hosts: scripts/fake-cluster puts 2 hosts in network, UTS and mount namespaces
of their own on this machine, and mpirun starts a daemon on each over TCP. Checks that tower info
sees 2 nodes with their own hostnames, that training across the hosts ends on the same replica hash
as on one host (--deterministic), that 3 ranks on 2 hosts (uneven) train with --allreduce auto as
with ring and bench every mode with #wrong 0, that parameter-server, async and sync-replicas train
across them, that a shared checkpoint resumes bit for bit with rank 0 moved to the other host, that
a host-local checkpoint directory is refused at start where several ranks write into it, that a
network partition ends every rank and mpirun on time, and that a rank killed with SIGKILL on the
other host ends the job. SKIP (77) where namespaces are not
permitted, saying why.

Usage: hosts_test.py SOURCE_DIR BUILD_DIR MPIRUN"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from jobs import skip_unless_namespaces  # noqa: E402

source, build, mpirun = sys.argv[1:4]
tower = os.path.join(build, "tower")
cluster = os.path.join(source, "scripts", "fake-cluster")


def fail(message):
    sys.exit(f"FAIL: {message}")


def on_cluster(*args, timeout=180):
    return subprocess.run([cluster, "mpirun", *args], capture_output=True, text=True, timeout=timeout, env=ENV)


TRAIN = ["--max-steps", "20", "--eval-every", "0", "--hidden", "64", "--depth", "1", "--batch", "32"]


def final_hash(text):
    for line in text.splitlines():
        if "replicas identical (hash " in line:
            return line.rsplit("hash ", 1)[1].rstrip(")")
    return None


def long_job(log_path, *extra):
    """A training job across the hosts that runs for minutes, returned once it has logged a step:
    a cut or a kill then certainly hits a running job (a fast machine finished a job of a few
    seconds before the cut took effect). Its output goes to a file, which nobody has to drain."""
    log = open(log_path, "w")
    job = subprocess.Popen([cluster, "mpirun", "-np", "4", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower,
                            "train", "--epochs", "1000", "--max-steps", "1000000", "--log-every", "20",
                            "--eval-every", "0", "--hidden", "64", "--depth", "1", "--batch", "32", *extra],
                           stdout=log, stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline and job.poll() is None and " step " not in open(log_path).read():
        time.sleep(0.2)
    if job.poll() is not None or " step " not in open(log_path).read():
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        fail(f"the long job across the hosts logged no step: {open(log_path).read()[-1500:]}")
    return job, log


skip_unless_namespaces()
# meson ends a test that runs too long with SIGTERM: the hosts still come down (the finally below).
signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated (timeout?)"))
with tempfile.TemporaryDirectory(prefix="tower-hosts-test-") as tmp:
    ENV = dict(os.environ, TOWER_CLUSTER_DIR=os.path.join(tmp, "cluster"), TOWER_CLUSTER_NAME="twrt",
               OMP_NUM_THREADS="1")
    up = subprocess.run([cluster, "up", "2"], capture_output=True, text=True, env=ENV, timeout=60)
    try:
        if up.returncode != 0:
            fail(f"fake-cluster up 2: {up.stdout} {up.stderr}")

        r = on_cluster("-np", "3", "--map-by", "node", tower, "info", "--json")
        if r.returncode != 0:
            fail(f"tower info across 2 hosts: {r.stdout} {r.stderr}")
        info = json.loads(r.stdout[r.stdout.index("{"):])
        ranks = info.get("ranks", [])
        hostnames = sorted({x.get("hostname") for x in ranks})
        nodes = sorted({x.get("node") for x in ranks})
        if hostnames != ["host0", "host1"] or len(nodes) != 2:
            fail(f"tower info across 2 hosts sees hostnames {hostnames} and nodes {nodes}: {r.stdout}")
        print(f"info: 3 ranks on {len(nodes)} nodes, hostnames {hostnames}")
        table = on_cluster("-np", "2", "--map-by", "node", tower, "info")
        if "net.ipv4.tcp_retries2=4" not in table.stdout:
            fail(f"tower info across hosts does not say how a partition ends on time: {table.stdout[-1500:]}")

        here = subprocess.run([mpirun, "-np", "4", tower, "train", *TRAIN, "--deterministic"], capture_output=True,
                              text=True, timeout=180, env=ENV)
        across = on_cluster("-np", "4", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                            "--deterministic")
        if across.returncode != 0 or final_hash(across.stdout) is None:
            fail(f"training across 2 hosts: {across.stdout[-1500:]} {across.stderr[-1500:]}")
        if final_hash(across.stdout) != final_hash(here.stdout):
            fail(f"--deterministic across 2 hosts ends on {final_hash(across.stdout)}, on one host on "
                 f"{final_hash(here.stdout)}")
        print(f"replicated --deterministic: hash {final_hash(here.stdout)} on one host and across 2")

        # Uneven hosts (3 ranks as 2 + 1): auto takes the hierarchical mode for uneven nodes, whose
        # losses follow ring's within f32 rounding; the bench measures every mode there, #wrong 0.
        uneven = on_cluster("-np", "3", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN)
        if (uneven.returncode != 0 or "hierarchical all-reduce" not in uneven.stdout or
                final_hash(uneven.stdout) is None):
            fail(f"3 ranks on 2 hosts with --allreduce auto: {uneven.stdout[-1500:]} {uneven.stderr[-1500:]}")
        ring = on_cluster("-np", "3", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                          "--allreduce", "ring")
        loss = lambda out: [float(x.split("loss ")[1].split()[0]) for x in out.splitlines() if " loss " in x]
        if ring.returncode != 0 or not loss(ring.stdout) or any(
                abs(a - b) > 1e-4 * abs(b) for a, b in zip(loss(uneven.stdout), loss(ring.stdout))):
            fail(f"uneven hierarchical and ring disagree: {loss(uneven.stdout)} against {loss(ring.stdout)}")
        bench = on_cluster("-np", "3", "--map-by", "node", tower, "bench", "allreduce", "--mode", "all", "-b", "8",
                           "-e", "1M", "-f", "16")
        rows = [line.split() for line in bench.stdout.splitlines() if line.strip() and not line.startswith("#")]
        if (bench.returncode != 0 or "skipped" in bench.stdout or "mode hierarchical on 3 ranks" not in bench.stdout
                or len(rows) != 3 * 5 or any(r[7] != "0" or r[11] != "0" for r in rows)):
            fail(f"tower bench --mode all on uneven hosts: {bench.stdout[-2500:]} {bench.stderr[-1000:]}")
        print(f"uneven 2+1: auto trains on hierarchical (uneven nodes) as ring does, the bench measures every mode, "
              f"{len(rows)} rows #wrong 0")

        ps = on_cluster("-np", "4", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                        "--strategy", "parameter-server", "--ps-ranks", "1")
        if ps.returncode != 0 or final_hash(ps.stdout) is None or "shared memory" in ps.stdout:
            fail(f"parameter-server across 2 hosts (must not use shared memory): {ps.stdout[-1500:]} {ps.stderr[-800:]}")
        print("parameter-server with a dedicated server across 2 hosts: replicas identical")

        # The detached strategies across hosts.
        for strategy in ("async", "sync-replicas"):
            d = on_cluster("-np", "4", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                           "--strategy", strategy)
            if d.returncode != 0 or final_hash(d.stdout) is None:
                fail(f"{strategy} across 2 hosts: {d.stdout[-1500:]} {d.stderr[-800:]}")
        print("async and sync-replicas across 2 hosts: trained")

        # A checkpoint in a directory both hosts share, resumed with rank 0 moved to the other host:
        # the run ends on the uninterrupted run's hash.
        shared = os.path.join(tmp, "shared-ckpt")
        rankfile = os.path.join(tmp, "rankfile")
        with open(rankfile, "w") as f:
            f.write("rank 0=host1 slot=0\nrank 1=host0 slot=0\n")
        whole = on_cluster("-np", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN)
        first = on_cluster("-np", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN[2:],
                           "--max-steps", "10", "--checkpoint-dir", shared)
        moved = on_cluster("-np", "2", "--rankfile", rankfile, "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                           "--checkpoint-dir", shared, "--resume")
        if (first.returncode != 0 or moved.returncode != 0 or "resumed from" not in moved.stdout or
                final_hash(moved.stdout) != final_hash(whole.stdout)):
            fail(f"resume with rank 0 on host1: {final_hash(moved.stdout)} against {final_hash(whole.stdout)}: "
                 f"{first.stderr[-800:]} {moved.stdout[-1500:]} {moved.stderr[-800:]}")
        print(f"checkpoint on a shared directory, resumed with rank 0 moved to host1: hash {final_hash(moved.stdout)}, "
              f"as without the interruption")

        # Checkpoints in a directory each host has of its own (/scratch): replicated saves on rank 0
        # only and runs; parameter-server writes a file per owner and is refused at start.
        local = on_cluster("-np", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                           "--checkpoint-dir", "/scratch/ckpt")
        if local.returncode != 0:
            fail(f"replicated with a host-local checkpoint directory: {local.stdout[-1000:]} {local.stderr[-1000:]}")
        refused = on_cluster("-np", "2", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                             "--strategy", "parameter-server", "--checkpoint-dir", "/scratch/ckpt")
        said = [x for x in refused.stderr.splitlines() if "is not shared with rank 0's host" in x]
        if refused.returncode == 0 or len(said) != 2 or "step 1" in refused.stdout:
            fail(f"parameter-server with a host-local checkpoint directory must be refused at start on both ranks: "
                 f"{refused.stdout[-1000:]} {refused.stderr[-1500:]}")
        print("checkpoints: a host-local directory works for replicated and is refused at start for parameter-server")

        # A partition: host1's link goes down mid-run. Every rank aborts after --stall-abort and
        # exits within its 5 s grace; mpirun ends once TCP gives up on host1's daemon (about 6 s
        # with the cluster's tcp_retries2=4).
        stall_abort = 6
        job, log = long_job(os.path.join(tmp, "partition.log"), "--stall-warn", "3", "--stall-abort", str(stall_abort))
        subprocess.run([cluster, "cut", "host1"], check=True, env=ENV, timeout=30)
        cut = time.time()
        gone = {}
        while time.time() - cut < 60 and (len(gone) < 2 or job.poll() is None):
            for host in ("host0", "host1"):
                pids = subprocess.run(["ip", "netns", "pids", f"twrt-{host}"], capture_output=True,
                                      text=True).stdout.split()
                alive = [p for p in pids if os.path.exists(f"/proc/{p}/comm") and
                         open(f"/proc/{p}/comm").read().strip() == "tower"]
                if host not in gone and not alive:
                    gone[host] = time.time() - cut
            time.sleep(0.25)
        ended = time.time() - cut if job.poll() is not None else None
        if ended is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        subprocess.run([cluster, "mend", "host1"], env=ENV, timeout=30)
        print(f"partition of host1 (--stall-abort {stall_abort}): ranks on host0 gone after "
              f"{gone.get('host0', -1):.1f} s, on host1 after {gone.get('host1', -1):.1f} s, mpirun ended after "
              f"{ended if ended is not None else -1:.1f} s")
        if any(gone.get(h, 1e9) > stall_abort + 5 + 2 for h in ("host0", "host1")):
            fail(f"a partitioned side's ranks outlived --stall-abort + the 5 s grace: {gone}")
        if ended is None or ended > stall_abort + 20:
            fail(f"mpirun did not end within --stall-abort + 20 s of the partition ({ended})")
        if job.returncode == 0:
            fail("a partitioned job ended with exit 0")

        # SIGKILL a rank on host1 mid-run: the job must end, not hang.
        job, log = long_job(os.path.join(tmp, "kill.log"))
        pids = subprocess.run(["ip", "netns", "pids", "twrt-host1"], capture_output=True, text=True).stdout.split()
        towers = [p for p in pids if open(f"/proc/{p}/comm").read().strip() == "tower"]
        if not towers:
            os.killpg(job.pid, signal.SIGKILL)
            fail("no tower rank found on host1 to kill")
        killed = time.time()
        os.kill(int(towers[0]), signal.SIGKILL)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            fail("a rank killed on host1 left the job running for 60 s")
        print(f"kill -9 of rank pid {towers[0]} on host1: the job ended {time.time() - killed:.1f} s later "
              f"(exit {job.returncode})")
        if job.returncode == 0:
            fail("the job ended with exit 0 after one of its ranks was killed")

        # Three hosts, 5 ranks as 2 + 2 + 1: the topology tower sees, and training on the uneven
        # hierarchical all-reduce that auto picks, against ring.
        up3 = subprocess.run([cluster, "up", "3"], capture_output=True, text=True, env=ENV, timeout=60)
        if up3.returncode != 0:
            fail(f"fake-cluster up 3: {up3.stdout} {up3.stderr}")
        r = on_cluster("-np", "5", "--map-by", "node", tower, "info", "--json")
        ranks = json.loads(r.stdout[r.stdout.index("{"):])["ranks"] if r.returncode == 0 and "{" in r.stdout else []
        layout = sorted((x["hostname"], x["node"], x["local_rank"]) for x in ranks)
        want = [("host0", 0, 0), ("host0", 0, 1), ("host1", 1, 0), ("host1", 1, 1), ("host2", 2, 0)]
        if layout != want:
            fail(f"tower info on 3 hosts, 5 ranks by node: {layout}, expected {want}: {r.stderr[-800:]}")
        three = on_cluster("-np", "5", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN)
        ring3 = on_cluster("-np", "5", "--map-by", "node", "-x", "OMP_NUM_THREADS", tower, "train", *TRAIN,
                           "--allreduce", "ring")
        if (three.returncode != 0 or "hierarchical all-reduce" not in three.stdout or ring3.returncode != 0 or
                any(abs(a - b) > 1e-4 * abs(b) for a, b in zip(loss(three.stdout), loss(ring3.stdout)))):
            fail(f"5 ranks on 3 hosts: {loss(three.stdout)} (auto) against {loss(ring3.stdout)} (ring): "
                 f"{three.stderr[-800:]} {ring3.stderr[-800:]}")
        print(f"3 hosts, 5 ranks (2+2+1): nodes and local ranks right; auto (hierarchical) trains as ring does")
    finally:
        subprocess.run([cluster, "down"], capture_output=True, env=ENV, timeout=60)
