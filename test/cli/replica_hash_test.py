#!/usr/bin/env python3
"""Refactors keep the bits: the final replica hash of fixed-seed `tower train` runs (replicated in
every all-reduce mode with and without --deterministic, parameter-server colocated and with a
dedicated server, at 2 and 3 ranks) equals the hash of the same run before the change.

oneDNN picks its kernels (and their summation order) by CPU, so a hash is only comparable on the
machine it was taken on. replica_hashes.json records them per machine; on a machine it does not
list, the test builds the reference commit it names (once per build directory) and compares with
that build's hashes instead. SKIP (77) only where neither is possible, saying why.

Usage: replica_hash_test.py MPIRUN TOWER SOURCE_ROOT BUILD_ROOT [--record] [--reference-tower PATH]
  --record: write this machine's hashes (from TOWER) into replica_hashes.json.
  --reference-tower PATH: compare with that binary instead of the recorded or rebuilt reference."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "replica_hashes.json")
SKIP = 77

# name -> (ranks, arguments). Small enough to run in about a second each.
COMMON = ["--batch", "16", "--eval-every", "0", "--seed", "7"]
MLP = ["--model", "mlp", "--hidden", "64", "--depth", "1", "--max-steps", "30"]


def runs():
    out = {}
    for np in (2, 3):
        for mode in ("ring", "hierarchical", "naive"):
            out[f"np{np}-replicated-{mode}"] = (np, ["--allreduce", mode])
            out[f"np{np}-replicated-{mode}-deterministic"] = (np, ["--allreduce", mode, "--deterministic"])
        out[f"np{np}-parameter-server-colocated"] = (np, ["--strategy", "parameter-server"])
        out[f"np{np}-parameter-server-dedicated"] = (np, ["--strategy", "parameter-server", "--ps-ranks", "1"])
    # The other paths a refactor moves: 16-bit compute with compressed all-reduce and a dynamic loss
    # scale, accumulation with Adam and moving averages, and the convolutions.
    out["np3-bf16-compressed-dynamic-scale"] = (3, ["--precision", "bf16", "--compress", "bf16", "--loss-scale", "dynamic"])
    out["np2-fp16-sum-groups"] = (2, ["--precision", "fp16", "--loss-scale", "dynamic", "--reduce", "sum",
                                      "--groups", "0;1", "--allreduce", "ring"])
    out["np2-adam-accumulate-ema"] = (2, ["--optimizer", "adam", "--lr", "0.001", "--accumulate", "2", "--ema-decay", "0.9"])
    out["np2-cnn"] = (2, ["--model", "cnn", "--hidden", "32", "--max-steps", "10"])
    return out


def machine():
    """The CPU, as oneDNN's kernel choice sees it: vendor, family, model, stepping."""
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return "{} family {} model {} stepping {}".format(fields.get("vendor_id", "?"), fields.get("cpu family", "?"),
                                                        fields.get("model", "?"), fields.get("stepping", "?"))


def hashes(mpirun, tower, tmp):
    result = {}
    # Each tower with the libtower built beside it: meson's test environment points
    # LD_LIBRARY_PATH at the tree under test, which would otherwise load into the reference binary.
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(tower))] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    for name, (np, args) in runs().items():
        metrics = os.path.join(tmp, f"{name}.jsonl")
        model = [] if "--model" in args else MLP
        r = subprocess.run([mpirun, "-np", str(np), "-x", "LD_LIBRARY_PATH", tower, "train", *COMMON, *model, *args,
                            "--metrics", metrics], capture_output=True, text=True, timeout=300, env=env)
        if r.returncode != 0:
            sys.exit(f"{name}: {tower} failed ({r.returncode}): {r.stderr[-1500:]}")
        with open(metrics) as f:
            result[name] = [json.loads(x) for x in f][-1]["replica_hash"]
    return result


def build_reference(source_root, build_root, commit):
    """The reference commit's tower, built once into BUILD_ROOT/replica-hash-reference; None and a
    reason when it cannot be had."""
    top = os.path.join(build_root, "replica-hash-reference")
    build = os.path.join(top, "build")
    tower = os.path.join(build, "tower")
    done = os.path.join(top, "built")  # written last: a build cut short is started again
    if os.path.exists(done):
        return tower, None
    if subprocess.run(["git", "-C", source_root, "cat-file", "-e", commit + "^{commit}"],
                      capture_output=True).returncode != 0:
        return None, f"this machine has no recorded hashes and the clone lacks commit {commit} to build them from"
    shutil.rmtree(top, ignore_errors=True)
    src = os.path.join(top, "src")
    os.makedirs(src)
    archive = subprocess.Popen(["git", "-C", source_root, "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {commit} failed")
    print(f"no recorded hashes for this machine: building reference commit {commit} in {top}", flush=True)
    subprocess.run(["meson", "setup", build, src, "-Dcuda=disabled"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build, "-j", os.environ.get("TOWER_BUILD_JOBS", "2"), "tower"], check=True,
                   stdout=subprocess.DEVNULL)
    open(done, "w").close()
    return tower, None


def main():
    args = sys.argv[1:]
    record = "--record" in args
    reference_tower = None
    if "--reference-tower" in args:
        i = args.index("--reference-tower")
        reference_tower = args[i + 1]
        del args[i:i + 2]
    args = [a for a in args if a != "--record"]
    mpirun, tower, source_root, build_root = args[:4]
    with open(TABLE) as f:
        table = json.load(f)
    here = machine()
    tmp = tempfile.mkdtemp(prefix="tower-replica-hash-test-")
    now = hashes(mpirun, tower, tmp)

    if record:
        table["machines"][here] = now
        with open(TABLE + ".partial", "w") as f:
            json.dump(table, f, indent=2, sort_keys=True)
            f.write("\n")
        os.rename(TABLE + ".partial", TABLE)
        print(f"recorded {len(now)} hashes for {here}")
        return 0

    if reference_tower:
        expected, source = hashes(mpirun, reference_tower, tmp), reference_tower
    elif here in table["machines"]:
        expected, source = table["machines"][here], f"replica_hashes.json ({here})"
    else:
        ref, why = build_reference(source_root, build_root, table["reference_commit"])
        if ref is None:
            print(f"SKIP: {why}")
            return SKIP
        expected, source = hashes(mpirun, ref, tmp), f"a build of {table['reference_commit']}"

    wrong = [f"{name}: {now[name]} against {expected.get(name)}" for name in now if now[name] != expected.get(name)]
    for name in sorted(now):
        print(f"{name}: {now[name]}")
    if wrong:
        print(f"replica hashes differ from {source}:\n  " + "\n  ".join(wrong))
        return 1
    print(f"replica hash test: all {len(now)} runs end on the hashes of {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
