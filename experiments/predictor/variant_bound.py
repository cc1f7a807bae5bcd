#!/usr/bin/python3
"""How well can any smooth law of the GEMM shapes map the base host's times
to a real host variant's (other BLIS kernels, two threads)? An upper bound
for the few-shot head of real CPUs (docs/predictor.md, "How far from the
targets", item 4): the laws below are fitted on *all* of a variant's
convolution and dense rows, against the same rows of the base host's set,
and scored leave-one-out (exact for least squares). No probe set of 10
layers can do better than a law fitted on all rows.

usage: experiments/predictor/variant_bound.py [SETS_DIR]
  (default: data/predictor/hosts/amd-epyc-skx when it exists, else data/predictor)
Reads host.h5 and host-*.h5 (h5py); prints, per variant and law, the share of
rows (forward and backward) within 10% of the variant's time."""
import os
import re
import sys

import h5py
import numpy as np

CONV = re.compile(r"conv2d@(\d+)x(\d+)x(\d+):out=(\d+),k=(\d+)x(\d+),s=(\d+),p=(\d+)$")
DENSE = re.compile(r"dense@1x1x(\d+):units=(\d+)$")


def waste(n, block):
    return np.log(np.ceil(n / block) * block / n)


def gemm_terms(m, n, k):
    f = m * n * k
    return [waste(m, 32), waste(m, 6), waste(n, 16), waste(n, 12), np.log(m), np.log(n),
            np.log(k), np.log(f), np.log(f) ** 2]


def row_gemms(spec, batch):
    """(path, [forward GEMM], [input-gradient GEMM, weight-gradient GEMM]) or None."""
    m = DENSE.match(spec)
    if m:
        k, n = map(int, m.groups())
        return "dense", [(batch, n, k)], [(batch, k, n), (k, n, batch)]
    m = CONV.match(spec)
    if not m:
        return None
    h, w, c, o, kh, kw, s, p = map(int, m.groups())
    oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    if kh == 1 and kw == 1 and s == 1 and p == 0:
        path = "conv1x1"
    elif s != 1:
        path = "im2col"
    else:  # stride 1, k > 1: our own direct kernel (input channels >= 4 forward,
        # output channels >= 16 for the input gradient) or the thin one
        return f"direct-{int(c >= 4)}{int(o >= 16)}", [], []
    mm, kk = batch * oh * ow, kh * kw * c
    return path, [(mm, o, kk)], [(mm, kk, o), (kk, o, mm)]


def loo_within(x, y, tol=np.log(1.1)):
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ beta
    hat = np.einsum("ij,jk,ik->i", x, np.linalg.pinv(x.T @ x), x)
    loo = r / np.clip(1 - hat, 1e-6, None)
    return 100 * np.mean(np.abs(loo) <= tol)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else (
        "data/predictor/hosts/amd-epyc-skx" if os.path.isdir("data/predictor/hosts/amd-epyc-skx")
        else "data/predictor")
    base = h5py.File(os.path.join(d, "host.h5"), "r")
    specs = [s.decode() for s in base["spec"][:]]
    batches = base["batch"][:]
    rows = [(i, row_gemms(s, b)) for i, (s, b) in enumerate(zip(specs, batches))]
    rows = [(i, g) for i, g in rows if g]
    paths = sorted({g[0] for _, g in rows})
    print(f"{d}: {len(rows)} convolution and dense rows x 2 passes; share within 10% "
          "(leave-one-out) of the variant's time, mapped from host.h5's")
    print(f"{'variant':16} {'one factor':>11} {'per path':>9} {'+ GEMM shapes':>14}")
    for name in sorted(f for f in os.listdir(d) if f.startswith("host-") and f.endswith(".h5")):
        var = h5py.File(os.path.join(d, name), "r")
        out = []
        for law in ("one", "path", "shape"):
            hits, total = 0.0, 0
            for q, key in enumerate(("fwd", "bwd")):
                x, y = [], []
                for i, (path, fwd, bwd) in rows:
                    feats = [1.0]
                    if law != "one":
                        feats += [float(path == p) for p in paths[1:]]
                    if law == "shape":
                        gemms = fwd if q == 0 else bwd
                        width = 9 * (1 if q == 0 else 2)
                        g = sum((gemm_terms(*mnk) for mnk in gemms), [])
                        feats += g if g else [0.0] * width
                    x.append(feats)
                    y.append(np.log(var[key][i] / base[key][i]))
                x, y = np.array(x), np.array(y)
                hits += loo_within(x, y) * len(y)
                total += len(y)
            out.append(hits / total)
        print(f"{name[:-3]:16} {out[0]:10.1f}% {out[1]:8.1f}% {out[2]:13.1f}%")


if __name__ == "__main__":
    main()
