#!/usr/bin/python3
"""Pipeline Gantt chart of one iteration and the loss curve of a baton run.

Reads the run's HDF5 log only (layout: docs/hdf5-schema.md) and writes two
PNGs: PREFIX-timeline.png (one row per rank: forward, backward, optimizer and
codec work on the device, sends and receives on a thinner lane below, each
compute bar labelled with its micro-batch) and PREFIX-loss.png (loss and
accuracy per iteration).

usage: plots/timeline.py RUN.h5 [--iteration N] [--out PREFIX]

Needs Debian's python3-h5py and python3-matplotlib (/usr/bin/python3). Works
on a run that is still going or was killed (opens it in SWMR-read mode).
"""
import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "optim": "#55a868",
    "encode": "#8172b3",
    "decode": "#937860",
    "send": "#5f5f5f",
    "recv": "#c8c8c8",  # waiting for a message, mostly
}
COMM = ("send", "recv")


def open_run(path):
    """A file whose writer died (or still runs) opens only in SWMR-read mode."""
    try:
        return h5py.File(path, "r")
    except OSError:
        return h5py.File(path, "r", swmr=True)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def kind_names(dataset):
    """{value: name} of the timeline's HDF5 enum."""
    mapping = h5py.check_enum_dtype(dataset.dtype["kind"])
    return {v: k for k, v in mapping.items()}


def pick_iteration(f, timeline, wanted):
    iterations = np.unique(timeline["iteration"])
    if len(iterations) == 0:
        sys.exit("timeline.py: the run has no /timeline events")
    if wanted is not None:
        if wanted not in iterations:
            sys.exit(f"timeline.py: iteration {wanted} is not in the log "
                     f"(logged: {iterations[0]}..{iterations[-1]})")
        return wanted
    # The last iteration with a /train row is complete; later events may not be.
    train = f["train"][:]
    done = np.intersect1d(iterations, train["iteration"]) if len(train) else iterations
    return int(done[-1] if len(done) else iterations[-1])


def time_unit(span):
    if span >= 1:
        return 1.0, "s"
    if span >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def device_names(f):
    return {int(r["rank"]): text(r["profile"]) for r in f["devices"][:]}


def busy_fraction(ev, names, rank, t0, t1):
    """Union of the rank's compute intervals over [t0, t1]."""
    spans = sorted((max(e["t_start"], t0), e["t_end"]) for e in ev
                   if e["rank"] == rank and names[e["kind"]] not in COMM)
    busy, end = 0.0, -np.inf
    for s, t in spans:
        if s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    return busy / (t1 - t0) if t1 > t0 else 0.0


def draw_bar(ax, e, name, y, t0, scale, label_min):
    x, w = (e["t_start"] - t0) * scale, (e["t_end"] - e["t_start"]) * scale
    comm = name in COMM
    h, yc = (0.22, y + 0.3) if comm else (0.5, y - 0.1)
    # A receive is mostly waiting; a send in flight at the same time is drawn on top.
    ax.broken_barh([(x, w)], (yc - h / 2, h), facecolors=COLOURS.get(name, "#999999"),
                   edgecolor="white" if not comm else "none", linewidth=0.5,
                   zorder=1 if name == "recv" else 2)
    if not comm and e["micro"] >= 0 and w >= label_min:
        ax.text(x + w / 2, yc, str(e["micro"]), ha="center", va="center", fontsize=8,
                color="white", zorder=3)


def gantt(f, path, iteration, out):
    tl = f["timeline"]
    names = kind_names(tl)
    allev = tl[:]
    ev = allev[allev["iteration"] == iteration]
    # Late stages start waiting for this iteration while the first stage still
    # finishes the previous one: the axis starts at the first compute op and
    # those waits are cut at 0.
    compute = np.isin(ev["kind"], [v for v, n in names.items() if n not in COMM])
    t0 = ev["t_start"][compute].min() if compute.any() else ev["t_start"].min()
    t1 = ev["t_end"].max()
    scale, unit = time_unit(t1 - t0)
    world = int(f.attrs["world_size"])
    ranks = sorted(set(range(world)) | set(int(r) for r in ev["rank"]))
    devices = device_names(f)
    fig, ax = plt.subplots(figsize=(12, 1.1 * len(ranks) + 1.4))
    label_min = (t1 - t0) * scale / 80  # no digits in slivers
    for e in ev:
        draw_bar(ax, e, names[e["kind"]], int(e["rank"]), t0, scale, label_min)
    ax.set_yticks(ranks)
    ax.set_yticklabels([f"rank {r}\n{devices.get(r, '?')}\n"
                        f"{100 * busy_fraction(ev, names, r, t0, t1):.0f}% busy" for r in ranks],
                       fontsize=8)
    ax.set_ylim(max(ranks) + 0.7, min(ranks) - 0.6)
    ax.set_xlim(0, (t1 - t0) * scale)
    ax.set_xlabel(f"time since the iteration's first compute op ({unit}, "
                  f"{text(f.attrs['clock'])} clock)")
    ax.set_title(f"{os.path.basename(path)}: iteration {iteration}, "
                 f"{text(f.attrs['schedule'])}, {world} ranks, "
                 f"{int(f.attrs['micro_batches'])} micro-batches "
                 "(numbers: micro-batch; thin lane: send/recv)", fontsize=10)
    present = {names[k] for k in np.unique(ev["kind"])}
    handles = [mpatches.Patch(color=c, label=k) for k, c in COLOURS.items() if k in present]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))  # room for the legend
    fig.savefig(out, dpi=120)
    plt.close(fig)


def loss_curve(f, path, out):
    train = f["train"][:]
    if len(train) == 0:
        print(f"timeline.py: {path} has no /train rows; no loss curve", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(train["iteration"], train["loss"], color=COLOURS["forward"], marker=".", label="loss")
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("loss (mean cross-entropy over the batch)", color=COLOURS["forward"])
    acc = ax.twinx()
    acc.plot(train["iteration"], 100 * train["accuracy"], color=COLOURS["backward"], marker=".",
             label="accuracy")
    if "eval" in f and len(f["eval"]) > 0:  # test-set evaluations (newer files)
        ev = f["eval"][:]
        acc.plot(ev["iteration"], 100 * ev["accuracy"], color=COLOURS["backward"], marker="D",
                 linestyle="none", markersize=7, label="test accuracy")
        acc.legend(loc="lower right", fontsize=8)
    acc.set_ylabel("batch accuracy (%); diamonds: test set", color=COLOURS["backward"])
    ax.set_title(f"{os.path.basename(path)}: training loss and accuracy", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="run log (HDF5)")
    ap.add_argument("--iteration", type=int, help="iteration to draw (default: last complete)")
    ap.add_argument("--out", help="output prefix (default: RUN without .h5)")
    args = ap.parse_args()
    prefix = args.out or (args.run[:-3] if args.run.endswith(".h5") else args.run)
    try:
        f = open_run(args.run)
    except OSError as e:
        sys.exit(f"timeline.py: {args.run}: cannot open: {e}")
    with f:
        if "schema_version" not in f.attrs or "timeline" not in f:
            sys.exit(f"timeline.py: {args.run}: not a baton run log")
        if int(f.attrs["schema_version"]) != 1:
            sys.exit(f"timeline.py: {args.run}: schema_version {f.attrs['schema_version']}, "
                     "this script reads 1")
        if len(f["timeline"]) == 0:  # a single-process run logs no timeline
            print(f"timeline.py: {args.run} has no /timeline events; no Gantt chart",
                  file=sys.stderr)
        else:
            iteration = pick_iteration(f, f["timeline"], args.iteration)
            gantt(f, args.run, iteration, prefix + "-timeline.png")
            print(f"wrote {prefix}-timeline.png (iteration {iteration})")
        if loss_curve(f, args.run, prefix + "-loss.png"):
            print(f"wrote {prefix}-loss.png")


if __name__ == "__main__":
    main()
