"""Variation and selection operators on placement arrays (thesis §3.2), shared by the algorithms.

Every function takes the numpy Generator it draws from, so runs are reproducible. ``n_devices`` is the
device count (an int: genes are devices, drawn exactly as always) or, when ops may be split, the
problem's :class:`~.genes.Genes`, which draws genes per op and repairs the ones an op cannot take.
"""

from __future__ import annotations

import numpy as np

try:  # the per-gene work after the draws, in one C pass (setup.py builds it; the numpy below is the same work)
    from . import _batch  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - installs without a C compiler
    _batch = None


def _fresh(rng: np.random.Generator, space, positions: np.ndarray) -> np.ndarray:
    """A random gene for each op position: a device (an int space), or the gene space's draw."""
    if isinstance(space, (int, np.integer)):
        return rng.integers(0, space, len(positions))
    return space.draw(rng, positions)


def _one(rng: np.random.Generator, space) -> int:
    """One gene for many ops at once (repaired per op afterwards)."""
    return int(rng.integers(0, space)) if isinstance(space, (int, np.integer)) else space.draw_any(rng)


def _repaired(space, y: np.ndarray) -> np.ndarray:
    return y if isinstance(space, (int, np.integer)) else space.repair(y)


def gene_count(space) -> int:
    """How many gene values there are (devices, then splits)."""
    return int(space) if isinstance(space, (int, np.integer)) else space.total


def point_mutation(rng: np.random.Generator, x: np.ndarray, rate: float, n_devices) -> np.ndarray:
    """Each gene gets a random device with probability ``rate``."""
    y = x.copy()
    mask = rng.random(len(x)) < rate
    y[mask] = _fresh(rng, n_devices, np.flatnonzero(mask))
    return y


def zone_mutation(rng: np.random.Generator, x: np.ndarray, n_devices, p_length: float = 0.2) -> np.ndarray:
    """A random run of consecutive genes (geometric length) is set to one random device."""
    y = x.copy()
    start = int(rng.integers(0, len(x)))
    length = min(int(rng.geometric(p_length)), len(x) - start)
    y[start:start + length] = _one(rng, n_devices)
    return _repaired(n_devices, y)


def copy_mutation(rng: np.random.Generator, x: np.ndarray, rate: float, space=None) -> np.ndarray:
    """Each gene takes its predecessor's device (as it was before this mutation) with probability ``rate``."""
    y = x.copy()
    mask = rng.random(len(x)) < rate
    mask[0] = False
    idx = np.flatnonzero(mask)
    y[idx] = x[idx - 1]
    return y if space is None else _repaired(space, y)


def replace_mutation(rng: np.random.Generator, x: np.ndarray, n_devices) -> np.ndarray:
    """Every gene on device a moves to device b (a among the used devices, b any device)."""
    used = np.unique(x)
    a = used[int(rng.integers(0, len(used)))]
    b = _one(rng, n_devices)
    y = x.copy()
    y[x == a] = b
    return _repaired(n_devices, y)


def n_point_crossover(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, points: int = 1
                      ) -> tuple[np.ndarray, np.ndarray]:
    n = len(a)
    if n < 2:
        return a.copy(), b.copy()
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(points, n - 1), replace=False))
    segment = np.zeros(n, dtype=bool)
    for k, c in enumerate(cuts):
        segment[c:] = (k % 2 == 0)
    c1 = np.where(segment, b, a)
    c2 = np.where(segment, a, b)
    return c1.astype(np.int32), c2.astype(np.int32)


def uniform_crossover(rng: np.random.Generator, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mask = rng.random(len(a)) < 0.5
    return np.where(mask, a, b).astype(np.int32), np.where(mask, b, a).astype(np.int32)


def valid_crossover(kind: str) -> bool:
    """single-point (1-point), N-point with N >= 1, or uniform."""
    if kind in ("uniform", "single-point", "1-point"):
        return True
    head, _, tail = kind.partition("-")
    return tail == "point" and head.isdigit() and int(head) >= 1


def crossover(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "uniform":
        return uniform_crossover(rng, a, b)
    points = 1 if kind in ("single-point", "1-point") else int(kind.split("-")[0])
    return n_point_crossover(rng, a, b, points)


def linear_rank_probabilities(n: int, s: float = 2.0) -> np.ndarray:
    """Probability of picking each of n ranked individuals (best first); s in [1, 2] is the pressure."""
    if n == 1:
        return np.ones(1)
    i = np.arange(n - 1, -1, -1)  # best gets the highest i
    p = (2 - s) / n + 2 * i * (s - 1) / (n * (n - 1))
    return p / p.sum()


def exponential_rank_probabilities(n: int) -> np.ndarray:
    """Probability of picking each of n ranked individuals (best first), proportional to 1 - e^(-i).

    i = n - 1 for the best down to 0 for the worst: the formula of the thesis' published code
    (Exprimo), copied as it is. Note the discrepancy with the thesis' text (§3.2.2), which says
    exponential ranking gives "the most selection pressure": 1 - e^(-i) saturates at 1 after a few
    ranks, so apart from the last few individuals the distribution is uniform. For the GA's population
    of 50 the best gets 1 / 48.418 = 0.0207 (uniform: 0.02; linear ranking with s = 2: 0.04) and only
    the worst (0) and the next few (0.013, 0.018, ...) are disfavoured, i.e. *less* pressure than linear
    ranking. A textbook exponential ranking (p_i ∝ c^(rank), c < 1) would match the text; we keep the
    code's formula so that its runs can be compared with the thesis'.
    """
    i = np.arange(n - 1, -1, -1)
    p = 1.0 - np.exp(-i.astype(float))
    if p.sum() == 0:
        return np.ones(n) / n
    return p / p.sum()


def sus_cdf(probabilities: np.ndarray) -> np.ndarray:
    """The cumulative probabilities :func:`stochastic_universal_sampling` searches (the last exactly 1)."""
    cum = np.cumsum(probabilities)
    cum[-1] = 1.0
    return cum


def stochastic_universal_sampling(rng: np.random.Generator, probabilities: np.ndarray, k: int,
                                  cum: np.ndarray | None = None) -> np.ndarray:
    """k indices with expected counts k * p, low variance (Baker's SUS); ``cum``: :func:`sus_cdf` of the
    probabilities when the caller keeps it."""
    cum = sus_cdf(probabilities) if cum is None else cum
    pointers = (rng.random() + np.arange(k)) / k
    return np.minimum(np.searchsorted(cum, pointers, side="left"), len(cum) - 1)


def choice_cdf(probabilities: np.ndarray) -> np.ndarray:
    """What ``Generator.choice(n, size, p=probabilities)`` searches (its ``p.cumsum()``, over its last value),
    made once for :func:`ranked_choice`; ``probabilities`` valid as ``choice`` requires (non-negative, sum 1)."""
    cdf = np.asarray(probabilities, dtype=float).cumsum()
    cdf /= cdf[-1]
    return cdf


def ranked_choice(rng: np.random.Generator, cdf: np.ndarray, k: int) -> np.ndarray:
    """``rng.choice(len(cdf), size=k, p=probabilities)`` with the cdf made by :func:`choice_cdf`: the same draws
    (k uniforms) and indices, without ``choice``'s checks and cumulative sum on every call."""
    return cdf.searchsorted(rng.random(k), side="right").astype(np.int64, copy=False)


def tournament(rng: np.random.Generator, objectives: np.ndarray, size: int, k: int) -> np.ndarray:
    """k winners, each the best of ``size`` indices drawn uniformly (with replacement; ties: first drawn)."""
    if _drawn_here(rng) and 0 < len(objectives) < 1 << 31 and size >= 1:
        out = np.empty(k, dtype=np.int64)
        _batch.tournament(rng.bit_generator.capsule, np.ascontiguousarray(objectives, dtype=float), size, k, out)
        return out
    draws = rng.integers(0, len(objectives), (k, size))
    return draws[np.arange(k), np.argmin(objectives[draws], axis=1)]


def mix_rates(rng: np.random.Generator, rate_a: float, rate_b: float) -> tuple[float, float]:
    """Self-adaptive mutation rates of two children (thesis §3.2.2): a random weight alpha in [0, 1),
    child 1 gets alpha * a + (1 - alpha) * b, child 2 alpha * b + (1 - alpha) * a."""
    alpha = rng.random()
    return alpha * rate_a + (1 - alpha) * rate_b, alpha * rate_b + (1 - alpha) * rate_a


def drift_rate(rng: np.random.Generator, rate: float, sd: float, low: float, high: float) -> float:
    """A child's inherited rate plus Gaussian drift N(0, sd), clamped to [low, high]."""
    return float(np.clip(rate + rng.normal(0, sd), low, high))


# -- the same operators on a whole batch at once (the asynchronous variants: one numpy call per batch
#    instead of Python per child, so the driver keeps up with several workers) -------------------------

def batch_crossover_mask(rng: np.random.Generator, k: int, n: int, kind: str) -> np.ndarray:
    """(k, n) booleans, True where a child takes its second parent's gene: ``kind`` as in ``crossover``
    (N cut points, distinct per row, the segments after odd cuts from the second parent; or uniform)."""
    if kind == "uniform":
        return rng.random((k, n)) < 0.5
    points = 1 if kind in ("single-point", "1-point") else int(kind.split("-")[0])
    points = min(points, n - 1)
    if points < 1:
        return np.zeros((k, n), dtype=bool)
    if points == 1:  # one cut per row (the same draws as below, which cannot repeat with one column)
        return np.arange(n)[None, :] >= rng.integers(1, n, (k, 1))
    if 4 * points <= n - 1:  # few cuts among many positions: draw and redraw the rows with a repeat
        cuts = np.sort(rng.integers(1, n, (k, points)), axis=1)
        while True:
            again = np.flatnonzero((np.diff(cuts, axis=1) == 0).any(axis=1))
            if not len(again):
                break
            cuts[again] = np.sort(rng.integers(1, n, (len(again), points)), axis=1)
    else:  # many: a random subset by sorting random keys
        cuts = np.sort(np.argsort(rng.random((k, n - 1)), axis=1)[:, :points] + 1, axis=1)
    crossed = (np.arange(n)[None, :, None] >= cuts[:, None, :]).sum(axis=2)
    return crossed % 2 == 1


def batch_point_mutation(rng: np.random.Generator, xs: np.ndarray, rates: np.ndarray, n_devices, copy: bool = True
                         ) -> np.ndarray:
    """Each gene of row i gets a random device with probability ``rates[i]`` (in ``xs`` itself, an int32
    C-contiguous array, unless ``copy``)."""
    rate = np.asarray(rates, dtype=np.float32).reshape(-1, 1)
    out = np.array(xs, dtype=np.int32) if copy else xs
    if _plain(n_devices, rng) and out.size:
        rate = rate[:, 0] if len(rate) == len(out) else np.broadcast_to(rate[:, 0], len(out)).copy()
        _batch.point(rng.bit_generator.capsule, out, rate, out.shape[1], int(n_devices))
        return out
    u = _uniform(rng, xs.shape)
    np.copyto(out, _devices(rng, xs.shape, n_devices), where=u < rate)
    return out


def batch_zone_mutation(rng: np.random.Generator, xs: np.ndarray, n_devices, p_length: float = 0.2
                        ) -> np.ndarray:
    """Per row, a run of consecutive genes (geometric length, from a random start) set to one random device."""
    k, n = xs.shape
    start = rng.integers(0, n, k)
    end = np.minimum(start + rng.geometric(p_length, k), n)
    if isinstance(n_devices, (int, np.integer)):
        device = rng.integers(0, n_devices, k)
    else:
        device = np.array([n_devices.draw_any(rng) for _ in range(k)], dtype=np.int64)
    out = np.array(xs, dtype=np.int32)
    if _batch is not None and out.size:
        _batch.zone(out, np.arange(k, dtype=np.int64), start, end, device.astype(np.int64), n)
    else:
        pos = np.arange(n)[None, :]
        np.copyto(out, device[:, None], where=(pos >= start[:, None]) & (pos < end[:, None]), casting="unsafe")
    return _repaired(n_devices, out)


def batch_replace_mutation(rng: np.random.Generator, xs: np.ndarray, n_devices) -> np.ndarray:
    """Per row, every gene on device a moves to device b (a uniform among the row's used devices)."""
    k = len(xs)
    total = gene_count(n_devices)
    used = np.zeros((k, total), dtype=bool)
    used[np.arange(k)[:, None], xs] = True  # the genes each row uses
    a = np.argmax(rng.random((k, total)) * used, axis=1)
    if isinstance(n_devices, (int, np.integer)):
        b = rng.integers(0, n_devices, k)
    else:
        b = np.array([n_devices.draw_any(rng) for _ in range(k)], dtype=np.int64)
    return _repaired(n_devices, np.where(xs == a[:, None], b[:, None], xs).astype(np.int32))


def batch_copy_point_mutation(rng: np.random.Generator, xs: np.ndarray, copy_rate: float, point_rate: float,
                              n_devices) -> np.ndarray:
    """Per gene: the predecessor's device (as it was) with ``copy_rate``, else a random device with
    ``point_rate`` (MAP-Elites' gene mutation)."""
    if _plain(n_devices, rng) and xs.size:
        y = np.array(xs, dtype=np.int32)
        mutate_rows(rng, y, np.arange(len(y)), batch_copy_point_mutation, copy_rate, point_rate, n_devices)
        return y
    point, copy = _uniform(rng, xs.shape) < np.float32(point_rate), _uniform(rng, xs.shape) < np.float32(copy_rate)
    copy[:, 0] = False
    narrow = _narrow(xs, n_devices)
    y = np.where(point, _devices(rng, xs.shape, n_devices), narrow).astype(np.int32)
    np.copyto(y[:, 1:], narrow[:, :-1], where=copy[:, 1:])  # the predecessor as it was (column 0 never copies)
    return _repaired(n_devices, y)


def mutate_rows(rng: np.random.Generator, kids: np.ndarray, rows: np.ndarray, mutation, *args) -> None:
    """``kids[rows] = mutation(rng, kids[rows], *args)`` for :func:`batch_zone_mutation` and
    :func:`batch_copy_point_mutation`, with the same draws; in place in C when genes are devices (no gather and
    scatter of a batch of 10,000-op rows)."""
    n = kids.shape[1]
    plain = _plain(args[-1], rng) and n
    if plain and mutation is batch_copy_point_mutation:
        _batch.copy_point(rng.bit_generator.capsule, kids, rows, args[1], args[0], n, int(args[-1]))
    elif plain and mutation is batch_zone_mutation and len(args) == 1 and n < 0xFFFFFFFF:
        start, device = np.empty(len(rows), dtype=np.int64), np.empty(len(rows), dtype=np.int64)
        _batch.integers(rng.bit_generator.capsule, n, start)  # rng.integers(0, n, len(rows)), the same draws
        end = np.minimum(start + rng.geometric(0.2, len(rows)), n)
        _batch.integers(rng.bit_generator.capsule, int(args[0]), device)
        _batch.zone(kids, rows, start, end, device, n)
    else:
        kids[rows] = mutation(rng, kids[rows], *args)


def _drawn_here(rng) -> bool:
    """Whether the helper can draw from ``rng``: built, and ``rng`` a numpy Generator (its bit generator's capsule)."""
    return _batch is not None and isinstance(rng, np.random.Generator)


def _plain(space, rng) -> bool:
    """Whether the helper draws and mutates itself: genes are at most 256 devices (uint8 draws)."""
    return _drawn_here(rng) and isinstance(space, (int, np.integer)) and 1 <= space <= 256


# Whole-batch draws in the narrowest types that hold them: a batch of a 10,000-op network is millions of genes.
def _uniform(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.random(shape, dtype=np.float32)


def _devices(rng: np.random.Generator, shape, n_devices) -> np.ndarray:
    if not isinstance(n_devices, (int, np.integer)):
        return n_devices.draw(rng, np.broadcast_to(np.arange(shape[-1]), shape)).astype(np.uint8)
    return rng.integers(0, n_devices, shape, dtype=np.uint8 if n_devices <= 256 else np.int32)


def _narrow(xs: np.ndarray, n_devices) -> np.ndarray:
    return xs.astype(np.uint8) if gene_count(n_devices) <= 256 else xs
