#!/usr/bin/python3
"""Generates the PyTorch reference fixtures of baton's layers and of a
small training run: tests/fixtures/torch/*.bin, read by
tests/test_torch_fixtures.c.

Regenerate (Debian's python3-torch, no pip needed), from the repository root:

    /usr/bin/python3 tests/gen_fixtures.py [--out tests/fixtures/torch]

and commit the .bin files. The output is deterministic: every fixture seeds
torch itself, so adding a fixture does not change the others.

What is computed
----------------
Inputs and parameters are drawn in float32; PyTorch then computes in float64
so that the reference is the exact result of the float32 inputs (baton
computes in float32 and is compared with a scaled tolerance). Everything is
stored in baton's layouts:

    activations  NHWC (PyTorch is NCHW)
    conv2d       W[(ky*kw + kx)*cin + c][cout] then bias[cout]
                 (PyTorch weight[cout][cin][ky][kx])
    dwconv2d     W[ky*kw + kx][c] then bias[c]  (PyTorch weight[c][1][ky][kx])
    dense        W[in][out] then bias[out]      (PyTorch weight[out][in]);
                 after a flatten, baton's input order is NHWC, PyTorch's is
                 CHW, so the input rows are permuted
    batchnorm    gamma[c], beta[c]; state running_mean[c], running_var[c]
    residual     the sub-layers' parameters (and states) concatenated,
                 body first, then the shortcut

A per-layer fixture holds: x (input, [N,H,W,C]), params and state (flat,
when the layer has them), y (output), state_out (running statistics after
the forward pass, batch-norm in training mode), dy (upstream gradient), dx
and dparams (gradients). softmax_ce holds labels, y (probabilities), loss
(mean cross-entropy) and dx (gradient of the mean loss); it has no dy.

The model fixture (model_train) trains
    conv2d(8,3,1,1) batchnorm relu maxpool(2,2,0)
    residual(conv2d(8,3,1,1) batchnorm relu conv2d(8,3,1,1) batchnorm;
             identity; post-ReLU)
    global_avgpool dense(10) softmax_ce
on 8x8x3 inputs with SGD (lr 0.1, momentum 0.9, weight decay 5e-4) for 5
steps of batch 8, each step 2 micro-batches of 4 whose losses are halved and
back-propagated in turn (batch-norm sees 4 samples at a time) before one
optimizer step. It holds x [5,8,8,8,3], labels [5,8], losses [5], and per
baton layer index i with parameters init.i / final.i (and state_init.i /
state_final.i for layers with batch-norm statistics).

File format (little-endian): "BTFX", uint32 version (1), uint32 tensor
count, then per tensor: uint32 name length, name bytes, uint32 ndim,
uint32 dims[ndim], float32 data[prod(dims)].
"""

import argparse
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC = b"BTFX"
VERSION = 1
DTYPE = torch.float64


# ---- file format ------------------------------------------------------------


def write_fixture(path, tensors):
    """Writes [(name, tensor)] in the BTFX format (float32, little-endian)."""
    out = [MAGIC, struct.pack("<II", VERSION, len(tensors))]
    for name, t in tensors:
        t = t.detach().to(torch.float32).contiguous()
        raw = name.encode("ascii")
        dims = list(t.shape) if t.dim() > 0 else [1]
        out.append(struct.pack("<I", len(raw)) + raw)
        out.append(struct.pack("<I%dI" % len(dims), len(dims), *dims))
        values = t.reshape(-1).tolist()
        out.append(struct.pack("<%df" % len(values), *values))
    with open(path, "wb") as f:
        f.write(b"".join(out))
    return os.path.getsize(path)


# ---- layout conversions (PyTorch -> baton) ----------------------------------


def nhwc(t):
    """NCHW activation -> NHWC."""
    return t.permute(0, 2, 3, 1).contiguous()


def conv_weight(w):
    """[cout][cin][kh][kw] -> rows (ky*kw + kx)*cin + c, columns cout."""
    cout = w.shape[0]
    return w.permute(2, 3, 1, 0).reshape(-1, cout)


def dwconv_weight(w):
    """[c][1][kh][kw] -> rows ky*kw + kx, columns c."""
    c = w.shape[0]
    return w[:, 0].permute(1, 2, 0).reshape(-1, c)


def dense_weight(w, chw=None):
    """[out][in] -> [in][out]; with chw=(c,h,w) the input is a flattened CHW
    image in PyTorch and a flattened HWC image in baton."""
    if chw is not None:
        c, h, wd = chw
        w = w.reshape(w.shape[0], c, h, wd).permute(0, 2, 3, 1).reshape(w.shape[0], -1)
    return w.t()


def flat(*tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


def conv_params(m, grad=False):
    w, b = (m.weight.grad, m.bias.grad) if grad else (m.weight, m.bias)
    fn = dwconv_weight if m.groups > 1 else conv_weight
    return flat(fn(w), b)


def bn_params(m, grad=False):
    return flat(m.weight.grad, m.bias.grad) if grad else flat(m.weight, m.bias)


def bn_state(m):
    return flat(m.running_mean, m.running_var)


def layer_params(m, grad=False):
    if isinstance(m, nn.Conv2d):
        return conv_params(m, grad)
    if isinstance(m, nn.BatchNorm2d):
        return bn_params(m, grad)
    if isinstance(m, nn.Linear):
        w, b = (m.weight.grad, m.bias.grad) if grad else (m.weight, m.bias)
        return flat(dense_weight(w), b)
    raise TypeError(type(m))


# ---- random inputs ----------------------------------------------------------


def randn(*shape, scale=1.0, shift=0.0):
    """float32 normal draws, promoted to float64 (exactly representable)."""
    return (torch.randn(*shape) * scale + shift).to(torch.float32).to(DTYPE)


def randomize_bn(bn):
    """Non-trivial gamma, beta and running statistics (float32 values)."""
    c = bn.num_features
    with torch.no_grad():
        bn.weight.copy_(1.0 + randn(c, scale=0.2))
        bn.bias.copy_(randn(c, scale=0.2))
        bn.running_mean.copy_(randn(c, scale=0.3))
        bn.running_var.copy_((0.5 + torch.rand(c)).to(torch.float32).to(DTYPE))


def to_f32_exact(module):
    """Rounds a module's parameters and buffers to float32 values, kept in
    float64, so that baton (float32) starts from exactly the same numbers."""
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(torch.float32).to(t.dtype))
    return module


# ---- per-layer fixtures -----------------------------------------------------


def layer_case(module, x_nchw, training, getters=(None, None, None)):
    """Runs an NCHW module forward and backward (with a random upstream
    gradient) and returns the fixture's tensors in baton's layouts.
    `getters` are (params, dparams, state) functions of the module, each
    None when the layer has no such tensor."""
    module = to_f32_exact(module.to(DTYPE))
    module.train(training)
    params, dparams, state = getters
    x = x_nchw.clone().requires_grad_(True)
    out = [("x", nhwc(x.detach()))]
    if params is not None:
        out.append(("params", params(module)))
    if state is not None:
        out.append(("state", state(module)))
    y = module(x)
    out.append(("y", nhwc(y.detach())))
    if state is not None:
        out.append(("state_out", state(module)))
    dy = randn(*y.shape)
    y.backward(dy)
    out.append(("dy", nhwc(dy)))
    out.append(("dx", nhwc(x.grad)))
    if dparams is not None:
        out.append(("dparams", dparams(module)))
    return out


def simple():
    """Getters of a single conv2d, dwconv2d or dense layer."""
    return (layer_params, lambda m: layer_params(m, grad=True), None)


def bn_getters():
    return (bn_params, lambda m: bn_params(m, grad=True), bn_state)


def case_conv(seed, n, h, w, cin, cout, k, stride, pad):
    torch.manual_seed(seed)
    conv = nn.Conv2d(cin, cout, k, stride, pad)
    return layer_case(conv, randn(n, cin, h, w), True, simple())


def case_dwconv(seed, n, h, w, c, k, stride, pad):
    torch.manual_seed(seed)
    conv = nn.Conv2d(c, c, k, stride, pad, groups=c)
    return layer_case(conv, randn(n, c, h, w), True, simple())


def case_dense(seed, n, fin, fout):
    """Dense on a vector: x is [N,1,1,in] in baton."""
    torch.manual_seed(seed)
    lin = nn.Linear(fin, fout)
    lin = to_f32_exact(lin.to(DTYPE))
    x = randn(n, fin).requires_grad_(True)
    y = lin(x)
    dy = randn(*y.shape)
    y.backward(dy)
    return [
        ("x", x.detach().reshape(n, 1, 1, fin)),
        ("params", layer_params(lin)),
        ("y", y.detach().reshape(n, 1, 1, fout)),
        ("dy", dy.reshape(n, 1, 1, fout)),
        ("dx", x.grad.reshape(n, 1, 1, fin)),
        ("dparams", layer_params(lin, grad=True)),
    ]


def case_flatten_dense(seed, n, h, w, c, fout):
    """nn.Flatten + nn.Linear on an NCHW image; baton runs flatten + dense on
    the NHWC image, so the dense weight's input rows are permuted."""
    torch.manual_seed(seed)
    lin = to_f32_exact(nn.Linear(c * h * w, fout).to(DTYPE))
    x = randn(n, c, h, w).requires_grad_(True)
    y = lin(torch.flatten(x, 1))
    dy = randn(*y.shape)
    y.backward(dy)
    return [
        ("x", nhwc(x.detach())),
        ("params", flat(dense_weight(lin.weight, (c, h, w)), lin.bias)),
        ("y", y.detach().reshape(n, 1, 1, fout)),
        ("dy", dy.reshape(n, 1, 1, fout)),
        ("dx", nhwc(x.grad)),
        ("dparams", flat(dense_weight(lin.weight.grad, (c, h, w)), lin.bias.grad)),
    ]


def case_flatten(seed, n, h, w, c):
    """baton's flatten keeps NHWC order: [N,H,W,C] -> [N,1,1,H*W*C]."""
    torch.manual_seed(seed)
    x = randn(n, h, w, c)
    dy = randn(n, 1, 1, h * w * c)
    return [("x", x), ("y", x.reshape(n, 1, 1, -1)), ("dy", dy), ("dx", dy.reshape(n, h, w, c))]


def case_module(seed, module, n, h, w, c, scale=1.0, exact=()):
    """A parameterless layer; every 7th input is replaced by one of the
    `exact` values (kinks of ReLU/ReLU6) when given."""
    torch.manual_seed(seed)
    x = randn(n, c, h, w, scale=scale)
    if exact:
        flat_x = x.view(-1)
        for j, i in enumerate(range(0, flat_x.numel(), 7)):
            flat_x[i] = exact[j % len(exact)]
    return layer_case(module, x, True)


def case_maxpool_ties(seed, n, h, w, c, k, stride, pad):
    """Inputs in {-1, 0, 1}: windows hold ties, and the gradient goes to the
    first maximum in window order (row by row), as in PyTorch."""
    torch.manual_seed(seed)
    x = torch.randint(-1, 2, (n, c, h, w)).to(DTYPE)
    return layer_case(nn.MaxPool2d(k, stride, pad), x, True)


def case_gap(seed, n, h, w, c):
    torch.manual_seed(seed)
    return layer_case(nn.AdaptiveAvgPool2d(1), randn(n, c, h, w), True)


def case_batchnorm(seed, n, h, w, c, training):
    torch.manual_seed(seed)
    bn = nn.BatchNorm2d(c)
    randomize_bn(bn)
    return layer_case(bn, randn(n, c, h, w, scale=1.5, shift=0.5), training, bn_getters())


def case_softmax_ce(seed, n, k):
    torch.manual_seed(seed)
    z = randn(n, k, scale=2.0).requires_grad_(True)
    labels = torch.randint(0, k, (n,))
    loss = F.cross_entropy(z, labels, reduction="mean")
    loss.backward()
    return [
        ("x", z.detach().reshape(n, 1, 1, k)),
        ("labels", labels.to(DTYPE)),
        ("y", torch.softmax(z.detach(), dim=1).reshape(n, 1, 1, k)),
        ("loss", loss.detach().reshape(1)),
        ("dx", z.grad.reshape(n, 1, 1, k)),
    ]


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn body, optional conv1x1-bn projection, post ReLU:
    baton's residual with these sub-layers in this order."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def sublayers(self):
        """Parameterised sub-layers in baton's order (body, then shortcut)."""
        subs = [self.conv1, self.bn1, self.conv2, self.bn2]
        return subs + (list(self.proj) if self.proj is not None else [])

    def forward(self, x):
        h = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        s = self.proj(x) if self.proj is not None else x
        return F.relu(h + s)


def block_params(block, grad=False):
    return flat(*[layer_params(m, grad) for m in block.sublayers()])


def block_state(block):
    return flat(*[bn_state(m) for m in block.sublayers() if isinstance(m, nn.BatchNorm2d)])


def case_residual(seed, n, h, w, cin, cout, stride):
    torch.manual_seed(seed)
    block = BasicBlock(cin, cout, stride)
    for m in block.sublayers():
        if isinstance(m, nn.BatchNorm2d):
            randomize_bn(m)
    getters = (block_params, lambda b: block_params(b, grad=True), block_state)
    return layer_case(block, randn(n, cin, h, w), True, getters)


# ---- the model fixture ------------------------------------------------------

MODEL_STEPS = 5
MODEL_BATCH = 8
MODEL_MICRO = 2
MODEL_CLASSES = 10


def build_model():
    """Returns the PyTorch model and, per baton layer index, the module
    holding that layer's parameters (None for parameterless layers)."""
    block = BasicBlock(8, 8, 1)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1),  # 0 conv2d
        nn.BatchNorm2d(8),  # 1 batchnorm
        nn.ReLU(),  # 2 relu
        nn.MaxPool2d(2, 2, 0),  # 3 maxpool
        block,  # 4 residual
        nn.AdaptiveAvgPool2d(1),  # 5 global_avgpool
        nn.Flatten(),  # (baton's global_avgpool already gives [N,1,1,C])
        nn.Linear(8, MODEL_CLASSES),  # 6 dense; 7 softmax_ce is the loss
    )
    layers = {0: model[0], 1: model[1], 4: block, 6: model[7]}
    return model, layers


def model_params(m):
    return block_params(m) if isinstance(m, BasicBlock) else layer_params(m)


def model_state(m):
    if isinstance(m, BasicBlock):
        return block_state(m)
    return bn_state(m) if isinstance(m, nn.BatchNorm2d) else None


def case_model(seed):
    torch.manual_seed(seed)
    model, layers = build_model()
    model = to_f32_exact(model.to(DTYPE))
    model.train()
    out = []
    for i, m in layers.items():
        out.append(("init.%d" % i, model_params(m)))
        if model_state(m) is not None:
            out.append(("state_init.%d" % i, model_state(m)))
    x = randn(MODEL_STEPS, MODEL_BATCH, 3, 8, 8)
    labels = torch.randint(0, MODEL_CLASSES, (MODEL_STEPS, MODEL_BATCH))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    mb = MODEL_BATCH // MODEL_MICRO
    losses = []
    for step in range(MODEL_STEPS):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for k in range(MODEL_MICRO):
            xs = x[step, k * mb : (k + 1) * mb]
            ys = labels[step, k * mb : (k + 1) * mb]
            loss = F.cross_entropy(model(xs), ys) / MODEL_MICRO
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    out.append(("x", x.permute(0, 1, 3, 4, 2).contiguous()))
    out.append(("labels", labels.to(DTYPE)))
    out.append(("losses", torch.tensor(losses, dtype=DTYPE)))
    for i, m in layers.items():
        out.append(("final.%d" % i, model_params(m)))
        if model_state(m) is not None:
            out.append(("state_final.%d" % i, model_state(m)))
    return out


# ---- main -------------------------------------------------------------------


def fixtures():
    """(file stem, builder) for every fixture; each builder seeds itself.
    The C test sets up the same layers; keep the two in step."""
    return [
        ("conv2d_3x3_pad1", lambda: case_conv(101, 2, 5, 6, 3, 4, 3, 1, 1)),
        ("conv2d_5x5_s2_pad2", lambda: case_conv(102, 2, 7, 6, 2, 3, 5, 2, 2)),
        ("conv2d_1x1", lambda: case_conv(103, 2, 4, 3, 5, 6, 1, 1, 0)),
        ("dwconv2d_3x3_s2", lambda: case_dwconv(104, 2, 7, 6, 4, 3, 2, 1)),
        ("dense", lambda: case_dense(105, 4, 9, 7)),
        ("flatten_dense", lambda: case_flatten_dense(106, 2, 2, 3, 4, 5)),
        ("relu", lambda: case_module(107, nn.ReLU(), 2, 3, 4, 5, exact=(0.0,))),
        ("relu6", lambda: case_module(108, nn.ReLU6(), 2, 3, 4, 5, 4.0, (0.0, 6.0))),
        ("maxpool_2x2", lambda: case_module(109, nn.MaxPool2d(2, 2, 0), 2, 6, 4, 3)),
        ("maxpool_3x3_s2_p1", lambda: case_module(110, nn.MaxPool2d(3, 2, 1), 2, 7, 6, 2)),
        ("maxpool_ties", lambda: case_maxpool_ties(120, 2, 7, 6, 3, 3, 2, 1)),
        ("avgpool_2x2", lambda: case_module(111, nn.AvgPool2d(2, 2, 0), 2, 6, 4, 3)),
        ("avgpool_3x3_s2_p1", lambda: case_module(112, nn.AvgPool2d(3, 2, 1), 2, 5, 6, 2)),
        ("global_avgpool", lambda: case_gap(113, 3, 4, 3, 5)),
        ("batchnorm_train", lambda: case_batchnorm(114, 3, 3, 4, 5, True)),
        ("batchnorm_eval", lambda: case_batchnorm(115, 3, 3, 4, 5, False)),
        ("flatten", lambda: case_flatten(116, 2, 2, 3, 4)),
        ("softmax_ce", lambda: case_softmax_ce(117, 5, 6)),
        ("residual_projection", lambda: case_residual(118, 2, 6, 6, 3, 6, 2)),
        ("model_train", lambda: case_model(119)),
    ]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "fixtures", "torch"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for stem, build in fixtures():
        size = write_fixture(os.path.join(args.out, stem + ".bin"), build())
        total += size
        print("%-24s %7d bytes" % (stem + ".bin", size))
    print("%-24s %7d bytes" % ("total", total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
