"""MAP-Elites with the thesis' selection and mutation operators (§3.2.3, Table 4.4).

Each step: a parent by tournament (10) among the archive's elites; with
probability 0.4 a second parent and single-point crossover into one child;
then one mutation: replace (0.01), else zone (0.05), else per gene copy (0.4)
or point (0.4). The child takes its niche if the niche is empty or it is
better. Steps are proposed in batches (``batch`` children from the same
archive) so evaluation can be parallel; the batch size, not the number of
workers, fixes the result, which is therefore the same on every backend.
"""

from __future__ import annotations

import numpy as np

from . import operators as ops
from .archive import THESIS_DESCRIPTORS, Archive, make_descriptors
from .base import Optimizer, Param, register


@register
class MapElites(Optimizer):
    name = "map-elites"
    title = "MAP-Elites"
    PARAMS = {
        "initial_size": Param(3, "random placements that seed the archive", int, low=1, high=100_000),
        "batch": Param(50, "children proposed (and evaluated) together", int, low=1, high=100_000),
        "tournament_size": Param(10, "elites drawn per parent selection; the best wins", int, low=1,
                                 high=100_000),
        "crossover_rate": Param(0.4, "probability of a second parent and single-point crossover", float, low=0,
                                high=1),
        "mutation_rate": Param(0.4, "per-gene point mutation (random device)", float, low=0, high=1),
        "copy_mutation_rate": Param(0.4, "per-gene copy mutation (the predecessor's device)", float, low=0, high=1),
        "replace_mutation_rate": Param(0.01, "probability that all genes on one device move to another", float,
                                       low=0, high=1),
        "zone_mutation_rate": Param(0.05, "probability of a zone mutation (a run of genes to one device)", float,
                                    low=0, high=1),
        "cross_edge_bins": Param(40, "bins of the cross-device-edges dimension", int, low=1, high=10_000),
        "include_trivial": Param(False, "seed the archive with every single-device placement", bool),
        "dimensions": Param(",".join(THESIS_DESCRIPTORS), "niche dimensions of the archive (at least two): the "
                            "device used most, the number of devices used, cross-device edges, and (when ops may be "
                            "split, added by default) the share of ops split", str,
                            items=THESIS_DESCRIPTORS + ("sharded",)),
    }

    def __init__(self, problem, descriptors=None, **kw):
        super().__init__(problem, **kw)
        if descriptors is None:
            if problem.splits and "dimensions" not in kw:  # --sharding: how much is split is a niche dimension
                self.params["dimensions"] += ",sharded"
            descriptors = self.params["dimensions"].split(",")
        descs = make_descriptors(problem, descriptors)
        for i, d in enumerate(descs):
            if d.name == "cross_device_edges" and d.size != self.params["cross_edge_bins"]:
                descs[i] = type(d)(problem, self.params["cross_edge_bins"])
        self.archive = Archive(problem, descs)
        self._started = False

    def ask(self, limit: int) -> np.ndarray:
        p = self.params
        if not self._started:
            seeds = [self.initial]
            if p["include_trivial"]:
                seeds.append(np.repeat(np.arange(self.d, dtype=np.int32)[:, None], self.n, axis=1))
            seeds.append(self.random_placements(p["initial_size"]))
            return np.concatenate(seeds)[:limit].astype(np.int32)
        return np.array([self._child() for _ in range(min(p["batch"], limit))], dtype=np.int32)

    def _pick(self, xs: np.ndarray, fs: np.ndarray) -> np.ndarray:
        return xs[ops.tournament(self.rng, fs, self.params["tournament_size"], 1)[0]]

    def _child(self) -> np.ndarray:
        p = self.params
        _, xs, fs = self._pool
        child = self._pick(xs, fs)
        if self.rng.random() < p["crossover_rate"]:
            other = self._pick(xs, fs)
            child, _ = ops.n_point_crossover(self.rng, child, other, 1)
        if self.rng.random() < p["replace_mutation_rate"]:
            return ops.replace_mutation(self.rng, child, self.space)
        if self.rng.random() < p["zone_mutation_rate"]:
            return ops.zone_mutation(self.rng, child, self.space)
        return self._gene_mutation(child)

    def _gene_mutation(self, x: np.ndarray) -> np.ndarray:
        """Per gene: copy the predecessor's device (as it was), else maybe a random device."""
        p = self.params
        copy = self.rng.random(self.n) < p["copy_mutation_rate"]
        point = self.rng.random(self.n) < p["mutation_rate"]
        fresh = (self.rng.integers(0, self.d, self.n) if not self.sharded
                 else self.space.draw(self.rng, np.arange(self.n)))
        y = np.where(point, fresh, x).astype(np.int32)
        copy[0] = False
        idx = np.flatnonzero(copy)
        y[idx] = x[idx - 1]
        return y if not self.sharded else self.space.repair(y)

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self._started = True
        self.archive.add(placements, objectives)
        self._pool = self.archive.arrays()
        self.current = float(objectives.min()) if len(objectives) else self.current

    def snapshot(self) -> dict:
        niches, _, fs = self._pool if self._started else ([], None, np.zeros(0))
        return {"archive_size": len(self.archive), "coverage": self.archive.coverage,
                "shape": list(self.archive.shape), "niches": [list(k) for k in niches], "objectives": fs.tolist()}

    def extras(self) -> dict:
        return {"archive": self.archive}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "archive": self.archive.to_dict(), "started": self._started}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.archive.load_dict(state["archive"])
        self._started = state["started"]
        if self._started:
            self._pool = self.archive.arrays()
