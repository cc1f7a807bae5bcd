#!/usr/bin/python3
"""How far a small neural network gets as the host-time model of one layer
kind, on the same rows as `baton predictor eval`'s host model (docs/predictor.md,
"How far from the targets", item 2). Not part of baton: a probe of whether
the model family, rather than the data, limits the host model.

Targets: the median host time over the base-host profiling sets of DIR (the
"host model" column of `baton predictor eval`'s by-kind table), forward and
backward, in log space. Training rows: every host corpus row whose layer the
sets do not hold, plus the other folds' set layers (5 folds over layers).
Network: shape features (log GEMM sizes, FLOPs, batch, spatial size,
channels, kernel, stride, bytes; block remainders) -> 128 -> 128 -> 2, SiLU,
Huber loss, Adam with a cosine schedule, a mean of ENSEMBLE nets.

usage: experiments/predictor/mlp_probe.py [KIND] [ENSEMBLE] [ITERATIONS] [DIR]
       KIND: conv2d (default), dwconv2d or dense
Needs python3-h5py and python3-torch (Debian packages).
"""
import glob
import re
import sys

import h5py
import numpy as np
import torch

KIND = sys.argv[1] if len(sys.argv) > 1 else "conv2d"
ENSEMBLE = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ITERATIONS = int(sys.argv[3]) if len(sys.argv) > 3 else 8000
DIR = sys.argv[4] if len(sys.argv) > 4 else "data/predictor/hosts/amd-epyc-skx"


def features(spec, batch):
    m = re.match(r"(\w+)@(\d+)x(\d+)x(\d+):?(.*)", spec)
    if not m or m.group(1) != KIND:
        return None
    H, W, C = map(int, m.group(2, 3, 4))
    kv = dict(re.findall(r"(\w+)=([\dx]+)", m.group(5)))
    if KIND == "dense":
        N, K, M = int(kv["units"]), H * W * C, batch
        Ho = Wo = kh = kw = s = 1
    else:
        kh, kw = map(int, kv["k"].split("x"))
        s, pad = int(kv["s"]), int(kv["p"])
        N = int(kv.get("out", C))
        Ho, Wo = (H + 2 * pad - kh) // s + 1, (W + 2 * pad - kw) // s + 1
        K = kh * kw * (C if KIND == "conv2d" else 1)
        M = batch * Ho * Wo
    x = [np.log(v) for v in (M, N, K, 2.0 * M * N * K, batch, H, W, C, Ho * Wo,
                             kh * kw + 0.0, s + 0.0, M * K + N * K + M * N)]
    x += [N % 16 / 16, N % 64 / 64, C % 16 / 16, C % 64 / 64, Wo % 6 / 6, M % 32 / 32,
          float(kh == 1), float(s == 2), float(C == 3)]
    return x


def rows(path):
    f = h5py.File(path, "r")
    return zip((s.decode() for s in f["spec"][:]), (int(b) for b in f["batch"][:]),
               f["host_fwd"][:], f["host_bwd"][:])


sets = [p for p in glob.glob(DIR + "/*.h5") if "/corpus-" not in p and "/host-" not in p]
times = {}
for p in sets:
    for spec, b, hf, hb in rows(p):
        times.setdefault((spec, b), []).append((hf, hb))
ev = [(k, features(*k), np.median([v[0] for v in t]), np.median([v[1] for v in t]))
      for k, t in times.items()]
ev = [e for e in ev if e[1] is not None]
corpus = [(features(spec, b), hf, hb) for p in glob.glob(DIR + "/corpus-*.h5")
          for spec, b, hf, hb in rows(p) if (spec, b) not in times]
corpus = [c for c in corpus if c[0] is not None]
Xc = np.array([c[0] for c in corpus])
Yc = np.log(np.array([[c[1], c[2]] for c in corpus]))
Xe = np.array([e[1] for e in ev])
Ye = np.log(np.array([[e[2], e[3]] for e in ev]))
fold = np.random.default_rng(0).integers(0, 5, len(ev))
pred = np.zeros_like(Ye)
for k in range(5):
    train = fold != k
    X, Y = np.vstack([Xc, Xe[train]]), np.vstack([Yc, Ye[train]])
    mu, sd, ym = X.mean(0), X.std(0) + 1e-9, Y.mean(0)
    Xt = torch.tensor((X - mu) / sd, dtype=torch.float32)
    Yt = torch.tensor(Y - ym, dtype=torch.float32)
    Xh = torch.tensor((Xe[~train] - mu) / sd, dtype=torch.float32)
    for e in range(ENSEMBLE):
        torch.manual_seed(100 * k + e)
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 128), torch.nn.SiLU(),
                                  torch.nn.Linear(128, 128), torch.nn.SiLU(),
                                  torch.nn.Linear(128, 2))
        opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-5)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, ITERATIONS)
        for _ in range(ITERATIONS):
            i = torch.randint(0, len(Xt), (256,))
            loss = torch.nn.functional.huber_loss(net(Xt[i]), Yt[i], delta=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            pred[~train] += (net(Xh).numpy() + ym) / ENSEMBLE
err = np.abs(np.exp(pred - Ye) - 1)
print(f"{KIND}: {len(ev)} set layers, {len(corpus)} corpus rows, {ENSEMBLE} net(s) x "
      f"{ITERATIONS} steps")
print(f"within 10%: forward {100 * (err[:, 0] < .1).mean():.1f}%, backward "
      f"{100 * (err[:, 1] < .1).mean():.1f}%, both {100 * (err < .1).mean():.1f}%; "
      f"within 5%: both {100 * (err < .05).mean():.1f}%")
