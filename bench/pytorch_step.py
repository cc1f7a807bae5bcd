#!/usr/bin/env python3
"""PyTorch reference timings for one full training step of baton's models.

Purpose
-------
baton is a C11 DNN-training library. To tell whether its kernels are fast,
`baton bench step` results are compared against this script: the same
architecture, batch size, input shape and thread count, timed in PyTorch
(CPU, oneDNN/MKL-DNN backend). This script is the reference side of those
`baton bench step` comparisons; it never imports or runs baton itself.

A "training step" here is exactly what baton's step benchmark does:

    optimizer.zero_grad(set_to_none=False)   # gradients are zeroed, not freed
    logits = model(x)                         # forward, training mode
    loss = cross_entropy(logits, y)           # softmax + cross-entropy, mean
    loss.backward()
    optimizer.step()                          # SGD, momentum 0.9, wd 0

Each step is timed with time.perf_counter(); after --warmup untimed steps,
--repeats steps are timed and the median is reported (with min and max).

Throughput uses analytic FLOPs: forward FLOPs of convolution and dense
layers only (2 * multiply-accumulates; bias, activations, pooling, batch-norm
and the loss are not counted), and a training step is counted as 3x the
forward FLOPs (forward + gradient w.r.t. inputs + gradient w.r.t. weights).
The same convention is used by baton so the GFLOP/s numbers are comparable.

The architectures below must match baton's exactly (layer sizes, padding,
strides, bias=True on every convolution, no batch-norm in VGG). Weights use
PyTorch's default initialisation; timing does not depend on their values.

Usage
-----
    /usr/bin/python3 bench/pytorch_step.py --model vgg11 --batch 32 \\
        [--threads 1] [--repeats 20] [--warmup 3] \\
        [--layout nchw|channels_last|both] [--input 32x32x3]
    /usr/bin/python3 bench/pytorch_step.py --list [--input 28x28x1]

Output: one line per layout, e.g.

    pytorch 1.13.0a0 vgg11 batch 32 input 32x32x3 layout nchw threads 1: \
median step 312.4 ms (min 305.1, max 330.0), 94.2 GFLOP/s

followed by one machine-readable line for the faster layout:

    RESULT model=vgg11 batch=32 layout=best median_ms=312.4 best_layout=nchw ...
"""

import argparse
import gc
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10
MODELS = ("mlp", "lenet5", "vgg11", "vgg16", "resnet18", "mobilenetv2")


# --------------------------------------------------------------------------
# Shape tracking + analytic FLOP counting
# --------------------------------------------------------------------------

class Tracker:
    """Tracks the per-sample activation shape (C, H, W) while a model is
    built, and accumulates forward FLOPs (2 * MACs) of conv/dense layers."""

    def __init__(self, c, h, w):
        self.c, self.h, self.w = c, h, w
        self.flops = 0

    def shape(self):
        return (self.c, self.h, self.w)

    def set_shape(self, shape):
        self.c, self.h, self.w = shape

    def conv(self, cout, k, stride=1, pad=0, groups=1):
        cin = self.c
        ho = (self.h + 2 * pad - k) // stride + 1
        wo = (self.w + 2 * pad - k) // stride + 1
        assert ho >= 1 and wo >= 1, "input too small for this model"
        self.flops += 2 * cout * ho * wo * (cin // groups) * k * k
        self.c, self.h, self.w = cout, ho, wo
        return nn.Conv2d(cin, cout, k, stride=stride, padding=pad,
                         groups=groups, bias=True)

    def maxpool(self, k=2, s=2):
        self.h = (self.h - k) // s + 1
        self.w = (self.w - k) // s + 1
        return nn.MaxPool2d(k, s)

    def flatten(self):
        self.c, self.h, self.w = self.c * self.h * self.w, 1, 1
        return nn.Flatten()

    def global_avgpool(self):
        self.h = self.w = 1
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def linear(self, out):
        assert self.h == 1 and self.w == 1, "linear needs a flattened input"
        cin = self.c
        self.flops += 2 * cin * out
        self.c = out
        return nn.Linear(cin, out)


# --------------------------------------------------------------------------
# Architectures (must match baton's)
# --------------------------------------------------------------------------

def build_mlp(t):
    return nn.Sequential(
        t.flatten(),
        t.linear(512), nn.ReLU(inplace=True),
        t.linear(256), nn.ReLU(inplace=True),
        t.linear(NUM_CLASSES))


def build_lenet5(t):
    pad = 2 if (t.h, t.w) == (28, 28) else 0
    return nn.Sequential(
        t.conv(6, 5, pad=pad), nn.ReLU(inplace=True), t.maxpool(),
        t.conv(16, 5), nn.ReLU(inplace=True), t.maxpool(),
        t.flatten(),                       # 16*5*5 = 400 for 28x28 / 32x32
        t.linear(120), nn.ReLU(inplace=True),
        t.linear(84), nn.ReLU(inplace=True),
        t.linear(NUM_CLASSES))


VGG_CFG = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M",
              512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
              512, 512, 512, "M", 512, 512, 512, "M"],
}


def build_vgg(t, cfg):
    layers = []
    for v in cfg:
        if v == "M":
            if t.h == 1 and t.w == 1:      # already 1x1: skip (28x28 -> 4 pools)
                continue
            layers.append(t.maxpool())
        else:
            layers += [t.conv(v, 3, pad=1), nn.ReLU(inplace=True)]
    layers.append(t.flatten())             # 512*h*w
    layers += [t.linear(512), nn.ReLU(inplace=True), nn.Dropout(0.5),
               t.linear(512), nn.ReLU(inplace=True), nn.Dropout(0.5),
               t.linear(NUM_CLASSES)]
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, t, cout, stride):
        super().__init__()
        cin, shape_in = t.c, t.shape()
        self.conv1 = t.conv(cout, 3, stride=stride, pad=1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = t.conv(cout, 3, stride=1, pad=1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            shape_out = t.shape()
            t.set_shape(shape_in)
            self.shortcut = nn.Sequential(t.conv(cout, 1, stride=stride),
                                          nn.BatchNorm2d(cout))
            assert t.shape() == shape_out

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc)


def build_resnet18(t):
    layers = [t.conv(64, 3, pad=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
    for i, width in enumerate((64, 128, 256, 512)):
        for j in range(2):
            stride = 2 if (i > 0 and j == 0) else 1
            layers.append(BasicBlock(t, width, stride))
    layers.append(t.global_avgpool())
    layers.append(t.linear(NUM_CLASSES))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, t, expand, cout, stride):
        super().__init__()
        cin = t.c
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [t.conv(hidden, 1), nn.BatchNorm2d(hidden),
                       nn.ReLU6(inplace=True)]
        layers += [t.conv(hidden, 3, stride=stride, pad=1, groups=hidden),
                   nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
                   t.conv(cout, 1), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        out = self.body(x)
        return x + out if self.residual else out


MOBILENETV2_CFG = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                   (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def build_mobilenetv2(t):
    layers = [t.conv(32, 3, pad=1), nn.BatchNorm2d(32), nn.ReLU6(inplace=True)]
    for expand, c, n, s in MOBILENETV2_CFG:
        for i in range(n):
            layers.append(InvertedResidual(t, expand, c, s if i == 0 else 1))
    layers += [t.conv(1280, 1), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True),
               t.global_avgpool(), t.linear(NUM_CLASSES)]
    return nn.Sequential(*layers)


def build_model(name, h, w, c):
    """Returns (model, forward FLOPs per sample)."""
    t = Tracker(c, h, w)
    if name == "mlp":
        model = build_mlp(t)
    elif name == "lenet5":
        model = build_lenet5(t)
    elif name in VGG_CFG:
        model = build_vgg(t, VGG_CFG[name])
    elif name == "resnet18":
        model = build_resnet18(t)
    elif name == "mobilenetv2":
        model = build_mobilenetv2(t)
    else:
        raise ValueError("unknown model " + name)
    assert t.shape() == (NUM_CLASSES, 1, 1)
    return model, t.flops


def param_count(model):
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------

def time_steps(model, batch, h, w, c, layout, warmup, repeats):
    """Times full training steps; returns a list of step times in seconds."""
    torch.manual_seed(0)
    x = torch.randn(batch, c, h, w)
    y = torch.randint(0, NUM_CLASSES, (batch,))
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                          weight_decay=0.0)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    if not torch.isfinite(loss):
        print("warning: non-finite loss", file=sys.stderr)
    return times


def parse_input(s):
    try:
        h, w, c = (int(v) for v in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected HxWxC, e.g. 32x32x3")
    if min(h, w, c) < 1:
        raise argparse.ArgumentTypeError("dimensions must be positive")
    return h, w, c


def main():
    ap = argparse.ArgumentParser(
        description="PyTorch reference for `baton bench step`: times one "
                    "training step (fwd + softmax CE + bwd + SGD momentum).")
    ap.add_argument("--model", choices=MODELS, default="vgg11")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layout", choices=("nchw", "channels_last", "both"),
                    default="both")
    ap.add_argument("--input", type=parse_input, default=(32, 32, 3),
                    metavar="HxWxC", help="input shape (default 32x32x3)")
    ap.add_argument("--list", action="store_true",
                    help="print the parameter count of every model and exit")
    args = ap.parse_args()
    if args.batch < 1 or args.repeats < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--batch, --repeats, --threads must be >= 1, --warmup >= 0")

    # Must happen before any parallel work (interop can only be set once).
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)

    h, w, c = args.input
    in_str = "%dx%dx%d" % (h, w, c)

    if args.list:
        print("models for input %s (%d classes):" % (in_str, NUM_CLASSES))
        for name in MODELS:
            model, flops = build_model(name, h, w, c)
            print("  %-12s params %11d   forward %.4f GFLOP/sample"
                  % (name, param_count(model), flops / 1e9))
        return

    layouts = (["nchw", "channels_last"] if args.layout == "both"
               else [args.layout])
    _, fwd_flops = build_model(args.model, h, w, c)
    step_flops = 3 * fwd_flops * args.batch
    print("%s input %s: forward %.4f GFLOP/sample (conv+dense, 2*MACs), "
          "step %.3f GFLOP for batch %d (3x forward)"
          % (args.model, in_str, fwd_flops / 1e9, step_flops / 1e9,
             args.batch), flush=True)

    results = []
    for layout in layouts:
        torch.manual_seed(0)
        model, _ = build_model(args.model, h, w, c)
        times = time_steps(model, args.batch, h, w, c, layout,
                           args.warmup, args.repeats)
        med = statistics.median(times)
        gflops = step_flops / med / 1e9
        results.append((med, layout, gflops))
        print("pytorch %s %s batch %d input %s layout %s threads %d: "
              "median step %.1f ms (min %.1f, max %.1f), %.1f GFLOP/s"
              % (torch.__version__, args.model, args.batch, in_str, layout,
                 args.threads, med * 1e3, min(times) * 1e3,
                 max(times) * 1e3, gflops), flush=True)

    med, layout, gflops = min(results)
    print("RESULT model=%s batch=%d layout=best median_ms=%.3f "
          "best_layout=%s input=%s threads=%d gflops=%.2f "
          "fwd_gflop_per_sample=%.5f"
          % (args.model, args.batch, med * 1e3, layout, in_str,
             args.threads, gflops, fwd_flops / 1e9))


if __name__ == "__main__":
    main()
