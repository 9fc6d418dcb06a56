"""Optimizer speed on every backend: evaluations per second, serial against 2 worker processes and a 2-worker Dask
cluster, for the GA and MAP-Elites, on ResNet-50 and on a 10,000-op synthetic graph.

    python benchmarks/optimizer.py [--json] [--graphs resnet50,synthetic10k] [--budget-resnet N] [--budget-10k N]
    python benchmarks/optimizer.py --overhead [--repeats N] [--json]

For each graph and algorithm it runs the synchronous algorithm (ga, map-elites) and its asynchronous variant
(ga-steady, map-elites-async) on each backend, with the same seed. Keys:

* ``serial``: the synchronous algorithm on one core, as a user runs it by default;
* ``workers_2`` / ``dask_2``: the asynchronous variant on 2 local worker processes / a 2-worker Dask
  LocalCluster (batch sizes auto: from the backend's measured costs, recorded);
* ``serial_async``, ``workers_2_sync``, ``dask_2_sync``: the other combinations, so a speed-up can be told
  apart from the variant's own (vectorized) speed.

Evaluations per second exclude starting the backend (the pool's processes; the cluster is started once,
outside the timing, as a user's would be running), which is reported as ``start_s``. ``model`` holds the
measured costs behind the scaling projection of docs/scaling.md: seconds per evaluation, per task round
trip, of the driver per evaluation, and of the Dask scheduler per task.
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
            "best_objective_s": r.best_objective, "evaluations": r.evaluations,
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
    placement, and a Dask scheduler of s seconds per task of b placements: R(W) = min(W / w, 1 / c, b / s).
    c comes from the run's own CPU clock and s from empty tasks; w from the 2-worker run, whose cores the
    driver shared: 2 = R_2 (w + c). The efficiency is R(W) against W bare simulators, R(W) t / W."""
    out = {}
    for sync, variant in ALGORITHMS.items():
        for backend, key in (("workers_2", "processes"), ("dask_2", "dask")):
            run_ = entry[sync][backend]
            pace = entry["pacing"][backend]
            t, b, c = pace["eval_s"], run_["batch"], run_["driver_cpu_s_per_eval"]
            s = dask_task_s if key == "dask" else 0.0
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
            mine, other = (sync, variant) if backend == "serial" else (variant, sync)
            suffix = "_async" if backend == "serial" else "_sync"
            rows[name, sync][backend] = timed_run(problem, mine, budgets[name], make)
            rows[name, sync][backend + suffix] = timed_run(problem, other, budgets[name], make)

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
                pacing[name]["dask_2"] = dask_ev.pacing.to_dict()
    for name, problem in graphs.items():
        entry = {"ops": problem.n_ops, "budget": budgets[name], "pacing": pacing[name]}
        for sync, variant in ALGORITHMS.items():
            table = rows[name, sync]
            order = ["serial", "serial_async", "workers_2", "workers_2_sync", "dask_2", "dask_2_sync"]
            entry[sync] = {k: table[k] for k in order}
            for row in entry[sync].values():
                row["speedup"] = row["evals_per_s"] / table["serial"]["evals_per_s"]
            entry[sync + "_driver_s_per_eval"] = {a: driver_cost(problem, a, budgets[name]) for a in (sync, variant)}
        entry["projection"] = projection(entry, results["dask_task_s"])
        results[name] = entry
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{results['cores']} cores, load average {results['load_average'][0]:.2f} at the start; "
          f"Dask: {results['dask_task_s'] * 1e3:.2f} ms per empty task")
    for name in args.graphs.split(","):
        entry = results[name]
        print(f"\n{name} ({entry['ops']} ops), {entry['budget']} evaluations, seed 0; "
              f"one evaluation {entry['pacing']['workers_2']['eval_s'] * 1e3:.3f} ms, "
              f"pool round trip {entry['pacing']['workers_2']['task_overhead_s'] * 1e3:.3f} ms, "
              f"Dask round trip {entry['pacing']['dask_2']['task_overhead_s'] * 1e3:.2f} ms")
        for sync in ALGORITHMS:
            print(f"  {sync}: driver {entry[sync + '_driver_s_per_eval'][sync] * 1e6:.1f} us/eval, "
                  f"{ALGORITHMS[sync]} {entry[sync + '_driver_s_per_eval'][ALGORITHMS[sync]] * 1e6:.1f} us/eval")
            for key, r in entry[sync].items():
                sizes = f", batch {r['batch']} x {r['pending']} pending" if r["pending"] else ""
                print(f"    {key:15s} {r['algorithm']:17s} {r['evals_per_s']:9,.0f} evals/s  x{r['speedup']:.2f}  "
                      f"(start {r['start_s']:.2f} s, best {r['best_objective_s']:.6g} s{sizes}, "
                      f"driver CPU {r['driver_cpu_s_per_eval'] * 1e6:.1f} us/eval)")
        print("  projection (docs/scaling.md): placements/s and efficiency at W workers, the binding ceiling")
        for key, proj in entry["projection"].items():
            cells = "  ".join(f"W={w}: {r['evals_per_s']:,.0f}/s {r['efficiency']:.0%} ({r['bound']})"
                              for w, r in proj["workers"].items())
            print(f"    {key:28s} t {proj['t'] * 1e6:.0f} us, w {proj['w'] * 1e6:.0f} us, b {proj['b']}, "
                  f"c {proj['c'] * 1e6:.1f} us (measured at W=2: {proj['measured_2']:,.0f}/s)\n      {cells}")


if __name__ == "__main__":
    main()
