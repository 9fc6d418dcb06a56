"""Families of computation graphs to train and test learned placers on (Placeto §3.1, App. A.3).

``nmt`` (an unrolled 2-layer encoder-decoder LSTM with attention), ``ptb`` (an
unrolled recurrent cell of ENAS-like random structure) and ``cifar10`` (stacked
ENAS-like convolutional cells) are generated op by op with their FLOPs and bytes
from the shapes, then grouped by Merge-and-Colocate (:func:`..coarsen.coarsen`)
to Placeto's sizes: 160 groups for ``nmt``, 128 for the others. Graph ``i`` of
a family and seed is a pure function of (family, seed, i), so a family is the
same on every machine, and the split is fixed by the index: even indices train,
odd ones test (Placeto's f = 0.5).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..model.coarsen import coarsen
from ..base.errors import InputError
from ..model.graph import Graph
from . import cifar10, nmt, ptb

FAMILIES = {"nmt": nmt, "ptb": ptb, "cifar10": cifar10}
GROUPS = {"nmt": 160, "ptb": 128, "cifar10": 128}
SPLITS = ("train", "test")
DEFAULT_COUNT = 32  # Placeto's N
MAX_COUNT = 10_000


@dataclass(frozen=True)
class FamilyGraph:
    family: str
    seed: int
    index: int
    graph: Graph
    meta: dict = field(default_factory=dict)

    @property
    def split(self) -> str:
        return split_of(self.index)


def split_of(index: int) -> str:
    return SPLITS[index % 2]


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise InputError(f"unknown graph family {family!r}", field="--family", fix="Use one of: " + ", ".join(FAMILIES))
    return family


def graph_name(family: str, seed: int, index: int) -> str:
    return f"{family}-s{seed}-{index:03d}"


def family_graph(family: str, seed: int, index: int) -> FamilyGraph:
    """Graph ``index`` of ``family`` for ``seed``: the same on every machine and Python version."""
    module = FAMILIES[check_family(family)]
    rng = random.Random(f"placement-family/1:{family}:{int(seed)}:{int(index)}")
    name = graph_name(family, seed, index)
    fine, meta = module.build(rng, name)
    graph = fine if len(fine) <= GROUPS[family] else coarsen(fine, GROUPS[family])[0]
    return FamilyGraph(family, int(seed), int(index), graph, {**meta, "ops_before_grouping": len(fine)})


def family_graphs(family: str, *, count: int = DEFAULT_COUNT, seed: int = 0,
                  split: str | None = None) -> list[FamilyGraph]:
    """Graphs 0..count-1 of a family, or those of one split."""
    check_family(family)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise InputError(f"the number of graphs must be an integer from 1 to {MAX_COUNT}, got {count!r}",
                         field="--count", fix="Use e.g. --count 32")
    if split is not None and split not in SPLITS:
        raise InputError(f"unknown split {split!r}", field="--split", fix="Use train or test")
    return [family_graph(family, seed, i) for i in range(count) if split is None or split_of(i) == split]


__all__ = ["DEFAULT_COUNT", "FAMILIES", "FamilyGraph", "GROUPS", "SPLITS", "check_family", "family_graph",
           "family_graphs", "graph_name", "split_of"]
