"""What the fixed-candidate placers share (the baselines, min-cut and HEFT): an optimizer that proposes a
fixed list of placements, the transfer-time table between devices, the simulator-like memory estimate, the
choice of target devices and each op's work."""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from .base import Optimizer, Param

FWD, BWD, UPD = 0, 1, 2



class FixedCandidates(Optimizer):
    """A deterministic algorithm: computes its candidates once, proposes them, then finishes.

    ``initial`` is ignored. ``extras()`` lists each candidate's label and objective.
    """

    deterministic = True
    PARAMS: dict = {}

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self._cands: np.ndarray | None = None
        self._labels: list[str] = []
        self._objectives: list[float] = []
        self._next = 0

    def candidates(self) -> tuple[np.ndarray, list[str]]:
        """(placements [k, n_ops], a label per placement)."""
        raise NotImplementedError

    def all_candidates(self) -> np.ndarray:
        if self._cands is None:
            xs, labels = self.candidates()
            xs = np.ascontiguousarray(np.atleast_2d(xs), dtype=np.int32)
            keep, seen = [], set()
            for i, x in enumerate(xs):  # the same placement twice would waste an evaluation
                if x.tobytes() not in seen:
                    seen.add(x.tobytes())
                    keep.append(i)
            self._cands = xs[keep]
            self._labels = [labels[i] for i in keep]
        return self._cands

    def ask(self, limit: int) -> np.ndarray:
        xs = self.all_candidates()
        return xs[self._next:self._next + max(int(limit), 0)]

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self._next += len(placements)
        self._objectives.extend(float(f) for f in objectives)
        if len(objectives):
            self.current = min(self.current, float(np.min(objectives)))
        if self._next >= len(self.all_candidates()):
            self.finished = True

    def snapshot(self) -> dict:
        return {"proposed": self._next, "candidates": len(self.all_candidates())}

    def extras(self) -> dict:
        self.all_candidates()
        return {"candidates": [{"label": lab, "objective": f}
                               for lab, f in zip(self._labels, self._objectives)]}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "next": self._next, "objectives": list(self._objectives)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
        self._objectives = [float(f) for f in state["objectives"]]


class Links:
    """Transfer times between devices as the simulator charges them (no contention)."""

    def __init__(self, problem: Problem):
        d = problem.n_devices
        costs = problem.costs
        self.channel = np.full((d, d), -1, dtype=np.int64)
        for (a, b), c in problem.devices.route.items():
            self.channel[a, b] = c
        self.costs = costs
        self.curves = costs.curve_ptr is not None  # measured transfer curves: time them point by point
        self.latency = np.asarray(costs.ch_latency, dtype=float)
        self.inv_rate = np.asarray(costs.ch_inv_rate, dtype=float)
        self.min_transfer = np.asarray(costs.min_transfer, dtype=float)
        off = ~np.eye(d, dtype=bool)
        if d > 1:
            ch = self.channel[off]
            # Topcuoglu et al.: mean cost = mean startup + bytes / mean transfer rate, over the
            # ordered pairs of distinct processors (a tensor on its own device costs nothing).
            self.mean_latency = float(self.latency[ch].mean())
            self.mean_rate = float((1.0 / self.inv_rate[ch]).mean())
            self.mean_min = float(np.broadcast_to(self.min_transfer[:, None], (d, d))[off].mean())
        self.d = d

    def time(self, src: int, dst: int, nbytes: float) -> float:
        if src == dst:
            return 0.0
        c = self.channel[src, dst]
        if self.curves:
            return self.costs.transfer_time(int(c), nbytes, src)
        return max(float(self.latency[c] + nbytes * self.inv_rate[c]), float(self.min_transfer[src]))

    def mean_time(self, nbytes: float) -> float:
        if self.d < 2:
            return 0.0
        if self.curves:  # no single rate to average: the mean of the pairs' times
            pairs = [(a, b) for a in range(self.d) for b in range(self.d) if a != b]
            return sum(self.time(a, b, nbytes) for a, b in pairs) / len(pairs)
        return max(self.mean_latency + nbytes / self.mean_rate, self.mean_min)


class MemoryEstimate:
    """What placing an op adds to its device's peak memory, the way the simulator counts it.

    Training: its resident weights (and gradients), its activation (kept for the backward
    pass when it has consumers) and a copy of each remote input not yet on the device; these
    stay until the backward pass, so at the end of the forward pass they are all resident at
    once. On top of that, the largest set of gradients one backward op of the device holds at
    once (those it consumes plus those it produces). Forward only: weights stay, the op's
    output only while it runs. Gradients of several branches pending together are not
    counted, so this can slightly underestimate the simulated peak.
    """

    def __init__(self, problem: Problem):
        c = problem.compiled
        self.graph = problem.graph
        self.static = np.asarray(c.static_mem, dtype=float)
        self.out = np.asarray(c.out_bytes, dtype=float)
        self.capacity = np.asarray(problem.capacity, dtype=float)
        self.training = not problem.settings.forward_only
        self.keeps_output = np.array([bool(ch) for ch in problem.graph.children])
        self.used = np.zeros(problem.n_devices)
        self.copies: list[set[int]] = [set() for _ in range(problem.n_devices)]
        n = len(problem.graph)
        ops = np.arange(n)
        grads_in = np.bincount(np.repeat(ops, np.diff(c.ch_ptr)), weights=c.ch_grad, minlength=n)
        grads_out = np.bincount(np.repeat(ops, np.diff(c.par_ptr)), weights=c.par_grad, minlength=n)
        self.transient = (grads_in + grads_out) if self.training else self.out.copy()
        self.peak_transient = np.zeros(problem.n_devices)

    def total(self) -> float:
        """Everything the network keeps resident if it ran on one device (no copies)."""
        if not self.training:
            return float(self.static.sum() + self.out.max(initial=0.0))
        return float(self.static.sum() + self.out[self.keeps_output].sum() + self.transient.max(initial=0.0))

    def _remote_inputs(self, i: int, d: int, placement: np.ndarray) -> list[int]:
        return [p for p in self.graph.parents[i] if placement[p] != d and p not in self.copies[d]]

    def need(self, i: int, d: int, placement: np.ndarray) -> float:
        """Bytes that stay on ``d`` once op ``i`` is placed there."""
        if not self.training:
            return float(self.static[i])
        b = self.static[i] + (self.out[i] if self.keeps_output[i] else 0.0)
        return float(b + sum(self.graph.edge_bytes(p, i) for p in self._remote_inputs(i, d, placement)))

    def overflow(self, i: int, d: int, placement: np.ndarray) -> float:
        """Bytes by which ``d``'s estimated peak would exceed its capacity with op ``i`` on it."""
        peak = self.used[d] + self.need(i, d, placement) + max(self.peak_transient[d], self.transient[i])
        return max(0.0, float(peak - self.capacity[d]))

    def place(self, i: int, d: int, placement: np.ndarray) -> None:
        self.used[d] += self.need(i, d, placement)
        self.peak_transient[d] = max(self.peak_transient[d], self.transient[i])
        if self.training:
            self.copies[d].update(self._remote_inputs(i, d, placement))


DEVICE_CHOICE = Param("auto", "devices to place on: gpus (all devices when there is none); auto: the GPUs, "
                      "then the others too if the GPUs cannot hold the network (memory-aware placers only); "
                      "all: every device in listed order", str, choices=("auto", "gpus", "all"))


def target_devices(problem: Problem, which: str = "auto", need: float | None = None) -> list[int]:
    """Device indices a baseline places on, in the order it fills them.

    ``need``: the bytes the network needs (memory-aware placers pass it); with ``auto``, when
    the GPUs' capacity is below it, the other devices follow the GPUs.
    """
    everything = list(range(problem.n_devices))
    gpus = [i for i, dev in enumerate(problem.devices.devices) if dev.kind == "gpu"]
    if which == "all" or not gpus:
        return everything
    if which == "auto" and need is not None and float(problem.capacity[gpus].sum()) < need:
        return gpus + [i for i in everything if i not in gpus]
    return gpus


def op_work(problem: Problem) -> np.ndarray:
    """Compute time of a whole training step per op and device [ops, devices] (forward only: fwd)."""
    c = problem.costs
    if problem.settings.forward_only:
        return np.asarray(c.fwd, dtype=float)
    return np.asarray(c.fwd + c.bwd + c.update, dtype=float)


def _names(problem: Problem, devs) -> str:
    return ",".join(problem.devices.names[d] for d in devs)
