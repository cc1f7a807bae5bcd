#!/usr/bin/python3
"""Is a host variant's layer-by-layer ratio to the base host a property of
its kernels, or timing noise? Compares log(variant time / base host time)
per layer between two timings of the same corpus: the sets of DIR_A and a
re-timing in DIR_B (docs/predictor.md, "How far from the targets", item 4).

usage: experiments/predictor/variant_repeat.py DIR_A DIR_B [VARIANT]
  VARIANT: the set's name (default host-haswell); both directories need
  host.h5 and VARIANT.h5 of the same corpus (same --seed, --random, --zoo).
  Re-timing, e.g.: baton profile --device host --out B/host.h5 --repeats 4
  --random 700 --passes 3 --quiet, and the same with --arch haswell.
Prints, per pass and kind: the spread (std) of the log ratio in each
timing, their correlation, the spread of the difference, the re-timing
noise of each set alone, and the share of layers whose ratio in B is within
10% of its ratio in A."""
import sys

import h5py
import numpy as np


def load(path):
    with h5py.File(path, "r") as f:
        spec = [s.decode() if isinstance(s, bytes) else s for s in f["spec"][:]]
        return spec, {p: f[p][:] for p in ("fwd", "bwd")}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = sys.argv[1], sys.argv[2]
    var = sys.argv[3] if len(sys.argv) > 3 else "host-haswell"
    spec, ha = load(f"{a}/host.h5")
    sets = {"ha": ha, "va": load(f"{a}/{var}.h5")[1]}
    for key, path in (("hb", f"{b}/host.h5"), ("vb", f"{b}/{var}.h5")):
        s, t = load(path)
        if s != spec:
            sys.exit(f"{path}: not the corpus of {a}/host.h5 (profile it with the same options)")
        sets[key] = t
    kind = np.array([s.split("@")[0] for s in spec])
    print(f"{var} / host, {a} (A) against {b} (B)")
    print("pass kind     rows  sd A   sd B   corr   sd B-A  noise host  noise var  B within 10% of A")
    for p in ("fwd", "bwd"):
        ra = np.log(sets["va"][p] / sets["ha"][p])
        rb = np.log(sets["vb"][p] / sets["hb"][p])
        nh = np.log(sets["hb"][p] / sets["ha"][p])
        nv = np.log(sets["vb"][p] / sets["va"][p])
        for k in ("conv2d", "dense", "all"):
            m = kind == k if k != "all" else np.ones(len(kind), bool)
            print(f"{p}  {k:8s} {m.sum():5d}  {ra[m].std():.3f}  {rb[m].std():.3f}  "
                  f"{np.corrcoef(ra[m], rb[m])[0, 1]:.3f}  {(rb - ra)[m].std():.3f}   "
                  f"{nh[m].std():.3f}       {nv[m].std():.3f}      "
                  f"{100 * np.mean(np.abs(rb - ra)[m] < np.log(1.1)):.1f}%")


if __name__ == "__main__":
    main()
