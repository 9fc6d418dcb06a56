"""Experiment E4 (thesis §4.3.4) on this machine: from the simulator's MAP-Elites archive to the real devices.

1. The model's network, the calibrated local devices and op times (a ``placement calibrate`` folder).
2. MAP-Elites against the calibrated simulator (a run in the experiment's own store).
3. Three measured searches from that run, each with the same budget of measurements (the benchmark
   protocol of ``placement benchmark``, ``ranks`` runner): re-measuring its best candidates in simulated
   order (top-K), the surrogate-assisted GA, and a plain GA on measurements (population 30, as in the
   thesis' E4), every measurement stored with its search.
4. A confirmation: the simulator's best and each search's best measured again, interleaved over several
   rounds (a search's best of many noisy measurements is biased low; this is not).

Everything lands in one folder: ``runs.sqlite`` (the runs and every measurement; running the same
command again resumes what was cut short), ``report.md``, ``history.csv`` and ``e4.png`` (measured best
against measurements). The machine's load average is recorded before and after every step.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..base.errors import InputError
from .plotting import pyplot, skipped

SEARCHES = ("top-k", "assisted", "ga")
TITLES = {"top-k": "top-K re-benchmarking", "assisted": "surrogate-assisted GA", "ga": "plain GA on measurements"}


def load() -> str:
    return "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def run_e4(source: str, shape, devices: str, *, batch_size: int, calibration: str | Path, out_dir: str | Path,
           budget: int = 50, archive_budget: int = 20000, seed: int = 0, steps: int = 4, warmup: int = 1,
           rounds: int = 2, confirm_rounds: int = 6, command: str = "",
           say: Callable[[str], None] = lambda m: None) -> dict:
    from ..formats.catalog import load_devices
    from ..surrogate.search import SearchSettings
    from ..surrogate.model import SurrogateSpec
    from ..store.measured_search import resume_measured, start_measured
    from ..analysis.benchmark_plan import distinct_top, run_candidates
    from ..problem import Problem
    from ..store.recording import start_run
    from ..store import RunStore
    from ..cost.timings import read_timings, timing_table
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..torch.devspec import parse_devices
    from ..torch.measure import measurer_from_params as truth_for
    from ..torch.model_import import trace_model
    from ..torch.sources import load_model, parse_source

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cal = Path(calibration)
    devs = parse_devices(devices)
    device_graph = load_devices(str(cal / "devices.json"))
    if device_graph.names != [d.name for d in devs]:
        raise InputError(f"the calibration is for devices {device_graph.names}", field="--calibration",
                         fix="Calibrate with the same --devices")
    src = parse_source(source)
    graph = trace_model(load_model(src, seed=0), shape, name=src.default_name).graph.with_batch_size(batch_size)
    problem = Problem(graph, device_graph, timings=timing_table(read_timings(cal / "timings.json"), graph))
    loads = {"start": load()}
    with RunStore(path=out / "runs.sqlite") as store:
        runs = {r.label: r for r in store.runs()}
        if "e4 archive" in runs and runs["e4 archive"].status == "done":
            archive_id = runs["e4 archive"].id
        else:
            say(f"MAP-Elites, {archive_budget} evaluations against the calibrated simulator ...")
            archive_id, _ = start_run(store, problem, "map-elites", evaluations=archive_budget, seed=seed,
                                      label="e4 archive")
        loads["archive"] = load()
        prob, cands, kinds = run_candidates(store, archive_id)
        ranked = distinct_top(prob, cands, 10_000)
        initial = np.array([r.placement for r in ranked], dtype=np.int32)
        say(f"run {archive_id}: {len(ranked)} candidates ({kinds})")
        params = {"model": source, "input_shape": list(shape), "batch_size": batch_size, "devices": devices,
                  "mapping": {n: n for n in device_graph.names}, "steps": steps, "warmup": warmup, "rounds": rounds,
                  "timeout": 600.0, "runner": "ranks"}
        found: dict[str, dict] = {}
        for search in SEARCHES:
            label = f"e4 {search}"
            truth = {}

            def make(p, pr):
                truth["m"] = truth_for(p, pr)
                return truth["m"]

            details = lambda key: truth["m"].results.get(key) if "m" in truth else None  # noqa: E731
            progress = lambda used, best, s=search: say(f"  {s}: {used}/{budget} measured, best {best * 1e3:.2f} ms")  # noqa: E731
            settings = SearchSettings(budget=budget, search=search, seed=seed, population=30, initial=10, batch=5,
                                      surrogate=SurrogateSpec(simulated=True, seed=seed))
            rec = {r.label: r for r in store.runs()}.get(label)
            say(f"{TITLES[search]} ({budget} measurements) ...")
            if rec is None:
                run_id, result = start_measured(store, archive_id, settings, make(params, prob), params=params,
                                                initial=initial, label=label, details=details, progress=progress)
            elif rec.status != "done":
                run_id, result = rec.id, resume_measured(store, rec.id, make, details=details, progress=progress)
            else:
                run_id, result = rec.id, None
            history = store.history(run_id)
            best = store.get(run_id)
            end_load = best.extras.get("load_average_at_end")
            found[search] = {"run": run_id, "history": history[:, :2].tolist(), "best_measured_s": best.best_objective,
                             "placement": best.best_placement, "minutes": (best.wall_s or 0.0) / 60,
                             "load": "{:.2f}, {:.2f}, {:.2f}".format(*end_load) if end_load else "-"}
        loads["searches"] = load()
        sim_best = ranked[0]
        say(f"confirmation: the simulator's best and each search's best, {confirm_rounds} interleaved rounds ...")
        picks = [("simulator's best", sim_best.placement)] + [(TITLES[s], found[s]["placement"]) for s in SEARCHES]
        names = device_graph.names
        assignments = [{op.name: names[int(i)] for op, i in zip(graph.ops, x)} for _, x in picks]
        results = benchmark(source, shape, assignments, devs, runner="ranks", batch_size=batch_size,
                            settings=BenchmarkSettings(steps=steps, warmup=warmup, rounds=confirm_rounds, seed=0),
                            name=graph.name)
        loads["end"] = load()
        sequences = {}  # per search, in measurement order: (is the simulator's best, measured median or None)
        for s in SEARCHES:
            seq = []
            for b in store.benchmarks(run_id=found[s]["run"]):
                x = np.array([names.index(b["placement"][op.name]) for op in graph.ops], dtype=np.int32)
                seq.append((bool(np.array_equal(x, sim_best.placement)), b["measured_median_s"]))
            sequences[s] = seq
    confirm = [{"placement": lbl, "median_s": r.median_step_s, "iqr_s": r.to_dict()["iqr_s"],
                "simulated_s": float(problem.simulate(x).result.batch_time), "status": r.status,
                "same_as_simulators_best": bool(np.array_equal(x, sim_best.placement))}
               for (lbl, x), r in zip(picks, results)]
    data = {"network": graph.name, "source": source, "shape": list(shape), "batch": batch_size, "devices": devices,
            "archive_run": archive_id, "candidates": len(ranked), "budget": budget, "searches": found,
            "confirm": confirm, "loads": loads, "sequences": sequences, "command": command}
    _write(out, data)
    return data


def first_other_at_least_as_fast(sequence) -> tuple[float | None, int | None]:
    """(the search's own measurement of the simulator's best, the number of measurements after which it had
    measured another placement at least that fast), from its measurements in order."""
    own = next((v for is_sim, v in sequence if is_sim and v is not None), None)
    if own is None:
        return None, None
    for n, (is_sim, v) in enumerate(sequence, start=1):
        if not is_sim and v is not None and v <= own:
            return own, n
    return own, None


def _write(out: Path, data: dict) -> None:
    with open(out / "history.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["search", "measurements", "best_measured_s"])
        for s in SEARCHES:
            for used, best in data["searches"][s]["history"]:
                w.writerow([s, int(used), f"{best:.6g}"])
    _plot(out / "e4.png", data)
    (out / "report.md").write_text(report(data))
    from ..base.jsonio import write_json
    write_json(out / "results.json", {k: v for k, v in data.items() if k != "searches"} | {
        "searches": {s: {k: v for k, v in f.items() if k != "placement"} | {"placement": np.asarray(f["placement"]).tolist()}
                     for s, f in data["searches"].items()}})


def _plot(path: Path, data: dict) -> None:
    plt = pyplot()
    if plt is None:
        skipped(path)
        return

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s, color in zip(SEARCHES, ("tab:gray", "tab:blue", "tab:orange")):
        h = np.array(data["searches"][s]["history"])
        ax.step(h[:, 0], h[:, 1] * 1e3, where="post", color=color, label=TITLES[s])
    ref = data["confirm"][0]["median_s"]
    if ref is not None:
        ax.axhline(ref * 1e3, color="black", ls="--", lw=1, label="simulator's best, re-measured")
    ax.set_xlabel("measurements")
    ax.set_ylabel("best measured step time so far (ms)")
    ax.set_title(f"E4: {data['network']} (batch {data['batch']}) on {data['devices']}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(data: dict) -> str:
    conf = {c["placement"]: c for c in data["confirm"]}
    ref = conf["simulator's best"]["median_s"]
    lines = [f"# E4 on this machine: {data['network']}, batch {data['batch']}, {data['devices']}", "",
             f"Command: `{data['command']}`" if data["command"] else "", "",
             f"MAP-Elites run {data['archive_run']} against the calibrated simulator; {data['candidates']} distinct "
             f"candidate placements; {data['budget']} measurements per search. Load average (1, 5, 15 min): "
             + "; ".join(f"{k} {v}" for k, v in data["loads"].items()) + ".", "",
             "| search | best of its measurements (ms) | its measurement of the simulator's best (ms) | "
             "measurements until another placement measured at least as fast | re-measured in the confirmation "
             "(ms, median ± IQR) | vs. the simulator's best re-measured | minutes | load after |",
             "|---|---|---|---|---|---|---|---|"]
    for s in SEARCHES:
        f = data["searches"][s]
        c = conf[TITLES[s]]
        own, n = first_other_at_least_as_fast(data["sequences"][s])
        vs = "-" if c["median_s"] is None or ref is None else f"{(c['median_s'] / ref - 1) * 100:+.1f} %"
        same = " (the simulator's best itself)" if c["same_as_simulators_best"] else ""
        lines.append(f"| {TITLES[s]} | {f['best_measured_s'] * 1e3:.2f} | "
                     f"{'-' if own is None else f'{own * 1e3:.2f}'} | {n if n is not None else 'none'} | "
                     f"{_ms(c)}{same} | {vs} | {f['minutes']:.1f} | {f['load']} |")
    sim = conf["simulator's best"]
    lines += ["", f"Simulator's best, re-measured: {_ms(sim)} (simulated {sim['simulated_s'] * 1e3:.2f} ms).", ""]
    return "\n".join(lines) + "\n"


def _ms(c: dict) -> str:
    if c["median_s"] is None:
        return f"{c['status']}"
    return f"{c['median_s'] * 1e3:.2f} ± {(c['iqr_s'] or 0) * 1e3:.2f}"
