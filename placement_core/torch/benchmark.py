"""Benchmark placements for real: SGD training steps on random data, timed per step.

Two runners:

* ``ranks``: one worker process per device (``cpu:2`` gives two CPU ranks, each
  pinned to its own cores with as many threads as cores; GPUs get NCCL, CPU
  ranks gloo). Activations and gradients cross with ``torch.distributed``
  send/recv (:class:`.executor.RankStep`). A step's time is the slowest rank's,
  from a common barrier.
* ``inprocess``: one worker process drives every device with the placed module
  of :func:`.apply.place` (tensors move with ``.to``). The natural choice on a
  GPU server; on a CPU-only machine every "device" is the same CPU.

Both run in worker processes, so a crash, an out-of-memory or a runaway step
never takes the caller down: a placement that runs past ``timeout`` is killed
and reported as ``timeout``, out-of-memory as ``oom``, a measured peak above
``memory_limit`` as ``memory_limit``. The first ``warmup`` steps are dropped
(thesis E2: the first batch is not representative); peak memory per device is
measured on the first one (:mod:`.memory`). Many placements share one set of
workers (the model is built once); ``rounds`` > 1 interleaves them, so slow
drifts of a shared machine spread over all of them.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..errors import InputError
from .devspec import LocalDevice, check_available, device_index, parse_devices
from .sources import parse_shape

RUNNERS = ("ranks", "inprocess")
STARTUP_S = 180.0  # building the model and importing torch in every worker


@dataclass(frozen=True)
class BenchmarkSettings:
    steps: int = 10
    warmup: int = 2
    rounds: int = 1
    memory_limit: float | None = None  # bytes per device
    timeout: float = 600.0  # seconds per placement
    seed: int = 0
    threads: int | None = None  # in-process runner: torch threads (default: torch's)

    def check(self) -> "BenchmarkSettings":
        for name in ("steps", "rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}", field=f"--{name}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 1:
            raise InputError(f"warmup must be at least 1 (its first step measures memory), got {self.warmup!r}",
                             field="--warmup")
        if not self.timeout > 0:
            raise InputError(f"timeout must be positive, got {self.timeout!r}", field="--timeout")
        if self.memory_limit is not None and not self.memory_limit > 0:
            raise InputError(f"memory limit must be positive, got {self.memory_limit!r}", field="--memory-limit")
        return self


@dataclass
class BenchmarkResult:
    """One placement's measurement. ``status`` is ok | oom | memory_limit | timeout | error."""

    status: str
    runner: str
    devices: list[dict]  # name, torch, peak_memory_bytes, memory_limit_bytes
    steps_s: list[float] = field(default_factory=list)  # timed steps, every round
    warmup_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # per timed step (the same for every placement)
    bytes_per_step: float = 0.0  # sent between ranks
    messages_per_step: float = 0.0
    message: str = ""
    shared_cores: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.steps_s) if self.steps_s else None

    @property
    def quartiles_s(self) -> tuple[float, float] | None:
        if len(self.steps_s) < 2:
            return (self.steps_s[0], self.steps_s[0]) if self.steps_s else None
        q = statistics.quantiles(self.steps_s, n=4, method="inclusive")
        return q[0], q[2]

    def to_dict(self) -> dict:
        d = asdict(self)
        q = self.quartiles_s
        d.update(median_step_s=self.median_step_s,
                 iqr_s=None if q is None else q[1] - q[0], q1_s=None if q is None else q[0],
                 q3_s=None if q is None else q[1],
                 min_step_s=min(self.steps_s) if self.steps_s else None,
                 max_step_s=max(self.steps_s) if self.steps_s else None,
                 peak_memory_bytes={dv["name"]: dv["peak_memory_bytes"] for dv in self.devices})
        return d


def benchmark(source: str, input_shape, placements: list[Mapping[str, object]], devices, *, runner: str = "ranks",
              batch_size: int | None = None, settings: BenchmarkSettings | None = None,
              progress: Callable[[int, int], None] | None = None, name: str | None = None) -> list[BenchmarkResult]:
    """Benchmark every placement (op -> device name, torch string or index) of the model ``source``.

    ``input_shape`` is the example input (its first dimension only matters
    for tracing); steps run at ``batch_size`` (default: that first dimension).
    Returns one result per placement, in order; never raises for what happens
    inside a run, only for bad input.
    """
    import torch

    from .apply import check_assignment
    from .fx_import import trace_model
    from .sources import load_model, parse_source

    settings = (settings or BenchmarkSettings()).check()
    devs = parse_devices(devices) if isinstance(devices, str) else list(devices)
    check_available(devs)
    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", field="--runner", fix="Use ranks or inprocess")
    if not placements:
        raise InputError("no placements to benchmark", field="placement")
    shape = parse_shape(input_shape)
    batch = int(batch_size or shape[0])
    src = parse_source(source)
    model = load_model(src, seed=settings.seed)
    traced = trace_model(model, shape, name=name or src.default_name)
    indexed = []
    for p in placements:
        check_assignment(traced.graph, p)
        indexed.append({op: device_index(devs, d) for op, d in p.items()})
    with tempfile.TemporaryDirectory(prefix="placement-state-") as tmp:
        state = Path(tmp) / "state.pt"
        torch.save(model.state_dict(), state)
        spec = {"mode": "benchmark", "runner": runner, "source": source, "seed": settings.seed,
                "input_shape": list(shape), "batch_size": batch, "state_dict": str(state),
                "devices": [asdict(d) for d in devs], "placements": indexed, "steps": settings.steps,
                "warmup": settings.warmup, "memory_limit": settings.memory_limit,
                "comm_timeout": settings.timeout}
        return _run_items(spec, devs, runner, settings, len(indexed), progress)


def _run_items(spec: dict, devs: list[LocalDevice], runner: str, settings: BenchmarkSettings, n: int,
               progress) -> list[BenchmarkResult]:
    from .launcher import assign_cores

    if runner == "ranks":
        world = len(devs)
        affinity, threads, shared = assign_cores(devs)
    else:
        world, affinity, threads, shared = 1, None, [settings.threads], False
    spec = dict(spec, affinity=affinity, threads=threads)
    todo = [(k, r) for r in range(settings.rounds) for k in range(n)]
    merged: dict[tuple[int, int], dict] = {}
    total = len(todo)
    while todo:
        problem = _one_job(dict(spec, items=[list(i) for i in todo]), world, settings, merged, progress, total)
        todo = [i for i in todo if i not in merged]
        if problem and todo:  # the workers died before finishing anything: report instead of looping
            for item in todo:
                merged[item] = {"status": "error", "message": problem}
            todo = []
    return [_combine([merged[(k, r)] for r in range(settings.rounds)], runner, devs, settings, shared)
            for k in range(n)]


def _one_job(spec: dict, world: int, settings: BenchmarkSettings, merged: dict, progress, total: int) -> str:
    """Run the items of ``spec`` in one set of workers; record what finished in ``merged``.

    Returns "" when something finished (the caller restarts the workers for the
    rest), else why the workers stopped.
    """
    from .launcher import WorkerJob

    items = [tuple(i) for i in spec["items"]]
    per_rank: dict[tuple, dict[int, dict]] = {}
    started: dict[tuple, float] = {}
    ready: set[int] = set()
    progressed = False
    fatal: dict | None = None
    timed_out: tuple | None = None
    with WorkerJob(spec, world) as job:
        launched = time.monotonic()
        failed_at = None
        while True:
            for rank, ev in job.events():
                kind = ev.get("event")
                if kind == "ready":
                    ready.add(rank)
                elif kind == "start":
                    started.setdefault(tuple(ev["item"]), time.monotonic())
                elif kind == "result":
                    item = tuple(ev["item"])
                    per_rank.setdefault(item, {})[rank] = ev
                    if len(per_rank[item]) == world and item not in merged:
                        merged[item] = _merge_ranks(per_rank[item])
                        progressed = True
                        if progress is not None:
                            progress(len(merged), total)
                elif kind == "fatal":
                    if ev.get("kind") == "input":
                        raise InputError(ev["message"])
                    fatal = fatal or ev
            codes = job.exit_codes()
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if any(c not in (None, 0) for c in codes):
                failed_at = failed_at or now
                if now - failed_at > 15:  # the others did not notice their peer is gone
                    job.kill()
                    break
            if len(ready) < world and now - launched > max(STARTUP_S, settings.timeout):
                job.kill()
                fatal = fatal or {"message": f"the workers did not start within {max(STARTUP_S, settings.timeout):.0f} s"}
                break
            running = [i for i in items if i in started and i not in merged]
            if running and now - started[running[0]] > settings.timeout:
                timed_out = running[0]
                job.kill()
                break
            time.sleep(0.05)
        for rank, ev in job.events():
            if ev.get("event") == "result":
                per_rank.setdefault(tuple(ev["item"]), {})[rank] = ev
        tail = job.log_tail()
    if timed_out is not None:
        merged[timed_out] = {"status": "timeout", "message": f"killed after {settings.timeout:g} s"}
        _report(progress, merged, total)
        return ""
    # an item that some rank reported but that did not complete everywhere: the job died on it
    for item in items:
        if item in merged or item not in per_rank:
            continue
        reports = list(per_rank[item].values())
        bad = next((r for r in reports if r.get("status") in ("oom", "memory_limit")), None)
        bad = bad or next((r for r in reports if r.get("status") != "ok"), None)
        merged[item] = {"status": bad["status"] if bad else "error",
                        "message": (bad or {}).get("message") or "a peer rank failed"}
        _report(progress, merged, total)
        return ""
    message = ((fatal or {}).get("message") or "the workers exited") + (f" ({tail})" if tail else "")
    if fatal is not None or not progressed:
        running = [i for i in items if i in started and i not in merged]
        if running:  # it died on this one: report it, go on with the rest
            merged[running[0]] = {"status": "error", "message": message}
            _report(progress, merged, total)
            return ""
    return "" if progressed else message


def _report(progress, merged: dict, total: int) -> None:
    if progress is not None:
        progress(len(merged), total)


def _merge_ranks(reports: dict[int, dict]) -> dict:
    """One item's per-rank reports as one: steps take the slowest rank, the loss its owner's."""
    ranks = [reports[r] for r in sorted(reports)]
    bad = [r for r in ranks if r.get("status") != "ok"]
    if bad:
        # the cause, not the peers that lost their connection to the rank that failed
        first = next((r for r in bad if r["status"] in ("oom", "memory_limit")), None)
        first = first or next((r for r in bad if not _peer_failure(r.get("message", ""))), bad[0])
        out = {"status": first["status"], "message": first.get("message", "")}
        out["peak_memory_bytes"] = _merge_dicts(r.get("peak_memory_bytes") for r in ranks)
        if first["status"] == "memory_limit" and first.get("limit") is not None:
            # every rank knows only its own peak: name the devices that went over from all of them
            out["message"] = limit_message(first["limit"], out["peak_memory_bytes"])
        return out
    steps = [max(vals) for vals in zip(*(r["steps_s"] for r in ranks))]
    warm = [max(vals) for vals in zip(*(r["warmup_s"] for r in ranks))]
    losses = next((r["losses"] for r in ranks if r.get("losses")), [])
    return {"status": "ok", "message": "", "steps_s": steps, "warmup_s": warm, "losses": losses,
            "peak_memory_bytes": _merge_dicts(r.get("peak_memory_bytes") for r in ranks),
            "bytes_per_step": sum(r.get("bytes_per_step", 0.0) for r in ranks),
            "messages_per_step": sum(r.get("messages_per_step", 0.0) for r in ranks)}


def _peer_failure(message: str) -> bool:
    text = message.lower()
    return "closed by peer" in text or "connection reset" in text or "broken pipe" in text


def limit_message(limit: float, peaks: Mapping[str, float | None]) -> str:
    """``peak memory above the limit of 25 kB on cpu1 (peak 41 kB)``: the devices that went over."""
    from ..analysis.units import fmt_bytes

    over = [f"{d} (peak {fmt_bytes(b)})" for d, b in peaks.items() if b is not None and b > limit]
    where = ", ".join(over[:-1]) + f" and {over[-1]}" if len(over) > 1 else (over[0] if over else "another rank")
    return f"peak memory above the limit of {fmt_bytes(limit)} on {where}"


def _merge_dicts(ds) -> dict:
    out: dict = {}
    for d in ds:
        out.update(d or {})
    return out


def _combine(rounds: list[dict], runner: str, devs: list[LocalDevice], settings: BenchmarkSettings,
             shared: bool) -> BenchmarkResult:
    peaks = _merge_dicts(r.get("peak_memory_bytes") for r in rounds)
    devices = [{"name": d.name, "torch": d.torch, "peak_memory_bytes": peaks.get(d.name),
                "memory_limit_bytes": settings.memory_limit} for d in devs]
    bad = next((r for r in rounds if r["status"] != "ok"), None)
    if bad is not None:
        return BenchmarkResult(bad["status"], runner, devices, message=bad.get("message", ""), shared_cores=shared)
    n = len(rounds)
    return BenchmarkResult(
        "ok", runner, devices,
        steps_s=[s for r in rounds for s in r["steps_s"]], warmup_s=[s for r in rounds for s in r["warmup_s"]],
        losses=rounds[0]["losses"], bytes_per_step=sum(r["bytes_per_step"] for r in rounds) / n,
        messages_per_step=sum(r["messages_per_step"] for r in rounds) / n, shared_cores=shared,
        message="ranks share cores: timings include contention" if shared else "")


# -- the worker side ------------------------------------------------------------------------------

def worker_main(spec: dict, rank: int, events) -> None:
    """Run the spec's items in this worker (see :mod:`.worker`)."""
    import torch

    from .fx_import import trace_for_batch
    from .sources import load_model

    devs = [LocalDevice(**d) for d in spec["devices"]]
    shape = tuple(spec["input_shape"])
    model = load_model(spec["source"], seed=spec["seed"])
    if spec.get("state_dict"):
        model.load_state_dict(torch.load(spec["state_dict"], weights_only=True))
    traced = trace_for_batch(model, shape, spec["batch_size"])
    if spec["runner"] == "ranks":
        _RanksWorker(spec, rank, devs, traced, events).run()
    else:
        _InProcessWorker(spec, devs, traced, events).run()


class _Worker:
    def __init__(self, spec, devs, traced, events):
        self.spec, self.devs, self.traced, self.events = spec, devs, traced, events
        self.shape = tuple(spec["input_shape"])
        self.batch = int(spec["batch_size"])
        self.limit = spec.get("memory_limit")

    def run(self) -> None:
        self.events.write({"event": "ready"})
        for k, rnd in self.spec["items"]:
            self.events.write({"event": "start", "item": [k, rnd]})
            try:
                report = self.item(self.spec["placements"][k])
            except _Abort as abort:  # this process cannot go on (its peers are mid-step): report and exit
                self.events.write({"event": "result", "item": [k, rnd], **abort.report})
                raise SystemExit(4) from None
            self.events.write({"event": "result", "item": [k, rnd], **report})

    def timed(self, step, limit_exceeded) -> dict:
        """Warm-up (memory measured on the first step), the limit check, then the timed steps."""
        warm = []
        for w in range(self.spec["warmup"]):
            warm.append(step(w == 0))
        peaks = self.peaks()
        if limit_exceeded(peaks):
            # a rank sees only its own peak; the caller names the devices from every rank's (_merge_ranks)
            return {"status": "memory_limit", "peak_memory_bytes": peaks, "limit": self.limit,
                    "message": limit_message(self.limit, peaks)}
        before = self.sent()
        runs = [step(False) for _ in range(self.spec["steps"])]
        after = self.sent()
        n = len(runs)
        return {"status": "ok", "steps_s": [r.seconds for r in runs], "warmup_s": [r.seconds for r in warm],
                "losses": [r.loss for r in runs if r.loss is not None], "peak_memory_bytes": peaks,
                "bytes_per_step": (after[0] - before[0]) / n, "messages_per_step": (after[1] - before[1]) / n}

    def sent(self) -> tuple[float, float]:
        return 0.0, 0.0


class _InProcessWorker(_Worker):
    def item(self, placement: dict) -> dict:
        import copy

        import torch

        from .apply import place
        from .executor import InProcessStep
        from .fx_import import Traced
        from .memory import CpuTracker, is_oom

        assignment = {op: self.devs[i].torch for op, i in placement.items()}
        torch_devices = sorted({d.torch for d in self.devs})
        try:
            traced = Traced(copy.deepcopy(self.traced.gm), self.traced.graph, self.traced.node_op, "copy")
            placed = place(None, assignment, self.shape, traced=traced)
            input_op = next(op for node, op in traced.node_op.items()
                            if any(n.name == node and n.op == "placeholder" for n in traced.gm.graph.nodes))
            runner = InProcessStep(placed, assignment[input_op], self.shape, self.batch, self.spec["seed"])
            for d in torch_devices:
                if d.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats(d)
                    if self.limit:
                        total = torch.cuda.get_device_properties(d).total_memory
                        torch.cuda.set_per_process_memory_fraction(min(1.0, self.limit / total), d)
            self.tracker = CpuTracker()
            self.runner = runner

            def step(first):
                return runner.step(self.tracker if first else None)
            return self.timed(step, lambda peaks: self.limit is not None and any(
                b is not None and b > self.limit for b in peaks.values()))
        except Exception as e:  # noqa: BLE001 - reported as the placement's result
            from ..errors import InputError
            if isinstance(e, InputError):
                return {"status": "error", "message": e.message}
            if is_oom(e):
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                return {"status": "oom", "message": _first_line(e)}
            return {"status": "error", "message": _first_line(e)}
        finally:
            self.runner = None

    def peaks(self) -> dict:
        import torch
        out = {}
        cpu = self.runner.resident_bytes("cpu") + self.tracker.peak
        for d in self.devs:
            out[d.name] = (torch.cuda.max_memory_allocated(d.torch) if d.is_cuda else cpu)
        return out


class _RanksWorker(_Worker):
    def __init__(self, spec, rank, devs, traced, events):
        super().__init__(spec, devs, traced, events)
        import datetime

        import torch
        import torch.distributed as dist

        from .executor import Comm, dry_run

        self.rank = rank
        self.device = torch.device(devs[rank].torch)
        backend = "nccl" if all(d.is_cuda for d in devs) else "gloo"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        store = dist.FileStore(spec["store"], len(devs))
        dist.init_process_group(backend, store=store, rank=rank, world_size=len(devs),
                                timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 600))))
        self.backend = backend
        self.comm = Comm(self.device, backend)
        self.meta = dry_run(traced.gm, self.shape, self.batch)
        self.initial = {k: v.clone() for k, v in traced.gm.state_dict().items()}

    def run(self) -> None:
        import torch.distributed as dist
        try:
            super().run()
        finally:
            dist.destroy_process_group()

    def item(self, placement: dict) -> dict:
        import torch
        import torch.distributed as dist

        from ..errors import InputError
        from .apply import node_devices, shared_module_conflicts
        from .executor import RankStep
        from .memory import CpuTracker, is_oom, tensor_bytes

        gm = self.traced.gm
        try:
            node_rank = node_devices(gm, self.traced.node_op, placement)
            shared_module_conflicts(gm, node_rank)
        except InputError as e:  # every rank sees the same and moves on
            return {"status": "error", "message": e.message}
        gm.load_state_dict(self.initial)
        if self.device.type == "cuda":
            gm.to("cpu")
        step = RankStep(gm, node_rank, self.rank, self.device, self.comm, self.meta, self.shape, self.batch,
                        self.spec["seed"])
        if self.device.type == "cuda":
            for t in step.owned_tensors():
                t.data = t.data.to(self.device)
            step.x = step.x.to(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.limit:
                total = torch.cuda.get_device_properties(self.device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, self.limit / total), self.device)
        self.step_runner = step
        self.tracker = CpuTracker()
        self.baseline = tensor_bytes(step.owned_tensors())

        def run_step(first):
            return step.step(self.tracker if first and self.device.type == "cpu" else None)

        def exceeded(peaks):
            mine = peaks[self.devs[self.rank].name]
            flag = torch.tensor([1.0 if (self.limit is not None and mine > self.limit) else 0.0],
                                device=self.device if self.backend == "nccl" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item() > 0)
        try:
            return self.timed(run_step, exceeded)
        except Exception as e:  # noqa: BLE001
            if is_oom(e):
                raise _Abort({"status": "oom", "message": _first_line(e)}) from None
            raise _Abort({"status": "error", "message": f"rank {self.rank}: {_first_line(e)}"}) from None

    def peaks(self) -> dict:
        import torch
        name = self.devs[self.rank].name
        if self.device.type == "cuda":
            return {name: int(torch.cuda.max_memory_allocated(self.device))}
        return {name: int(self.baseline + self.tracker.peak)}

    def sent(self) -> tuple[float, float]:
        return float(self.comm.bytes_sent), float(self.comm.messages)


class _Abort(Exception):
    def __init__(self, report: dict):
        super().__init__(report.get("message", ""))
        self.report = report


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
