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

    def scaled(key):
        return key.startswith("loss_scale_log2")

    # (matches, source, y label, title, drawn only when); panels for what the runs hold.
    panels = [(losses, "steps", "loss", "training loss", None),
              (lambda k: k == "test_accuracy", "evals", "test accuracy", "test accuracy", None),
              (lambda k: k == "samples_per_s", "steps", "samples/s", "throughput", None),
              (lambda k: k == "allreduce_ms", "steps", "ms per step", "gradient communication time", None),
              # A run without loss scaling logs a scale of 2^0 throughout: nothing to show.
              (scaled, "steps", "log2 of the scale", "loss scale", lambda v: v != 0)]
    labels = run_labels(runs)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    series = []  # per panel: (panel, [(run index, key, points)])
    for panel in panels:
        matches, source, _, title, shown = panel
        found = []
        for i, run in enumerate(runs):
            keys = list(dict.fromkeys(k for x in run[source] for k in x if matches(k)))
            for key in keys:
                points = [(x["step"], x[key]) for x in run[source] if x.get(key) is not None]
                if points:
                    found.append((i, key, points))
        if found and shown and not any(shown(v) for _, _, points in found for _, v in points):
            found = []
        if not found:
            print(f"{title}: not drawn (nothing in these runs)")
            continue
        series.append((panel, found))
    # One cell per panel and one for the legend, which stays off the data.
    columns = 3
    rows = (len(series) + 1 + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(16, 4 * rows), squeeze=False)
    cells = list(axes.flat)
    keys_styled = {}
    for ((_, source, ylabel, title, _), found), ax in zip(series, cells):
        keys = list(dict.fromkeys(key for _, key, _ in found))
        drawn = []
        for i, key, points in found:
            style = styles[keys.index(key) % len(styles)] if len(keys) > 1 else "-"
            if len(keys) > 1:
                keys_styled[key] = style
            ax.plot(*zip(*points), color=colors[i % len(colors)], linestyle=style,
                    marker="o" if source == "evals" or len(points) < 30 else None, markersize=4)
            name = labels[i] if len(keys) == 1 else f"{labels[i]} {key}"
            drawn.append(f"{name} ({len(points)} points)")
        print(f"{title}: {', '.join(drawn)}")
        values = [v for _, _, points in found for _, v in points]
        if title == "test accuracy":
            # From a floor a person reads at a glance: a tenth of a point is not a collapse.
            bottom = max(0.0, int((min(values) - 0.05) * 10) / 10)
            top = min(1.0, max(values) + 0.02)
            ax.set_ylim(bottom, top)
            ax.yaxis.set_major_formatter(plt.matplotlib.ticker.PercentFormatter(1.0))
            print(f"test accuracy axis: {100 * bottom:.0f}% to {100 * top:.1f}%")
        elif title in ("throughput", "gradient communication time"):
            ax.set_ylim(bottom=0, top=max(values) * 1.1 if max(values) > 0 else 1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    legend = cells[len(series)]
    legend.axis("off")
    handles = [plt.matplotlib.lines.Line2D([], [], color=colors[i % len(colors)]) for i in range(len(runs))]
    names = list(labels)
    for key, style in keys_styled.items():
        handles.append(plt.matplotlib.lines.Line2D([], [], color="black", linestyle=style))
        names.append(key)
    legend.legend(handles, names, loc="center", fontsize=9, frameon=False)
    for ax in cells[len(series) + 1:]:
        ax.axis("off")
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
        import matplotlib.lines  # noqa: F401  (plt.matplotlib.lines, .ticker)
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        sys.exit(f"tower plot: {sys.executable} has no matplotlib; install python3-matplotlib "
                 "(scripts/setup-deps does) or set TOWER_PYTHON to a python that has it")
    if a.runs:
        plot_runs(a.runs, output, plt)
    else:
        plot_bench(a.bench, output, plt)
    print(f"tower plot: wrote {output}")


main()
