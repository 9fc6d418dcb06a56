"""Optimizer speed on every backend, like for like: each variant on 2 worker processes and on a 2-worker Dask cluster
against the same variant on one process, for the GA and MAP-Elites, on ResNet-50 and on a 10,000-op synthetic graph;
and quality per evaluation, synchronous against asynchronous.

    python benchmarks/optimizer.py [--json] [--graphs resnet50,synthetic10k] [--budget-resnet N] [--budget-10k N]
                                   [--quality-budget N] [--quality-seeds N]
    python benchmarks/optimizer.py --overhead [--repeats N] [--json]

For each graph and algorithm it runs the synchronous algorithm (ga, map-elites) and its asynchronous variant
(ga-steady, map-elites-async) on each backend, with the same seed. Keys, per algorithm:

* ``serial`` / ``workers_2`` / ``dask_2``: the synchronous algorithm on one process, on 2 local worker processes,
  on a 2-worker Dask LocalCluster;
* ``serial_async`` / ``workers_2_async`` / ``dask_2_async``: the asynchronous variant on the same three (batch
  sizes auto: from the backend's measured costs, capped for quality, recorded).

``speedup`` is like for like: a row's evaluations per second over the SAME variant's on one process (the
synchronous rows over ``serial``, the asynchronous ones over ``serial_async``); ``vs_sync_serial`` is over
``serial`` whatever the variant (what a user switching variant and backend at once sees). ``best_at`` is each run's
best objective at a tenth, half and all of the budget. ``quality`` (ResNet-50 only, several seeds, one process,
``--quality-budget`` evaluations): the best objective at equal evaluations of the synchronous algorithm, of the
asynchronous variant with its one-process batch, with the batch and pending the Dask run chose (the same result
on every backend: batch and pending fix it), and with the batch the automatic rule gave before it was capped.

Evaluations per second exclude starting the backend (the pool's processes; the cluster is started once,
outside the timing, as a user's would be running), which is reported as ``start_s``. ``model`` holds the
measured costs behind the scaling projection of docs/scaling.md: seconds per evaluation, per task round
trip, of the driver per evaluation, and of the Dask scheduler per task. ``--overhead`` measures only the share
of one-core runs spent outside the simulator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import Problem, load_devices, load_network  # noqa: E402
from placement_core.model.graph import Graph, Op  # noqa: E402
from placement_core.optimize import make_optimizer, run  # noqa: E402
from placement_core.parallel import DaskEvaluator, ProcessPoolEvaluator, SerialEvaluator  # noqa: E402

ALGORITHMS = {"ga": "ga-steady", "map-elites": "map-elites-async"}


def synthetic_graph(n_ops: int = 10_000, seed: int = 0) -> Graph:
    """A deep, branchy network of ``n_ops`` ops: layers of 1-4 parallel ops, each reading 1-2 ops of the
    previous two layers; conv-like compute (0.1-5 GFLOP) and activations (0.1-8 MB), weights on half."""
    rng = np.random.default_rng(seed)
    ops, layers = [Op("input", kind="input", output_bytes=4e6)], [["input"]]
    while len(ops) < n_ops:
        width = min(int(rng.integers(1, 5)), n_ops - len(ops))
        layer = []
        for _ in range(width):
            pool = layers[-1] + (layers[-2] if len(layers) > 1 else [])
            parents = tuple(sorted(set(rng.choice(pool, size=min(len(pool), int(rng.integers(1, 3))),
                                                  replace=False).tolist())))
            flops = float(rng.uniform(1e8, 5e9))
            name = f"op{len(ops)}"
            ops.append(Op(name, kind="conv", inputs=parents, fwd_flops=flops, bwd_flops=2 * flops,
                          output_bytes=float(rng.uniform(1e5, 8e6)),
                          param_bytes=float(rng.uniform(1e4, 4e6)) if rng.random() < 0.5 else 0.0))
            layer.append(name)
        layers.append(layer)
    return Graph(f"synthetic-{n_ops}", ops, batch_size=128)


def problems(names: list[str]) -> dict[str, Problem]:
    out = {}
    if "resnet50" in names:
        out["resnet50"] = Problem(load_network("resnet50"), load_devices("malvik-4gpu-limited-resnet50"))
    if "synthetic10k" in names:
        out["synthetic10k"] = Problem(synthetic_graph(), load_devices("malvik-4gpu"))
    return out


def timed_run(problem, algorithm, budget, make_evaluator) -> dict:
    t = time.perf_counter()
    evaluator = make_evaluator()
    start_s = time.perf_counter() - t
    try:
        t, cpu = time.perf_counter(), time.process_time()
        r = run(problem, algorithm, evaluations=budget, seed=0, evaluator=evaluator)
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    finally:
        evaluator.close()
    return {"algorithm": algorithm, "evals_per_s": r.evaluations / wall, "wall_s": wall, "start_s": start_s,
            "best_objective_s": r.best_objective, "evaluations": r.evaluations, "best_at": best_at(r.history, budget),
            "batch": r.params.get("batch"), "pending": r.params.get("pending"),
            # the driver's own CPU per evaluation in this very run (on a parallel backend: everything but the
            # simulations, which run elsewhere): the c_driver of docs/scaling.md's model
            "driver_cpu_s_per_eval": cpu / max(r.evaluations, 1)}


class TimedEvaluator(SerialEvaluator):
    """One core, with the time spent inside ``Problem.evaluate_many`` (the simulator and its Python entry) counted:
    wall clock and this process's CPU clock."""

    def __init__(self, problem):
        super().__init__(problem)
        self.wall = self.cpu = 0.0

    def evaluate(self, placements):
        t, c = time.perf_counter(), time.process_time()
        out = super().evaluate(placements)
        self.wall += time.perf_counter() - t
        self.cpu += time.process_time() - c
        return out


def overhead(problem, algorithm, budget, seed=0) -> dict:
    """A whole run on one core: the share of its time spent outside the simulator (selection, variation, the
    population or archive, the driver's bookkeeping), by the wall clock and by the CPU clock (which a busy
    machine disturbs less)."""
    ev = TimedEvaluator(problem)
    t, c = time.perf_counter(), time.process_time()
    r = run(problem, algorithm, evaluations=budget, seed=seed, evaluator=ev)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {"algorithm": algorithm, "evaluations": r.evaluations, "wall_s": wall, "cpu_s": cpu,
            "evaluate_wall_s": ev.wall, "evaluate_cpu_s": ev.cpu, "outside_wall": 1 - ev.wall / wall,
            "outside_cpu": 1 - ev.cpu / cpu, "best_objective_s": r.best_objective}


def overhead_report(budget: int, repeats: int) -> dict:
    """docs/scaling.md's "time outside the simulator": 20,000-evaluation runs of ResNet-50 and Inception-V3 on
    malvik-4gpu, each algorithm ``repeats`` times (seed 0), the run with the least CPU time kept."""
    out: dict = {"load_average": os.getloadavg(), "budget": budget}
    for name in ("resnet50", "inception_v3"):
        problem = Problem(load_network(name), load_devices("malvik-4gpu"))
        out[name] = {a: min((overhead(problem, a, budget) for _ in range(repeats)), key=lambda r: r["cpu_s"])
                     for a in ("ga", "map-elites", "ga-steady", "map-elites-async")}
    out["load_average_end"] = os.getloadavg()
    return out


def best_at(history, budget, fractions=(0.1, 0.5, 1.0)) -> list:
    """[evaluations, best objective so far] at each fraction of the budget (history rows: evaluations, best, current)."""
    out = []
    for f in fractions:
        rows = history[history[:, 0] <= f * budget]
        out.append([int(f * budget), float(rows[-1, 1]) if len(rows) else None])
    return out


def quality(problem, budget: int, seeds: int, dask_params: dict, old_batch: dict) -> dict:
    """Best objective at ``budget`` evaluations, seeds 0..seeds-1, on one process: the synchronous algorithm, the
    asynchronous variant as on one process (batch 50, 1 pending), with the batch and pending the Dask run used, and
    with the batch the automatic rule gave before its quality cap (min(Dask's task size, budget / (10 pending)))."""
    out = {}
    for sync, variant in ALGORITHMS.items():
        cases = {"sync": (sync, None), "async_serial": (variant, {"batch": 50, "pending": 1}),
                 "async_dask_auto": (variant, dask_params[sync]), "async_uncapped": (variant, old_batch[sync])}
        out[sync] = {k: {"params": params, "best": [run(problem, a, evaluations=budget, seed=s, params=params)
                                                    .best_objective for s in range(seeds)]}
                     for k, (a, params) in cases.items()}
    return out


def driver_cost(problem, algorithm, budget) -> float:
    """Seconds the driver spends per evaluation outside the simulator (asking, telling)."""
    opt = make_optimizer(problem, algorithm, seed=0, evaluations=budget,
                         params={"batch": 200, "pending": 1} if algorithm in ALGORITHMS.values() else None)
    spent = done = 0
    while done < min(budget, 4000):
        t = time.perf_counter()
        xs = opt.ask(budget)
        spent += time.perf_counter() - t
        fs = problem.evaluate_many(xs)
        t = time.perf_counter()
        opt.tell(xs, fs)
        spent += time.perf_counter() - t
        done += len(xs)
    return spent / done


def scheduler_cost(client, tasks: int = 2000) -> float:
    """Seconds per task of Dask's scheduler and workers for empty tasks, many in flight (its throughput limit)."""
    t = time.perf_counter()
    client.gather(client.map(int, range(tasks), pure=False))
    return (time.perf_counter() - t) / tasks


def projection(entry: dict, dask_task_s: float, workers=(8, 64, 512)) -> dict:
    """docs/scaling.md's model. Three ceilings, each measured: W workers of w seconds per placement
    (simulation, the task's round trip and framing, children made on the worker), a driver of c CPU seconds per
    placement, and a Dask scheduler of s seconds per task of b placements: R(W) = min(W / w, 1 / c, b / s)
    (no scheduler ceiling when work goes over direct connections or to actors, which the scheduler never sees).
    c comes from the run's own CPU clock and s from empty tasks; w from the 2-worker run, whose cores the
    driver shared: 2 = R_2 (w + c). The efficiency is R(W) against W bare simulators, R(W) t / W."""
    out = {}
    for sync, variant in ALGORITHMS.items():
        for backend, key in (("workers_2_async", "processes"), ("dask_2_async", "dask")):
            run_ = entry[sync][backend]
            pace = entry["pacing"][backend.removesuffix("_async")]
            t, b, c = pace["eval_s"], run_["batch"], run_["driver_cpu_s_per_eval"]
            s = dask_task_s if key == "dask" and pace.get("via", "tasks") == "tasks" else 0.0  # direct, actors: none
            w_s = 2.0 / run_["evals_per_s"] - c
            rows = {}
            for w in workers:
                ceilings = {"workers": w / w_s, "driver": 1.0 / c, "scheduler": b / s if s else float("inf")}
                bound = min(ceilings, key=ceilings.get)
                rows[str(w)] = {"evals_per_s": ceilings[bound], "efficiency": ceilings[bound] * t / w,
                                "bound": bound}
            out[f"{variant}/{key}"] = {"t": t, "w": w_s, "b": b, "c": c, "s": s,
                                       "measured_2": run_["evals_per_s"], "workers": rows}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="resnet50,synthetic10k")
    ap.add_argument("--budget-resnet", type=int, default=300_000)
    ap.add_argument("--budget-10k", type=int, default=3_000)
    ap.add_argument("--quality-budget", type=int, default=20_000)
    ap.add_argument("--quality-seeds", type=int, default=3, help="0: no quality comparison")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--overhead", action="store_true",
                    help="only the share of one-core runs spent outside the simulator (20,000 evaluations of "
                         "ResNet-50 and Inception-V3 on malvik-4gpu, each algorithm)")
    ap.add_argument("--repeats", type=int, default=3, help="--overhead: runs per algorithm, the least CPU kept")
    args = ap.parse_args()
    if args.overhead:
        report = overhead_report(20_000, args.repeats)
        if args.json:
            print(json.dumps(report, indent=1))
            return
        print(f"load average {report['load_average'][0]:.2f} at the start, {report['load_average_end'][0]:.2f} at "
              f"the end; 20,000 evaluations, seed 0, one core, the run with the least CPU of {args.repeats}")
        for name in ("resnet50", "inception_v3"):
            for a, r in report[name].items():
                print(f"  {name:13s} {a:17s} CPU {r['cpu_s']:.2f} s, in evaluate {r['evaluate_cpu_s']:.2f} s: "
                      f"{r['outside_cpu']:.0%} outside the simulator (wall clock: {r['outside_wall']:.0%})")
        return
    from distributed import Client, LocalCluster

    results: dict = {"cores": os.cpu_count(), "load_average": os.getloadavg()}
    graphs = problems(args.graphs.split(","))
    budgets = {name: args.budget_resnet if name == "resnet50" else args.budget_10k for name in graphs}
    rows: dict = {(name, sync): {} for name in graphs for sync in ALGORITHMS}

    def measure(name, problem, backend, make) -> None:
        for sync, variant in ALGORITHMS.items():
            rows[name, sync][backend] = timed_run(problem, sync, budgets[name], make)
            rows[name, sync][backend + "_async"] = timed_run(problem, variant, budgets[name], make)

    # One core and the local pool first, with no cluster alive: an idle Dask cluster (its scheduler, nannies
    # and workers' 10 ms profiler) took a quarter off the pool's rate on the 10,000-op graph.
    pacing: dict = {name: {} for name in graphs}
    for name, problem in graphs.items():
        measure(name, problem, "serial", lambda: SerialEvaluator(problem))
        measure(name, problem, "workers_2", lambda: ProcessPoolEvaluator(problem, 2))
        with ProcessPoolEvaluator(problem, 2) as pool:
            pacing[name]["workers_2"] = pool.pacing.to_dict()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        results["dask_task_s"] = scheduler_cost(client)
        for name, problem in graphs.items():
            measure(name, problem, "dask_2", lambda: DaskEvaluator(problem, client))
            with DaskEvaluator(problem, client) as dask_ev:
                pacing[name]["dask_2"] = {**dask_ev.pacing.to_dict(), "via": dask_ev.via}
    for name, problem in graphs.items():
        entry = {"ops": problem.n_ops, "budget": budgets[name], "pacing": pacing[name]}
        for sync, variant in ALGORITHMS.items():
            table = rows[name, sync]
            order = ["serial", "workers_2", "dask_2", "serial_async", "workers_2_async", "dask_2_async"]
            entry[sync] = {k: table[k] for k in order}
            for key, row in entry[sync].items():  # like for like: over the same variant on one process
                same = "serial_async" if key.endswith("_async") else "serial"
                row["speedup"] = row["evals_per_s"] / table[same]["evals_per_s"]
                row["vs_sync_serial"] = row["evals_per_s"] / table["serial"]["evals_per_s"]
            entry[sync + "_driver_s_per_eval"] = {a: driver_cost(problem, a, budgets[name]) for a in (sync, variant)}
        entry["projection"] = projection(entry, results["dask_task_s"])
        results[name] = entry
    if "resnet50" in graphs and args.quality_seeds:
        from placement_core.optimize.asynchronous import quality_cap
        entry = results["resnet50"]
        task_size = entry["pacing"]["dask_2"]["task_size"]
        results["quality"] = {"budget": args.quality_budget, "seeds": args.quality_seeds, "graph": "resnet50",
                              "load_average": os.getloadavg(),
                              **quality(graphs["resnet50"], args.quality_budget, args.quality_seeds,
                                        {s: {"batch": min(task_size, quality_cap(args.quality_budget)),
                                             "pending": 4} for s in ALGORITHMS},
                                        {s: {"batch": min(task_size, args.quality_budget // 40), "pending": 4}
                                         for s in ALGORITHMS})}
    results["load_average_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{results['cores']} cores, load average {results['load_average'][0]:.2f} at the start, "
          f"{results['load_average_end'][0]:.2f} at the end; "
          f"Dask: {results['dask_task_s'] * 1e3:.2f} ms per empty task")
    for name in args.graphs.split(","):
        entry = results[name]
        print(f"\n{name} ({entry['ops']} ops), {entry['budget']} evaluations, seed 0; "
              f"one evaluation {entry['pacing']['workers_2']['eval_s'] * 1e3:.3f} ms, "
              f"pool round trip {entry['pacing']['workers_2']['task_overhead_s'] * 1e3:.3f} ms, "
              f"Dask round trip {entry['pacing']['dask_2']['task_overhead_s'] * 1e3:.2f} ms "
              f"({entry['pacing']['dask_2']['via']})")
        for sync in ALGORITHMS:
            print(f"  {sync}: driver {entry[sync + '_driver_s_per_eval'][sync] * 1e6:.1f} us/eval, "
                  f"{ALGORITHMS[sync]} {entry[sync + '_driver_s_per_eval'][ALGORITHMS[sync]] * 1e6:.1f} us/eval")
            for key, r in entry[sync].items():
                sizes = f", batch {r['batch']} x {r['pending']} pending" if r["pending"] else ""
                print(f"    {key:15s} {r['algorithm']:17s} {r['evals_per_s']:9,.0f} evals/s  x{r['speedup']:.2f} like for "
                      f"like, x{r['vs_sync_serial']:.2f} over serial sync  "
                      f"(start {r['start_s']:.2f} s, best {r['best_objective_s']:.6g} s{sizes}, "
                      f"driver CPU {r['driver_cpu_s_per_eval'] * 1e6:.1f} us/eval)")
        print("  projection (docs/scaling.md): placements/s and efficiency at W workers, the binding ceiling")
        for key, proj in entry["projection"].items():
            cells = "  ".join(f"W={w}: {r['evals_per_s']:,.0f}/s {r['efficiency']:.0%} ({r['bound']})"
                              for w, r in proj["workers"].items())
            print(f"    {key:28s} t {proj['t'] * 1e6:.0f} us, w {proj['w'] * 1e6:.0f} us, b {proj['b']}, "
                  f"c {proj['c'] * 1e6:.1f} us (measured at W=2: {proj['measured_2']:,.0f}/s)\n      {cells}")
    if "quality" in results:
        print_quality(results["quality"])


def print_quality(q: dict) -> None:
    print(f"\nquality: best objective (s) after {q['budget']:,} evaluations of {q['graph']}, seeds 0-{q['seeds'] - 1}, "
          "one process (batch and pending fix the result on every backend)")
    for sync in ALGORITHMS:
        for key, r in q[sync].items():
            params = ", ".join(f"{k} {v}" for k, v in (r["params"] or {}).items())
            print(f"  {sync:10s} {key:16s} {' '.join(f'{f:.3f}' for f in r['best'])}  {params}")


if __name__ == "__main__":
    main()
