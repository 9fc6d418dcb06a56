"""``placement benchmark``: run a placement (or a stored run's top placements) for real and time it."""

from __future__ import annotations

import sys

from ..base.errors import InputError
from ..base.units import fmt_bytes, fmt_seconds
from .common import print_json, table
from .torch_common import _assignment, _needs_torch, _shape_and_network


def cmd_benchmark(args) -> int:
    _needs_torch()
    if getattr(args, "schedule", None):
        from .pipeline_bench_cmds import cmd_benchmark_pipeline
        return cmd_benchmark_pipeline(args)
    for name in ("micro_batches", "simulate", "timings"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name.replace('_', '-')} goes with --schedule (a pipelined run)",
                             field=f"--{name.replace('_', '-')}", fix="Add --schedule gpipe, 1f1b, interleaved-1f1b or zb-h1")
    if args.run is not None:
        if args.placement is not None:
            raise InputError("give either --placement or --run, not both", field="--placement",
                             fix="--placement measures one placement; --run ID --top K the K best of a stored run")
        return cmd_benchmark_top(args)
    if args.placement is None:
        raise InputError("nothing to measure", field="--placement",
                         fix="Give --placement (single:DEVICE, random:SEED or a file) or --run ID --top K")
    for name in ("top", "map"):
        if getattr(args, name) is not None:
            raise InputError(f"--{name} goes with --run", field=f"--{name}",
                             fix="Add --run ID (a stored run; see placement runs list)")
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..torch.devspec import check_available, parse_devices

    devs = parse_devices(args.devices)
    check_available(devs)
    shape, batch, network, groups = _shape_and_network(args)
    assignment, traced = _assignment(args, shape, network, groups, devs)
    settings = BenchmarkSettings(steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                 memory_limit=args.memory_limit, timeout=args.timeout, seed=args.seed,
                                 threads=args.threads, profile=args.profile)
    result = benchmark(args.model, shape, [assignment], devs, runner=args.runner, batch_size=batch,
                       settings=settings, name=traced.graph.name)[0]
    report = {"model": args.model, "network": traced.graph.name, "batch_size": batch, "placement": args.placement,
              **result.to_dict()}
    if not args.no_store:
        report["benchmark_id"] = _store_benchmark(args, traced.graph.with_batch_size(batch), assignment, result)
    if args.json:
        print_json(report)
        return 0 if result.ok else 1
    used = sorted({d for entry in assignment.values()  # a split op's entry names its devices
                   for d in (entry["devices"] if isinstance(entry, dict) else [entry])})
    print(f"{traced.graph.name} (batch {batch}) on {', '.join(d.name + '=' + d.torch for d in devs)}, "
          f"{args.runner} runner, placement {args.placement} (uses {', '.join(used)})")
    if not result.ok:
        print(f"status: {result.status}: {result.message}")
    else:
        q1, q3 = result.quartiles_s
        print(f"median_step_s: {result.median_step_s:.6f}   ({fmt_seconds(result.median_step_s)}; IQR "
              f"{fmt_seconds(q1)} .. {fmt_seconds(q3)}, min {fmt_seconds(min(result.steps_s))}, max "
              f"{fmt_seconds(max(result.steps_s))}; {len(result.warmup_s)} warm-up step(s) dropped)")
        print("steps_s: " + " ".join(f"{s:.6f}" for s in result.steps_s))
        if args.runner == "ranks":
            print(f"sent between ranks per step: {fmt_bytes(result.bytes_per_step)} in "
                  f"{result.messages_per_step:.0f} messages")
        if result.message:
            print(f"note: {result.message}")
        for path in result.profiles:
            print(f"profiled step (Chrome trace): {path}")
    rows = [[d["name"], d["torch"], "-" if d["peak_memory_bytes"] is None else str(int(d["peak_memory_bytes"])),
             "-" if d["peak_memory_bytes"] is None else fmt_bytes(d["peak_memory_bytes"])]
            for d in result.devices]
    print(table(rows, ["device", "torch", "peak_memory_bytes", ""], right=(2, 3)))
    return 0 if result.ok else 1


def cmd_benchmark_top(args) -> int:
    """``--run ID --top K``: measure a run's K best distinct placements, rank them both ways, store them."""
    import numpy as np

    from ..analysis import kendall_tau
    from ..analysis.benchmark_plan import default_mapping, parse_mapping, shared_warning, top_of_run
    from ..formats.catalog import load_network
    from ..formats.network import network_hash
    from ..store import RunStore
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..model.coarsen import expand_assignment, groups_path, read_groups
    from ..torch.devspec import check_available, parse_devices
    from ..torch.sources import parse_input_shape
    from ..cost.timings import input_shape_of

    devs = parse_devices(args.devices)
    check_available(devs)
    k = args.top or 5
    with RunStore(home=args.home) as store:
        algorithm = store.get(args.run).algorithm
        problem, ranked, note = top_of_run(store, args.run, k)
    graph, names = problem.graph, problem.devices.names
    groups = None
    if args.network:
        net = load_network(args.network)
        if [op.name for op in net.ops] != [op.name for op in graph.ops]:
            raise InputError(f"the network is not the one run {args.run} optimized ({graph.name}, {len(graph)} ops)",
                             source=args.network, field="--network",
                             fix="Give the network file the run was made with, or leave --network out")
        if groups_path(args.network).is_file():
            groups = read_groups(groups_path(args.network))
    if args.input_shape:
        shape = parse_input_shape(args.input_shape)
    elif input_shape_of(graph):
        shape = input_shape_of(graph)
    else:
        raise InputError(f"run {args.run}'s network {graph.name} does not say its input's shape",
                         field="--input-shape", fix="Give --input-shape, e.g. 1,3,224,224")
    batch = args.batch_size or graph.batch_size
    local = [d.name for d in devs]
    from ..model.sharding import gene_entry, used_devices
    splits = problem.splits
    used = used_devices([r.placement for r in ranked], len(names), splits)
    chosen = parse_mapping(args.map, names, local) if args.map else {}
    mapping = {names[i]: chosen.get(names[i], loc) for i, loc in default_mapping(names, used, local).items()}
    warning = shared_warning(mapping, {d.name: d.torch for d in devs}, args.runner)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    def on_local(entry):  # a graph device, or a split's devices, as local devices
        if isinstance(entry, dict):
            return {**entry, "devices": [mapping[d] for d in entry["devices"]]}
        return mapping[entry]
    assignments = [{op.name: on_local(gene_entry(int(i), names, splits)) for op, i in zip(graph.ops, r.placement)}
                   for r in ranked]
    if groups is not None and splits:
        raise InputError("a coarsened network's groups cannot be split", field="--network",
                         fix="Benchmark a run made on the model's own network")
    if groups is not None:
        assignments = [expand_assignment(a, groups) for a in assignments]
    settings = BenchmarkSettings(steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                 memory_limit=args.memory_limit, timeout=args.timeout, seed=args.seed,
                                 threads=args.threads, profile=args.profile)
    results = benchmark(args.model, shape, assignments, devs, runner=args.runner, batch_size=batch,
                        settings=settings, name=graph.name)
    at_batch = graph.with_batch_size(batch)
    if batch == graph.batch_size:
        simulated = [r.batch_time for r in ranked]
    else:  # the run's problem at the measured batch (measured op times scale with it)
        again = problem.spec.build(at_batch, problem.devices, whole_batch=False)
        simulated = [float(again.simulate(r.placement).result.batch_time) for r in ranked]
    ok = [i for i, res in enumerate(results) if res.ok]
    order = sorted(ok, key=lambda i: results[i].median_step_s)
    measured_rank = {i: n for n, i in enumerate(order, start=1)}
    tau = kendall_tau([ranked[i].objective for i in ok], [results[i].median_step_s for i in ok])
    ids = [None] * len(ranked)
    if not args.no_store:
        with RunStore(home=args.home) as store:
            ids = [store.add_benchmark(network_name=graph.name, devices_spec=args.devices, runner=args.runner,
                                       placement=a, simulated_s=sim, measured_median_s=res.median_step_s,
                                       result=res.to_dict(), run_id=args.run, label=r.label,
                                       network_hash=network_hash(at_batch), batch_size=batch)
                   for r, a, res, sim in zip(ranked, assignments, results, simulated)]
    rows = [{"simulated_rank": n, "label": r.label, "simulated_objective_s": r.objective, "simulated_s": sim,
             "feasible": r.feasible, "measured_median_s": res.median_step_s, "iqr_s": res.to_dict()["iqr_s"],
             "measured_rank": measured_rank.get(n - 1), "status": res.status, "message": res.message,
             "benchmark_id": bid, "placement": {op.name: gene_entry(int(i), names, splits)
                                                for op, i in zip(graph.ops, r.placement)}}
            for n, (r, res, sim, bid) in enumerate(zip(ranked, results, simulated, ids), start=1)]
    tau_out = None if np.isnan(tau) else tau
    code = 0 if len(ok) == len(results) else 1
    if args.json:
        print_json({"run": args.run, "algorithm": algorithm, "model": args.model, "network": graph.name,
                    "batch_size": batch, "devices": args.devices, "runner": args.runner, "mapping": mapping,
                    "top": k, "kendall_tau": tau_out, "measured": len(ok), "note": note or None,
                    "warning": warning or None, "placements": rows})
        return code
    print(f"{graph.name} (batch {batch}) on {', '.join(d.name + '=' + d.torch for d in devs)}, {args.runner} runner: "
          f"the {len(ranked)} best distinct placement(s) of run {args.run} ({algorithm}), "
          + ", ".join(f"{dev} on {loc}" for dev, loc in mapping.items()))
    table_rows = [[str(r["simulated_rank"]), r["label"], f"{r['simulated_objective_s'] * 1e3:.9g}",
                   "-" if r["measured_median_s"] is None else f"{r['measured_median_s'] * 1e3:.9g}",
                   "-" if r["measured_rank"] is None else str(r["measured_rank"]),
                   r["status"] + (f": {r['message']}" if r["message"] and r["status"] != "ok" else "")]
                  for r in rows]
    print(table(table_rows, ["simulated rank", "placement", "simulated objective (ms)", "measured median (ms)",
                             "measured rank", "status"], right=(0, 2, 3, 4)))
    print(f"Kendall tau (simulated objective vs measured median, {len(ok)} placement(s)): "
          + ("-" if tau_out is None else f"{tau_out:.6f}"))
    if not args.no_store:
        print(f"stored with run {args.run} as benchmark(s) {', '.join(map(str, ids))} "
              "(placement runs benchmarks lists them)")
    return code


def _store_benchmark(args, graph, assignment: dict, result) -> int:
    """Record the measurement, so the dashboard's Benchmark page and `placement runs` see it."""
    from ..formats.network import network_hash
    from ..store import RunStore

    with RunStore(home=args.home) as store:
        return store.add_benchmark(network_name=graph.name, devices_spec=args.devices, runner=args.runner,
                                   placement=assignment, simulated_s=None, measured_median_s=result.median_step_s,
                                   result=result.to_dict(), label=args.placement,
                                   network_hash=network_hash(graph), batch_size=graph.batch_size)
