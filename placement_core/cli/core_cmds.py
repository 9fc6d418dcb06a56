"""``placement networks``, ``placement devices`` and ``placement simulate``."""

from __future__ import annotations

from ..analysis.stats import channel_stats, device_stats
from ..base.errors import InputError
from ..base.units import fmt_bytes, fmt_seconds
from ..formats.catalog import builtin_devices, builtin_networks, load_devices, load_network
from ..base.jsonio import write_json
from ..analysis.pipeline import placement_option
from ..model.placement import describe_ignored
from .common import add_problem_options, build_problem, print_json, printable, table
from .validate import check_output_file


def register(sub) -> None:
    p = sub.add_parser("networks", help="list the built-in networks")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_networks)

    p = sub.add_parser("devices", help="list the device presets")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_devices)

    p = sub.add_parser("simulate", help="simulate one placement: makespan, busy time, memory, traffic",
                       description="Simulate one training step of a placement and report makespan, per-device "
                                   "busy time and peak memory, and per-channel traffic.")
    add_problem_options(p)
    p.add_argument("--placement", required=True,
                   help="single:DEVICE, random:SEED, stages:P (P balanced pipeline stages), stages:PxV (P V "
                        "chunks round-robin, for interleaved-1f1b), or a placement file (placement/1 or Exprimo's)")
    p.add_argument("--trace", metavar="FILE", help="write the event trace as Chrome trace JSON (Perfetto)")
    p.add_argument("--interval", action="store_true",
                   help="a 90 %% interval around the time per batch, from how much the calibration's op times moved "
                        "between its rounds (needs --timings or a calibrated local graph; docs/e5.md)")
    p.add_argument("--samples", type=int, default=64, help="--interval: draws of the op times (default 64)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_simulate)


def cmd_networks(args) -> int:
    rows = []
    for name in builtin_networks():
        g = load_network(name)
        t = g.totals()
        rows.append({"name": name, "ops": len(g), "batch_size": g.batch_size, "fwd_flops": t["fwd_flops"],
                     "param_bytes": t["param_bytes"]})
    if args.json:
        print_json(rows)
    else:
        print(table([[r["name"], r["ops"], r["batch_size"], f"{r['fwd_flops'] / 1e12:.2f}",
                      fmt_bytes(r["param_bytes"])] for r in rows],
                    ["network", "ops", "batch", "fwd TFLOP", "parameters"], right=(1, 2, 3, 4)))
    return 0


def cmd_devices(args) -> int:
    rows = []
    for name in builtin_devices():
        g = load_devices(name)
        rows.append({"name": name, "devices": g.names, "channels": [c.name for c in g.channels],
                     "memory_bytes": {d.name: d.memory_bytes for d in g.devices}})
    if args.json:
        print_json(rows)
    else:
        # the user's presets (file names, device names in them) are escaped like every name from a file
        print(table([[printable(r["name"]), len(r["devices"]), len(r["channels"]),
                      ", ".join(printable(d) for d in r["devices"])] for r in rows],
                    ["preset", "devices", "channels", "names"], right=(1, 2)))
    return 0


def batch_summary(problem) -> dict:
    """How the problem runs its batch: the fields ``simulate --json`` and ``optimize --json`` share.

    Under gpipe/1f1b the problem's graph is one micro-batch; ``batch_size`` is the whole batch,
    ``micro_batch_size`` the graph's, and ``batches`` counts whole batches (not micro-batches).
    """
    s = problem.settings
    m = s.micro_batches
    pipelined = s.schedule != "thesis"
    return {"batch_size": problem.graph.batch_size * m, "micro_batch_size": problem.graph.batch_size,
            "batches": s.batches,
            # gpipe/1f1b admit every micro-batch of the one batch at once; "in flight" is the thesis scheme's
            "in_flight": 1 if pipelined else s.units_in_flight,
            "schedule": s.schedule, "micro_batches": m, "virtual_stages": s.virtual_stages}


def describe_batches(summary: dict) -> str:
    """``4 batch(es), 2 in flight`` or ``gpipe schedule, 4 micro-batches of 32`` for the text output."""
    if summary["schedule"] == "thesis":
        return f"{summary['batches']} batch(es), {summary['in_flight']} in flight"
    virtual = f", {summary['virtual_stages']} virtual stages" if summary.get("virtual_stages", 1) > 1 else ""
    return (f"{summary['schedule']} schedule, {summary['micro_batches']} micro-batches of "
            f"{summary['micro_batch_size']}{virtual}")


def simulation_report(problem, placement_spec: str, ev) -> dict:
    """The numbers of one simulated placement; per-device and per-channel figures are analysis's."""
    r = ev.result
    kinds = [d.kind for d in problem.devices.devices]
    device_rows = device_stats(r, problem.devices.names, [d.memory_bytes for d in problem.devices.devices])
    devices = {row["device"]: {"kind": kind, "busy_s": row["busy_s"], "idle_s": float(r.makespan - row["busy_s"]),
                               "peak_memory_bytes": row["peak_memory"], "memory_bytes": row["capacity"],
                               "overflow_bytes": float(ev.overflow[i]), "utilisation": row["utilisation"]}
               for i, (row, kind) in enumerate(zip(device_rows, kinds))}
    channels = {row["channel"]: {"bytes": row["bytes"], "busy_s": row["busy_s"], "utilisation": row["utilisation"]}
                for row in channel_stats(r, [c.name for c in problem.devices.channels])}
    used = r.busy > 0
    bubble = float(r.idle_fraction()[used].mean()) if used.any() else 0.0
    return {"network": problem.graph.name, "ops": len(problem.graph), "precision": problem.graph.precision,
            **batch_summary(problem),
            "device_graph": problem.devices.name, "profile": problem.profile.name,
            "measured_op_times": bool(getattr(problem.profile, "timings", None)), "placement": placement_spec,
            "bubble_fraction": bubble,
            "forward_only": problem.settings.forward_only, "makespan_s": r.makespan,
            "batch_time_s": r.batch_time, "objective_s": ev.objective, "penalty": problem.penalty,
            "feasible": ev.feasible, "transfers": r.transfers, "devices": devices, "channels": channels}


def cmd_simulate(args) -> int:
    trace_path = check_output_file(args.trace, "--trace", "trace.json") if args.trace is not None else None
    problem = build_problem(args)
    ignored: list[str] = []
    splits = list(problem.splits)
    placement = placement_option(args.placement, problem.graph, problem.devices, ignored=ignored, splits=splits,
                                 profile=problem.profile)
    problem = problem.with_splits(splits)  # a placement file's splits join the table
    ev = problem.simulate(placement)  # the fast kernel: the numbers, and how large a trace would be
    if trace_path is not None:
        from ..simulate.chrome import chrome_trace
        from ..simulate.tracesize import check_trace_size
        check_trace_size(problem, ev.result)
        ev = problem.simulate(placement, trace=True)
        write_json(trace_path, chrome_trace(ev.result, problem.devices.names,
                                      [c.name for c in problem.devices.channels],
                                      title=f"{problem.graph.name} on {problem.devices.name}",
                                      graph=problem.graph), indent=None)
    report = simulation_report(problem, args.placement, ev)
    if args.interval:
        from ..analysis import uncertainty
        if not uncertainty.has_spread(problem):
            raise InputError("--interval needs measured op times that say how much they move", field="--interval",
                             fix="Give --timings from placement calibrate (rounds >= 2 record each op's spread), "
                                 "or leave --interval out")
        [iv] = uncertainty.intervals(problem, [placement], samples=args.samples)
        report["interval"] = iv.to_dict()
    report["ignored_placement_keys"] = len(ignored)  # Exprimo files: keys that are not ops (Block names, stale)
    from ..model.sharding import gene_entry
    names = problem.devices.names
    report["split_ops"] = {op.name: gene_entry(int(g), names, problem.splits)
                                                  for op, g in zip(problem.graph.ops, placement) if g >= len(names)}
    if args.json:
        print_json(report)
        return 0
    r = ev.result
    how = describe_batches(report)
    # names come from files and paths from the command line: escaped, they cannot drive the terminal
    print(f"{printable(report['network'])} ({report['ops']} ops, batch {report['batch_size']}, {report['precision']}) on "
          f"{printable(report['device_graph'])}, profile {report['profile']}"
          f"{' with measured op times' if report['measured_op_times'] else ''}, {how}"
          + (", forward only" if report["forward_only"] else ""))
    print(f"placement {printable(args.placement)}: makespan {fmt_seconds(r.makespan)}, batch time "
          f"{fmt_seconds(r.batch_time)}, {r.transfers} transfers, "
          + ("fits in memory" if ev.feasible else "OVERFLOWS memory") + f", objective {ev.objective:.6g} s, "
          f"bubble {report['bubble_fraction']:.1%} (mean idle share of the devices used)")
    if "interval" in report:
        iv = report["interval"]
        print(f"{iv['level']:.0%} interval of the time per batch from the calibration's spread: "
              f"{fmt_seconds(iv['low_s'])} to {fmt_seconds(iv['high_s'])} ({iv['samples']} draws of the op times)")
    if ignored:
        print(f"note: {printable(describe_ignored(ignored))}")
    if report["split_ops"]:
        from ..model.sharding import gene_label
        shown = [f"{printable(op.name)} ({printable(gene_label(int(g), names, problem.splits))})"
                 for op, g in zip(problem.graph.ops, placement) if g >= len(names)]
        print(f"{len(shown)} op(s) split over several devices: " + ", ".join(shown[:6])
              + (f" and {len(shown) - 6} more" if len(shown) > 6 else ""))
    print()
    rows = [[printable(name), d["kind"], fmt_seconds(d["busy_s"]), f"{d['utilisation']:.0%}",
             fmt_bytes(d["peak_memory_bytes"]), fmt_bytes(d["memory_bytes"]),
             fmt_bytes(d["overflow_bytes"]) if d["overflow_bytes"] else "-"]
            for name, d in report["devices"].items()]
    print(table(rows, ["device", "kind", "busy", "util", "peak memory", "capacity", "overflow"],
                right=(2, 3, 4, 5, 6)))
    if report["channels"]:
        print()
        rows = [[printable(name), fmt_bytes(c["bytes"]), fmt_seconds(c["busy_s"]), f"{c['utilisation']:.0%}"]
                for name, c in report["channels"].items()]
        print(table(rows, ["channel", "traffic", "busy", "util"], right=(1, 2, 3)))
    if trace_path is not None:
        print(f"\ntrace written to {printable(args.trace)} (open it in https://ui.perfetto.dev)")
    return 0
