"""The MAP-Elites archive and the niche descriptors (thesis §3.2.3).

A descriptor maps placements to an integer bin along one dimension; the
archive keeps, per niche (a tuple of bins), the best placement seen. The
thesis' three dimensions are the most-used device, the number of devices used
and the number of cross-device edges (40 bins scaled by the most possible).
Descriptors are plain objects, so users can plug in their own.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError
from ..problem import Problem


@dataclass
class Descriptor:
    """One archive dimension: ``bins(placements) -> int array`` with values in [0, size)."""

    name: str
    label: str
    size: int

    def values(self, problem: Problem, placements: np.ndarray) -> np.ndarray:
        """The raw (unbinned) value, for display."""
        raise NotImplementedError

    def bins(self, problem: Problem, placements: np.ndarray) -> np.ndarray:
        return self.values(problem, placements).astype(np.int64)

    def tick_labels(self, problem: Problem) -> list[str]:
        return [str(i) for i in range(self.size)]


def _device_use(problem: Problem, placements: np.ndarray) -> np.ndarray | None:
    """``[placements, ops, devices]``: which devices each op runs on, when ops may be split (else None)."""
    if not problem.splits:
        return None
    from .genes import gene_space
    return gene_space(problem).uses[placements]


def _device_counts(placements: np.ndarray, n_devices: int) -> np.ndarray:
    """``[placements, devices]``: how many ops each placement puts on each device (one pass over the batch)."""
    k = len(placements)
    rows = np.arange(k, dtype=np.int64)[:, None] * n_devices
    return np.bincount((placements + rows).ravel(), minlength=k * n_devices).reshape(k, n_devices)


class MostUsedDevice(Descriptor):
    def __init__(self, problem: Problem):
        super().__init__("most_used_device", "most-used device", problem.n_devices)

    def values(self, problem, placements):
        use = _device_use(problem, placements)  # a split op counts on each of its devices
        counts = use.sum(axis=1) if use is not None else _device_counts(placements, problem.n_devices)
        return counts.argmax(axis=1)  # ties: the lowest device index

    def tick_labels(self, problem):
        return list(problem.devices.names)


class DevicesUsed(Descriptor):
    def __init__(self, problem: Problem):
        super().__init__("devices_used", "devices used", problem.n_devices)

    def values(self, problem, placements):
        use = _device_use(problem, placements)
        used = use.any(axis=1) if use is not None else _device_counts(placements, problem.n_devices) > 0
        return used.sum(axis=1)

    def bins(self, problem, placements):
        return self.values(problem, placements) - 1

    def tick_labels(self, problem):
        return [str(i + 1) for i in range(self.size)]


class CrossDeviceEdges(Descriptor):
    def __init__(self, problem: Problem, bins: int = 40):
        super().__init__("cross_device_edges", "cross-device edges", bins)
        edges = problem.graph.edges()
        self._src = np.array([e[0] for e in edges], dtype=np.int64)
        self._dst = np.array([e[1] for e in edges], dtype=np.int64)
        self.max_edges = max(len(edges), 1)

    def values(self, problem, placements):
        if len(self._src) == 0:
            return np.zeros(len(placements), dtype=np.int64)
        return (placements[:, self._src] != placements[:, self._dst]).sum(axis=1)

    def bins(self, problem, placements):
        v = self.values(problem, placements)
        return np.rint(v / self.max_edges * (self.size - 1)).astype(np.int64)

    def tick_labels(self, problem):
        return [f"{round(i * self.max_edges / (self.size - 1))}" for i in range(self.size)]


class ShardedShare(Descriptor):
    """How much of the network is split (docs/sharding.md): the share of ops whose gene is a split, in tenths."""

    def __init__(self, problem: Problem, bins: int = 11):
        super().__init__("sharded", "ops split", bins)

    def values(self, problem, placements):
        return (placements >= problem.n_devices).mean(axis=1)

    def bins(self, problem, placements):
        return np.rint(self.values(problem, placements) * (self.size - 1)).astype(np.int64)

    def tick_labels(self, problem):
        return [f"{i / (self.size - 1):.0%}" for i in range(self.size)]


DESCRIPTORS = {"most_used_device": MostUsedDevice, "devices_used": DevicesUsed,
               "cross_device_edges": CrossDeviceEdges, "sharded": ShardedShare}
THESIS_DESCRIPTORS = ("most_used_device", "devices_used", "cross_device_edges")


def make_descriptors(problem: Problem, spec) -> list[Descriptor]:
    out = []
    for item in spec:
        if isinstance(item, Descriptor):
            out.append(item)
        elif item in DESCRIPTORS:
            out.append(DESCRIPTORS[item](problem))
        else:
            raise InputError(f"unknown niche descriptor {item!r}", field="descriptors",
                             fix="Use " + ", ".join(DESCRIPTORS) + " or a Descriptor object")
    return out


@dataclass
class Elite:
    niche: tuple[int, ...]
    placement: np.ndarray
    objective: float
    descriptors: tuple[float, ...]  # raw values, one per dimension


class Archive:
    """niche -> elite; inserting keeps the better placement (ties keep the incumbent)."""

    def __init__(self, problem: Problem, descriptors: list[Descriptor]):
        self.problem = problem
        self.descriptors = descriptors
        self.shape = tuple(d.size for d in descriptors)
        self.elites: dict[tuple[int, ...], Elite] = {}
        # arrays() kept up to date by add() instead of rebuilt per batch (a 10,000-op archive is tens of MB):
        # (the elites dict it describes, niches sorted, placements, objectives)
        self._sorted: tuple[dict, list, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.elites)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.descriptors]

    @property
    def coverage(self) -> float:
        return len(self.elites) / float(np.prod(self.shape))

    def describe(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bins = np.stack([d.bins(self.problem, placements) for d in self.descriptors], axis=1)
        raw = np.stack([d.values(self.problem, placements) for d in self.descriptors], axis=1)
        return bins, raw

    def add(self, placements: np.ndarray, objectives: np.ndarray) -> int:
        """Insert a batch; returns how many niches improved or were filled. The same as inserting the
        placements one by one in order: a niche ends with the best of its incumbent and the batch's
        placements in it, and on a tie the earliest (the incumbent first) stays."""
        if not len(placements):
            return 0
        fs = np.asarray(objectives, dtype=float)
        bins = np.stack([d.bins(self.problem, placements) for d in self.descriptors], axis=1)
        if ((bins >= 0) & (bins < np.array(self.shape))).all():  # one integer per niche (row-major)
            key = bins @ np.cumprod((1,) + self.shape[:0:-1], dtype=np.int64)[::-1]
        else:  # a descriptor out of its range: still one niche per distinct row
            key = np.unique(bins, axis=0, return_inverse=True)[1].reshape(-1)
        order = np.lexsort((np.arange(len(fs)), fs, key))  # by niche, then objective, then batch order
        ks = key[order]
        first = order[np.r_[True, ks[1:] != ks[:-1]]]  # each niche's best in the batch
        winners = []
        for i, niche in zip(first.tolist(), map(tuple, bins[first].tolist())):
            old = self.elites.get(niche)
            if old is None or fs[i] < old.objective:
                winners.append((i, niche, old is None))
        if not winners:
            return 0
        rows = np.array([i for i, _, _ in winners])
        raw = np.stack([d.values(self.problem, placements[rows]) for d in self.descriptors], axis=1)
        for (i, niche, new), r in zip(winners, raw):
            x = placements[i]
            self.elites[niche] = Elite(niche, x.copy(), float(fs[i]), tuple(float(v) for v in r))
            self._keep_sorted(niche, x, float(fs[i]), new=new)
        return len(winners)

    def _keep_sorted(self, niche, x, f, new: bool) -> None:
        if self._sorted is None or self._sorted[0] is not self.elites:
            return  # none built yet, or the elites were replaced wholesale: arrays() rebuilds
        owner, keys, xs, fs = self._sorted
        i = bisect.bisect_left(keys, niche)
        if new:
            keys.insert(i, niche)
            self._sorted = (owner, keys, np.insert(xs, i, x, axis=0), np.insert(fs, i, f))
        else:
            xs[i], fs[i] = x, f

    def best(self) -> Elite:
        return min(self.elites.values(), key=lambda e: e.objective)

    def ranked(self) -> list[Elite]:
        return sorted(self.elites.values(), key=lambda e: (e.objective, e.niche))

    def arrays(self) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
        """Niches in sorted order with their placements and objectives. The arrays are the archive's own:
        valid until the next ``add`` (which updates them in place), not to be modified."""
        cached = self._sorted
        if cached is None or cached[0] is not self.elites or len(cached[1]) != len(self.elites):
            niches = sorted(self.elites)
            cached = self._sorted = (
                self.elites, niches,
                np.array([self.elites[k].placement for k in niches], dtype=np.int32).reshape(-1, self.problem.n_ops),
                np.array([self.elites[k].objective for k in niches], dtype=float))
        return list(cached[1]), cached[2], cached[3]

    def to_dict(self) -> dict:
        return {"dimensions": [{"name": d.name, "label": d.label, "size": d.size} for d in self.descriptors],
                "elites": [{"niche": list(e.niche), "objective_s": e.objective, "descriptors": list(e.descriptors),
                            "placement": e.placement.tolist()} for e in self.ranked()]}

    def load_dict(self, data: dict) -> None:
        self.elites = {tuple(e["niche"]): Elite(tuple(e["niche"]), np.array(e["placement"], dtype=np.int32),
                                                float(e["objective_s"]), tuple(e["descriptors"]))
                       for e in data["elites"]}
