"""The space pg, ppo and post search: units of ops that share a device, the devices they may use, and the
placement their distributions start concentrated on.

- **Units** (``groups``): the papers place op *groups*, not single ops. Mirhoseini et al. co-locate ops into
  groups before their policy sees the graph, Placeto merges the leftover small groups into neighbours
  (Merge-and-Colocate, App. A.6) and grouped its graphs to 128 nodes (cifar10, ptb; §3.1). ``groups = G`` coarsens
  the network with this project's Merge-and-Colocate (:func:`..model.coarsen.coarsen`, which also keeps a shared
  module's calls and the ops between them in one group) to at most G units; ``groups = 0`` gives one unit per op.
  Either way the calls of a module with weights called more than once are one unit
  (:func:`..model.coarsen.tied_calls`): a real run needs them on one device.
- **Devices** (``devices``): Post's experiments place on GPUs only (§4: "Single GPU ... assigns all the operations
  to a single GPU"; its placements, Fig. 3, use GPU0-GPU3). ``gpus`` restricts the units to the GPUs, ``all``
  allows every device, and ``auto`` (the baselines' word, :data:`.fixed_candidates.DEVICE_CHOICE`) takes the GPUs
  unless they cannot hold the network together, then every device.
- **Start** (``start``): Post starts from u(0) = 0, uniform over the devices. Here the distribution may start on a
  good placement instead: memory-aware HEFT's (``heft``, the placement this project's Placeto policies improve) or
  m-ETF's (``m-etf``), planned on the allowed devices. The start distribution is the one Post's cross-entropy
  update (Algorithm 1, line 12) would produce if all its elites were the start placement: each unit on its start
  device with probability 1 − ε, mixed with ε/|D| over the allowed devices, ε = Post's exploration factor 0.1
  (``start_epsilon``). ``uniform`` is Post's own start.

A unit's device is its first op's; a placement from outside the space (an initial placement given with
``--init``) is projected into it: each unit takes its first op's device, or its start device when that device
is not allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.errors import InputError
from ..problem import Problem
from .base import Param

STARTS = ("heft", "m-etf", "uniform")
DEVICE_CHOICES = ("auto", "gpus", "all")
# Post's own space: one uniform softmax per op over every device, no memory fallback (what cem searches by default,
# and what pg, ppo and post searched before they had these parameters: their stored runs resume with it)
POSTS_OWN = {"groups": 0, "devices": "all", "start": "uniform", "feasible": False}


def space_params(groups: int = 128, devices: str = "auto", start: str = "heft", feasible: bool = True) -> dict:
    """The search space's parameters, with the given defaults."""
    return {
        "groups": Param(groups, "units of ops that share a device: at most this many Merge-and-Colocate groups "
                                "(Placeto's 128; 0: one unit per op)", int, low=0, high=1_000_000),
        "devices": Param(devices, "devices the units may use: gpus (Post's experiments), all, or auto (the GPUs "
                                  "when they hold the network, else all)", str, choices=DEVICE_CHOICES),
        "start": Param(start, "placement the distributions start concentrated on: heft (memory-aware), m-etf, or "
                              "uniform (Post's u(0) = 0)", str, choices=STARTS),
        "start_epsilon": Param(0.1, "probability spread uniformly over the allowed devices at the start (Post's "
                                    "exploration factor)", float, low=0.0, high=1.0),
        "feasible": Param(feasible, "fall a sample that overflows memory back to the start move by move (when "
                                    "the start fits)", bool),
    }


def setup(opt) -> tuple["SearchSpace", np.ndarray, object]:
    """An optimizer's space from its parameters: (space, start probabilities [units, k], memory guard or None)."""
    from .feasible import MemoryGuard
    p = opt.params
    space = build_space(opt.problem, groups=p["groups"], devices=p["devices"], start=p["start"])
    start = space.start_placement()
    guard = MemoryGuard(opt.problem, start, space.unit_of) if p["feasible"] and start is not None else None
    return space, space.start_probabilities(p["start_epsilon"]), guard


def sample_categorical(probs: np.ndarray, rng: np.random.Generator, k: int) -> np.ndarray:
    """k placements, op (unit) i on device j with probability probs[i, j] (one uniform draw per op)."""
    cum = np.cumsum(probs, axis=1)
    cum[:, -1] = 1.0
    u = rng.random((k, probs.shape[0], 1))
    return (u > cum[None, :, :]).sum(axis=2).astype(np.int32)


def draw(opt, probs: np.ndarray, limit: int) -> np.ndarray:
    """A batch of ``opt.params['samples']`` (at most ``limit``) placements from the units' distributions, the
    initial placements (projected into the space) first before the first update, each sample that overflows
    fallen back to the start."""
    k = min(opt.params["samples"], limit)
    seeds = opt.search.project(opt.initial[:k] if opt.updates == 0 else opt.initial[:0])
    drawn = opt.search.expand(sample_categorical(probs, opt.rng, k - len(seeds)))
    if opt.guard is not None:
        drawn = opt.guard(drawn)
    return np.concatenate([seeds, drawn]).astype(np.int32)


@dataclass
class SearchSpace:
    unit_of: np.ndarray  # [ops] the unit each op belongs to (units numbered by their first op)
    devices: np.ndarray  # [k] the device indices a unit may take
    start: np.ndarray | None  # [units] the start placement, as indices into ``devices`` (None: uniform)
    start_name: str = "uniform"

    def __post_init__(self):
        self.units = int(self.unit_of.max()) + 1 if len(self.unit_of) else 0
        self.first = np.full(self.units, -1, dtype=np.int64)
        for i in range(len(self.unit_of) - 1, -1, -1):
            self.first[self.unit_of[i]] = i
        self.index = np.full(int(self.devices.max()) + 1, -1, dtype=np.int64)
        self.index[self.devices] = np.arange(len(self.devices))

    @property
    def width(self) -> int:
        return len(self.devices)

    def expand(self, local: np.ndarray) -> np.ndarray:
        """[K, units] indices into ``devices`` -> [K, ops] placements."""
        local = np.atleast_2d(np.asarray(local, dtype=np.int64))
        return np.ascontiguousarray(self.devices[local][:, self.unit_of], dtype=np.int32)

    def contract(self, placements: np.ndarray) -> np.ndarray:
        """[K, ops] placements -> [K, units] indices into ``devices`` (each unit's first op's device; a device
        outside the space becomes the unit's start device, or the first allowed one)."""
        dev = np.atleast_2d(np.asarray(placements, dtype=np.int64))[:, self.first]
        idx = np.where(dev < len(self.index), self.index[np.minimum(dev, len(self.index) - 1)], -1)
        fallback = self.start[None, :] if self.start is not None else np.zeros((1, self.units), dtype=np.int64)
        return np.where(idx >= 0, idx, fallback).astype(np.int64)

    def project(self, placements: np.ndarray) -> np.ndarray:
        """Placements moved into the space (unchanged when they are in it already)."""
        return self.expand(self.contract(placements)) if len(placements) else np.zeros((0, len(self.unit_of)),
                                                                                         dtype=np.int32)

    def start_probabilities(self, epsilon: float) -> np.ndarray:
        """[units, k]: uniform, or (1 − ε) on each unit's start device plus ε/k on every allowed device."""
        k = self.width
        probs = np.full((self.units, k), 1.0 / k)
        if self.start is not None:
            probs = np.full((self.units, k), epsilon / k)
            probs[np.arange(self.units), self.start] += 1.0 - epsilon
        return probs

    def start_placement(self) -> np.ndarray | None:
        return None if self.start is None else self.expand(self.start[None, :])[0]

    def describe(self) -> dict:
        return {"units": self.units, "devices": self.devices.tolist(), "start": self.start_name}


def op_units(problem: Problem, groups: int) -> np.ndarray:
    """[ops] unit of each op: Merge-and-Colocate groups (at most ``groups``; 0: one per op), then the calls of
    each shared module with weights joined; units numbered in the order of their first op."""
    from ..model.coarsen import coarsen, tied_calls
    graph = problem.graph
    n = len(graph)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(ops) -> None:
        ops = [int(i) for i in ops]
        for i in ops[1:]:
            a, b = find(i), find(ops[0])
            if a != b:
                parent[max(a, b)] = min(a, b)

    if groups and groups < n:
        _, mapping = coarsen(graph, int(groups), strict=False)
        index = graph.index
        for members in mapping.values():
            join([index[m] for m in members])
    for calls in tied_calls(graph):
        join(calls)
    roots = np.array([find(i) for i in range(n)])
    _, first_seen = np.unique(roots, return_index=True)
    label = {int(roots[i]): k for k, i in enumerate(sorted(first_seen))}
    return np.array([label[int(r)] for r in roots], dtype=np.int64)


def allowed_devices(problem: Problem, which: str) -> np.ndarray:
    """The device indices ``which`` names: ``all``, ``gpus`` (all devices when there is no GPU) or ``auto``."""
    from .fixed_candidates import MemoryEstimate, target_devices
    if which not in DEVICE_CHOICES:
        raise InputError(f"unknown device choice {which!r}", field="devices", fix="Use " + ", ".join(DEVICE_CHOICES))
    need = MemoryEstimate(problem).total() if which == "auto" else None
    return np.array(target_devices(problem, which, need), dtype=np.int64)


def start_placement(problem: Problem, start: str, devices: np.ndarray) -> np.ndarray | None:
    """[ops] the start placement on ``devices`` (None for ``uniform``)."""
    if start == "uniform":
        return None
    if start == "heft":
        from .heft import heft_schedule
        return np.asarray(heft_schedule(problem, comm=True, memory=True, devices=devices.tolist()).placement,
                          dtype=np.int32)
    if start == "m-etf":
        from . import make_optimizer
        which = "all" if len(devices) == problem.n_devices else "gpus"
        return np.asarray(make_optimizer(problem, "m-etf", params={"devices": which}).candidates()[0][0],
                          dtype=np.int32)
    raise InputError(f"unknown start {start!r}", field="start", fix="Use " + ", ".join(STARTS))


def build_space(problem: Problem, *, groups: int = 0, devices: str = "all", start: str = "uniform") -> SearchSpace:
    unit_of = op_units(problem, groups)
    allowed = allowed_devices(problem, devices)
    placement = start_placement(problem, start, allowed)
    space = SearchSpace(unit_of, allowed, None, start)
    if placement is not None:
        # a unit starts on the device that holds most of its members' compute in the start placement
        work = np.asarray(problem.costs.fwd + problem.costs.bwd, dtype=float)
        votes = np.zeros((space.units, len(allowed)))
        local = space.index[placement]
        ok = local >= 0
        np.add.at(votes, (unit_of[ok], local[ok]), work[np.flatnonzero(ok), placement[ok]] + 1e-30)
        space.start = np.argmax(votes, axis=1).astype(np.int64)
    return space
