"""What a learned cost model sees of a placement: numbers computed in numpy from the problem's compiled
arrays, for a whole batch of placements at once.

Per device: the compute time of its ops (forward, backward, update), resident bytes and the estimated
overflow beyond its memory; per channel: the bytes and the time of the messages that cross it (one per
producer and receiving device, as the simulator sends them, plus the gradients back), and the number of
messages; the critical path of the forward and of the backward pass with each cross-device edge costing
its transfer (latency, bytes over bandwidth, the devices' per-message overhead); and the lower bound
max(critical path, busiest device). Loads also appear sorted, so that two devices of one kind look alike.
The dissertation's own encoding (one-hot op -> device, §5.4) is available as ``encoding="one-hot"`` or
added to the features with ``"both"``.

No simulator run is involved: with the simulator as the truth a surrogate must not peek at it. A
surrogate of *measured* times may add the simulated batch time as one more feature (``simulated``).
"""

from __future__ import annotations

import numpy as np

from ..base.errors import InputError
from ..problem import Problem

ENCODINGS = ("features", "one-hot", "both")


class Featurizer:
    """Turns placements [k, n_ops] into a feature matrix [k, n_features] for one problem."""

    def __init__(self, problem: Problem, encoding: str = "features", simulated: bool = False):
        if encoding not in ENCODINGS:
            raise InputError(f"unknown encoding {encoding!r}", field="encoding", fix="Use one of: " + ", ".join(ENCODINGS))
        self.problem, self.encoding, self.simulated = problem, encoding, bool(simulated)
        c = problem.compiled
        n, d = c.n_ops, c.n_dev
        self.n, self.d, self.n_ch = n, d, c.n_ch
        self.work = (c.fwd + c.bwd + c.upd).reshape(n, d) if not problem.settings.forward_only \
            else c.fwd.reshape(n, d).copy()
        self.fwd = c.fwd.reshape(n, d)
        self.bwd = c.bwd.reshape(n, d) if not problem.settings.forward_only else np.zeros((n, d))
        self.mem = c.static_mem + c.out_bytes  # resident weights and the activation kept for the backward
        self.capacity = np.asarray(problem.capacity, dtype=float)
        self.route = c.route.reshape(d, d).astype(np.int64)
        self.lat = np.append(c.ch_latency, 0.0)  # index n_ch: "no channel" (same device)
        self.inv = np.append(c.ch_inv_rate, 0.0)
        self.overhead = np.asarray(c.msg_overhead, dtype=float)
        # edges (parent -> child) with their bytes; forward messages go once per (producer, receiving device)
        child = np.repeat(np.arange(n), np.diff(c.par_ptr))
        self.e_src, self.e_dst = c.par_idx.astype(np.int64), child
        self.e_bytes, self.e_grad = np.asarray(c.par_bytes, float), np.asarray(c.par_grad, float)
        self.parents = [c.par_idx[c.par_ptr[i]:c.par_ptr[i + 1]] for i in range(n)]
        self.parent_edges = [np.arange(c.par_ptr[i], c.par_ptr[i + 1]) for i in range(n)]
        self.children_edges = [[] for _ in range(n)]
        for e, p in enumerate(self.e_src):
            self.children_edges[p].append(e)

    @property
    def names(self) -> list[str]:
        dev, ch = self.problem.devices.names, [c.name for c in self.problem.devices.channels]
        out: list[str] = []
        if self.encoding != "one-hot":
            out += [f"compute {x}" for x in dev] + [f"compute, rank {r + 1}" for r in range(self.d)]
            out += [f"resident bytes {x}" for x in dev] + [f"overflow {x}" for x in dev]
            out += ["overflow total", "overflow max"]
            out += [f"bytes on {x}" for x in ch] + [f"transfer time on {x}" for x in ch]
            out += ["messages", "bytes cut", "transfer time", "message overhead time", "devices used",
                    "forward critical path", "backward critical path", "critical path", "busiest device",
                    "lower bound", "compute balance"]
        if self.encoding != "features":
            out += [f"{op.name} on {x}" for op in self.problem.graph.ops for x in dev]
        if self.simulated:
            out.append("simulated batch time")
        return out

    def __call__(self, placements) -> np.ndarray:
        P = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int64)
        if P.ndim != 2 or P.shape[1] != self.n:
            raise InputError(f"expected placements of shape (k, {self.n}), got {P.shape}", field="placement")
        parts = []
        if self.encoding != "one-hot":
            parts.append(self._engineered(P))
        if self.encoding != "features":
            onehot = np.zeros((len(P), self.n, self.d))
            np.put_along_axis(onehot, P[:, :, None], 1.0, axis=2)
            parts.append(onehot.reshape(len(P), -1))
        if self.simulated:
            sims = self.problem.simulator.run_many(np.ascontiguousarray(P, dtype=np.int32))
            parts.append(np.array([[r.batch_time] for r in sims]))
        return np.hstack(parts)

    def _engineered(self, P: np.ndarray) -> np.ndarray:
        k, n, d = len(P), self.n, self.d
        rows = np.arange(n)
        onehot = np.zeros((k, n, d))
        np.put_along_axis(onehot, P[:, :, None], 1.0, axis=2)
        compute = np.einsum("knd,nd->kd", onehot, self.work)
        resident = np.einsum("knd,n->kd", onehot, self.mem)
        over = np.maximum(resident - self.capacity, 0.0)
        # forward messages: one per (producer, receiving device), the largest edge; gradients: one per
        # (consumer, producer's device), summed -- both as the simulator sends them
        src_dev, dst_dev = P[:, self.e_src], P[:, self.e_dst]
        cross = src_dev != dst_dev
        ch = np.where(cross, self.route[src_dev, dst_dev], self.n_ch)
        back = np.where(cross, self.route[dst_dev, src_dev], self.n_ch)
        fwd_msgs = _largest_per_key(self.e_src * d + dst_dev, self.e_bytes, cross)
        grad_msgs = _sum_per_key(self.e_dst * d + src_dev, self.e_grad, cross)
        ch_bytes = np.zeros((k, self.n_ch + 1))
        ch_time = np.zeros((k, self.n_ch + 1))
        messages = np.zeros(k)
        for key_bytes, chan in ((fwd_msgs, ch), (grad_msgs, back)):
            for kk in range(k):
                idx, nbytes = key_bytes[kk]
                if len(idx) == 0:
                    continue
                c = chan[kk, idx]
                np.add.at(ch_bytes[kk], c, nbytes)
                np.add.at(ch_time[kk], c, self.lat[c] + nbytes * self.inv[c])
                messages[kk] += len(idx)
        ch_bytes, ch_time = ch_bytes[:, :-1], ch_time[:, :-1]
        edge_t = np.where(cross, self.lat[ch] + self.e_bytes * self.inv[ch]
                          + self.overhead[src_dev] + self.overhead[dst_dev], 0.0)
        grad_t = np.where(cross & (self.e_grad > 0), self.lat[back] + self.e_grad * self.inv[back]
                          + self.overhead[src_dev] + self.overhead[dst_dev], 0.0)
        t_f = self.fwd[rows, P]
        t_b = self.bwd[rows, P]
        fin = np.zeros((k, n))
        for i in range(n):
            pe = self.parent_edges[i]
            start = (fin[:, self.e_src[pe]] + edge_t[:, pe]).max(axis=1) if len(pe) else 0.0
            fin[:, i] = start + t_f[:, i]
        fwd_cp = fin.max(axis=1)
        bfin = np.zeros((k, n))
        for i in range(n - 1, -1, -1):
            ce = self.children_edges[i]
            start = (bfin[:, self.e_dst[ce]] + grad_t[:, ce]).max(axis=1) if ce else 0.0
            bfin[:, i] = start + t_b[:, i]
        bwd_cp = bfin.max(axis=1)
        overhead_t = (cross * (self.overhead[src_dev] + self.overhead[dst_dev])).sum(axis=1)
        busiest = compute.max(axis=1)
        cp = fwd_cp + bwd_cp
        used = (onehot.sum(axis=1) > 0).sum(axis=1)
        balance = busiest / np.maximum(compute.sum(axis=1), 1e-300)
        return np.column_stack([compute, -np.sort(-compute, axis=1), resident, over, over.sum(axis=1),
                                over.max(axis=1), ch_bytes, ch_time, messages, ch_bytes.sum(axis=1),
                                ch_time.sum(axis=1), overhead_t, used, fwd_cp, bwd_cp, cp, busiest,
                                np.maximum(cp, busiest), balance])


def _largest_per_key(keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> list:
    """Per placement (row of ``keys`` and ``mask``): (edge indices of the largest value per key among the
    masked edges, those values)."""
    out = []
    order = np.argsort(-values, kind="stable")
    for kk in range(mask.shape[0]):
        e = order[mask[kk, order]]
        _, first = np.unique(keys[kk, e], return_index=True)
        idx = e[first]
        out.append((idx, values[idx]))
    return out


def _sum_per_key(keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> list:
    """Per placement: (one representative edge per key among the masked edges with a value, the sum of its
    key's values)."""
    out = []
    for kk in range(mask.shape[0]):
        e = np.flatnonzero(mask[kk] & (values > 0))
        kv = keys[kk, e]
        uniq, first, inv = np.unique(kv, return_index=True, return_inverse=True)
        out.append((e[first], np.bincount(inv, weights=values[e], minlength=len(uniq))))
    return out
