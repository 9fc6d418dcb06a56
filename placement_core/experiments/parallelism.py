"""Sharding against the other ways to use many GPUs (issue 15's targets, docs/sharding.md).

For each network on one device graph, in the simulator: the network on one GPU; the best placement of
whole ops a search finds; data parallelism (every op split by batch over all GPUs); the best hybrid
(data parallel inside groups of GPUs, a pipeline across groups); and the best placement a search finds
when it may also split ops by channel or batch, once started from the data-parallel, hybrid and
heft-sharded placements and once from its own random population. Every search gets the same budget of
evaluations (the starting placements are not counted, as with ``placement optimize --init``).

Writes ``results.csv`` (one row per network and column), each network's best sharded placement as a
``placement/1`` file (``placement simulate --placement`` reproduces its number), and a markdown report
with the table, the command and the load average.
"""

from __future__ import annotations

import csv
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..base.jsonio import write_json
from ..base.outputs import write_output

NETWORKS = ("vgg16", "resnet50", "inception_v3")
UNSHARDED_INIT = "heft,expert,m-topo,min-cut,single"
SHARDED_INIT = "data-parallel,hybrid-parallel,heft-sharded"
FIELDS = ["network", "ops", "column", "algorithm", "batch_time_s", "feasible", "split_ops", "evaluations", "wall_s",
          "speedup_vs_single", "vs_data_parallel"]
TITLES = {"single": "one GPU", "unsharded": "best unsharded", "data-parallel": "data parallel",
          "hybrid": "best hybrid", "sharded": "best sharded (seeded)", "sharded-unseeded": "best sharded (unseeded)"}


@dataclass
class Row:
    network: str
    ops: int
    column: str
    algorithm: str
    batch_time_s: float
    feasible: bool
    split_ops: int
    evaluations: int
    wall_s: float
    placement: np.ndarray
    speedup_vs_single: float = 0.0
    vs_data_parallel: float = 0.0


def load() -> str:
    return "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def _problem(network: str, devices: str, batch_size: int, max_shards: int):
    from ..formats.catalog import load_devices, load_network
    from ..optimize import problem_for
    from ..problem import Problem
    from ..model.sharding import search_splits
    graph = load_network(network, batch_size=batch_size)
    devs = load_devices(devices)
    gpus = sum(d.kind == "gpu" for d in devs.devices)
    table = search_splits(devs, ["channel", "batch"], min(max_shards, max(gpus, 2)))
    problem = Problem(graph, devs, splits=table)
    for kind in ("data-parallel", "hybrid-parallel"):
        problem = problem_for(problem, kind)
    return Problem(graph, devs), problem


def _row(network, problem, column, algorithm, x, evaluations, wall) -> Row:
    ev = problem.simulate(np.asarray(x, dtype=np.int32))
    res = ev.result
    return Row(network, problem.n_ops, column, algorithm, res.makespan / max(res.batches, 1),
               not bool(np.any(ev.overflow > 0)), int(np.sum(np.asarray(x) >= problem.n_devices)), evaluations,
               wall, np.asarray(x, dtype=np.int32))


def run_network(network: str, *, devices: str = "nvlink-8gpu", batch_size: int = 128, evaluations: int = 20000,
                seed: int = 0, algorithm: str = "ga", max_shards: int = 8,
                say: Callable[[str], None] = lambda m: None) -> list[Row]:
    """The six columns of one network."""
    from ..optimize import run
    from ..optimize.fixed_candidates import target_devices
    from ..optimize.seeding import initial_placements

    whole, sharded = _problem(network, devices, batch_size, max_shards)
    gpu0 = target_devices(whole, "gpus")[0]
    rows = [_row(network, whole, "single", f"single:{whole.devices.names[gpu0]}",
                 np.full(whole.n_ops, gpu0, dtype=np.int32), 1, 0.0)]

    def search(problem, column, init):
        t0 = time.perf_counter()
        seeds = initial_placements(problem, init, seed=seed) if init else None
        say(f"{network}: {TITLES[column]} ({algorithm}, {evaluations} evaluations"
            + (f", from {init}" if init else "") + ") ...")
        result = run(problem, algorithm, evaluations=evaluations, seed=seed,
                     initial=None if seeds is None else seeds.placements)
        spent = result.evaluations + (seeds.evaluations if seeds is not None else 0)
        return _row(network, problem, column, f"{algorithm}" + (f" from {init}" if init else ""),
                    result.best_placement, spent, time.perf_counter() - t0)

    rows.append(search(whole, "unsharded", UNSHARDED_INIT))
    for column, kind in (("data-parallel", "data-parallel"), ("hybrid", "hybrid-parallel")):
        seeds = initial_placements(sharded, kind, seed=seed)
        rows.append(_row(network, sharded, column, kind, seeds.placements[0], seeds.evaluations, 0.0))
        if column == "hybrid":
            rows[-1].algorithm = f"hybrid-parallel ({_group_size(sharded, seeds.placements[0])} GPUs per group)"
    rows.append(search(sharded, "sharded", SHARDED_INIT))
    rows.append(search(sharded, "sharded-unseeded", ""))
    single = rows[0].batch_time_s
    dp = rows[2].batch_time_s
    for r in rows:
        r.speedup_vs_single = single / r.batch_time_s
        r.vs_data_parallel = dp / r.batch_time_s
    return rows


def _group_size(problem, x) -> int:
    from ..model.sharding import gene_devices
    return max(len(gene_devices(int(g), problem.n_devices, problem.splits)) for g in x)


def run_sharding(networks: Sequence[str] = NETWORKS, *, out_dir: str | Path, markdown: str | Path | None = None,
                 command: str = "", say: Callable[[str], None] = lambda m: None, **kw) -> list[Row]:
    from ..model.placement import placement_to_dict
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start_load = load()
    rows: list[Row] = []
    for network in networks:
        net_rows = run_network(network, say=say, **kw)
        rows += net_rows
        best = net_rows[4] if net_rows[4].batch_time_s <= net_rows[5].batch_time_s else net_rows[5]
        _, problem = _problem(network, kw.get("devices", "nvlink-8gpu"), kw.get("batch_size", 128),
                              kw.get("max_shards", 8))
        write_json(out / f"{network}-best-sharded.json",
                   placement_to_dict(best.placement, problem.graph, problem.devices, problem.splits))
        _write_csv(out / "results.csv", rows)  # rewritten per network: a stopped run keeps what it measured
    end_load = load()
    if markdown is not None:
        write_output(Path(markdown), report(rows, command=command, loads=(start_load, end_load), out_dir=out,
                                            **kw).encode("utf-8"))
    return rows


def _write_csv(path: Path, rows: list[Row]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{getattr(r, k):.6g}" if isinstance(getattr(r, k), float) else getattr(r, k))
                    for k in FIELDS})
    write_output(path, buf.getvalue().encode("utf-8"))


def table(rows: list[Row]) -> str:
    """One line per network: batch time (ms) of each column, and the best sharded speed-ups."""
    nets = list(dict.fromkeys(r.network for r in rows))
    cols = list(TITLES)
    lines = ["| network (ops) | " + " | ".join(TITLES[c] for c in cols) + " | best sharded vs one GPU | vs data parallel |",
             "|---" * (len(cols) + 3) + "|"]
    for net in nets:
        by = {r.column: r for r in rows if r.network == net}
        best = min((by[c] for c in ("sharded", "sharded-unseeded")), key=lambda r: r.batch_time_s)
        cells = [f"{by[c].batch_time_s * 1e3:.2f}" + ("" if by[c].feasible else " (over memory)") for c in cols]
        lines.append(f"| {net} ({by['single'].ops}) | " + " | ".join(cells)
                     + f" | {best.speedup_vs_single:.2f}x | {best.vs_data_parallel:.3f}x |")
    return "\n".join(lines)


def report(rows: list[Row], *, command: str, loads: tuple[str, str], out_dir: Path, devices: str = "nvlink-8gpu",
           batch_size: int = 128, evaluations: int = 20000, seed: int = 0, algorithm: str = "ga",
           max_shards: int = 8) -> str:
    detail = ["| network | column | how | batch time (ms) | ops split | evaluations | wall (s) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        detail.append(f"| {r.network} | {TITLES[r.column]} | {r.algorithm} | {r.batch_time_s * 1e3:.3f} | "
                      f"{r.split_ops} | {r.evaluations} | {r.wall_s:.1f} |")
    return "\n".join([
        "# Sharding against one GPU, placements and data parallelism",
        "",
        f"Simulated on `{devices}`, batch {batch_size}, default profile, one batch; searches: `{algorithm}`, "
        f"{evaluations} evaluations each, seed {seed}; splits by channel or batch over windows of 2..{max_shards} "
        "GPUs. Batch times in ms (lower is better). Made by:",
        "",
        f"    {command}" if command else "",
        "",
        f"Load average at the start: {loads[0]}; at the end: {loads[1]} (the figures are simulated, so the load "
        "changes only the wall times).",
        "",
        table(rows),
        "",
        "## Every column",
        "",
        "\n".join(detail),
        "",
        f"Each network's best sharded placement: `{out_dir}/NETWORK-best-sharded.json` "
        f"(`placement simulate --network NETWORK --devices {devices} --batch-size {batch_size} --placement FILE`).",
        "",
    ])
