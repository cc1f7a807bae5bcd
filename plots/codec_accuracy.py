#!/usr/bin/env python3
"""Test accuracy per epoch for each codec pair, mean and spread over seeds.

Reads the run files of experiments/codec-accuracy/run.sh (HDF5 /eval only)
and writes codec-accuracy.png next to them, plus a table: final mean test
accuracy of each codec pair and its difference to uncompressed (none:none).

    /usr/bin/python3 plots/codec_accuracy.py runs/codec-accuracy
"""
import collections
import glob
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_evals(path):
    try:
        f = h5py.File(path, "r")
    except OSError:
        f = h5py.File(path, "r", swmr=True)
    with f:
        if "eval" not in f:
            return None
        ev = f["eval"][:]
    return {int(e["epoch"]): 100.0 * float(e["accuracy"]) for e in ev}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    runs = collections.defaultdict(list)  # "act/grad" -> [ {epoch: acc} per seed ]
    for path in sorted(glob.glob(os.path.join(folder, "*_s*.h5"))):
        name = os.path.basename(path)[:-3]
        pair, _, _seed = name.rpartition("_s")
        evals = read_evals(path)
        if evals:
            runs[pair.replace("_", "/")].append(evals)
    if not runs:
        sys.exit(f"codec_accuracy.py: no run files with /eval in {folder}")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    final = {}
    for pair, seeds in runs.items():
        epochs = sorted(set.intersection(*(set(s) for s in seeds)))
        acc = np.array([[s[e] for e in epochs] for s in seeds])
        mean, lo, hi = acc.mean(0), acc.min(0), acc.max(0)
        ax.plot(epochs, mean, marker="o", label=f"{pair} ({len(seeds)} seeds)")
        ax.fill_between(epochs, lo, hi, alpha=0.15)
        final[pair] = (mean[-1], acc[:, -1].std(), len(seeds), epochs[-1])
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%), mean; band: min..max over seeds")
    ax.set_title("LeNet-5 / Fashion-MNIST, 4 pipeline stages: codecs (activations/gradients)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(folder, "codec-accuracy.png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    base = final.get("none/none")
    print(f"{'codec (act/grad)':<20} {'epochs':>6} {'seeds':>5} {'mean test acc':>14} "
          f"{'std':>6} {'vs none':>8}")
    for pair, (m, sd, n, ep) in sorted(final.items(), key=lambda kv: -kv[1][0]):
        diff = f"{m - base[0]:+.2f}" if base else "n/a"
        print(f"{pair:<20} {ep:>6} {n:>5} {m:>13.2f}% {sd:>6.2f} {diff:>8}")


if __name__ == "__main__":
    main()
