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
from .operators import _batch


@dataclass
class Descriptor:
    """One archive dimension: ``bins(placements) -> int array`` with values in [0, size)."""

    name: str
    label: str
    size: int

    def values(self, problem: Problem, placements: np.ndarray) -> np.ndarray:
        """The raw (unbinned) value, for display."""
        raw = self.measured(batch_stats(problem, placements, *getattr(self, "_edges", ())), placements)
        if raw is None:
            raise NotImplementedError
        return raw

    def bins(self, problem: Problem, placements: np.ndarray) -> np.ndarray:
        return self.binned(self.values(problem, placements))

    # The built-in descriptors read what one pass over a batch counts (batch_stats), so the archive counts
    # once for all of them; one without ``measured`` (a user's) is asked through values() and bins().
    def measured(self, stats: np.ndarray, placements: np.ndarray) -> np.ndarray | None:
        """The raw values from ``batch_stats`` columns (most-used device, devices used, cross-device edges)."""
        return None

    def binned(self, values: np.ndarray) -> np.ndarray:
        return values.astype(np.int64)

    def tick_labels(self, problem: Problem) -> list[str]:
        return [str(i) for i in range(self.size)]


_NO_EDGES = np.zeros(0, dtype=np.int64)


def batch_stats(problem: Problem, placements: np.ndarray, src: np.ndarray = _NO_EDGES, dst: np.ndarray = _NO_EDGES
                ) -> np.ndarray:
    """``[placements, 3]`` int64: the most-used device (ties: the lowest index; a split op counts on each of its
    devices), the number of devices used and the number of edges ``src -> dst`` between different genes. One C
    pass when the batch helper is built, else numpy."""
    placements = np.ascontiguousarray(placements, dtype=np.int32).reshape(-1, problem.n_ops)
    uses = _uses(problem)
    out = np.empty((len(placements), 3), dtype=np.int64)
    if _batch is not None and problem.n_ops:
        _batch.describe(placements, problem.n_ops, uses if problem.splits else None, uses.shape[1], src, dst, out)
        return out
    counts = uses[placements].sum(axis=1, dtype=np.int64)  # [placements, devices]
    out[:, 0] = counts.argmax(axis=1)
    out[:, 1] = (counts > 0).sum(axis=1)
    out[:, 2] = (placements[:, src] != placements[:, dst]).sum(axis=1) if len(src) else 0
    return out


def _uses(problem: Problem) -> np.ndarray:
    """``[genes, devices]`` uint8: the devices each gene runs on (the identity without splits), made once."""
    cached = getattr(problem, "_gene_uses", None)
    if cached is None:
        from .genes import gene_space
        space = gene_space(problem)
        cached = (np.eye(problem.n_devices) if isinstance(space, (int, np.integer)) else space.uses).astype(np.uint8)
        problem._gene_uses = cached
    return cached


class MostUsedDevice(Descriptor):
    def __init__(self, problem: Problem):
        super().__init__("most_used_device", "most-used device", problem.n_devices)

    def measured(self, stats, placements):
        return stats[:, 0]

    def tick_labels(self, problem):
        return list(problem.devices.names)


class DevicesUsed(Descriptor):
    def __init__(self, problem: Problem):
        super().__init__("devices_used", "devices used", problem.n_devices)

    def measured(self, stats, placements):
        return stats[:, 1]

    def binned(self, values):
        return values.astype(np.int64) - 1

    def tick_labels(self, problem):
        return [str(i + 1) for i in range(self.size)]


class CrossDeviceEdges(Descriptor):
    def __init__(self, problem: Problem, bins: int = 40):
        super().__init__("cross_device_edges", "cross-device edges", bins)
        edges = problem.graph.edges()
        self._edges = (np.array([e[0] for e in edges], dtype=np.int64), np.array([e[1] for e in edges], dtype=np.int64))
        self.max_edges = max(len(edges), 1)

    def measured(self, stats, placements):
        return stats[:, 2]

    def binned(self, values):
        return np.rint(values / self.max_edges * (self.size - 1)).astype(np.int64)

    def tick_labels(self, problem):
        return [f"{round(i * self.max_edges / (self.size - 1))}" for i in range(self.size)]


class ShardedShare(Descriptor):
    """How much of the network is split (docs/sharding.md): the share of ops whose gene is a split, in tenths."""

    def __init__(self, problem: Problem, bins: int = 11):
        super().__init__("sharded", "ops split", bins)
        self._n_devices = problem.n_devices

    def values(self, problem, placements):
        return (placements >= problem.n_devices).mean(axis=1)

    def measured(self, stats, placements):
        return (placements >= self._n_devices).mean(axis=1)

    def binned(self, values):
        return np.rint(values * (self.size - 1)).astype(np.int64)

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
        # (the elites dict it describes, niches sorted, placements, objectives, the niches' row-major codes, or
        # None when a niche lies outside the shape)
        self._sorted: tuple[dict, list, np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._sizes = np.array(self.shape, dtype=np.int64)
        self._strides = np.cumprod((1,) + self.shape[:0:-1], dtype=np.int64)[::-1]
        # the built-in descriptors share one count of the batch (batch_stats); a user's is asked on its own
        self._counted = all(type(d) in DESCRIPTORS.values() for d in descriptors)
        self._edges = next((d._edges for d in descriptors if isinstance(d, CrossDeviceEdges)), ())
        # the built-in descriptors' raw values and bins in C (kind, divisor, steps per dimension; see _batch.niches)
        kinds = {MostUsedDevice: 0, DevicesUsed: 1, CrossDeviceEdges: 2, ShardedShare: 3}
        self._kinds = (np.array([kinds[type(d)] for d in descriptors], dtype=np.uint8),
                       np.array([float(getattr(d, "max_edges", 1)) for d in descriptors]),
                       np.array([float(d.size - 1) for d in descriptors])) if self._counted else None

    def __len__(self) -> int:
        return len(self.elites)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.descriptors]

    @property
    def coverage(self) -> float:
        return len(self.elites) / float(np.prod(self.shape))

    def describe(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bins, raw = self._measure(placements)
        if raw is None:
            raw = np.stack([d.values(self.problem, placements) for d in self.descriptors], axis=1)
        return bins, raw

    def _measure(self, placements: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(bins, raw values) of a batch; the raw values only when one count gives them for every placement."""
        if not self._counted:
            return np.stack([d.bins(self.problem, placements) for d in self.descriptors], axis=1), None
        stats = batch_stats(self.problem, placements, *self._edges)
        bins, raw = np.empty((len(stats), len(self.shape)), dtype=np.int64), np.empty((len(stats), len(self.shape)))
        if _batch is not None and self.problem.n_ops:  # one C pass: the same numbers as the loop below
            _batch.niches(np.ascontiguousarray(placements, dtype=np.int32), self.problem.n_ops, stats, *self._kinds,
                          self.problem.n_devices, bins, raw)
            return bins, raw
        for j, d in enumerate(self.descriptors):
            raw[:, j] = v = d.measured(stats, placements)
            bins[:, j] = d.binned(v)
        return bins, raw

    def add(self, placements: np.ndarray, objectives: np.ndarray) -> int:
        """Insert a batch; returns how many niches improved or were filled. The same as inserting the
        placements one by one in order: a niche ends with the best of its incumbent and the batch's
        placements in it, and on a tie the earliest (the incumbent first) stays."""
        if not len(placements):
            return 0
        fs = np.ascontiguousarray(objectives, dtype=float)
        bins, raw = self._measure(placements)
        view = self._view()
        found = self._winners_in_c(bins, fs, view) if _batch is not None else None
        if found is not None:
            won, new, codes_won = found
        else:
            won, new, codes_won = self._winners(bins, fs, view)
        if not len(won):
            return 0
        if raw is None:
            raw = np.stack([d.values(self.problem, placements[won]) for d in self.descriptors], axis=1).astype(float)
        else:
            raw = raw[won]
        niches = list(map(tuple, bins[won].tolist()))
        xs_won, fs_won = np.array(placements[won], dtype=np.int32), fs[won]  # one copy: each elite owns a row
        for niche, x, f, r in zip(niches, xs_won, fs_won.tolist(), raw.tolist()):
            self.elites[niche] = Elite(niche, x, f, tuple(r))
        self._keep_sorted(view, niches, codes_won, new, xs_won, fs_won)
        return len(won)

    def _winners_in_c(self, bins, fs, view):
        """(rows that win their niche, in niche order; whether each niche was empty; their codes) in one C call,
        or None where that does not apply (no codes kept, a bin out of range): the same as ``_winners``."""
        codes = view[4]
        if codes is None:
            return None
        k = len(fs)
        rows, fresh, code_out = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.uint8), np.empty(k, dtype=np.int64)
        count = _batch.best_per_niche(np.ascontiguousarray(bins, dtype=np.int64), self._sizes, fs, codes, view[3],
                                      rows, fresh, code_out)
        return None if count < 0 else (rows[:count], fresh[:count].astype(bool), code_out[:count])

    def _winners(self, bins, fs, view):
        """numpy's ``_winners_in_c``; with a bin out of range, codes None and the incumbents looked up by tuple."""
        inside = bool(((bins >= 0) & (bins < self._sizes)).all())
        if inside:  # one integer per niche (row-major: ordered as the niches' tuples)
            key = bins @ self._strides
        else:  # a descriptor out of its range: still one niche per distinct row
            key = np.unique(bins, axis=0, return_inverse=True)[1].reshape(-1)
        order = np.lexsort((np.arange(len(fs)), fs, key))  # by niche, then objective, then batch order
        ks = key[order]
        first = order[np.concatenate(([True], ks[1:] != ks[:-1]))]  # each niche's best in the batch, in niche order
        codes, sorted_fs = view[4], view[3]
        if inside and codes is not None:  # the incumbents looked up by code, all at once
            kf = key[first]
            pos = np.minimum(np.searchsorted(codes, kf), max(len(codes) - 1, 0))
            had = codes[pos] == kf if len(codes) else np.zeros(len(kf), dtype=bool)
            better = ~had | (fs[first] < (sorted_fs[pos] if len(codes) else 0.0))
            return first[better], ~had[better], kf[better]
        won, new = [], []
        for i, niche in zip(first.tolist(), map(tuple, bins[first].tolist())):
            old = self.elites.get(niche)
            if old is None or fs[i] < old.objective:
                won.append(i)
                new.append(old is None)
        return np.array(won, dtype=np.int64), np.array(new, dtype=bool), key[won] if inside else None

    def _view(self) -> tuple:
        """The sorted arrays (``_sorted``), rebuilt from the elites when they were replaced or changed size."""
        cached = self._sorted
        if cached is None or cached[0] is not self.elites or len(cached[1]) != len(self.elites):
            niches = sorted(self.elites)
            arr = np.array(niches, dtype=np.int64).reshape(-1, len(self.shape))
            codes = arr @ self._strides if ((arr >= 0) & (arr < self._sizes)).all() else None
            cached = self._sorted = (
                self.elites, niches,
                np.array([self.elites[k].placement for k in niches], dtype=np.int32).reshape(-1, self.problem.n_ops),
                np.array([self.elites[k].objective for k in niches], dtype=float), codes)
        return cached

    def _keep_sorted(self, view, niches, codes_won, new, xs_won, fs_won) -> None:
        """The batch's winners into the sorted arrays: the new niches inserted (one concatenation per array), then
        every winner's row and objective written where its niche is."""
        owner, keys, xs, fs, codes = view
        if codes is not None and codes_won is not None:
            if new.any():  # np.insert's work: the old arrays cut where the new niches go, the pieces joined
                fresh = codes_won[new]
                at = np.searchsorted(codes, fresh).tolist()
                cuts = list(zip([0] + at, at + [len(codes)]))

                def merged(was, add):
                    pieces = [was[:at[0]]]
                    for j, (lo, hi) in enumerate(cuts[1:]):
                        pieces += [add[j:j + 1], was[lo:hi]]
                    return np.concatenate(pieces)
                codes, xs, fs = merged(codes, fresh), merged(xs, xs_won[new]), merged(fs, fs_won[new])
                for j, (i, niche) in enumerate(zip(at, [n for n, f in zip(niches, new) if f])):
                    keys.insert(i + j, niche)  # ascending final positions: each lands where it belongs
            at = np.searchsorted(codes, codes_won)
            xs[at], fs[at] = xs_won, fs_won
            self._sorted = (owner, keys, xs, fs, codes)
            return
        for niche, x, f, fresh in zip(niches, xs_won, fs_won.tolist(), new.tolist()):  # a niche outside the shape
            i = bisect.bisect_left(keys, niche)
            if fresh:
                keys.insert(i, niche)
                xs, fs = np.insert(xs, i, x, axis=0), np.insert(fs, i, f)
            else:
                xs[i], fs[i] = x, f
        self._sorted = (owner, keys, xs, fs, None)

    def best(self) -> Elite:
        return min(self.elites.values(), key=lambda e: e.objective)

    def ranked(self) -> list[Elite]:
        return sorted(self.elites.values(), key=lambda e: (e.objective, e.niche))

    def arrays(self) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
        """Niches in sorted order with their placements and objectives. The arrays are the archive's own:
        valid until the next ``add`` (which updates them in place), not to be modified."""
        _, niches, xs, fs, _ = self._view()
        return list(niches), xs, fs

    def to_dict(self) -> dict:
        return {"dimensions": [{"name": d.name, "label": d.label, "size": d.size} for d in self.descriptors],
                "elites": [{"niche": list(e.niche), "objective_s": e.objective, "descriptors": list(e.descriptors),
                            "placement": e.placement.tolist()} for e in self.ranked()]}

    def load_dict(self, data: dict) -> None:
        self.elites = {tuple(e["niche"]): Elite(tuple(e["niche"]), np.array(e["placement"], dtype=np.int32),
                                                float(e["objective_s"]), tuple(e["descriptors"]))
                       for e in data["elites"]}
