"""Experiment E5 (thesis §4.3.5) on this machine: how well does the simulator predict real step times?

1. Calibrate the local devices on the model (:mod:`placement_core.torch.calibrate`), or reuse a calibration.
2. Collect a varied set of placements: the best placement of a genetic
   algorithm run against the calibrated simulator every few generations (the
   thesis' method), uniformly random ones, random contiguous zones (between
   the two in how much they communicate), contiguous two-way splits at several
   cut points, every single-device placement, and placements that split ops over
   the devices (docs/sharding.md): data parallelism, and random placements of
   whole and split ops.
3. Benchmark each for real (:mod:`placement_core.torch.benchmark`, ``ranks`` runner), rounds interleaved.
4. Simulate each with the calibrated profile (measured op times, ping-pong
   links and the CPU devices' fitted message overhead) and with the
   uncalibrated default (roofline formulas on the same device graph, so with
   the same links and message overhead), and compare: Pearson r, Kendall τ (τ-b) and mean absolute
   percentage error of simulated against measured median step time.

Writes ``results.csv``, ``scatter.png`` (simulated against measured, y = x and
the least-squares line), ``placements.json`` and ``report.md`` to the output folder.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..analysis.stats import kendall_tau, mape, pearson_r
from ..base.errors import InputError
from ..base.jsonio import write_json
from ..problem import Problem
from .e2 import STATISTICS, estimate
from .e5_report import WHOLE, plot, report




@dataclass(frozen=True)
class E5Settings:
    generations: int = 30  # GA generations against the calibrated simulator
    checkpoint_every: int = 2  # keep the GA's best placement every this many generations
    random: int = 8  # uniformly random placements
    zones: int = 8  # random contiguous-zone placements
    splits: int = 5  # contiguous two-way splits at evenly spaced cut points
    sharded: int = 4  # placements that split ops over the devices: data parallel, then random ones
    steps: int = 4  # timed steps per round
    warmup: int = 1
    rounds: int = 4
    seed: int = 0
    timeout: float = 600.0
    statistic: str = "median"  # what a placement's measured step time is (E2: which one orders placements best)
    shuffle: bool = True  # each round benchmarks the placements in its own random order


@dataclass
class Candidate:
    label: str
    kind: str  # ga | random | zones | split | single | sharded
    placement: np.ndarray


@dataclass
class E5Result:
    rows: list[dict]
    metrics: dict  # profile -> statistic -> {"pearson_r", "kendall_tau", "mape_pct", "n"}
    files: dict = field(default_factory=dict)
    statistic: str = "median"  # the measured statistic the headline figures use
    load: tuple = ()  # the load average (1, 5, 15 min) before and after


# -- statistics -----------------------------------------------------------------------------------

def metrics(predicted, measured) -> dict:
    return {"pearson_r": pearson_r(predicted, measured), "kendall_tau": kendall_tau(predicted, measured),
            "mape_pct": mape(predicted, measured), "n": len(measured)}


# -- placements -------------------------------------------------------------------------------------

def collect_placements(problem: Problem, settings: E5Settings,
                       progress: Callable[[str], None] | None = None) -> list[Candidate]:
    """GA checkpoints, random, random zones, contiguous splits, single devices; duplicates dropped."""
    from ..optimize import make_optimizer

    n, d = problem.n_ops, problem.n_devices
    rng = np.random.default_rng(settings.seed)
    out: list[Candidate] = [Candidate(f"single:{name}", "single", np.full(n, i, dtype=np.int32))
                            for i, name in enumerate(problem.devices.names)]
    if d > 1:
        work = (problem.costs.fwd + problem.costs.bwd + problem.costs.update)[:, 0]
        cum = np.cumsum(work) / max(float(work.sum()), 1e-300)
        for f in np.linspace(0, 1, settings.splits + 2)[1:-1]:
            cut = int(np.searchsorted(cum, f)) + 1
            x = np.where(np.arange(n) < cut, 0, 1).astype(np.int32)
            out.append(Candidate(f"split {f:.0%} of compute on {problem.devices.names[0]}", "split", x))
        for k in range(settings.random):
            out.append(Candidate(f"random #{k}", "random", rng.integers(0, d, n).astype(np.int32)))
        for k in range(settings.zones):
            zones = int(rng.integers(2, max(3, min(n, 12))))
            cuts = np.sort(rng.choice(np.arange(1, n), size=min(zones - 1, n - 1), replace=False))
            x = np.zeros(n, dtype=np.int32)
            dev = int(rng.integers(0, d))
            start = 0
            for c in list(cuts) + [n]:
                x[start:c] = dev
                dev = (dev + 1 + int(rng.integers(0, d - 1))) % d if d > 2 else 1 - dev
                start = c
            out.append(Candidate(f"{zones} zones #{k}", "zones", x))
        if settings.generations > 0:
            # the GA's best placement every few generations, as the thesis collected them (ask/tell by hand,
            # so that a checkpoint is exactly a generation)
            ga = make_optimizer(problem, "ga", seed=settings.seed)
            best_f, best_x, kept = float("inf"), None, 0
            for gen in range(1, settings.generations + 1):
                xs = ga.ask(1 << 30)
                fs = problem.evaluate_many(xs)
                ga.tell(xs, fs)
                i = int(np.argmin(fs))
                if fs[i] < best_f:
                    best_f, best_x = float(fs[i]), xs[i].copy()
                if gen % max(1, settings.checkpoint_every) == 0 or gen == 1:
                    out.append(Candidate(f"GA generation {gen}", "ga", best_x.copy()))
                    kept += 1
            if progress:
                progress(f"GA: {kept} checkpoints over {settings.generations} generations")
    out += sharded_placements(problem, settings, rng)
    unique, seen = [], set()
    for c in out:
        if c.placement.tobytes() not in seen:
            seen.add(c.placement.tobytes())
            unique.append(c)
    return unique


def sharded_table(problem: Problem):
    from ..model.sharding import search_splits
    return search_splits(problem.devices, ["channel", "batch"], problem.n_devices)


def sharded_placements(problem: Problem, settings: E5Settings, rng: np.random.Generator) -> list[Candidate]:
    """Data parallelism over every device, then random placements of whole and split ops (their genes index
    :func:`sharded_table`, which ``problem`` may lack: the experiment simulates them on a problem with it)."""
    if settings.sharded <= 0 or problem.n_devices < 2:
        return []
    from ..optimize.genes import Genes
    from ..model.sharding import Split
    wide = problem.with_splits(sharded_table(problem))
    out = []
    everyone = Split("batch", tuple(range(wide.n_devices)))
    if everyone in wide.splits:  # devices of one kind (CPU ranks): data parallel over all of them
        every = wide.n_devices + wide.splits.index(everyone)
        dp = np.where(wide.allowed[:, every - wide.n_devices], every, 0).astype(np.int32)
        out.append(Candidate("data parallel", "sharded", dp))
    genes = Genes(wide)
    for k in range(settings.sharded - len(out)):
        out.append(Candidate(f"random with splits #{k}", "sharded", genes.draw(rng, np.arange(wide.n_ops))))
    return out


# -- the experiment -----------------------------------------------------------------------------------

def run_e5(source: str, input_shape, devices: str, *, batch_size: int | None, out_dir: str | Path,
           settings: E5Settings | None = None, calibration_dir: str | Path | None = None,
           progress: Callable[[str], None] | None = None, command: str = "") -> E5Result:
    from ..formats.catalog import load_devices
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..analysis.calibration_fit import CalibrationSettings
    from ..torch.calibrate import calibrate, save_calibration
    from ..torch.devspec import parse_devices
    from ..torch.model_import import trace_model
    from ..torch.sources import load_model, parse_input_shape, parse_source
    from ..cost.timings import read_timings, timing_table

    settings = settings or E5Settings()
    say = progress or (lambda _: None)
    load_before = os.getloadavg()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shape = parse_input_shape(input_shape)
    batch = int(batch_size or shape[0])
    devs = parse_devices(devices)
    if len(devs) < 2:
        raise InputError("E5 compares placements over several devices; give at least two", field="--devices",
                         fix="Use e.g. --devices cpu:2")
    src = parse_source(source)
    graph = trace_model(load_model(src, seed=settings.seed), shape, name=src.default_name).graph.with_batch_size(batch)
    if calibration_dir is not None:
        cal_dir = Path(calibration_dir)
        device_graph = load_devices(str(cal_dir / "devices.json"))
        timings_doc = read_timings(cal_dir / "timings.json")
        say(f"using the calibration in {cal_dir}")
    else:
        say(f"calibrating {graph.name} on {devices} ...")
        cal = calibrate(source, shape, devs, batch_size=batch, name=graph.name,
                        settings=CalibrationSettings(seed=settings.seed), progress=say)
        save_calibration(cal, out / "calibration", preset=None)  # an experiment leaves the user's preset alone
        device_graph, timings_doc = cal.devices, cal.timings
    names = [d.name for d in devs]
    if device_graph.names != names:
        raise InputError(f"the calibration is for devices {device_graph.names}, not {names}", field="--calibration",
                         fix="Calibrate with the same --devices")
    calibrated = Problem(graph, device_graph, timings=timing_table(timings_doc, graph))
    default = Problem(graph, device_graph)
    candidates = collect_placements(calibrated, settings, say)
    # simulated with the split table of the sharded candidates (whole ops simulate the same with it)
    table = sharded_table(calibrated) if settings.sharded > 0 else ()
    calibrated, default = calibrated.with_splits(table), default.with_splits(table)
    say(f"benchmarking {len(candidates)} placements x {settings.rounds} rounds x {settings.steps} steps ...")
    from ..model.sharding import gene_entry
    assignments = [{op.name: gene_entry(int(i), names, table) for op, i in zip(graph.ops, c.placement)}
                   for c in candidates]
    results = benchmark(source, shape, assignments, devs, runner="ranks", batch_size=batch, name=graph.name,
                        settings=BenchmarkSettings(steps=settings.steps, warmup=settings.warmup,
                                                   rounds=settings.rounds, seed=settings.seed,
                                                   timeout=settings.timeout, shuffle=settings.shuffle),
                        progress=lambda done, total: say(f"  {done}/{total} runs") if done % 10 == 0 else None)
    rows = []
    for c, r in zip(candidates, results):
        row = {"label": c.label, "kind": c.kind, "status": r.status, "message": r.message,
               "sim_calibrated_s": calibrated.simulate(c.placement).result.batch_time,
               "sim_default_s": default.simulate(c.placement).result.batch_time,
               **{f"measured_{stat}_s": estimate(r.steps_s, stat) if r.steps_s else None for stat in STATISTICS},
               "q1_s": r.quartiles_s[0] if r.steps_s else None, "q3_s": r.quartiles_s[1] if r.steps_s else None,
               "steps": len(r.steps_s), "bytes_per_step": r.bytes_per_step, "messages_per_step": r.messages_per_step,
               "cross_device_edges": int(sum(1 for p, ch, _ in graph.edges() if c.placement[p] != c.placement[ch]))}
        for dv in r.devices:
            row[f"peak_memory_{dv['name']}_bytes"] = dv["peak_memory_bytes"]
        rows.append(row)
    with_intervals(calibrated, candidates, rows)
    ok = [r for r in rows if r["status"] == "ok"]
    if len(ok) < 3:
        raise InputError(f"only {len(ok)} placements could be benchmarked", field="e5",
                         fix="See results.csv for the failures")
    result_metrics = {}
    for profile in ("calibrated", "default"):
        sim = [r[f"sim_{profile}_s"] for r in ok]
        result_metrics[profile] = {stat: metrics(sim, [r[f"measured_{stat}_s"] for r in ok]) for stat in STATISTICS}
    whole = [r for r in ok if r["kind"] != "sharded"]
    if len(whole) < len(ok) and len(whole) >= 3:  # the split ops' cost model apart (docs/e5.md)
        result_metrics[WHOLE] = {stat: metrics([r["sim_calibrated_s"] for r in whole],
                                               [r[f"measured_{stat}_s"] for r in whole]) for stat in STATISTICS}
    files = {"csv": out / "results.csv", "png": out / "scatter.png", "placements": out / "placements.json",
             "report": out / "report.md"}
    _write_csv(files["csv"], rows)
    write_json(files["placements"], {"network": graph.name, "devices": names, "placements": [
        {"label": c.label, "kind": c.kind, "assignment": a} for c, a in zip(candidates, assignments)]}, indent=None)
    plot(ok, result_metrics, files["png"], title=f"{graph.name} (batch {batch}, input {'x'.join(map(str, shape[1:]))})"
                                                 f" on {devices}", statistic=settings.statistic)
    load = (load_before, os.getloadavg())
    files["report"].write_text(report(graph.name, source, shape, batch, devices, rows, result_metrics,
                                      timings_doc, settings, command, load))
    return E5Result(rows, result_metrics, {k: str(v) for k, v in files.items()}, settings.statistic, load)


def with_intervals(calibrated: Problem, candidates: list[Candidate], rows: list[dict]) -> None:
    """Each row's 90 % interval of its calibrated simulated time (``sim_low_s``, ``sim_high_s``) from the
    calibration's spread (analysis.uncertainty), and ``tied_with_next``: whether the simulator can tell it from
    the next faster placement by simulated time. Nothing when the calibration recorded no spread."""
    from ..analysis import uncertainty
    if not rows or not uncertainty.has_spread(calibrated):
        return
    sp = uncertainty.spread(calibrated, np.array([c.placement for c in candidates]))
    order = np.argsort(sp.point, kind="stable")
    for rank, i in enumerate(order):
        fits = np.isclose(sp.point[i], rows[i]["sim_calibrated_s"])  # over memory: the objective is not a time
        rows[i]["sim_low_s"] = float(sp.low[i]) if fits else None
        rows[i]["sim_high_s"] = float(sp.high[i]) if fits else None
        rows[i]["tied_with_next"] = bool(rank + 1 < len(order) and sp.same[i, order[rank + 1]])


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def summary_line(result: E5Result) -> str:
    parts = []
    for profile in ("calibrated", "default"):
        m = result.metrics[profile][result.statistic]
        parts.append(f"{profile} ({result.statistic}): r {m['pearson_r']:.3f}, tau {m['kendall_tau']:.3f}, MAPE {m['mape_pct']:.1f} %")
    return "; ".join(parts)


def dumps(result: E5Result) -> str:
    return json.dumps({"metrics": result.metrics, "files": result.files, "rows": result.rows}, indent=1)
