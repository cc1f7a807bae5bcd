#!/usr/bin/python3
"""How well a layer's back-to-back host time repeats in another context: the
same layer and batch timed by a host corpus (another corpus, other
neighbours, another run) against the median host time of the profiling sets
timed on the base host. That is the ceiling of any model of the host time
from the layer descriptor alone; the sets' own repeatability (the same layer
at the same place of the same corpus, `baton predictor eval`) is higher.
With DUMP (`baton predictor eval --dump DUMP`), also the host model's
out-of-fold prediction against the same medians, on the same pairs.
Not part of baton (docs/predictor.md, "Small products and the dense layers").

usage: experiments/predictor/cross_context.py [DIR] [DUMP]
Needs python3-h5py (Debian package).
"""
import collections
import csv
import glob
import os
import statistics
import sys

import h5py

DIR = sys.argv[1] if len(sys.argv) > 1 else "data/predictor/hosts/intel-xeon-skx"
DUMP = sys.argv[2] if len(sys.argv) > 2 else None


def rows(path):
    f = h5py.File(path, "r")
    keys = [(s.decode(), int(b)) for s, b in zip(f["spec"][:], f["batch"][:])]
    src = [s.decode() for s in f["source"][:]]
    return f, keys, src, f["host_fwd"][:], f["host_bwd"][:]


def base_host_sets():
    for path in sorted(glob.glob(os.path.join(DIR, "*.h5"))):
        name = os.path.basename(path)
        if name.startswith("corpus-") or name.startswith("host-"):
            continue  # host corpora and real host variants (other kernels)
        yield path


times = collections.defaultdict(lambda: ([], []))
source = {}
for path in base_host_sets():
    f, keys, src, hf, hb = rows(path)
    for k, s, a, b in zip(keys, src, hf, hb):
        times[k][0].append(a), times[k][1].append(b)
        source[k] = s
median = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in times.items()}

model = {}
if DUMP:
    for r in csv.DictReader(open(DUMP)):
        if r["set"] == "host":
            model[(r["spec"], int(r["batch"]))] = (float(r["model_host_fwd"]),
                                                   float(r["model_host_bwd"]))

pairs = collections.defaultdict(lambda: [0, 0, 0])
for path in sorted(glob.glob(os.path.join(DIR, "corpus-*.h5"))):
    f, keys, src, hf, hb = rows(path)
    for k, a, b in zip(keys, hf, hb):
        if k not in median:
            continue
        kind = k[0].split("@")[0]
        for p, t in enumerate((a, b)):
            m = median[k][p]
            if not (t > 0 and m > 0):
                continue
            for group in (kind, kind + " (" + ("random" if source[k] == "random" else "zoo+probe") + ")"):
                e = pairs[group]
                e[0] += 1
                e[1] += abs(t / m - 1) <= 0.1
                if k in model:
                    e[2] += abs(model[k][p] / m - 1) <= 0.1

print(f"{DIR}: corpus rows of layers the sets also time, against the sets' median host time")
print(f"{'kind':28s} {'pairs':>6s} {'corpus within 10%':>18s}" + (f" {'host model within 10%':>22s}" if model else ""))
for g, (n, ok, mok) in sorted(pairs.items()):
    line = f"{g:28s} {n:6d} {100.0 * ok / n:17.1f}%"
    if model:
        line += f" {100.0 * mok / n:21.1f}%"
    print(line)
