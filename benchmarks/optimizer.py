"""Optimizer speed on every backend: evaluations per second, serial against 2 worker processes and a 2-worker Dask
cluster, for the GA and MAP-Elites, on ResNet-50 and on a 10,000-op synthetic graph.

    python benchmarks/optimizer.py [--json] [--graphs resnet50,synthetic10k] [--budget-resnet N] [--budget-10k N]

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
from placement_core.graph import Graph, Op  # noqa: E402
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
            "batch": r.params.get("batch"), "in_flight": r.params.get("in_flight"),
            # the driver's own CPU per evaluation in this very run (on a parallel backend: everything but the
            # simulations, which run elsewhere): the c_driver of docs/scaling.md's model
            "driver_cpu_s_per_eval": cpu / max(r.evaluations, 1)}


def driver_cost(problem, algorithm, budget) -> float:
    """Seconds the driver spends per evaluation outside the simulator (asking, telling)."""
    opt = make_optimizer(problem, algorithm, seed=0, evaluations=budget,
                         params={"batch": 200, "in_flight": 1} if algorithm in ALGORITHMS.values() else None)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="resnet50,synthetic10k")
    ap.add_argument("--budget-resnet", type=int, default=300_000)
    ap.add_argument("--budget-10k", type=int, default=3_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    results: dict = {"cores": os.cpu_count(), "load_average": os.getloadavg()}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        results["dask_task_s"] = scheduler_cost(client)
        for name, problem in problems(args.graphs.split(",")).items():
            budget = args.budget_resnet if name == "resnet50" else args.budget_10k
            backends = {"serial": lambda: SerialEvaluator(problem),
                        "workers_2": lambda: ProcessPoolEvaluator(problem, 2),
                        "dask_2": lambda: DaskEvaluator(problem, client)}
            entry = {"ops": problem.n_ops, "budget": budget}
            for sync, variant in ALGORITHMS.items():
                rows = {}
                for backend, make in backends.items():
                    mine, other = (sync, variant) if backend == "serial" else (variant, sync)
                    suffix = "_async" if backend == "serial" else "_sync"
                    rows[backend] = timed_run(problem, mine, budget, make)
                    rows[backend + suffix] = timed_run(problem, other, budget, make)
                for key, row in rows.items():
                    row["speedup"] = row["evals_per_s"] / rows["serial"]["evals_per_s"]
                entry[sync] = rows
                entry[sync + "_driver_s_per_eval"] = {a: driver_cost(problem, a, budget) for a in (sync, variant)}
            with ProcessPoolEvaluator(problem, 2) as pool, DaskEvaluator(problem, client) as dask_ev:
                entry["pacing"] = {"workers_2": pool.pacing.to_dict(), "dask_2": dask_ev.pacing.to_dict()}
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
                sizes = f", batch {r['batch']} x {r['in_flight']} in flight" if r["in_flight"] else ""
                print(f"    {key:15s} {r['algorithm']:17s} {r['evals_per_s']:9,.0f} evals/s  x{r['speedup']:.2f}  "
                      f"(start {r['start_s']:.2f} s, best {r['best_objective_s']:.6g} s{sizes}, "
                      f"driver CPU {r['driver_cpu_s_per_eval'] * 1e6:.1f} us/eval)")


if __name__ == "__main__":
    main()
