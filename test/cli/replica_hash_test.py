#!/usr/bin/env python3
"""Refactors keep the bits: the final replica hash of fixed-seed `tower train` runs (replicated in
every all-reduce mode with and without --deterministic, parameter-server colocated and with a
dedicated server, at 2 and 3 ranks; sync-replicas and async where they are deterministic; the GPT)
and of examples/gan built against the library (replicated, and fp16 with a dedicated server)
equals the hash of the same run before the change.

oneDNN picks its kernels (and their summation order) by CPU, so a hash is only comparable on the
machine it was taken on. replica_hashes.json records them per machine; for a machine it does not
list, or runs its entry lacks, the test builds the reference commit it names (once per build
directory, again when the commit changes) and compares with that build's hashes instead. SKIP (77)
only where neither is possible, saying why.

Usage: replica_hash_test.py MPIRUN TOWER SOURCE_ROOT BUILD_ROOT [--record] [--reference-tower PATH]
  --record: write this machine's hashes (from TOWER) into replica_hashes.json.
  --reference-tower PATH: compare with that binary (of a build folder) instead of the recorded or
  rebuilt reference.
A session about to move code on a CPU whose entry lacks some runs records them first (--record with
a tower that keeps the reference's bits): each missing run otherwise costs a build of the reference."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
from installed import build_gan  # noqa: E402
TABLE = os.path.join(HERE, "replica_hashes.json")
SKIP = 77

# name -> (program, ranks, arguments). Small enough to run in about a second each.
COMMON = ["--batch", "16", "--eval-every", "0", "--seed", "7"]
MLP = ["--model", "mlp", "--hidden", "64", "--depth", "1", "--max-steps", "30"]
GAN = ["--steps", "40", "--batch", "32", "--r1-every", "8", "--log-every", "40", "--seed", "7"]
CORPUS = "{tmp}/corpus.txt"  # written by write_corpus(): the same bytes for every build compared


def gpt(*args, context=32):
    return ["--model", "gpt", "--layers", "2", "--width", "32", "--heads", "2", "--context", str(context),
            "--optimizer", "adamw", "--lr", "3e-3", "--max-steps", "12", "--data", CORPUS, *args]


def runs():
    out = {}
    for np in (2, 3):
        for mode in ("ring", "hierarchical", "naive"):
            out[f"np{np}-replicated-{mode}"] = ("tower", np, ["--allreduce", mode])
            out[f"np{np}-replicated-{mode}-deterministic"] = ("tower", np, ["--allreduce", mode, "--deterministic"])
        out[f"np{np}-parameter-server-colocated"] = ("tower", np, ["--strategy", "parameter-server"])
        out[f"np{np}-parameter-server-dedicated"] = ("tower", np, ["--strategy", "parameter-server", "--ps-ranks", "1"])
    # The other paths a refactor moves: 16-bit compute with compressed all-reduce and a dynamic loss
    # scale, accumulation with Adam and moving averages, and the convolutions.
    out["np3-bf16-compressed-dynamic-scale"] = ("tower", 3, ["--precision", "bf16", "--compress", "bf16",
                                                             "--loss-scale", "dynamic"])
    out["np2-fp16-sum-groups"] = ("tower", 2, ["--precision", "fp16", "--loss-scale", "dynamic", "--reduce", "sum",
                                               "--groups", "0;1", "--allreduce", "ring"])
    out["np2-adam-accumulate-ema"] = ("tower", 2, ["--optimizer", "adam", "--lr", "0.001", "--accumulate", "2",
                                                   "--ema-decay", "0.9"])
    out["np2-cnn"] = ("tower", 2, ["--model", "cnn", "--hidden", "32", "--max-steps", "10"])
    # The detached strategies where their result does not depend on arrival order: sync-replicas
    # averaging both of two workers' gradients (0 + a + b is b + a bit for bit), and async with one
    # worker (its push and its next request travel in order to the owner).
    out["np2-sync-replicas"] = ("tower", 2, ["--strategy", "sync-replicas", "--replicas-to-aggregate", "2"])
    out["np3-sync-replicas-dedicated-adam-ema"] = ("tower", 3, ["--strategy", "sync-replicas", "--ps-ranks", "1",
                                                                "--replicas-to-aggregate", "2", "--optimizer", "adam",
                                                                "--lr", "0.001", "--ema-decay", "0.9"])
    out["np2-async-one-worker"] = ("tower", 2, ["--strategy", "async", "--ps-ranks", "1"])
    # The GPT, replicated and through owners in bf16; and at a context of several causal blocks and
    # tiles, not a whole number of either (the CPU's own f32 attention kernels, the blocks in bf16).
    out["np2-gpt"] = ("tower", 2, gpt())
    out["np3-gpt-parameter-server-bf16"] = ("tower", 3, gpt("--strategy", "parameter-server", "--precision", "bf16"))
    out["np2-gpt-context-72"] = ("tower", 2, gpt(context=72))
    out["np2-gpt-context-72-bf16"] = ("tower", 2, gpt("--precision", "bf16", context=72))
    # examples/gan, a program of its own on the installed library: three optimizers, one sharing D's state.
    out["gan-np2-replicated"] = ("gan", 2, GAN)
    out["gan-np3-parameter-server-dedicated-fp16"] = ("gan", 3, [*GAN, "--strategy", "parameter-server",
                                                                 "--ps-ranks", "1", "--precision", "fp16"])
    return out


def write_corpus(tmp):
    """About 64 KB of text made from a fixed generator: the GPT runs' data, the same for every build."""
    words = ("tower trains one replica of the model on every rank while the gradients travel in fused "
             "buckets and the owners apply each update once").split()
    state, lines = 7, []
    for _ in range(1500):
        line = []
        for _ in range(8):
            state = (state * 1103515245 + 12345) % 2 ** 31
            line.append(words[state % len(words)])
        lines.append(" ".join(line).capitalize() + ".")
    with open(os.path.join(tmp, "corpus.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


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


def hashes(mpirun, build, tmp, names, gan=None):
    """The runs `names` of the tower in `build` (and of `gan`, (binary, environment), built against it)."""
    tower = os.path.join(build, "tower")
    result = {}
    # Each tower with the libtower built beside it: meson's test environment points
    # LD_LIBRARY_PATH at the tree under test, which would otherwise load into the reference binary.
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(tower))] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    for name, (program, np, args) in runs().items():
        if name not in names:
            continue
        args = [a.format(tmp=tmp) for a in args]
        out = os.path.join(tmp, name)
        if program == "gan":
            cmd, run_env, metrics = [gan[0], "--out", out, *args], gan[1], os.path.join(out, "metrics.jsonl")
        else:
            model = [] if "--model" in args else MLP
            metrics = out + ".jsonl"
            cmd, run_env = [tower, "train", *COMMON, *model, *args, "--metrics", metrics], env
        r = subprocess.run([mpirun, "-np", str(np), "-x", "LD_LIBRARY_PATH", *cmd], capture_output=True, text=True,
                           timeout=300, env=run_env)
        if r.returncode != 0:
            sys.exit(f"{name}: {cmd[0]} failed ({r.returncode}; the runs' files are kept in {tmp}): "
                     f"{r.stderr[-1500:]}")
        with open(metrics) as f:
            last = [json.loads(x) for x in f][-1]
        result[name] = f"{last['G_hash']}-{last['D_hash']}" if program == "gan" else last["replica_hash"]
    return result


def gan_of(build, source, tmp):
    """examples/gan of `source` built against `build`, in a folder of tmp."""
    return build_gan(build, source, tempfile.mkdtemp(prefix="gan-", dir=tmp))


def build_reference(source_root, build_root, commit):
    """The reference commit's build folder (its tower) and its source, built once into
    BUILD_ROOT/replica-hash-reference; None and a reason when it cannot be had."""
    top = os.path.join(build_root, "replica-hash-reference")
    build = os.path.join(top, "build")
    src = os.path.join(top, "src")
    done = os.path.join(top, "built")  # written last, naming the commit: a build cut short or of another commit is redone
    if os.path.exists(done) and open(done).read().strip() == commit:
        return (build, src), None
    if subprocess.run(["git", "-C", source_root, "cat-file", "-e", commit + "^{commit}"],
                      capture_output=True).returncode != 0:
        return None, f"this machine has no recorded hashes and the clone lacks commit {commit} to build them from"
    shutil.rmtree(top, ignore_errors=True)
    os.makedirs(src)
    archive = subprocess.Popen(["git", "-C", source_root, "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {commit} failed")
    print(f"no recorded hashes for this machine: building reference commit {commit} in {top}", flush=True)
    # The library and the tower executable (what install and the GAN need), nothing else.
    options = ["-Dcuda=disabled"]
    if "option('torch'" in open(os.path.join(src, "meson_options.txt")).read():
        options.append("-Dtorch=disabled")
    subprocess.run(["meson", "setup", build, src, *options], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build, "-j", os.environ.get("TOWER_BUILD_JOBS", "2"), "tower"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(done, "w") as f:
        f.write(commit + "\n")
    return (build, src), None


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
    write_corpus(tmp)
    every = set(runs())
    build = os.path.dirname(os.path.abspath(tower))
    now = hashes(mpirun, build, tmp, every, gan_of(build, source_root, tmp))

    if record:
        table["machines"][here] = now
        with open(TABLE + ".partial", "w") as f:
            json.dump(table, f, indent=2, sort_keys=True)
            f.write("\n")
        os.rename(TABLE + ".partial", TABLE)
        print(f"recorded {len(now)} hashes for {here}")
        shutil.rmtree(tmp, ignore_errors=True)
        return 0

    recorded = table["machines"].get(here, {})
    if reference_tower:
        ref = os.path.dirname(os.path.abspath(reference_tower))
        expected, source = hashes(mpirun, ref, tmp, every, gan_of(ref, source_root, tmp)), reference_tower
    else:
        expected = {name: recorded[name] for name in every if name in recorded}
        source = f"replica_hashes.json ({here})"
        missing = every - set(expected)
        if missing:
            commit = table["reference_commit"]
            ref, why = build_reference(source_root, build_root, commit)
            if ref is None:
                print(f"SKIP: {why}")
                shutil.rmtree(tmp, ignore_errors=True)
                return SKIP
            print(f"{len(missing)} run(s) not recorded for {here}: comparing them with a build of {commit}")
            gan = gan_of(ref[0], ref[1], tmp) if any(runs()[n][0] == "gan" for n in missing) else None
            expected.update(hashes(mpirun, ref[0], tmp, missing, gan))
            source = f"a build of {commit}" if not recorded else f"{source} and a build of {commit}"

    wrong = [f"{name}: {now[name]} against {expected.get(name)}" for name in now if now[name] != expected.get(name)]
    for name in sorted(now):
        print(f"{name}: {now[name]}")
    if wrong:
        print(f"replica hashes differ from {source}:\n  " + "\n  ".join(wrong))
        print(f"the runs' files are kept in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"replica hash test: all {len(now)} runs end on the hashes of {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
