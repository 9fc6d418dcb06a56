"""One rank of a pipelined benchmark: the placement's chunks run by a torch.distributed.pipelining schedule.

Every rank rebuilds the model, cuts it into the plan's stages (:mod:`.stage_split`) and keeps its own:
one for GPipe, 1F1B and ZB-H1 (``ScheduleInterleavedZeroBubble`` with one stage per rank), V for
interleaved 1F1B. Pipeline rank r is the r-th device in stage order (a process group in that order).
A step is ``zero_grad``, the schedule's ``step`` over the micro-batches, the sum of the gradients of a
weight that stages on several ranks read (GPT-2's tied embedding), and ``SGD.step``, timed from a common
barrier. A rank's busy time is the time inside its stages' forward, backward and weight-gradient work
(the schedule's compute actions); the rest of the step it waits: its share of the bubble.
"""

from __future__ import annotations

import time


def worker_main(spec: dict, rank: int, events) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from .worker_setup import load_traced

    devs, shape, traced = load_traced(spec)
    world = len(devs)
    store = dist.FileStore(spec["store"], world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 600))))
    try:
        run = _PipelineRank(spec, rank, devs, shape, traced)
        events.write({"event": "ready"})
        for k, rnd in spec["items"]:
            events.write({"event": "start", "item": [k, rnd]})
            try:
                report = run.measure()
            except Exception as e:  # noqa: BLE001 - this rank's peers are mid-step: report and stop
                from .memory import is_oom
                text = str(e).strip().splitlines()
                message = f"rank {rank}: {type(e).__name__}: {text[0]}" if text else type(e).__name__
                events.write({"event": "result", "item": [k, rnd], "status": "oom" if is_oom(e) else "error",
                              "message": message})
                raise SystemExit(4) from None
            events.write({"event": "result", "item": [k, rnd], **report})
    finally:
        dist.destroy_process_group()


class _PipelineRank:
    def __init__(self, spec, rank, devs, shape, traced):
        import torch
        import torch.distributed as dist
        from torch.distributed import pipelining

        from ..analysis.pipeline_stages import TORCH_SCHEDULES
        from .executor import Loss, make_input
        from .stage_split import plan_stages

        plan = spec["plan"]
        names = [d.name for d in devs]
        self.spec, self.rank = spec, rank
        order = [names.index(d) for d in plan["order"]]
        group = dist.new_group(order)  # pipeline rank r: the r-th device in stage order
        p, m, batch = len(order), int(plan["micro_batches"]), int(spec["batch_size"])
        self.first, self.last = order[0], order[(len(plan["chunks"]) - 1) % p]
        chunks = _Plan(plan)
        modules = plan_stages(traced, chunks, (batch // m, *shape[1:]))
        mine = [c for c in range(len(modules)) if order[c % p] == rank]
        device = torch.device("cpu")
        self.stages = [pipelining.PipelineStage(modules[c], c, len(modules), device, group=group) for c in mine]
        self.busy = 0.0
        for stage in self.stages:
            for action in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                setattr(stage, action, self._timed(getattr(stage, action)))
        loss = Loss(int(spec["seed"]))
        cls = getattr(pipelining, TORCH_SCHEDULES[plan["schedule"]])
        multi = plan["schedule"] in ("interleaved-1f1b", "zb-h1")
        self.schedule = cls(self.stages if multi else self.stages[0], m, loss_fn=lambda out, target: loss(out))
        self.tied = _tied_groups(traced.gm, modules, order, p, rank)
        params: dict[int, torch.nn.Parameter] = {}
        for stage in self.stages:
            for prm in stage.submod.parameters():
                params[id(prm)] = prm
        self.params = list(params.values())
        self.opt = torch.optim.SGD(self.params, lr=0.01)
        self.x = make_input(shape, batch, int(spec["seed"]), traced.gm)
        self.target = torch.zeros(batch)  # the loss ignores it (the same loss as the other runners)

    def _timed(self, action):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return action(*args, **kwargs)
            finally:
                self.busy += time.perf_counter() - t
        return timed

    def step(self, tracker=None):
        import torch.distributed as dist

        dist.barrier()
        self.busy = 0.0
        losses: list = []
        t = time.perf_counter()
        if tracker is not None:
            with tracker:
                self._step(losses)
        else:
            self._step(losses)
        seconds = time.perf_counter() - t
        loss = float(sum(float(x) for x in losses) / len(losses)) if losses else None
        return seconds, self.busy, loss

    def _step(self, losses) -> None:
        import torch.distributed as dist

        self.opt.zero_grad(set_to_none=True)
        args = (self.x,) if self.rank == self.first else ()
        kwargs = {"target": self.target, "losses": losses} if self.rank == self.last else {}
        self.schedule.step(*args, **kwargs)
        for prm, group in self.tied:
            if prm.grad is not None:
                dist.all_reduce(prm.grad, group=group)
        self.opt.step()

    def measure(self) -> dict:
        from .memory import CpuTracker, tensor_bytes

        tracker = CpuTracker()
        tracker.ignore(self.params)
        warm = [self.step(tracker if w == 0 else None) for w in range(int(self.spec["warmup"]))]
        runs = [self.step() for _ in range(int(self.spec["steps"]))]
        name = self.spec["devices"][self.rank]["name"]
        return {"status": "ok", "steps_s": [r[0] for r in runs], "warmup_s": [r[0] for r in warm],
                "busy_s": [r[1] for r in runs], "losses": [r[2] for r in runs if r[2] is not None],
                "peak_memory_bytes": {name: int(tensor_bytes(self.params) + tracker.peak)},
                "bytes_per_step": 0.0, "messages_per_step": 0.0}


class _Plan:
    """The plan's chunks as :func:`.stage_split.plan_stages` reads them."""

    def __init__(self, plan: dict):
        self.chunks = tuple((c["device"], tuple(c["ops"])) for c in plan["chunks"])


def _tied_groups(gm, modules, order, p, rank):
    """Weights that stages on more than one rank read (a tied embedding): (this rank's parameter, the process
    group of those ranks), for summing their gradients. Every rank makes every group, in the same order."""
    import torch.distributed as dist

    canonical: dict[int, str] = {}  # a tied weight has several names: its first one
    for name, prm in gm.named_parameters(remove_duplicate=False):
        canonical.setdefault(id(prm), name)
    holders: dict[str, set[int]] = {}
    for c, module in enumerate(modules):
        for name, prm in module.named_parameters(remove_duplicate=False):
            holders.setdefault(canonical.get(id(prm), name), set()).add(order[c % p])
    out = []
    for name in sorted(holders):
        ranks = sorted(holders[name])
        if len(ranks) < 2:
            continue
        group = dist.new_group(ranks)
        if rank in ranks:
            out.append((gm.get_parameter(name), group))
    return out
