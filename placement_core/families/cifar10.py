"""``cifar10``: stacked convolutional cells of ENAS-like random structure (Pham et al. 2018's micro space).

One normal and one reduction cell are sampled per graph. A cell reads the two
previous cells' outputs (each first brought to C channels by a 1×1 convolution);
each of its five nodes adds two operations, each on an input chosen among the
cell's inputs and the earlier nodes: a 3×3 or 5×5 separable convolution
(ReLU, depthwise, pointwise, batch norm, twice), 3×3 average or max pooling,
or the identity. The nodes nobody reads are concatenated and brought back to C
channels. A reduction cell applies its operations to the cell inputs with
stride 2 and doubles C. The network is a stem, three stages of N normal cells
(N sampled) separated by reduction cells, global pooling and a classifier;
the batch is sampled (Placeto App. A.3: 240-360, here scaled so that memory
straddles one GPU).
"""

from __future__ import annotations

import random

from .layers import NetBuilder

CHANNELS = 64
IMAGE = 32
NODES = 5
CELLS_PER_STAGE = (2, 4)
BATCH = (256, 768)
OPERATIONS = ("sep3", "sep5", "avg3", "max3", "identity")


def build(rng: random.Random, name: str):
    per_stage = rng.randint(*CELLS_PER_STAGE)
    batch = 16 * rng.randint(BATCH[0] // 16, BATCH[1] // 16)
    normal, reduction = sample_cell(rng), sample_cell(rng)
    meta = {"cells_per_stage": per_stage, "batch_size": batch, "normal": normal, "reduction": reduction}
    return cifar10_graph(name, batch, per_stage, normal, reduction), meta


def sample_cell(rng: random.Random, nodes: int = NODES) -> list[list]:
    """Per node: [input a, op a, input b, op b]; inputs 0 and 1 are the cell's, 2 + k is node k."""
    return [[rng.randrange(j + 2), rng.choice(OPERATIONS), rng.randrange(j + 2), rng.choice(OPERATIONS)]
            for j in range(nodes)]


def cifar10_graph(name: str, batch: int, per_stage: int, normal, reduction, channels: int = CHANNELS):
    b = NetBuilder(name, batch)
    n = batch
    x = b.input("images", (n, 3, IMAGE, IMAGE))
    c = channels
    stem = b.norm("stem/bn", b.conv("stem/conv", x, 3, 3 * c, 3, IMAGE, first=True), 3 * c, IMAGE)
    # (name, channels, side) of the last two cells' outputs
    prev2 = prev = (stem, 3 * c, IMAGE)
    side = IMAGE
    index = 0
    for stage in range(3):
        if stage:
            c, side = 2 * c, side // 2
            out = _cell(b, f"cell{index:02d}_reduce", reduction, prev2, prev, c, side, reduce=True)
            prev2, prev, index = prev, (out, c, side), index + 1
        for _ in range(per_stage):
            out = _cell(b, f"cell{index:02d}", normal, prev2, prev, c, side, reduce=False)
            prev2, prev, index = prev, (out, c, side), index + 1
    pooled = b.pool("head/global_pool", prev[0], c, side, 1)
    logits = b.linear("head/classifier", [pooled], c, 10, n, (n, 10))
    b._add("head/loss", "softmax", (logits,), fwd=3.0 * n * 10, bwd=2.0 * n * 10, out_elems=n * 10, shape=(n,))
    return b.graph()


def _cell(b: NetBuilder, name: str, arch, prev2, prev, c: int, side: int, *, reduce: bool) -> str:
    """One cell; returns the op that outputs it (C channels at ``side``)."""
    n = b.batch
    inputs = []
    for k, (src, cin, s_in) in enumerate((prev2, prev)):
        # bring each input to C channels; an input at twice the side (the cell before a reduction's
        # predecessor) is reduced by a stride-2 1x1 convolution, as ENAS' factorized reduction
        stride_in = s_in // (side * (2 if reduce else 1))
        s_out = s_in // max(stride_in, 1)
        conv = b.conv(f"{name}/pre{k}/conv", src, cin, c if not reduce else c // 2, 1, s_out)
        inputs.append((b.norm(f"{name}/pre{k}/bn", conv, c if not reduce else c // 2, s_out),
                       c if not reduce else c // 2, s_out))
    nodes = list(inputs)
    read = set()
    for j, (ia, opa, ib, opb) in enumerate(arch):
        branches = []
        for which, (i, op) in enumerate(((ia, opa), (ib, opb))):
            read.add(i)
            src, cin, s_in = nodes[i]
            stride = 2 if reduce and i < 2 else 1
            branches.append(_operation(b, f"{name}/node{j}/{'ab'[which]}_{op}", op, src, cin, c, s_in // stride,
                                       strided=stride > 1))
        add = b.elementwise(f"{name}/node{j}/add", branches, n * c * side * side, (n, c, side, side))
        nodes.append((add, c, side))
    loose = [nodes[i][0] for i in range(2, len(nodes)) if i not in read]
    cat = b.elementwise(f"{name}/concat", loose, n * c * len(loose) * side * side,
                        (n, c * len(loose), side, side), kind="concat")
    conv = b.conv(f"{name}/out/conv", cat, c * len(loose), c, 1, side)
    return b.norm(f"{name}/out/bn", conv, c, side)


def _operation(b: NetBuilder, name: str, op: str, src: str, cin: int, c: int, side: int, strided: bool) -> str:
    """A separable convolution, a pooling or the identity, from ``cin`` to ``c`` channels at ``side``; an
    identity that must change channels or stride is a 1×1 convolution."""
    if op == "identity":
        if cin == c and not strided:
            return src  # no op: the node adds the tensor itself
        return b.conv(name, src, cin, c, 1, side)
    if op in ("avg3", "max3"):
        pooled = b.pool(name, src, cin, 3, side)
        return pooled if cin == c else b.conv(f"{name}/proj", pooled, cin, c, 1, side)
    k = 3 if op == "sep3" else 5
    x, ch = src, cin
    for rep in range(2):  # ReLU, depthwise k x k, pointwise 1 x 1, batch norm; twice
        dw = b.conv(f"{name}/dw{rep}", x, ch, ch, k, side, groups=ch)
        pw = b.conv(f"{name}/pw{rep}", dw, ch, c, 1, side)
        x, ch = b.norm(f"{name}/bn{rep}", pw, c, side), c
    return x
