"""``placement import-model``, ``benchmark``, ``calibrate``, ``export-placement`` and ``experiment e5``.

Everything here needs PyTorch, which is imported inside the handlers only, so
``placement --help`` and the other commands work without it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

from ..errors import InputError
from .common import human_bytes, human_seconds, positive_int, print_json, table
from .validate import check_output_dir, check_output_file, positive_seconds, seed_int, write_output_bytes

MODEL_HELP = ("torchvision:NAME (built with weights=None, e.g. torchvision:resnet18) or FILE.py:NAME (a class, "
              "factory or module in that file); keyword arguments as NAME(key=value)")
DEVICES_HELP = "cpu:N (N CPU ranks, each on its own cores), cuda:0,cuda:1, or a mix such as cpu,cuda:0"


def register(sub) -> None:
    p = sub.add_parser("import-model", help="import a PyTorch model as a network (torch.fx, torch.export fallback)",
                       description="Trace an nn.Module and write its training step as a placement-network/1 file: "
                                   "per-op FLOPs, activation and parameter bytes, at leaf-module granularity.")
    p.add_argument("source", metavar="SOURCE", help=MODEL_HELP)
    p.add_argument("--input-shape", required=True, help="example input, e.g. 1,3,224,224")
    p.add_argument("--batch-size", type=positive_int, help="scale the network to this batch (default: the input's)")
    p.add_argument("--groups", type=positive_int,
                   help="coarsen to at most N groups (merge cheapest ops into neighbours); also writes "
                        "OUT.groups.json, the mapping back to the model's ops")
    p.add_argument("--name", help="network name (default: the model's)")
    p.add_argument("--out", required=True, help="network JSON file to write")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(handler=cmd_import)

    p = sub.add_parser("benchmark", help="run a placement for real and time its training steps",
                       description="SGD training steps on random data with a placement applied; prints "
                                   "median_step_s, steps_s and peak_memory_bytes per device.")
    _model_options(p)
    p.add_argument("--placement",
                   help="single:DEVICE, random:SEED, or a placement file (placement/1 or Exprimo's); or --run")
    p.add_argument("--run", type=positive_int, metavar="ID",
                   help="measure the --top K best distinct placements of this stored run (its best, a MAP-Elites "
                        "run's archive, a stopped run's last population) and compare the rankings")
    p.add_argument("--top", type=positive_int, metavar="K", help="with --run: how many (default 5)")
    p.add_argument("--map", metavar="DEV=LOCAL,...",
                   help="with --run: which local device plays each device of the run's device graph (default: the "
                        "local device of the same name, else the local devices in turn)")
    p.add_argument("--network", help="the network the placement was made for (an import-model output); a coarsened "
                                     "one is expanded with its .groups.json")
    p.add_argument("--devices", required=True, help=DEVICES_HELP)
    p.add_argument("--runner", choices=["ranks", "inprocess"], default="ranks",
                   help="ranks: one process per device, torch.distributed send/recv (default); inprocess: one "
                        "process, tensors moved with .to()")
    p.add_argument("--steps", type=positive_int, default=10, help="timed steps (default 10)")
    p.add_argument("--warmup", type=positive_int, default=2, help="dropped steps before timing (default 2)")
    p.add_argument("--rounds", type=positive_int, default=1, help="repeat the warm-up + timed steps (default 1)")
    p.add_argument("--memory-limit", type=byte_size, help="report devices whose peak goes above this (e.g. 512MB)")
    p.add_argument("--timeout", type=positive_seconds, default=600.0,
                   help="seconds before a run is stopped (default 600)")
    p.add_argument("--threads", type=positive_int, help="inprocess runner: torch threads (default: torch's)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the model's weights and the data (default 0)")
    p.add_argument("--no-store", action="store_true", help="do not record the measurement in the run store")
    p.add_argument("--home", metavar="DIR", help="data directory with runs.sqlite (default $PLACEMENT_HOME or "
                                                 "~/.placement)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_benchmark)

    p = sub.add_parser("calibrate", help="measure op times and links on local devices: the 'local' preset",
                       description="Measure every op's forward/backward/update time on each device and the "
                                   "latency and bandwidth between devices (10^3..10^8 bytes), then write a "
                                   "device graph and a timing table the simulator uses. Also saved as the "
                                   "'local' device preset in $PLACEMENT_HOME (default ~/.placement).")
    _model_options(p)
    p.add_argument("--devices", required=True, help=DEVICES_HELP)
    p.add_argument("--runner", choices=["ranks", "inprocess"], default="ranks", help="as for benchmark")
    p.add_argument("--out", help="folder for devices.json and timings.json")
    p.add_argument("--preset", default="local", help="name of the saved device preset (default local)")
    p.add_argument("--reconcile", choices=["scale", "none"], default="scale",
                   help="scale per-op times so they add up to the measured single-device step (default)")
    p.add_argument("--steps", type=positive_int, default=10, help="whole steps timed per device (default 10)")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="measure every device this many times, taking turns, and keep the fastest (default 3)")
    p.add_argument("--max-transfer", type=byte_size, default=1e8, metavar="BYTES",
                   help="largest message of the link measurements, from 1 kB up (default 100MB; smaller is faster)")
    p.add_argument("--fit-placements", type=int, default=6,
                   help="whole-step runs of calibration placements to fit the CPU devices' message overhead "
                        "(device time per message sent or received) to (default 6; 0: no overhead)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_calibrate)

    p = sub.add_parser("export-placement", help="write a placement for PyTorch: JSON or a Python snippet",
                       description="Map each op (and module) of the model to a torch device string, as JSON "
                                   "(placement-torch/1) or as Python that applies it with placement_core.")
    _model_options(p)
    p.add_argument("--placement", required=True, help="single:DEVICE, random:SEED, or a placement file")
    p.add_argument("--network", help="the network the placement was made for (coarsened: with its .groups.json)")
    p.add_argument("--devices", required=True, help=DEVICES_HELP)
    p.add_argument("--format", choices=["json", "python"], default="json", help="default json")
    p.add_argument("--out", help="file to write (default: print)")
    p.set_defaults(handler=cmd_export)


def _model_options(p) -> None:
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--input-shape", help="example input, e.g. 1,3,224,224 (default: the --network's input)")
    p.add_argument("--batch-size", type=positive_int, help="batch of the steps (default: the input's first size)")


def byte_size(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size such as 512MB or 2GB, got {text!r}")
    unit = (m.group(2) or "").rstrip("b")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    if unit not in scale:
        raise argparse.ArgumentTypeError(f"unknown unit in {text!r}; use B, kB, MB, GB")
    value = float(m.group(1)) * scale[unit]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the size must be positive, got {text!r}")
    return value


def _needs_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("PyTorch is not installed", field="torch",
                         fix='Install it: .venv/bin/pip install -e ".[torch]" (CPU wheels work: --index-url '
                             "https://download.pytorch.org/whl/cpu)") from None


def _shape_and_network(args):
    """(input shape, batch, network or None, group mapping or None) from --input-shape / --network."""
    from ..catalog import load_network
    from ..torch.coarsen import groups_path, read_groups
    from ..torch.sources import parse_shape
    from ..torch.timings import input_shape_of

    network = groups = None
    if getattr(args, "network", None):
        network = load_network(args.network)
        gp = groups_path(args.network)
        if gp.is_file():
            groups = read_groups(gp)
    if args.input_shape:
        shape = parse_shape(args.input_shape)
    elif network is not None and input_shape_of(network):
        shape = input_shape_of(network)
    else:
        raise InputError("the example input's shape is needed", field="--input-shape",
                         fix="Give --input-shape, e.g. 1,3,224,224 (or --network, an import-model output)")
    batch = args.batch_size or (network.batch_size if network is not None else shape[0])
    return shape, batch, network, groups


def _assignment(args, shape, network, groups, devs) -> tuple[dict[str, str], object]:
    """The placement as op -> device name over the model's own ops, and the traced model."""
    from ..placement import parse_placement_spec
    from ..torch.coarsen import expand_assignment
    from ..torch.devspec import nominal_device_graph
    from ..torch.fx_import import trace_model
    from ..torch.sources import load_model, parse_source

    src = parse_source(args.model)
    traced = trace_model(load_model(src, seed=getattr(args, "seed", 0)), shape, name=src.default_name)
    graph = network if network is not None else traced.graph
    devgraph = nominal_device_graph(devs)
    ignored: list[str] = []
    placement = parse_placement_spec(args.placement, graph, devgraph, ignored=ignored)
    if ignored:
        from ..placement import describe_ignored
        print(f"note: {describe_ignored(ignored)}", file=sys.stderr)
    assignment = {op.name: devgraph.names[int(i)] for op, i in zip(graph.ops, placement)}
    if groups is not None:
        assignment = expand_assignment(assignment, groups)
    return assignment, traced


def cmd_import(args) -> int:
    _needs_torch()
    from ..jsonio import write_json
    from ..netformat import network_to_dict
    from ..torch.coarsen import coarsen, groups_path, write_groups
    from ..torch.fx_import import trace_model
    from ..torch.sources import load_model, parse_shape, parse_source

    src = parse_source(args.source)
    shape = parse_shape(args.input_shape)
    out = check_output_file(args.out, "--out", "net.json")
    traced = trace_model(load_model(src), shape, name=args.name or src.default_name)
    graph = traced.graph.with_batch_size(args.batch_size) if args.batch_size else traced.graph
    full = len(graph)
    groups = None
    if args.groups:
        graph, groups = coarsen(graph, args.groups)
    write_json(out, network_to_dict(graph), indent=None)
    written = [str(out)]
    if groups is not None:
        write_groups(groups_path(out), graph.name, groups)
        written.append(str(groups_path(out)))
    t = graph.totals()
    summary = {"network": graph.name, "source": args.source, "method": traced.method, "ops": len(graph),
               "model_ops": full, "batch_size": graph.batch_size, "fwd_flops": t["fwd_flops"],
               "bwd_flops": t["bwd_flops"], "param_bytes": t["param_bytes"],
               "activation_bytes": t["activation_bytes"], "written": written}
    if args.json:
        print_json(summary)
    else:
        grouped = f" in {len(graph)} groups" if groups is not None else ""
        print(f"{graph.name}: {full} ops{grouped} (traced with torch.{traced.method}), batch {graph.batch_size}, "
              f"{t['fwd_flops'] / 1e9:.2f} GFLOP forward, {t['bwd_flops'] / 1e9:.2f} GFLOP backward, "
              f"{human_bytes(t['param_bytes'])} parameters, {human_bytes(t['activation_bytes'])} activations")
        print("wrote " + ", ".join(written))
    return 0


def cmd_benchmark(args) -> int:
    _needs_torch()
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
                                 threads=args.threads)
    result = benchmark(args.model, shape, [assignment], devs, runner=args.runner, batch_size=batch,
                       settings=settings, name=traced.graph.name)[0]
    report = {"model": args.model, "network": traced.graph.name, "batch_size": batch, "placement": args.placement,
              **result.to_dict()}
    if not args.no_store:
        report["benchmark_id"] = _store_benchmark(args, traced.graph.with_batch_size(batch), assignment, result)
    if args.json:
        print_json(report)
        return 0 if result.ok else 1
    used = sorted(set(assignment.values()))
    print(f"{traced.graph.name} (batch {batch}) on {', '.join(d.name + '=' + d.torch for d in devs)}, "
          f"{args.runner} runner, placement {args.placement} (uses {', '.join(used)})")
    if not result.ok:
        print(f"status: {result.status}: {result.message}")
    else:
        q1, q3 = result.quartiles_s
        print(f"median_step_s: {result.median_step_s:.6f}   ({human_seconds(result.median_step_s)}; IQR "
              f"{human_seconds(q1)} .. {human_seconds(q3)}, min {human_seconds(min(result.steps_s))}, max "
              f"{human_seconds(max(result.steps_s))}; {len(result.warmup_s)} warm-up step(s) dropped)")
        print("steps_s: " + " ".join(f"{s:.6f}" for s in result.steps_s))
        if args.runner == "ranks":
            print(f"sent between ranks per step: {human_bytes(result.bytes_per_step)} in "
                  f"{result.messages_per_step:.0f} messages")
        if result.message:
            print(f"note: {result.message}")
    rows = [[d["name"], d["torch"], "-" if d["peak_memory_bytes"] is None else str(int(d["peak_memory_bytes"])),
             "-" if d["peak_memory_bytes"] is None else human_bytes(d["peak_memory_bytes"])]
            for d in result.devices]
    print(table(rows, ["device", "torch", "peak_memory_bytes", ""], right=(2, 3)))
    return 0 if result.ok else 1


def cmd_benchmark_top(args) -> int:
    """``--run ID --top K``: measure a run's K best distinct placements, rank them both ways, store them."""
    import numpy as np

    from ..analysis import kendall_tau
    from ..benchplan import default_mapping, parse_mapping, shared_warning, top_of_run
    from ..catalog import load_network
    from ..netformat import network_hash
    from ..store import RunStore
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..torch.coarsen import expand_assignment, groups_path, read_groups
    from ..torch.devspec import check_available, parse_devices
    from ..torch.sources import parse_shape
    from ..torch.timings import input_shape_of

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
        shape = parse_shape(args.input_shape)
    elif input_shape_of(graph):
        shape = input_shape_of(graph)
    else:
        raise InputError(f"run {args.run}'s network {graph.name} does not say its input's shape",
                         field="--input-shape", fix="Give --input-shape, e.g. 1,3,224,224")
    batch = args.batch_size or graph.batch_size
    local = [d.name for d in devs]
    used = sorted({int(i) for r in ranked for i in np.unique(r.placement)})
    chosen = parse_mapping(args.map, names, local) if args.map else {}
    mapping = {names[i]: chosen.get(names[i], loc) for i, loc in default_mapping(names, used, local).items()}
    warning = shared_warning(mapping, {d.name: d.torch for d in devs}, args.runner)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    assignments = [{op.name: mapping[names[int(i)]] for op, i in zip(graph.ops, r.placement)} for r in ranked]
    if groups is not None:
        assignments = [expand_assignment(a, groups) for a in assignments]
    settings = BenchmarkSettings(steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                 memory_limit=args.memory_limit, timeout=args.timeout, seed=args.seed,
                                 threads=args.threads)
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
             "benchmark_id": bid, "placement": {op.name: names[int(i)] for op, i in zip(graph.ops, r.placement)}}
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
    from ..netformat import network_hash
    from ..store import RunStore

    with RunStore(home=args.home) as store:
        return store.add_benchmark(network_name=graph.name, devices_spec=args.devices, runner=args.runner,
                                   placement=assignment, simulated_s=None, measured_median_s=result.median_step_s,
                                   result=result.to_dict(), label=args.placement,
                                   network_hash=network_hash(graph), batch_size=graph.batch_size)


def cmd_calibrate(args) -> int:
    _needs_torch()
    from ..torch.calibrate import CalibrationSettings, calibrate, save_calibration, summary_rows

    if args.out:
        check_output_dir(args.out, "--out")
    shape, batch, _, _ = _shape_and_network(args)
    if args.fit_placements < 0:
        raise InputError("--fit-placements must not be negative", field="--fit-placements")
    from ..torch.calibrate import SIZES
    sizes = tuple(n for n in SIZES if n <= args.max_transfer * (1 + 1e-9))
    if len(sizes) < 2:
        raise InputError(f"--max-transfer must be at least {human_bytes(SIZES[1])}: a link's latency and bandwidth "
                         "need two message sizes", field="--max-transfer")
    settings = CalibrationSettings(steps=args.steps, reconcile=args.reconcile, rounds=args.rounds,
                                   fit_placements=args.fit_placements, sizes=sizes)
    cal = calibrate(args.model, shape, args.devices, runner=args.runner, batch_size=batch, settings=settings,
                    progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    written = save_calibration(cal, args.out, preset=args.preset)
    if args.json:
        print_json({"report": cal.report, "written": [str(p) for p in written]})
        return 0
    print(f"{cal.timings['network']} (batch {batch}) calibrated on {args.devices}")
    print(table(summary_rows(cal), ["device", "what", "compute / latency", "bandwidth", "step", "per-op sum"]))
    print("wrote " + ", ".join(str(p) for p in written))
    if args.preset:
        print(f"use it: placement simulate|optimize --devices {args.preset} --timings {args.preset} "
              "--network NET.json (the network from placement import-model, same input shape and batch)")
    elif args.out:
        print(f"use it: --devices {Path(args.out) / 'devices.json'} --timings {Path(args.out) / 'timings.json'}")
    return 0


def cmd_export(args) -> int:
    _needs_torch()
    from ..torch.apply import placement_snippet, torch_placement_dict
    from ..torch.devspec import parse_devices

    devs = parse_devices(args.devices)
    if args.out:
        check_output_file(args.out, "--out", "placement.json" if args.format == "json" else "placement.py")
    shape, _, network, groups = _shape_and_network(args)
    assignment, traced = _assignment(args, shape, network, groups, devs)
    torch_of = {d.name: d.torch for d in devs}
    per_op = {op: torch_of[d] for op, d in assignment.items()}
    if args.format == "json":
        data = torch_placement_dict(traced.graph, per_op, source=args.model, input_shape=shape)
        if args.out:
            write_output_bytes(args.out, (json.dumps(data, indent=1, allow_nan=False) + "\n").encode(), "--out")
        else:
            print_json(data)
    else:
        text = placement_snippet(traced.graph, per_op, source=args.model, input_shape=shape)
        if args.out:
            write_output_bytes(args.out, text.encode(), "--out")
        else:
            sys.stdout.write(text)
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


# -- experiment e5 ----------------------------------------------------------------------------------

def register_e5(sub) -> None:
    """``placement experiment e5``: simulated against measured step times (thesis E5)."""
    p = sub.add_parser("e5", help="simulator accuracy: simulated vs measured step time of many placements",
                       description="Calibrate, collect placements (GA checkpoints, random, zones, splits, single "
                                   "devices), benchmark each and report Pearson r, Kendall tau and MAPE for the "
                                   "calibrated and the default profile, with a scatter plot.")
    _model_options(p)
    p.add_argument("--devices", default="cpu:2", help=DEVICES_HELP + " (default cpu:2)")
    p.add_argument("--out", required=True, help="folder for results.csv, scatter.png, placements.json, report.md")
    p.add_argument("--calibration", help="reuse a calibration folder (devices.json + timings.json)")
    p.add_argument("--generations", type=int, default=30, help="GA generations (default 30)")
    p.add_argument("--checkpoint-every", type=positive_int, default=2, help="GA checkpoint interval (default 2)")
    p.add_argument("--random", type=int, default=8, help="uniformly random placements (default 8)")
    p.add_argument("--zones", type=int, default=8, help="random contiguous-zone placements (default 8)")
    p.add_argument("--splits", type=int, default=5, help="contiguous two-way splits (default 5)")
    p.add_argument("--steps", type=positive_int, default=4, help="timed steps per round (default 4)")
    p.add_argument("--warmup", type=positive_int, default=1, help="warm-up steps per round (default 1)")
    p.add_argument("--rounds", type=positive_int, default=4, help="interleaved rounds (default 4)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the GA and the random placements (default 0)")
    p.add_argument("--json", action="store_true", help="print the metrics and rows as JSON")
    p.set_defaults(handler=cmd_e5)


def cmd_e5(args) -> int:
    _needs_torch()
    from ..torch.e5 import E5Settings, dumps, run_e5, summary_line

    for name in ("generations", "random", "zones", "splits"):
        if getattr(args, name) < 0:
            raise InputError(f"--{name} must not be negative", field=f"--{name}")
    check_output_dir(args.out, "--out")
    shape, batch, _, _ = _shape_and_network(args)
    settings = E5Settings(generations=args.generations, checkpoint_every=args.checkpoint_every, random=args.random,
                          zones=args.zones, splits=args.splits, steps=args.steps, warmup=args.warmup,
                          rounds=args.rounds, seed=args.seed)
    command = "placement experiment e5 " + " ".join(shlex.quote(a) for a in _argv(args))
    result = run_e5(args.model, shape, args.devices, batch_size=batch, out_dir=args.out, settings=settings,
                    calibration_dir=args.calibration, command=command.strip(),
                    progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    if args.json:
        print(dumps(result))
    else:
        print(summary_line(result))
        print("wrote " + ", ".join(result.files.values()))
    return 0


def _argv(args) -> list[str]:
    """The command's options, for the report."""
    out = ["--model", args.model]
    for key in ("input_shape", "batch_size", "devices", "out", "calibration", "generations", "checkpoint_every",
                "random", "zones", "splits", "steps", "warmup", "rounds", "seed"):
        v = getattr(args, key, None)
        if v is not None:
            out += [f"--{key.replace('_', '-')}", str(v)]
    return out
