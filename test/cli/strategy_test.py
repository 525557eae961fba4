#!/usr/bin/env python3
"""Runs `tower train --strategy ...` under mpirun: the parameter-server strategy against replicated,
dedicated servers, variable averages, and the strategy options' errors. Usage: strategy_test.py MPIRUN TOWER"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

mpirun, tower = sys.argv[1], sys.argv[2]
failures = []
tmp = tempfile.mkdtemp(prefix="tower-strategy-test-")


def run(np, *args):
    return subprocess.run([mpirun, "-np", str(np), tower, "train", "--device", "cpu", "--model", "mlp", "--hidden", "64",
                           "--depth", "1", "--batch", "32", "--epochs", "1", *args],
                          capture_output=True, text=True, timeout=300)


def lines_of(path):
    return [json.loads(x) for x in open(path)]


def expect(cond, what):
    if not cond:
        failures.append(what)


def expect_error_on_every_rank(r, np, text, what):
    expect(r.returncode != 0, f"{what}: exit status 0")
    for rank in range(np):
        expect(f"[rank {rank}] error:" in r.stderr and text in r.stderr,
               f"{what}: rank {rank} did not report '{text}': {r.stderr[-2000:]}")


def train(np, name, *args):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    r = run(np, "--max-steps", "30", "--log-every", "10", "--metrics", metrics, *args)
    expect(r.returncode == 0, f"{name}: failed: {r.stderr[-2000:]}")
    return (lines_of(metrics), r.stdout) if r.returncode == 0 else ([], r.stdout)


# The same job in both strategies logs the same losses and ends on the same parameters.
replicated, _ = train(2, "replicated")
ps, ps_out = train(2, "ps", "--strategy", "parameter-server")
if replicated and ps:
    loss_r = [x["loss"] for x in replicated if x["event"] == "step"]
    loss_p = [x["loss"] for x in ps if x["event"] == "step"]
    expect(len(loss_r) == 3 and all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(loss_r, loss_p)),
           f"losses differ: replicated {loss_r}, parameter-server {loss_p}")
    s = ps[-1]
    expect(s["strategy"] == "parameter-server" and replicated[-1]["strategy"] == "replicated", "strategy fields")
    expect(s["total_optimizer_state_bytes"] == replicated[-1]["optimizer_state_bytes"],
           f"owners' state {s['total_optimizer_state_bytes']} != one replica's {replicated[-1]['optimizer_state_bytes']}")
    expect(s["optimizer_state_bytes"] < replicated[-1]["optimizer_state_bytes"], "rank 0 holds all the state")
    expect(replicated[-1]["max_optimizer_state_bytes"] == replicated[-1]["optimizer_state_bytes"],
           "replicated: largest owner's state differs from its own")
    # The node's two ranks share one copy of the state (the sharded update): counted once.
    expect(replicated[-1]["sharded_update"] is True and
           replicated[-1]["total_optimizer_state_bytes"] == replicated[-1]["optimizer_state_bytes"],
           f"replicated, sharded: the node's state counted {replicated[-1]['total_optimizer_state_bytes']} "
           f"bytes, one copy is {replicated[-1]['optimizer_state_bytes']}")
    expect([x["rank"] for x in s["placement"]] == [0, 1], f"placement: {s['placement']}")
    expect(any(x["event"] == "placement" for x in ps), "no placement event in the metrics")
    expect("least-loaded" in ps_out, "the placement is not printed at start")
    # Both ranks share this host: the shared-memory transport, named at start and in the summary.
    expect("through shared memory" in s["transport"] and s["transport"] in ps_out,
           f"transport: {s['transport']}")
    expect(abs(s["test_accuracy"] - replicated[-1]["test_accuracy"]) < 1e-9, "test accuracy differs")

# Dedicated servers: rank 0 serves, ranks 1 and 2 train; same losses as replicated on 2 ranks.
served, _ = train(3, "served", "--strategy", "parameter-server", "--ps-ranks", "1")
if served and replicated:
    s = served[-1]
    expect(s["server_ranks"] == [0] and s["workers"] == 2 and s["global_batch"] == 64, f"servers: {s}")
    loss_s = [x["loss"] for x in served if x["event"] == "step"]
    loss_r = [x["loss"] for x in replicated if x["event"] == "step"]
    expect(all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(loss_r, loss_s)),
           f"dedicated servers: losses {loss_s} vs replicated {loss_r}")

# Variable averages in both strategies: an averaged accuracy next to the raw one.
for strategy in ("replicated", "parameter-server"):
    ema, _ = train(2, f"ema-{strategy}", "--strategy", strategy, "--ema-decay", "0.9")
    if ema:
        evals = [x for x in ema if x["event"] == "eval"]
        expect(len(evals) == 1 and 0.3 < evals[0]["test_accuracy_ema"] <= 1.0, f"{strategy}: eval lines {evals}")
        expect(ema[-1]["test_accuracy_ema"] == evals[-1]["test_accuracy_ema"], f"{strategy}: summary ema")

# Errors, on every rank, naming the option.
for np, args, text in [
        (2, ["--strategy", "gossip"], "--strategy"),
        (2, ["--strategy", "parameter-server", "--ps-ranks", "2"], "--ps-ranks 2"),
        (1, ["--strategy", "parameter-server", "--ps-ranks", "1"], "--ps-ranks 1"),
        (2, ["--ps-ranks", "1"], "--strategy parameter-server"),
        (2, ["--strategy", "parameter-server", "--allreduce", "ring"], "--allreduce"),
        (2, ["--strategy", "parameter-server", "--groups", "0;1"], "--groups"),
        (2, ["--ema-decay", "1"], "--ema-decay 1")]:
    r = run(np, "--max-steps", "2", *args)
    if "--strategy" in args and "gossip" in args:
        # CLI11 rejects it while parsing, on every rank, before MPI work starts.
        expect(r.returncode != 0 and "gossip" in r.stderr, f"unknown strategy accepted: {r.stderr[-500:]}")
        continue
    expect_error_on_every_rank(r, np, text, " ".join(args))

if failures:
    print("\n".join(failures))
    print(f"the runs' files are kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("strategy test: all checks passed")
