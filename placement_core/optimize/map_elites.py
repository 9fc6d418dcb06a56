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
from . import variation
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
        k = min(p["batch"], limit)
        xs, both = self._parent_rows(k)
        return variation.map_elites_children(self.rng, xs, xs, p, self.space, rows=(both[:k], both[k:]))

    def _parent_rows(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(the elites' placements, rows of k first parents then k second parents), each by tournament among the
        elites: drawn in one call, the same numbers as two calls of k (bounded integers carry nothing from one
        call to the next)."""
        _, xs, fs = self._pool
        return xs, ops.tournament(self.rng, fs, self.params["tournament_size"], 2 * k)

    def _parent_pairs(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k parent pairs of :meth:`_parent_rows`, gathered (a recipe carries them to where they are used)."""
        xs, both = self._parent_rows(k)
        both = xs[both]
        return both[:k], both[k:]

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
