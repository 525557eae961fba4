#!/usr/bin/python3
"""tower-plot: draws tower's metrics files (tower train --metrics) and bench rows (tower bench --json)
into a PNG with matplotlib. `tower plot` runs it; it can also be run by hand:
  tower-plot.py RUN.jsonl [RUN2.jsonl ...] [-o FILE.png]
  tower-plot.py --bench BENCH.jsonl [--bench OTHER.jsonl] [-o FILE.png]"""
import argparse
import itertools
import json
import os
import sys

# The options that tell runs apart in a legend, in the order they are named.
LABEL_KEYS = ["model", "strategy", "allreduce", "world_size", "workers", "global_batch", "accumulate",
              "precision", "compress", "ema_decay"]


def read_json_lines(path):
    """One object per line; a line cut short (a run killed while writing) or blank is skipped."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    if not rows and path.endswith(".json"):
        with open(path) as f:
            text = f.read().strip()
        if text.startswith("["):
            rows = json.loads(text)
    return rows


def open_run(path):
    """A metrics file, or its .partial twin when the run has not finished (or was killed)."""
    if not os.path.exists(path) and os.path.exists(path + ".partial"):
        return read_json_lines(path + ".partial"), True
    return read_json_lines(path), False


def label_text(key, value):
    names = {"world_size": "np", "workers": "workers ", "global_batch": "batch ", "accumulate": "accumulate ",
             "ema_decay": "ema "}
    return f"{names.get(key, '')}{value}"


def run_labels(runs):
    """Legend entries: the options whose values differ between the runs (all of them for one run)."""
    summaries = [r["summary"] for r in runs]
    keys = [k for k in LABEL_KEYS if any(k in s for s in summaries)]
    if len(runs) > 1:
        keys = [k for k in keys if len({json.dumps(s.get(k)) for s in summaries}) > 1]
    labels = []
    for r in runs:
        parts = [label_text(k, r["summary"][k]) for k in keys if k in r["summary"]]
        label = " ".join(parts) if parts else os.path.basename(r["path"])
        labels.append(label + (" (unfinished)" if r["partial"] else ""))
    if len(set(labels)) < len(labels):
        labels = [f"{label} [{os.path.basename(r['path'])}]" for label, r in zip(labels, runs)]
    return labels


def plot_runs(paths, output, plt):
    runs = []
    for path in paths:
        rows, partial = open_run(path)
        summary = next((x for x in reversed(rows) if x.get("event") == "summary"), {})
        runs.append({"path": path, "partial": partial or not summary, "summary": summary,
                     "steps": [x for x in rows if x.get("event") == "step"],
                     "evals": [x for x in rows if x.get("event") == "eval"]})
        if not runs[-1]["steps"]:
            sys.exit(f"tower plot: {path} holds no step lines; pass metrics files (tower train --metrics, "
                     f"examples/gan's metrics.jsonl)")
    # A panel draws every key it matches: "loss" for tower train, "loss_G" and "loss_D" for a
    # program with several optimizers (examples/gan), and each optimizer's loss scale.
    def losses(key):
        return key == "loss" or (key.startswith("loss_") and not key.startswith("loss_scale"))

    panels = [(losses, "steps", "loss", "training loss"),
              (lambda k: k == "test_accuracy", "evals", "test accuracy", "test accuracy"),
              (lambda k: k == "samples_per_s", "steps", "samples/s", "throughput"),
              (lambda k: k == "allreduce_ms", "steps", "ms per step", "gradient communication time"),
              (lambda k: k.startswith("loss_scale_log2"), "steps", "log2 of the scale", "loss scale")]
    figure, axes = plt.subplots(2, 3, figsize=(16, 8))
    axes.flat[-1].axis("off")
    for (matches, source, ylabel, title), ax in zip(panels, axes.flat):
        drawn = []
        for run, label in zip(runs, run_labels(runs)):
            keys = list(dict.fromkeys(k for x in run[source] for k in x if matches(k)))
            for key in keys:
                points = [(x["step"], x[key]) for x in run[source] if x.get(key) is not None]
                if not points:
                    continue
                name = label if len(keys) == 1 else f"{label} {key}"
                ax.plot(*zip(*points), marker="o" if source == "evals" or len(points) < 30 else None,
                        markersize=4, label=name)
                drawn.append(f"{name} ({len(points)} points)")
        print(f"{title}: {', '.join(drawn) or 'nothing'}")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(drawn) > 1 and ax is not axes.flat[0]:
            ax.legend(fontsize=8)
        if source == "evals" and not any(r["evals"] for r in runs):
            ax.text(0.5, 0.5, "no evaluation in these runs", ha="center", va="center", transform=ax.transAxes)
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("tower plot: " + ", ".join(os.path.basename(r["path"]) for r in runs), fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def size_text(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def plot_bench(paths, output, plt):
    figure, ax = plt.subplots(figsize=(10, 6))
    colors = itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    titles = set()
    for path in paths:
        rows = [r for r in read_json_lines(path) if "busbw_gbps" in r]
        if not rows:
            sys.exit(f"tower plot: {path} holds no bench rows; pass a file written by tower bench --json")
        prefix = f"{os.path.basename(path)}: " if len(paths) > 1 else ""
        for mode in dict.fromkeys(r["mode"] for r in rows):
            # One colour per mode; in place dashed beside out of place solid.
            color = next(colors)
            for in_place in (False, True):
                points = sorted((r["bytes"], r["busbw_gbps"]) for r in rows
                                if r["mode"] == mode and bool(r.get("in_place")) == in_place)
                if points:
                    label = f"{prefix}{mode}{' (in place)' if in_place else ''}"
                    ax.plot(*zip(*points), marker="o", markersize=3, linestyle="--" if in_place else "-",
                            color=color, label=label)
                    print(f"busbw: {label} ({len(points)} points)")
        first = rows[0]
        titles.add(f"{first.get('collective', 'allreduce')} on {first.get('ranks', '?')} ranks, "
                   f"{first.get('dtype', '?')} {first.get('op', '')}")
    ax.set_xscale("log", base=2)
    ticks = sorted({r["bytes"] for p in paths for r in read_json_lines(p) if "bytes" in r})
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_text(t) for t in ticks], rotation=45, fontsize=8)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("tower bench: " + "; ".join(sorted(titles)))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="metrics files of tower train --metrics")
    parser.add_argument("--bench", action="append", default=[], help="JSON lines of tower bench --json")
    parser.add_argument("-o", "--output", help="PNG to write (default: the first input with .png)")
    a = parser.parse_args()
    if bool(a.runs) == bool(a.bench):
        parser.error("give metrics files, or --bench files, not both or neither")
    inputs = a.runs or a.bench
    for path in inputs:
        if not os.path.exists(path) and not os.path.exists(path + ".partial"):
            sys.exit(f"tower plot: {path} does not exist")
    output = a.output or os.path.splitext(inputs[0])[0] + ".png"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"tower plot: {sys.executable} has no matplotlib; install python3-matplotlib "
                 "(scripts/setup-deps does) or set TOWER_PYTHON to a python that has it")
    if a.runs:
        plot_runs(a.runs, output, plt)
    else:
        plot_bench(a.bench, output, plt)
    print(f"tower plot: wrote {output}")


main()
