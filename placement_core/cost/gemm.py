"""What a matmul loses to tiles and waves on a GPU: small and odd-shaped GEMMs do not reach peak.

NVIDIA's *Matrix Multiplication Background User's Guide* (DU-09799-001, 2023) describes how cuBLAS computes
C = A·B: the m×n output is cut into tiles (§2.3 lists the tile shapes of its kernels, 256×128 down to 64×64),
each tile is one thread block on one streaming multiprocessor (SM), and the tiles run in *waves* of as many
blocks as there are SMs. So a GEMM pays for whole tiles (§3.1, tile quantization: a 257-row output costs a
second row of tiles) and whole waves (§3.2, wave quantization: 109 tiles on an A100's 108 SMs take two
waves). This module counts exactly that: the useful m·n·batch output over the output the waves compute,
taking the tile shape that wastes least. Nothing is fitted; the SM count comes from the device's datasheet
(``Device.sms``). What the count leaves out: a smaller tile reuses less of what it loads and runs below a
large one's rate (the guide's §2.3 figures), and a short K loop pays its prologue; so the time is a lower
bound, and ops with a large output approach ``flops / peak`` as the roofline has it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# cuBLAS tile shapes (rows × columns of the output), the guide's §2.3
TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
MATMUL_KINDS = ("linear", "matmul")


@functools.lru_cache(maxsize=65536)
def efficiency(batch: int, m: int, n: int, sms: int) -> float:
    """The share of the computed output that is useful, with the least wasteful tile: in (0, 1]."""
    best = 0.0
    for tm, tn in TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        computed = math.ceil(tiles / sms) * sms * tm * tn
        best = max(best, batch * m * n / computed)
    return best


def gemm_dims(op) -> tuple[int, int, int, int, bool] | None:
    """(batch, m, n, k, weights) of a linear layer (x·W: m = every row of x, weights shared, batch 1) or a
    batched matmul (``matmul``: its output's leading dimensions are the batch), from its output shape and
    forward FLOPs (2·batch·m·n·k); None when the op is not one or its numbers do not make whole sizes."""
    if op.kind not in MATMUL_KINDS or len(op.shape) < 2 or op.fwd_flops <= 0:
        return None
    shape = [int(s) for s in op.shape]
    if op.kind == "linear":
        batch, m, n = 1, int(np.prod(shape[:-1])), shape[-1]
    else:
        batch, m, n = int(np.prod(shape[:-2])), shape[-2], shape[-1]
    if min(batch, m, n) < 1:
        return None
    k = op.fwd_flops / (2.0 * batch * m * n)
    if k < 1 or abs(k - round(k)) > 1e-6 * k:
        return None
    return batch, m, n, int(round(k)), op.kind == "linear"


def time_factors(graph, devices) -> tuple[np.ndarray, np.ndarray] | None:
    """Per op and device, how much longer the forward and backward matmuls take than flops / peak says
    (≥ 1); None when no device counts SMs (nothing changes). The backward is two GEMMs of the forward's
    FLOPs each: the input gradient (an m×k output) and the weight gradient (k×n; batched like the forward
    for a batched matmul, one GEMM over all rows for a linear layer); an op whose backward has only the
    forward's FLOPs (a first layer) computes only the weight gradient."""
    sms = [d.sms for d in devices.devices]
    if not any(sms):
        return None
    # a cluster's thousands of GPUs have a handful of SM counts and a GPT's layers a handful of shapes: each
    # (shape, SM count) is worked out once and copied to every op and device that has it
    kinds = sorted({s for s in sms if s})
    column = {s: j for j, s in enumerate(kinds)}
    per_kind_f = np.ones((len(graph), len(kinds)))
    per_kind_b = np.ones((len(graph), len(kinds)))
    for i, op in enumerate(graph.ops):
        dims = gemm_dims(op)
        if dims is None:
            continue
        batch, m, n, k, weights = dims
        both = op.bwd_flops >= 2.0 * op.fwd_flops * (1 - 1e-9)
        for j, s in enumerate(kinds):
            per_kind_f[i, j] = 1.0 / efficiency(batch, m, n, s)
            dw = 1.0 / efficiency(1 if weights else batch, k, n, s)
            per_kind_b[i, j] = 0.5 / efficiency(batch, m, k, s) + 0.5 * dw if both else dw
    fwd = np.ones((len(graph), len(sms)))
    bwd = np.ones((len(graph), len(sms)))
    for d, s in enumerate(sms):
        if s:
            fwd[:, d] = per_kind_f[:, column[s]]
            bwd[:, d] = per_kind_b[:, column[s]]
    return fwd, bwd
