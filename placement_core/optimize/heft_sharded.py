"""HEFT-style list scheduling that also chooses splits (``heft-sharded``, docs/sharding.md).

Ops are taken in decreasing HEFT upward rank (:mod:`.heft`), and each gets the gene, a device or a split
of the problem's table (``--sharding``), that finishes it earliest: every shard starts when its device
is free and its inputs have arrived (the pieces it needs from each producer's shards, over the routes
the simulator charges, plus the gather's copy when it needs several), and the score is the last shard's
forward end plus its own backward and update, as in :mod:`.heft`, plus for a batch split with weights the
ring all-reduce (2(k-1)/k of the weights' bytes on the slowest route between ring neighbours). Ties go to
fewer devices. Devices are filled append-only (no insertion into gaps); the backward pass is not planned.
The plain HEFT placement is proposed too, and the driver keeps the better of the two.
"""

from __future__ import annotations

import numpy as np

from ..base.errors import InputError
from .base import register
from .fixed_candidates import FixedCandidates, Links
from .heft import heft_schedule, task_graph, upward_ranks


def sharded_schedule(problem) -> np.ndarray:
    sh, c = problem.shards, problem.compiled
    if sh is None:
        raise InputError("heft-sharded chooses splits, and this problem has none", field="algorithm",
                         fix="Add --sharding channel,batch (or one of them), or use heft")
    n, nd, T = problem.n_ops, problem.n_devices, sh.T
    links = Links(problem)
    ranks = upward_ranks(task_graph(problem), links)[:n]
    order = np.lexsort((np.arange(n), -ranks)).tolist()
    fwd, bwd, upd = (np.asarray(a, dtype=float).reshape(n, nd) for a in (c.fwd, c.bwd, c.upd))
    training = not problem.settings.forward_only
    avail = [0.0] * nd
    pieces: list[list[tuple[int, float, float, float, float]] | None] = [None] * n  # (device, blo, bhi, cf, end)
    out = np.zeros(n, dtype=np.int32)

    def shards_of(i: int, gene: int):
        if gene < nd:
            rest = bwd[i, gene] + upd[i, gene] if training else 0.0
            return [(gene, 0.0, 1.0, 1.0, float(fwd[i, gene]), float(rest))], False
        t = gene - nd
        row = int(sh.entry[i * T + t])
        devs = sh.opt_dev[sh.opt_ptr[t]:sh.opt_ptr[t + 1]]
        rows = [(int(dv), float(sh.blo[row + j]), float(sh.bhi[row + j]), float(sh.cf[row + j]),
                 float(sh.fwd[row + j]), float(sh.bwd[row + j] + sh.upd[row + j]) if training else 0.0)
                for j, dv in enumerate(devs)]
        return rows, bool(sh.opt_dim[t] == 1)

    def ready(i: int, dev: int, nlo: float, nhi: float) -> float:
        at = 0.0
        for e in range(int(c.par_ptr[i]), int(c.par_ptr[i + 1])):
            p, b = int(c.par_idx[e]), float(c.par_bytes[e])
            got = [(q, (min(q[2], nhi) - max(q[1], nlo)) * q[3]) for q in pieces[p]]
            got = [(q, ov) for q, ov in got if ov > 0.0]
            arrive = max(q[4] + links.time(q[0], dev, b * ov) for q, ov in got)
            if len(got) > 1:
                arrive += sum(b * ov for _, ov in got) * float(sh.gather_rate[dev])
            at = max(at, arrive)
        return at

    for i in order:
        genes = list(range(nd)) + [nd + t for t in np.flatnonzero(sh.allowed[i])]
        best = None
        for gene in genes:
            rows, batch = shards_of(i, gene)
            ends, score = [], 0.0
            for dev, blo, bhi, cf, f, rest in rows:
                nlo, nhi = (blo, bhi) if batch else (0.0, 1.0)
                end = max(avail[dev], ready(i, dev, nlo, nhi)) + f
                ends.append(end)
                score = max(score, end + rest)
            if batch and training and sh.ar_bytes[i] > 0 and len(rows) > 1:
                k = len(rows)
                nbytes = 2.0 * (k - 1) / k * float(sh.ar_bytes[i])
                score += max(links.time(rows[j][0], rows[(j + 1) % k][0], nbytes) for j in range(k))
            key = (score, len(rows), gene)
            if best is None or key < best[0]:
                best = (key, gene, rows, ends)
        _, gene, rows, ends = best
        out[i] = gene
        pieces[i] = [(r[0], r[1], r[2], r[3], e) for r, e in zip(rows, ends)]
        for r, e in zip(rows, ends):
            avail[r[0]] = max(avail[r[0]], e)
    return out


@register
class HeftSharded(FixedCandidates):
    name = "heft-sharded"
    title = "HEFT choosing splits (needs --sharding)"

    def candidates(self):
        plain = heft_schedule(self.problem).placement
        return np.stack([sharded_schedule(self.problem), plain]), ["heft with splits", "heft"]
