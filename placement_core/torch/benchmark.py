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

from ..base.errors import InputError
from .devspec import LocalDevice, check_available, device_index, parse_devices
from .sources import parse_input_shape

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
    # measure peak memory on the first warm-up step (its dispatch-mode tracker slows that step); E2 turns it
    # off to time the first step as it is
    track_memory: bool = True
    # each round visits the placements in its own seeded random order (a shared machine's slow spells then
    # fall on different placements in different rounds) instead of the given order
    shuffle: bool = False
    # a folder: after its timed steps each placement runs one more step under torch.profiler, written as a
    # Chrome trace per placement and rank (placement<k>-rank<r>.json; ui.perfetto.dev opens it)
    profile: str | None = None

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
        if self.memory_limit is not None and not self.track_memory:
            raise InputError("a memory limit needs the memory measured", field="--memory-limit")
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
    busy_s: dict[str, list[float]] = field(default_factory=dict)  # pipelined runs: per device, per timed step
    pipeline: dict | None = None  # pipelined runs: the schedule, its stages and the measured bubble
    profiles: list[str] = field(default_factory=list)  # --profile: the Chrome traces of a profiled step, per rank

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
    from .model_import import trace_model
    from .sources import load_model, parse_source

    settings = (settings or BenchmarkSettings()).check()
    devs = parse_devices(devices) if isinstance(devices, str) else list(devices)
    check_available(devs)
    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", field="--runner", fix="Use ranks or inprocess")
    if not placements:
        raise InputError("no placements to benchmark", field="placement")
    shape = parse_input_shape(input_shape)
    batch = int(batch_size or shape[0])
    src = parse_source(source)
    model = load_model(src, seed=settings.seed)
    traced = trace_model(model, shape, name=name or src.default_name)
    indexed = []
    for p in placements:
        check_assignment(traced.graph, p)
        if runner != "ranks" and any(isinstance(d, Mapping) for d in p.values()):
            raise InputError("a placement that splits ops runs on the ranks runner (one process per device)",
                             field="--runner", fix="Use --runner ranks")
        indexed.append({op: _indexed(devs, d) for op, d in p.items()})
    with tempfile.TemporaryDirectory(prefix="placement-state-") as tmp:
        state = Path(tmp) / "state.pt"
        torch.save(model.state_dict(), state)
        spec = {"mode": "benchmark", "runner": runner, "source": source, "seed": settings.seed,
                "input_shape": list(shape), "batch_size": batch, "state_dict": str(state),
                "devices": [asdict(d) for d in devs], "placements": indexed, "steps": settings.steps,
                "warmup": settings.warmup, "memory_limit": settings.memory_limit,
                "track_memory": settings.track_memory,
                "comm_timeout": settings.timeout, "profile": _profile_dir(settings.profile)}
        return _run_items(spec, devs, runner, settings, len(indexed), progress)


def _profile_dir(folder: str | None) -> str | None:
    """The profile folder, made before any worker starts (a bad path is refused, not found after the run)."""
    if folder is None:
        return None
    path = Path(folder).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot make the profile folder {folder}: {e.strerror or e}", field="--profile",
                         fix="Give a folder you can write to") from None
    return str(path)


def _indexed(devs: list[LocalDevice], d):
    """A device as its position, or a split's devices as positions (docs/sharding.md)."""
    if not isinstance(d, Mapping):
        return device_index(devs, d)
    return {"devices": [device_index(devs, x) for x in d["devices"]], "split": d["split"],
            "sizes": None if d.get("sizes") is None else list(d["sizes"])}


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
    if settings.shuffle:
        import random
        order = [random.Random(settings.seed * 100_003 + r).sample(range(n), n) for r in range(settings.rounds)]
        todo = [(k, r) for r in range(settings.rounds) for k in order[r]]
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
    """One item's per-rank reports as one: steps take the slowest rank, the loss its owner's (or, when each
    rank took the loss of its own samples, the sum of their shares)."""
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
    if any(r.get("loss_share") for r in ranks):
        losses = [sum(vals) for vals in zip(*(r["losses"] for r in ranks if r.get("losses")))]
    else:
        losses = next((r["losses"] for r in ranks if r.get("losses")), [])
    busy = {k: r["busy_s"] for k, r in zip(sorted(reports), ranks) if "busy_s" in r}
    return {"status": "ok", "message": "", "steps_s": steps, "warmup_s": warm, "losses": losses, "rank_busy_s": busy,
            "peak_memory_bytes": _merge_dicts(r.get("peak_memory_bytes") for r in ranks),
            "bytes_per_step": sum(r.get("bytes_per_step", 0.0) for r in ranks),
            "messages_per_step": sum(r.get("messages_per_step", 0.0) for r in ranks),
            "profiles": [r["profile"] for r in ranks if r.get("profile")]}


def _peer_failure(message: str) -> bool:
    text = message.lower()
    return "closed by peer" in text or "connection reset" in text or "broken pipe" in text


def limit_message(limit: float, peaks: Mapping[str, float | None]) -> str:
    """``peak memory above the limit of 25 kB on cpu1 (peak 41 kB)``: the devices that went over."""
    from ..base.units import fmt_bytes

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
    busy = {d.name: [b for r in rounds for b in r.get("rank_busy_s", {}).get(k, [])] for k, d in enumerate(devs)}
    return BenchmarkResult(
        "ok", runner, devices, busy_s={k: v for k, v in busy.items() if v},
        steps_s=[s for r in rounds for s in r["steps_s"]], warmup_s=[s for r in rounds for s in r["warmup_s"]],
        losses=rounds[0]["losses"], bytes_per_step=sum(r["bytes_per_step"] for r in rounds) / n,
        messages_per_step=sum(r["messages_per_step"] for r in rounds) / n, shared_cores=shared,
        message="ranks share cores: timings include contention" if shared else "",
        # every round profiles into the same files: the last round's traces are what is on disk
        profiles=list(dict.fromkeys(p for r in rounds for p in r.get("profiles") or
                                    ([r["profile"]] if r.get("profile") else []))))
