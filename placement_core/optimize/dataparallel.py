"""Data parallelism as placers (docs/sharding.md): the baseline every user compares against.

* ``data-parallel``: every op split by batch over all the GPUs (weights replicated, their gradients
  all-reduced over a ring); an op without a batch dimension runs on the first GPU.
* ``hybrid-parallel``: the GPUs in groups of g consecutive ones; the network cut into contiguous stages,
  one per group, balanced like ``expert``'s; inside a stage every op split by batch over its group. One
  candidate per group size g dividing the GPU count (g = 1 is ``expert``'s pipeline, g = all is data
  parallel); the driver keeps the best.

Both need their splits in the problem's table: :func:`needed_splits` names them and
:func:`placement_core.optimize.problem_for` adds them (the CLI and the dashboard do this for you).
"""

from __future__ import annotations

import numpy as np

from ..base.errors import InputError
from ..model.sharding import Split
from .base import register
from .baselines import balanced_stages
from .fixed_candidates import FixedCandidates, op_work, target_devices


def _groups(problem, size: int) -> list[tuple[int, ...]]:
    gpus = target_devices(problem, "gpus")
    return [tuple(gpus[s:s + size]) for s in range(0, len(gpus) - size + 1, size)]


def _sizes(problem) -> list[int]:
    n = len(target_devices(problem, "gpus"))
    return [g for g in range(1, n + 1) if n % g == 0]


def needed_splits(problem, algorithm: str) -> tuple[Split, ...]:
    """The splits ``algorithm`` proposes (none for the others)."""
    if algorithm == "data-parallel":
        return tuple(Split("batch", grp) for grp in _groups(problem, len(target_devices(problem, "gpus")))
                     if len(grp) > 1)
    if algorithm == "hybrid-parallel":
        return tuple(Split("batch", grp) for g in _sizes(problem) if g > 1 for grp in _groups(problem, g))
    return ()


class _BatchSplit(FixedCandidates):
    def _gene(self, group: tuple[int, ...]) -> np.ndarray:
        """Every op's gene for "split by batch over ``group``" (the group's first device where it cannot)."""
        if len(group) == 1:
            return np.full(self.n, group[0], dtype=np.int32)
        split = Split("batch", group)
        if split not in self.problem.splits:
            raise InputError(f"{self.name} needs the split {split.dim} over "
                             + ",".join(self.problem.devices.names[d] for d in group) + " in the problem's table",
                             field="algorithm", fix="Build the problem with placement_core.optimize.problem_for "
                                                    f"(problem, {self.name!r}); the CLI and the dashboard do")
        gene = self.d + self.problem.splits.index(split)
        ok = self.problem.allowed[:, gene - self.d]
        return np.where(ok, gene, group[0]).astype(np.int32)


@register
class DataParallel(_BatchSplit):
    name = "data-parallel"
    title = "Data parallel: every op split by batch over all GPUs"

    def candidates(self):
        gpus = tuple(target_devices(self.problem, "gpus"))
        return self._gene(gpus)[None, :], [f"batch over {len(gpus)} devices"]


@register
class HybridParallel(_BatchSplit):
    name = "hybrid-parallel"
    title = "Hybrid: data parallel within groups of GPUs, pipeline stages across groups"

    def candidates(self):
        work = op_work(self.problem)
        xs, labels = [], []
        for g in _sizes(self.problem):
            groups = _groups(self.problem, g)
            stages = min(len(groups), self.n)
            # a stage's work on its group: each op's time on the group's first device, shared by g shards
            cuts = balanced_stages(np.stack([work[:, grp[0]] / len(grp) for grp in groups[:stages]], axis=1))
            x = np.empty(self.n, dtype=np.int32)
            for s in range(stages):
                x[cuts[s]:cuts[s + 1]] = self._gene(groups[s])[cuts[s]:cuts[s + 1]]
            xs.append(x)
            labels.append(f"{stages} stage(s) of {g} device(s)")
        return np.array(xs), labels
