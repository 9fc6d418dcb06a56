"""``placement import-model``, ``calibrate`` and ``export-placement`` (``benchmark``: :mod:`.benchmark_cmds`).

Everything here needs PyTorch, which is imported inside the handlers only, so
``placement --help`` and the other commands work without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..base.errors import InputError
from ..base.units import fmt_bytes
from .common import positive_int, print_json, table
from ..simulate.schedules import PIPELINES
from .benchmark_cmds import cmd_benchmark
from .torch_common import (DEVICES_HELP, MODEL_HELP, _assignment, _model_options, _needs_torch, _shape_and_network,
                           byte_size)
from .validate import check_output_dir, check_output_file, positive_seconds, seed_int, write_output_bytes

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
                   help="single:DEVICE, random:SEED, stages:P, stages:PxV, or a placement file (placement/1 or "
                        "Exprimo's); or --run")
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
    p.add_argument("--profile", metavar="DIR",
                   help="after the timed steps, profile one more step with torch.profiler and write its Chrome "
                        "trace per placement and rank (DIR/placement0-rank0.json; open it in ui.perfetto.dev)")
    p.add_argument("--no-store", action="store_true", help="do not record the measurement in the run store")
    p.add_argument("--home", metavar="DIR", help="data directory with runs.sqlite (default $PLACEMENT_HOME or "
                                                 "~/.placement)")
    p.add_argument("--schedule", choices=list(PIPELINES),
                   help="run the placement's stages as a pipeline with torch.distributed.pipelining on CPU ranks: "
                        "gpipe, 1f1b, interleaved-1f1b (V chunks per device, e.g. --placement stages:4x2) or zb-h1")
    p.add_argument("--micro-batches", type=positive_int, help="with --schedule: micro-batches per step (default 4)")
    p.add_argument("--simulate", metavar="DEVICES",
                   help="with --schedule: also simulate the pipeline on this device graph (e.g. local, the preset "
                        "placement calibrate saves) and report its step and bubble beside the measured ones")
    p.add_argument("--timings", metavar="NAME|FILE", help="with --simulate: measured op times (e.g. local)")
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
    p.add_argument("--link-model", choices=("auto", "curve", "affine"), default="auto",
                   help="links in the device graph: the measured transfer curve, latency + bytes / bandwidth, or "
                        "auto: whichever reproduces the whole-step runs better (default; with --fit-placements 0: "
                        "the curve)")
    p.add_argument("--no-batch-fit", dest="batch_fit", action="store_false",
                   help="measure the ops at the given batch only (default: at half of it too, for the part of "
                        "each op's time that does not shrink with the batch: what micro-batches and batch "
                        "shards cost)")
    p.add_argument("--separate", action="store_true",
                   help="keep identical devices' measurements apart (default: cpu:N ranks, or GPUs of one model, "
                        "share the fastest figures of all of them, as rounds do)")
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


def cmd_import(args) -> int:
    _needs_torch()
    from ..base.jsonio import write_json
    from ..formats.network import network_to_dict
    from ..model.coarsen import coarsen, groups_path, write_groups
    from ..torch.model_import import trace_model
    from ..torch.sources import load_model, parse_input_shape, parse_source

    src = parse_source(args.source)
    shape = parse_input_shape(args.input_shape)
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
              f"{fmt_bytes(t['param_bytes'])} parameters, {fmt_bytes(t['activation_bytes'])} activations")
        print("wrote " + ", ".join(written))
    return 0


def cmd_calibrate(args) -> int:
    _needs_torch()
    from ..analysis.calibration_fit import CalibrationSettings, summary_rows
    from ..torch.calibrate import calibrate, save_calibration

    if args.out:
        check_output_dir(args.out, "--out")
    shape, batch, _, _ = _shape_and_network(args)
    if args.fit_placements < 0:
        raise InputError("--fit-placements must not be negative", field="--fit-placements")
    from ..analysis.calibration_fit import SIZES
    sizes = tuple(n for n in SIZES if n <= args.max_transfer * (1 + 1e-9))
    if len(sizes) < 2:
        raise InputError(f"--max-transfer must be at least {fmt_bytes(SIZES[1])}: a link's latency and bandwidth "
                         "need two message sizes", field="--max-transfer")
    settings = CalibrationSettings(steps=args.steps, reconcile=args.reconcile, rounds=args.rounds,
                                   fit_placements=args.fit_placements, sizes=sizes, pool_identical=not args.separate,
                                   link_model=args.link_model, batch_fit=args.batch_fit)
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
