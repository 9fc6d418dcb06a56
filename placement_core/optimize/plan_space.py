"""The space of cluster plans as genomes for MAP-Elites (:mod:`.plan_elites`).

A genome is a plan's discrete dimensions (tp, pp, dp, micro-batch, schedule, virtual stages, recomputation,
ZeRO stage), stored as indices into each dimension's sorted values. The valid genomes are enumerated once (a
tuple per plan, no simulation: tens of thousands even on 3,072 GPUs), so a mutation never has to re-derive
validity. The rules are :func:`.plans.candidates`' (t·p·d = the GPUs, dp divides the global batch, the
micro-batch a replica's share, interleaved 1F1B's micro-batches come in rounds of pp) and the simulator's
(interleaved 1F1B and ZB-H1 run a stage on whole devices, dp 1, unless the replicas are folded). A mutation
moves one dimension to a neighbouring value (or, sometimes, any other) and takes the valid genome nearest the
parent in the other dimensions, so changing the tensor degree halves dp or pp instead of breaking the product.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..base.errors import InputError
from ..families import gpt_parallel
from ..formats.clusters import Cluster
from .plans import SCHEDULES, PlanRequest, _divisors, gpus_of, tensor_degrees
from .plan_links import node_size

DIMS = ("tp", "pp", "dp", "micro_batch", "schedule", "virtual_stages", "recompute", "zero")
LABELS = {"tp": "tensor parallel", "pp": "pipeline stages", "dp": "data parallel", "micro_batch": "micro-batch",
          "schedule": "schedule", "virtual_stages": "virtual stages", "recompute": "recomputation",
          "zero": "ZeRO stage"}
VARIABLE = ("schedule", "virtual_stages", "recompute", "zero")  # searched only when asked (the rest: when not given)
ORDER = {"schedule": SCHEDULES, "recompute": gpt_parallel.RECOMPUTE}  # categorical values in their own order
MAX_GENOMES = 200_000
INTERLEAVE = (2, 4)  # the virtual stages interleaved 1F1B tries when they are searched
WHOLE_STAGES = ("interleaved-1f1b", "zb-h1")  # unfolded, they need dp 1 (simulate.Simulator._check_schedule)


@dataclass
class PlanSpace:
    """Every valid genome: ``genomes[i, j]`` indexes ``values[DIMS[j]]``."""

    values: dict[str, list]
    genomes: np.ndarray  # [n, len(DIMS)] int
    req: PlanRequest
    n_gpus: int

    def __len__(self) -> int:
        return len(self.genomes)

    def plan_of(self, row: int) -> dict:
        return {d: self.values[d][int(k)] for d, k in zip(DIMS, self.genomes[row])}

    def request(self, row: int) -> PlanRequest:
        """The request :func:`.plans.simulate_plan` runs this genome under."""
        g = self.plan_of(row)
        return replace(self.req, tp=g["tp"], pp=g["pp"], dp=g["dp"], micro_batch=g["micro_batch"],
                       schedule=g["schedule"], virtual_stages=g["virtual_stages"], recompute=g["recompute"],
                       zero=g["zero"])

    def searched(self) -> list[str]:
        return [d for d in DIMS if len(self.values[d]) > 1]

    def mutate(self, rng: np.random.Generator, row: int, jump: float = 0.25) -> int | None:
        """A child of genome ``row``: one searched dimension moved to the next value up or down (with
        probability ``jump`` to any other value; the schedule, which has no order, always so), the other
        dimensions the valid genome's nearest to the parent's (fewest index steps; ties at random). None when
        no dimension can move."""
        g = self.genomes[row]
        dims = [DIMS.index(d) for d in self.searched()]
        for j in rng.permutation(dims):
            size = len(self.values[DIMS[j]])
            if DIMS[j] == "schedule" or rng.random() < jump:
                targets = [k for k in rng.permutation(size) if k != g[j]]
            else:
                targets = [k for k in (g[j] + rng.choice([-1, 1]) * np.array([1, -1])) if 0 <= k < size]
            for k in targets:
                hit = np.flatnonzero(self.genomes[:, j] == k)
                if not len(hit):
                    continue
                steps = np.abs(self.genomes[hit] - g).astype(float)
                steps[:, DIMS.index("schedule")] = steps[:, DIMS.index("schedule")] > 0
                distance = steps.sum(axis=1)
                near = hit[distance == distance.min()]
                return int(near[rng.integers(len(near))])
        return None


def plan_space(graph, devices, req: PlanRequest, config=None, vary=()) -> PlanSpace:
    """Every plan of ``graph`` on ``devices`` the request allows: tp, pp, dp and the micro-batch searched when
    not given (as :func:`.plans.plan` does), and each of ``vary`` (``schedule``, ``virtual_stages``,
    ``recompute``, ``zero``) searched too instead of taking the request's value. Interleaved 1F1B needs two
    stages or more and, with searched virtual stages, 2 or 4 chunks per stage that divide a ``gpt:`` network's
    layers (Megatron-LM's even cut); ZeRO over a single replica partitions nothing, so searched ZeRO stages
    above 0 need dp > 1; recomputation, ZeRO-3 and tensor parallelism need a ``gpt:`` network."""
    unknown = [v for v in vary if v not in VARIABLE]
    if unknown:
        raise InputError(f"cannot search {', '.join(map(repr, unknown))}", field="--vary",
                         fix="Search any of " + ", ".join(VARIABLE))
    vary = set(vary) | ({"virtual_stages"} if "schedule" in vary and req.virtual_stages == 1 else set())
    if req.global_batch < 1:
        raise InputError("the global batch must be at least 1", field="--global-batch", fix="Give sequences per step")
    gpus = gpus_of(devices)
    folded = isinstance(devices, Cluster)
    n_gpus, n_ops = len(gpus), len(graph)
    tps = tensor_degrees(n_gpus, node_size(devices, gpus), req, config)
    schedules = list(SCHEDULES) if "schedule" in vary else [req.schedule]
    recomputes = [r for r in gpt_parallel.RECOMPUTE if config is not None or r == "none"] \
        if "recompute" in vary else [req.recompute]
    zeros = [z for z in (0, 1, 2, 3) if config is not None or z < 3] if "zero" in vary else [req.zero]
    layers = config.layers if config is not None else None
    for name, value in (("--pp", req.pp), ("--dp", req.dp)):
        if value is not None and n_gpus % value:
            raise InputError(f"{name} {value} does not divide the {n_gpus} GPUs", field=name,
                             fix=f"Use one of {', '.join(map(str, _divisors(n_gpus)))}")
    rows = []
    for t in tps:
        n = n_gpus // t
        for schedule in schedules:
            for recompute in recomputes:
                for zero in zeros:
                    rows += _genomes(n, n_ops, t, schedule, recompute, zero, req, vary, layers, folded)
                    if len(rows) > MAX_GENOMES:
                        raise InputError(f"more than {MAX_GENOMES:,} plans to search", field="--micro-batch",
                                         fix="Fix --micro-batch, --pp or --dp, or search fewer dimensions")
    if not rows:
        raise InputError(f"no plan of {n_gpus} GPUs fits the constraints (global batch {req.global_batch}"
                         + "".join(f", {k} {v}" for k, v in (("--tp", req.tp), ("--pp", req.pp), ("--dp", req.dp),
                                                              ("--micro-batch", req.micro_batch)) if v) + ")",
                         field="--global-batch", fix="The data-parallel degree must divide the global batch, and "
                                                     "the micro-batch a replica's share of it")
    values = {}
    for j, d in enumerate(DIMS):
        present = {r[j] for r in rows}
        values[d] = [v for v in ORDER[d] if v in present] if d in ORDER else sorted(present)
    index = {d: {v: k for k, v in enumerate(values[d])} for d in DIMS}
    genomes = np.array([[index[d][v] for d, v in zip(DIMS, r)] for r in rows], dtype=np.int64)
    return PlanSpace(values, genomes, req, n_gpus)


def _genomes(n: int, n_ops: int, t: int, schedule: str, recompute: str, zero: int, req: PlanRequest, vary: set,
             layers: int | None, folded: bool) -> list[tuple]:
    """The genomes of one tensor degree, schedule, recomputation and ZeRO stage on ``n`` simulated GPUs (the
    tensor-parallel groups)."""
    interleaved = schedule == "interleaved-1f1b"
    out = []
    for pp in _divisors(n):
        dp = n // pp
        if (req.pp is not None and pp != req.pp) or (req.dp is not None and dp != req.dp):
            continue
        if schedule in WHOLE_STAGES and dp > 1 and not folded:
            continue  # the simulator runs these schedules on whole devices, not ops split over a replica group
        if req.global_batch % dp or ("zero" in vary and zero and dp == 1):
            continue
        if "virtual_stages" in vary:
            vs = [v for v in INTERLEAVE if pp > 1 and pp * v <= n_ops and (layers is None or layers % (pp * v) == 0)
                  ] if interleaved else [1]
        else:
            if req.virtual_stages != 1 and not interleaved:
                continue  # a fixed --virtual-stages only interleaves
            vs = [req.virtual_stages]
        share = req.global_batch // dp
        for v in vs:
            if pp * v > n_ops:
                continue
            for b in _divisors(share):
                if req.micro_batch is not None and b != req.micro_batch:
                    continue
                if interleaved and (share // b) % pp:
                    continue  # torch's interleaved schedule runs micro-batches in rounds of pp
                out.append((t, pp, dp, b, schedule, v, recompute, zero))
    return out
