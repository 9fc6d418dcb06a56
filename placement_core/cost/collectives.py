"""Collectives in the alpha-beta model: how long an all-reduce, all-gather or reduce-scatter takes, per algorithm.

A message of n bytes between two ranks costs ``alpha + n * beta``: ``alpha`` the link's latency (seconds per
step), ``beta`` its inverse bandwidth (seconds per byte, one direction). Over a group of ``ranks`` ranks
(Thakur, Rabenseifner & Gropp, *Optimization of collective communication operations in MPICH*, IJHPCA 19(1),
2005, §2 and §4; the reduction's arithmetic, their gamma term, is left out: on a GPU it runs at memory speed
and overlaps the transfers):

* ring all-gather and ring reduce-scatter of ``nbytes`` (the whole gathered, or the whole reduced, buffer):
  ``(p - 1) alpha + (p - 1)/p * nbytes * beta``; each rank sends p - 1 pieces of n/p bytes;
* ring all-reduce = reduce-scatter then all-gather: ``2 (p - 1) alpha + 2 (p - 1)/p * nbytes * beta``; the
  bandwidth term is NCCL's bus-bandwidth factor 2(n - 1)/n (NCCL's documentation, *Performance reported by
  NCCL tests*: busBw = algBw * 2(n - 1)/n for all-reduce, (n - 1)/n for all-gather and reduce-scatter);
* tree all-reduce as NCCL runs it, a pipelined double binary tree (Sanders, Speck & Träff, *Two-tree
  algorithms for full bandwidth broadcast, reduction and scan*, Parallel Computing 35, 2009; NCCL 2.4's
  trees): a reduction up and a broadcast down, each tree carrying half of the buffer, so
  ``2 ceil(log2 p) alpha + 2 * nbytes * beta``: the latency grows with log p instead of p, the bandwidth
  term is the ring's limit 2 n beta;
* hierarchical, for a group of ``nodes`` nodes with ``per_node`` ranks in each: reduce-scatter inside each
  node, all-reduce across the nodes of each rank's 1/per_node share (per_node of these run at once, each on
  its own rank's adapter), all-gather inside each node. All-gather and reduce-scatter likewise go in two
  levels.

``algorithm="auto"`` takes the faster of ring and tree under this model (NCCL's tuner chooses between them by
a latency/bandwidth model of its own). Nothing here is fitted: alpha and beta are the links' (docs/clusters.md).
"""

from __future__ import annotations

import math

ALGORITHMS = ("ring", "tree", "auto")
KINDS = ("all-reduce", "all-gather", "reduce-scatter")


def _check(nbytes: float, ranks: int, alpha: float, beta: float) -> None:
    if ranks < 1 or int(ranks) != ranks:
        raise ValueError(f"a collective needs a whole number of ranks, at least 1, got {ranks!r}")
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError("bytes, latency and seconds per byte must not be negative")


def ring_allgather(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Seconds for ``ranks`` ranks to gather ``nbytes`` in all (each holds nbytes / ranks) on a ring."""
    _check(nbytes, ranks, alpha, beta)
    p = int(ranks)
    return (p - 1) * alpha + (p - 1) / p * nbytes * beta


def ring_reduce_scatter(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Seconds to reduce ``nbytes`` held by every rank, each keeping nbytes / ranks of the sum, on a ring."""
    return ring_allgather(nbytes, ranks, alpha, beta)


def ring_allreduce(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Reduce-scatter then all-gather on a ring: 2(p-1) alpha + 2(p-1)/p n beta."""
    return 2.0 * ring_allgather(nbytes, ranks, alpha, beta)


def tree_allreduce(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """A pipelined double binary tree: 2 ceil(log2 p) alpha + 2 n beta (0 for one rank)."""
    _check(nbytes, ranks, alpha, beta)
    p = int(ranks)
    if p == 1:
        return 0.0
    return 2.0 * math.ceil(math.log2(p)) * alpha + 2.0 * nbytes * beta


def allreduce(nbytes: float, ranks: int, alpha: float, beta: float, algorithm: str = "auto") -> float:
    """One level's all-reduce by ``algorithm`` (ring, tree, or auto: the faster of the two)."""
    if algorithm == "ring":
        return ring_allreduce(nbytes, ranks, alpha, beta)
    if algorithm == "tree":
        return tree_allreduce(nbytes, ranks, alpha, beta)
    if algorithm == "auto":
        return min(ring_allreduce(nbytes, ranks, alpha, beta), tree_allreduce(nbytes, ranks, alpha, beta))
    raise ValueError(f"unknown algorithm {algorithm!r}: use " + ", ".join(ALGORITHMS))


def collective(kind: str, nbytes: float, ranks: int, alpha: float, beta: float, algorithm: str = "auto") -> float:
    """One level's ``kind`` (all-reduce, all-gather, reduce-scatter) of ``nbytes`` over ``ranks`` ranks. All-gather
    and reduce-scatter run on a ring whatever the algorithm (NCCL has only rings for them)."""
    if kind == "all-reduce":
        return allreduce(nbytes, ranks, alpha, beta, algorithm)
    if kind in ("all-gather", "reduce-scatter"):
        return ring_allgather(nbytes, ranks, alpha, beta)
    raise ValueError(f"unknown collective {kind!r}: use " + ", ".join(KINDS))


def hierarchical(kind: str, nbytes: float, per_node: int, nodes: int, intra: tuple[float, float],
                 inter: tuple[float, float], algorithm: str = "auto") -> float:
    """``kind`` over ``nodes`` × ``per_node`` ranks: ``intra`` and ``inter`` are (alpha, beta) of a rank's link
    inside its node and across nodes. One node is the one-level collective on ``intra``; one rank per node
    the one-level collective on ``inter``.

    all-reduce: reduce-scatter inside the node, all-reduce of the nbytes / per_node share across nodes,
    all-gather inside the node. all-gather: across nodes each rank gathers its local group's nbytes / per_node
    share, then the node gathers the whole. reduce-scatter: the reverse of all-gather (same time)."""
    (a1, b1), (a2, b2) = intra, inter
    if nodes == 1:
        return collective(kind, nbytes, per_node, a1, b1, algorithm)
    if per_node == 1:
        return collective(kind, nbytes, nodes, a2, b2, algorithm)
    share = nbytes / per_node
    if kind == "all-reduce":
        return (ring_reduce_scatter(nbytes, per_node, a1, b1) + allreduce(share, nodes, a2, b2, algorithm)
                + ring_allgather(nbytes, per_node, a1, b1))
    if kind in ("all-gather", "reduce-scatter"):
        return ring_allgather(share, nodes, a2, b2) + ring_allgather(nbytes, per_node, a1, b1)
    raise ValueError(f"unknown collective {kind!r}: use " + ", ".join(KINDS))


def bus_bandwidth(kind: str, nbytes: float, seconds: float, ranks: int) -> float:
    """NCCL tests' bus bandwidth of a collective that took ``seconds``: the algorithm bandwidth nbytes / seconds
    times 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter): what each link carried per second."""
    factor = {"all-reduce": 2.0, "all-gather": 1.0, "reduce-scatter": 1.0}[kind] * (ranks - 1) / ranks
    return nbytes / seconds * factor
