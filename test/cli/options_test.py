#!/usr/bin/env python3
"""Checks how tower's command line reads: range errors in tower's words, and every option's
default in `tower <command> --help`. No MPI is started: parsing comes first. Usage: options_test.py TOWER"""
import re
import subprocess
import sys

tower = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([tower, *args], capture_output=True, text=True, timeout=60)


def expect(cond, what):
    if not cond:
        failures.append(what)


# A value out of range names the option, the value and what to give instead, on one error line.
range_errors = [
    (["train", "--batch", "0"], "error: --batch: 0 is out of range; give 1 or more"),
    (["train", "--batch", "2.5"], "error: --batch: '2.5' is not an integer; give 1 or more"),
    (["train", "--max-steps", "-3"], "error: --max-steps: -3 is out of range; give 0 or more"),
    (["train", "--lr", "-1"], "error: --lr: -1 is out of range; give a number above 0"),
    # CLI11's own check lets NaN through (every comparison with it is false).
    (["train", "--lr", "nan"], "error: --lr: nan is out of range; give a number above 0"),
    (["train", "--fusion-mb", "-1"], "error: --fusion-mb: -1 is out of range; give a number of 0 or more"),
    (["bench", "--iters", "0"], "error: --iters: 0 is out of range; give 1 or more"),
    (["info", "--ranks-per-node", "0"], "error: --ranks-per-node: 0 is out of range; give 1 or more"),
]
for args, message in range_errors:
    r = run(*args)
    expect(r.returncode != 0, f"{' '.join(args)} was accepted")
    expect(r.stderr.startswith(message + "\n"), f"{' '.join(args)}: expected '{message}', got: {r.stderr!r}")
    expect("not in range" not in r.stderr and "1797693" not in r.stderr,
           f"{' '.join(args)}: CLI11's raw range message leaked: {r.stderr!r}")
    expect(f"See '{tower} {args[0]} --help'" in r.stderr, f"{' '.join(args)}: no pointer to --help: {r.stderr!r}")

# In range still parses: --help after valid values prints help and exits 0.
r = run("train", "--batch", "1", "--lr", "1e-3", "--max-steps", "0", "--help")
expect(r.returncode == 0, f"valid values were refused: {r.stderr!r}")


def help_entries(command):
    """(option names, TYPE or '', description) for each option of `tower COMMAND --help`."""
    r = run(command, "--help")
    expect(r.returncode == 0, f"{command} --help failed: {r.stderr!r}")
    entries, current = [], None
    for line in r.stdout.splitlines():
        if re.match(r"^  \S", line):
            current = [line.strip()]
            entries.append(current)
        elif current is not None and re.match(r"^\s{4,}\S", line):
            current.append(line.strip())
        else:
            current = None
    parsed = []
    for parts in entries:
        text = " ".join(parts)
        m = re.match(r"^(\S+)(?: ([A-Z]+\S*))?\s+(.*)$", text)
        if m:
            parsed.append((m.group(1), m.group(2) or "", m.group(3)))
    return parsed


defaults_seen = {}
for command in ["train", "bench", "info"]:
    entries = help_entries(command)
    expect(len(entries) > 2, f"{command} --help lists no options")
    for names, type_name, description in entries:
        if not type_name:
            continue  # a flag: off unless given
        expect("=" not in type_name, f"{command} {names}: default still beside the type: {type_name}")
        m = re.search(r"\[default: ([^\]]*)\]$", description)
        expect(m is not None or "default" in description,
               f"{command} --help: {names} does not show its default: {description!r}")
        if m:
            defaults_seen[(command, names)] = m.group(1)

for key, value in [(("train", "--batch"), "128"), (("train", "--lr"), "0.05"), (("train", "--overlap"), "true"),
                   (("train", "--groups"), "none"), (("train", "--strategy"), "replicated"),
                   (("bench", "--iters"), "20"), (("bench", "-b,--min-bytes"), "8"),
                   (("info", "--device"), "auto")]:
    expect(defaults_seen.get(key) == value, f"{key[0]} --help: {key[1]} shows default "
           f"{defaults_seen.get(key)!r}, expected {value!r}")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
