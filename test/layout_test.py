#!/usr/bin/env python3
"""The tree's layering holds: each folder includes only the folders below it (base/ none of the
others; collectives/, optim/, models/ and data/ only base/; runtime/ none of cli/ or frameworks/; frameworks/ none of cli/), the public
strategy interface includes no strategy's engine, runtime/ keeps at most a dozen files at its
top level, no function body in runtime/ or cli/ runs past 60 lines (a function's braces stand
alone at the start of a line in this tree's style), and no string below cli/ names a command-line
flag: the library names its fields by id (`fusion_mb`), which each front end spells its own way.
Usage: layout_test.py SOURCE_ROOT"""
import os
import re
import sys

root = sys.argv[1]
allowed = {
    "base": {"base"},
    "collectives": {"base", "collectives"},
    "optim": {"base", "optim"},
    "models": {"base", "models"},
    "data": {"base", "data"},
    "runtime": {"base", "collectives", "optim", "models", "data", "runtime"},
    "frameworks": {"base", "collectives", "optim", "models", "data", "runtime", "frameworks"},
}
include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
failures = []
for folder, ok in allowed.items():
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        for name in names:
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                for top in include.findall(f.read()):
                    if top not in ok:
                        failures.append(f"{os.path.relpath(path, root)} includes {top}/, above {folder}/")

with open(os.path.join(root, "runtime/strategies/strategy.h")) as f:
    for line in f:
        if re.match(r'\s*#\s*include\s+"runtime/strategies/[a-z_]+/', line):
            failures.append(f"runtime/strategies/strategy.h, the public interface, includes an engine: {line.strip()}")

top = [n for n in os.listdir(os.path.join(root, "runtime")) if os.path.isfile(os.path.join(root, "runtime", n))]
if len(top) > 12:
    failures.append(f"runtime/ has {len(top)} files at its top level (at most 12): {sorted(top)}")

def sources(*folders):
    """(path relative to the root, its lines) of every C++ and CUDA source below `folders`."""
    for folder in folders:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".h", ".cpp", ".cu")):
                    path = os.path.join(dirpath, name)
                    with open(path) as f:
                        yield os.path.relpath(path, root), f.read().split("\n")


LONGEST = 60
for path, lines in sources("runtime", "cli"):
    opened = None
    for number, line in enumerate(lines, 1):
        if line == "{":
            opened = number
        elif line == "}" and opened is not None:
            if number - opened - 1 > LONGEST:
                failures.append(f"{path}:{opened}: a function of {number - opened - 1} lines (at most {LONGEST}): split it")
            opened = None

# Flags of other programs a message may tell a person to use.
FOREIGN_FLAGS = {"--gpus-per-task"}
literal = re.compile(r'"(?:[^"\\\n]|\\.)*"')
flag = re.compile(r"--[a-z][a-z-]*[a-z]")
for path, lines in sources("base", "collectives", "optim", "models", "data", "runtime", "frameworks"):
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("//"):
            continue
        for text in literal.findall(line):
            for found in sorted(set(flag.findall(text)) - FOREIGN_FLAGS):
                failures.append(f"{path}:{number}: names the flag {found}; name the field as "
                                f"`{found[2:].replace('-', '_')}`")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("layout test: every folder includes only the folders below it; no function in runtime/ or cli/ over "
      f"{LONGEST} lines; no flag named below cli/")
