#!/usr/bin/python3
"""Plot a tptrain run's metrics.jsonl to a PNG.

    /usr/bin/python3 io/plot_metrics.py RUN_DIR_or_metrics.jsonl [MORE ...] [-o out.png]
                                        [--title TEXT] [--label NAME ...]

Reads the JSON lines that rank 0 writes to <run.dir>/metrics.jsonl (step, loss, lr, grad_norm,
tokens_per_s, and eval_loss on evaluation steps) and draws three panels that share the step
axis: training loss with the evaluation loss as markers (top), learning rate (middle), gradient
norm (bottom). Several runs (e.g. the same deck in fp32 and bf16) are drawn together, one
colour each, named by --label (default: their paths). Without -o the PNG goes next to the
(first) metrics file as metrics.png.

Needs Debian's python3-matplotlib (apt-get install python3-matplotlib); it uses the Agg
backend, so no display is needed. Exit status: 0 on success, 1 on a missing, empty or
unreadable metrics file, 2 on bad arguments.
"""

import argparse
import json
import math
import os
import sys


def fail(message):
    print(f"plot_metrics.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def metrics_path(arg):
    """The metrics file named by arg: a run directory or the file itself."""
    if os.path.isdir(arg):
        path = os.path.join(arg, "metrics.jsonl")
        if not os.path.exists(path):
            fail(f"{arg} is a directory without metrics.jsonl (is it a run.dir?)")
        return path
    if not os.path.exists(arg):
        fail(f"no such file or directory: {arg}")
    return arg


def read_records(path):
    """Records by step (a step logged twice, e.g. by a resumed run, keeps its last record)."""
    by_step = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            last = number == len(lines)
            what = "a truncated last line (a run still writing, or killed)" if last else "invalid JSON"
            print(f"plot_metrics.py: warning: {path}:{number}: skipping {what}: {e.msg}",
                  file=sys.stderr)
            continue
        if not isinstance(rec, dict) or "step" not in rec:
            print(f"plot_metrics.py: warning: {path}:{number}: skipping a record without a step",
                  file=sys.stderr)
            continue
        by_step[rec["step"]] = rec
    if not by_step:
        fail(f"{path} holds no metrics records (empty file: has the run logged a step yet?)")
    return [by_step[s] for s in sorted(by_step)]


def series(records, key):
    """(steps, values) of the records that have a finite number under key."""
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def main():
    parser = argparse.ArgumentParser(
        description="Plot loss/eval_loss, lr and grad_norm of a tptrain metrics.jsonl to a PNG.")
    parser.add_argument("sources", nargs="+", metavar="source",
                        help="run directory (run.dir) or its metrics.jsonl; several are overlaid")
    parser.add_argument("-o", "--output", help="PNG to write (default: metrics.png next to the "
                                               "first metrics file)")
    parser.add_argument("--title", help="figure title (default: the metrics file's path)")
    parser.add_argument("--label", action="append", default=[],
                        help="legend name of each source, in order (default: its path)")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.sources):
        parser.error(f"{len(args.label)} --label for {len(args.sources)} sources: give one per source")

    paths = [metrics_path(src) for src in args.sources]
    runs = [read_records(path) for path in paths]
    labels = args.label or (paths if len(paths) > 1 else [""])
    path, records = paths[0], runs[0]
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "metrics.png")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        fail("matplotlib is missing: install python3-matplotlib (apt-get install "
             "python3-matplotlib) and run this script with /usr/bin/python3")

    fig, (ax_loss, ax_lr, ax_gn) = plt.subplots(3, 1, sharex=True, figsize=(9, 9),
                                                gridspec_kw={"height_ratios": [2, 1, 1]})
    fig.suptitle(args.title or ("  vs  ".join(paths) if len(paths) > 1 else path), fontsize=11)

    colours = ["tab:blue", "tab:red", "tab:green", "tab:purple", "tab:brown", "tab:gray"]
    summary = []
    for i, (recs, label) in enumerate(zip(runs, labels)):
        one = len(runs) == 1
        colour = colours[i % len(colours)]
        name = (label + " ") if label else ""
        xs, ys = series(recs, "loss")
        ax_loss.plot(xs, ys, color="tab:blue" if one else colour, linewidth=1.4, label=name + "train loss")
        ex, ey = series(recs, "eval_loss")
        if ex:
            ax_loss.plot(ex, ey, color="tab:orange" if one else colour, marker="o", markersize=5,
                         linewidth=1.0, linestyle="-" if one else "--", label=name + "eval loss")
        if ys or ey:
            last = f"train {ys[-1]:.4f}" if ys else ""
            if ey:
                last += f"{', ' if last else ''}eval {ey[-1]:.4f}"
            summary.append(name + last)
        xs, ys = series(recs, "lr")
        ax_lr.plot(xs, ys, color="tab:green" if one else colour, linewidth=1.4, label=label or None)
        xs, ys = series(recs, "grad_norm")
        ax_gn.plot(xs, ys, color="tab:red" if one else colour, linewidth=1.2, label=label or None)
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.legend(loc="upper right")
    if summary:
        ax_loss.set_title("last: " + "; ".join(summary), fontsize=9, loc="left")
    ax_lr.set_ylabel("learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax_gn.set_ylabel("gradient norm")
    ax_gn.set_xlabel("step")
    ax_gn.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    if len(runs) > 1:
        ax_gn.legend(loc="upper right")

    for ax in (ax_loss, ax_lr, ax_gn):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        fail(f"cannot write {out}: {e.strerror}")
    for p, recs in zip(paths, runs):
        print(f"wrote {out} ({len(recs)} records of {p}, steps {recs[0]['step']}..{recs[-1]['step']})"
              if len(runs) > 1 else
              f"wrote {out} ({len(recs)} records, steps {recs[0]['step']}..{recs[-1]['step']})")


if __name__ == "__main__":
    main()
