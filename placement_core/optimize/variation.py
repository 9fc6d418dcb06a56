"""Making children from parents anywhere: a batch's recipe is applied by the driver or by a worker alike.

The asynchronous variants split a batch in two steps. Selection (which elites or individuals are
parents) needs the whole population and stays with the driver. Variation (crossover, mutation) needs
only the parents, the parameters and a seed, so it can run where the children are evaluated. On a
10,000-op network variation costs the driver a few hundred microseconds per child. That alone would
cap a cluster at a few dozen workers. A :class:`Recipe` carries what variation needs. Its seed is
derived from the run's seed and the batch number, so the children are the same bytes whichever
process makes them, and a run is the same with variation in the driver or on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import operators as ops
from .reseed import seeded


@dataclass(frozen=True)
class Recipe:
    """One batch to make and evaluate. ``kind``: "given" (``a`` are the placements themselves), "ga"
    (``a``/``b`` parent pairs with their mutation rates) or "map-elites" (``a``/``b`` parent pairs)."""

    kind: str
    a: np.ndarray
    b: np.ndarray | None = None
    rates_a: np.ndarray | None = None
    rates_b: np.ndarray | None = None
    seed: tuple[int, int] = (0, 0)  # (run seed, batch number)
    params: tuple = ()  # the algorithm's parameters, as sorted (name, value) pairs
    n_devices: int = 1  # gene values (devices, then splits): what the placements are packed by

    def __len__(self) -> int:
        return len(self.a)

    def make_and_evaluate(self, problem) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """What a worker does with the recipe it was sent. The backends call this method of the object
        they receive, so ``parallel/`` runs any such work without importing the optimizers."""
        return apply_and_evaluate(problem, self)

    def to_dict(self) -> dict:
        """JSON for a checkpoint: a resumed run makes and evaluates the batches that were in flight."""
        arr = lambda v: None if v is None else np.asarray(v).tolist()  # noqa: E731
        return {"kind": self.kind, "a": arr(self.a), "b": arr(self.b), "rates_a": arr(self.rates_a),
                "rates_b": arr(self.rates_b), "seed": list(self.seed), "params": [list(p) for p in self.params],
                "n_devices": self.n_devices}

    @classmethod
    def from_dict(cls, data: dict, n_ops: int) -> "Recipe":
        def arr(v, dtype):
            return None if v is None else np.asarray(v, dtype=dtype)
        a = np.asarray(data["a"], dtype=np.int32).reshape(-1, n_ops)
        b = None if data["b"] is None else np.asarray(data["b"], dtype=np.int32).reshape(-1, n_ops)
        return cls(data["kind"], a, b, arr(data["rates_a"], float), arr(data["rates_b"], float),
                   tuple(data["seed"]), tuple(tuple(p) for p in data["params"]), int(data["n_devices"]))


def apply(recipe: Recipe, space=None) -> tuple[np.ndarray, np.ndarray | None]:
    """(children as int32 placements, their mutation rates or None); ``space`` is the problem's gene space
    (:func:`.genes.gene_space`), needed when ops may be split."""
    if recipe.kind == "given":
        return np.ascontiguousarray(recipe.a, dtype=np.int32), recipe.rates_a
    if recipe.kind not in ("ga", "map-elites"):
        raise ValueError(f"unknown recipe kind {recipe.kind!r}")
    rng = seeded(recipe.seed)  # default_rng(list(recipe.seed))'s state, without building a generator
    d = recipe.n_devices if space is None else space
    p = dict(recipe.params)
    a = np.asarray(recipe.a, dtype=np.int32)
    b = np.asarray(recipe.b, dtype=np.int32)
    if recipe.kind == "ga":
        return ga_children(rng, a, b, recipe.rates_a, recipe.rates_b, p, d)
    return map_elites_children(rng, a, b, p, d), None


def crossed(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, rate: float, kind: str = "single-point",
            pair: bool = False, rows: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Children of the parent pairs (a[i], b[i]), int32: a pair crosses over with probability ``rate`` (``kind`` as
    in :func:`.operators.crossover`; the segments after odd cuts come from ``b[i]``), one that does not gives
    ``a[i]`` whole. With ``pair``, rows 2i and 2i + 1 are that child and its complement. ``rows`` (ia, ib): the
    parents are a[ia[i]] and b[ib[i]] (the helper reads them where they are)."""
    n = a.shape[1]
    if ops._drawn_here(rng) and kind in ("single-point", "1-point") and 0 < n < 1 << 31:  # one cut: all in C
        k = len(a) if rows is None else len(rows[0])
        out = np.empty((2 * k if pair else k, n), dtype=np.int32)
        ops._batch.cross(rng.bit_generator.capsule, np.ascontiguousarray(a, dtype=np.int32),
                         np.ascontiguousarray(b, dtype=np.int32), float(rate), out, n, pair,
                         *(() if rows is None else (np.ascontiguousarray(rows[0], dtype=np.int64),
                                                    np.ascontiguousarray(rows[1], dtype=np.int64))))
        return out
    if rows is not None:
        a, b = a[rows[0]], b[rows[1]]
    k = len(a)
    cross = np.flatnonzero(rng.random(k) < rate)
    take_b = np.zeros((k, n), dtype=bool)
    if len(cross):
        take_b[cross] = ops.batch_crossover_mask(rng, len(cross), n, kind)
    kids = np.where(take_b, b, a)
    if pair:
        kids = np.stack([kids, np.where(take_b, a, b)], axis=1).reshape(2 * k, n)
    return kids.astype(np.int32)


def ga_mutate(rng: np.random.Generator, kids: np.ndarray, rates: np.ndarray, p: dict, space
              ) -> tuple[np.ndarray, np.ndarray]:
    """The GA's mutation of a batch: each child's inherited rate drifts (Gaussian, clamped) when
    ``self_adaptive``, it mutates each gene with that rate (point mutation), and with probability
    ``zone_mutation_rate`` a run of genes goes to one device (zone mutation). (children, their rates);
    ``kids``, the caller's own int32 array, is mutated in place."""
    k = len(kids)
    if p["self_adaptive"]:
        rates = np.minimum(np.maximum(rates + rng.normal(0, p["rate_drift"], k), p["min_mutation_rate"]),
                           p["max_mutation_rate"])  # a clamp (np.clip costs more than the rest on 45 children)
    kids = ops.batch_point_mutation(rng, kids, rates, space, copy=False)
    zone = np.flatnonzero(rng.random(k) < p["zone_mutation_rate"])
    if len(zone):
        ops.mutate_rows(rng, kids, zone, ops.batch_zone_mutation, space)
    return kids, rates


def ga_children(rng: np.random.Generator, a, b, rates_a, rates_b, p: dict, space) -> tuple[np.ndarray, np.ndarray]:
    """``ga-steady``: one child per parent pair (crossover, then a random weighted mix of the parents'
    rates, then :func:`ga_mutate`)."""
    kids = crossed(rng, a, b, p["crossover_rate"], p.get("crossover", "single-point"))
    alpha = rng.random(len(a))
    return ga_mutate(rng, kids, alpha * rates_a + (1 - alpha) * rates_b, p, space)


def ga_pair_children(rng: np.random.Generator, a, b, rates_a, rates_b, p: dict, space
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The synchronous GA: two complementary children per parent pair, interleaved (pair i gives rows 2i
    and 2i + 1). A pair crosses over with ``crossover_rate`` (child 1 takes ``b`` where child 2 takes
    ``a``); with one weight alpha per pair, child 1 inherits alpha a + (1 - alpha) b of the parents' rates
    and child 2 alpha b + (1 - alpha) a (:func:`.operators.mix_rates`); both then mutate (:func:`ga_mutate`)."""
    m = len(a)
    kids = crossed(rng, a, b, p["crossover_rate"], p.get("crossover", "single-point"), pair=True)
    alpha = rng.random(m)
    rates = np.empty(2 * m)
    rates[0::2], rates[1::2] = alpha * rates_a + (1 - alpha) * rates_b, alpha * rates_b + (1 - alpha) * rates_a
    return ga_mutate(rng, kids, rates, p, space)


def map_elites_children(rng: np.random.Generator, a, b, p: dict, space, rows=None) -> np.ndarray:
    """MAP-Elites: child i is ``a[i]``, crossed over (single point) with ``b[i]`` with ``crossover_rate``,
    then one mutation: replace (``replace_mutation_rate``), else zone (``zone_mutation_rate``), else per
    gene copy or point (:func:`.operators.batch_copy_point_mutation`). ``rows``: as in :func:`crossed`."""
    kids = crossed(rng, a, b, p["crossover_rate"], rows=rows)
    k = len(kids)
    if ops._plain(space, rng) and kids.size:  # the same draws and changes in two C calls around numpy's geometric
        kinds, starts = np.empty(k, dtype=np.uint8), np.empty(k, dtype=np.int64)
        n = kids.shape[1]
        z = ops._batch.me_head(rng.bit_generator.capsule, kids, n, p["replace_mutation_rate"],
                               p["zone_mutation_rate"], int(space), kinds, starts)
        lengths = rng.geometric(0.2, z) if z else starts[:0]
        ops._batch.me_tail(rng.bit_generator.capsule, kids, n, kinds, starts, lengths, int(space),
                           p["mutation_rate"], p["copy_mutation_rate"])
        return kids
    u = rng.random(k)
    replace = u < p["replace_mutation_rate"]
    zone = ~replace & (rng.random(k) < p["zone_mutation_rate"])
    gene = ~replace & ~zone
    if replace.any():
        kids[replace] = ops.batch_replace_mutation(rng, kids[replace], space)
    if zone.any():
        ops.mutate_rows(rng, kids, np.flatnonzero(zone), ops.batch_zone_mutation, space)
    if gene.any():
        ops.mutate_rows(rng, kids, np.flatnonzero(gene), ops.batch_copy_point_mutation, p["copy_mutation_rate"],
                        p["mutation_rate"], space)
    return kids


def apply_and_evaluate(problem, recipe: Recipe) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """What a worker does with a recipe: (children, their objectives, their rates)."""
    from .genes import gene_space
    kids, rates = apply(recipe, gene_space(problem))
    return kids, problem.evaluate_many(kids) if len(kids) else np.zeros(0), rates
