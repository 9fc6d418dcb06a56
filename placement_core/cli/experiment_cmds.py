"""``placement experiment NAME ...``: the thesis' experiments, reproducible from the command line.

Each entry of ``EXPERIMENTS`` adds one sub-command to the ``experiment``
parser (``register(sub)``, like the command modules). An experiment that
already has its own ``main(argv)`` registers with :func:`passthrough`, e.g.
``lambda sub: passthrough(sub, "e3", "...", "placement_core.experiments.e3:main")``.
"""

from __future__ import annotations

import argparse
import importlib

import shlex
import sys

from ..base.errors import InputError
from ..base.outputs import check_report_file
from .common import Parser, positive_int, print_json
from .torch_common import DEVICES_HELP, MODEL_HELP, _model_options, _needs_torch, _shape_and_network
from .validate import check_output_dir, seed_int

def register_e1(sub) -> None:
    """``placement experiment e1``: transfer time and effective bandwidth against message size (thesis E1)."""
    from .torch_common import byte_size
    p = sub.add_parser("e1", help="message size against practical bandwidth, and the link model it gives",
                       description="Time messages of a few bytes to hundreds of MB between two devices (every "
                                   "sample), plot the effective bandwidth against the nominal link, and fit the "
                                   "size-dependent link model a device graph carries (docs/e1.md).")
    p.add_argument("--devices", default="cpu:2", help="two devices: cpu:2 (two CPU ranks), cpu,cuda:0 (the "
                                                      "thesis' CPU -> GPU) or cuda:0,cuda:1 (default cpu:2)")
    p.add_argument("--runner", choices=("ranks", "inprocess"), default="ranks",
                   help="ranks: a ping-pong between two worker processes, halved (default); inprocess: "
                        "tensor.to(dst) in one process")
    p.add_argument("--sizes", help="message sizes, comma-separated (e.g. 4,1kB,1MB,256MiB); default 4 B to "
                                   "256 MiB, every factor of 4")
    p.add_argument("--max-size", type=byte_size, default=2**28, metavar="BYTES",
                   help="leave out the default sizes above this (default 256MiB)")
    p.add_argument("--repeats", type=positive_int, default=10, help="samples per size in each round (default 10)")
    p.add_argument("--rounds", type=positive_int, default=5, help="rounds over all sizes (default 5)")
    p.add_argument("--nominal", type=byte_size, metavar="BYTES_PER_S",
                   help="the link's nominal bandwidth per second, drawn for comparison (PCIe 3 x16: 15.75GB)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole measurement")
    p.add_argument("--out", default="docs/e1", help="folder for the samples, summary, device graph and plot")
    p.add_argument("--markdown", default="docs/e1.md", help="the report (default docs/e1.md)")
    p.add_argument("--json", action="store_true", help="print the per-size summary and the fits as JSON")
    p.set_defaults(handler=cmd_e1)


def cmd_e1(args) -> int:
    _needs_torch()
    from ..experiments.e1 import run_e1
    from ..torch.transfers import SIZES
    from .torch_common import byte_size

    if args.sizes:
        try:
            sizes = [int(byte_size(s)) for s in args.sizes.split(",") if s.strip()]
        except argparse.ArgumentTypeError as e:
            raise InputError(str(e), field="--sizes") from None
    else:
        sizes = [s for s in SIZES if s <= args.max_size]
    check_report_file(args.markdown, "--markdown", check_output_dir(args.out, "--out"))
    command = "placement experiment e1 " + " ".join(shlex.quote(a) for a in _e1_argv(args))
    result = run_e1(args.devices, sizes=sizes, runner=args.runner, repeats=args.repeats, rounds=args.rounds,
                    out_dir=args.out, markdown_path=args.markdown, nominal=args.nominal, command=command.strip(),
                    timeout=args.timeout, progress=None if args.json else (lambda m: print(m, file=sys.stderr)))
    if args.json:
        print_json({"latency_s": result.latency, "bandwidth": result.bandwidth,
                    "transfer_curve": [list(p) for p in result.curve], "sizes": result.rows, "files": result.files})
    else:
        print(f"latency {result.latency * 1e6:.1f} us, bandwidth {result.bandwidth / 1e9:.3f} GB/s; transfer curve "
              f"of {len(result.curve)} sizes")
        print("wrote " + ", ".join(result.files.values()))
    return 0


def _e1_argv(args) -> list[str]:
    out = ["--devices", args.devices]
    for key in ("runner", "sizes", "repeats", "rounds", "nominal", "out", "markdown"):
        v = getattr(args, key, None)
        if v is not None:
            out += [f"--{key}", str(int(v)) if key == "nominal" else str(v)]
    return out


def register_e2(sub) -> None:
    """``placement experiment e2``: every step's time over a long benchmark (thesis E2)."""
    p = sub.add_parser("e2", help="stability of step times: warm-up, noise, outliers and the statistic to use",
                       description="Run several placements for many steps (every step kept), show the residual per "
                                   "step index, the distribution and the outliers, and measure which warm-up and "
                                   "statistic make benchmarks repeatable (docs/e2.md).")
    p.add_argument("--model", help=MODEL_HELP + " (required unless --reanalyse)")
    p.add_argument("--input-shape", help="example input, e.g. 1,3,224,224")
    p.add_argument("--batch-size", type=positive_int, help="batch of the steps (default: the input's first size)")
    p.add_argument("--devices", default="cpu:2", help=DEVICES_HELP + " (default cpu:2)")
    p.add_argument("--configurations", type=positive_int, default=12,
                   help="placements: every single device, then random zones and mixes (default 12)")
    p.add_argument("--steps", type=positive_int, default=50, help="steps per run, the first included (default 50)")
    p.add_argument("--rounds", type=positive_int, default=2, help="interleaved runs of every placement (default 2)")
    p.add_argument("--window", type=positive_int, default=10,
                   help="steps per benchmark window when comparing statistics (default 10, the benchmark's)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the model and the placements (default 0)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    p.add_argument("--out", default="docs/e2", help="folder for steps.csv and e2.png (default docs/e2)")
    p.add_argument("--markdown", default="docs/e2.md", help="the report (default docs/e2.md)")
    p.add_argument("--reanalyse", metavar="DIR", help="analyse the steps an earlier run recorded in DIR again "
                                                      "(steps.csv, run.json) instead of measuring")
    p.set_defaults(handler=cmd_e2)


def cmd_e2(args) -> int:
    from ..experiments.e2 import run_e2, write_e2

    if args.reanalyse:
        result = write_e2(args.reanalyse, args.window, args.markdown)
        print(f"recommended warm-up: {result.warmup} step(s); steadiest statistic: {result.statistic}")
        print("wrote " + ", ".join(result.files.values()))
        return 0
    if not args.model:
        raise InputError("the model to run is needed", field="--model",
                         fix="Give --model (e.g. torchvision:resnet18), or --reanalyse DIR for recorded steps")
    _needs_torch()

    check_report_file(args.markdown, "--markdown", check_output_dir(args.out, "--out"))
    shape, batch, _, _ = _shape_and_network(args)
    argv = ["--model", args.model]
    for key in ("input_shape", "batch_size", "devices", "configurations", "steps", "rounds", "window", "seed",
                "out", "markdown"):
        if getattr(args, key, None) is not None:
            argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    result = run_e2(args.model, shape, args.devices, batch_size=batch, configurations=args.configurations,
                    steps=args.steps, rounds=args.rounds, window=args.window, seed=args.seed, timeout=args.timeout,
                    out_dir=args.out, markdown_path=args.markdown,
                    command="placement experiment e2 " + " ".join(shlex.quote(a) for a in argv),
                    progress=lambda m: print(m, file=sys.stderr))
    print(f"recommended warm-up: {result.warmup} step(s); steadiest statistic: {result.statistic}")
    print("wrote " + ", ".join(result.files.values()))
    return 0


def register_e3(sub) -> None:
    passthrough(sub, "e3", "the optimizers on the thesis' normal, limited and pipelined problems",
                "placement_core.experiments.e3:main")


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
    p.add_argument("--sharded", type=int, default=4,
                   help="placements that split ops over the devices: data parallel, then random (default 4)")
    p.add_argument("--steps", type=positive_int, default=4, help="timed steps per round (default 4)")
    p.add_argument("--warmup", type=positive_int, default=1, help="warm-up steps per round (default 1)")
    p.add_argument("--rounds", type=positive_int, default=4, help="interleaved rounds (default 4)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the GA and the random placements (default 0)")
    p.add_argument("--statistic", choices=("median", "mean", "min", "trimmed"), default="median",
                   help="a placement's measured step time: this statistic of its steps (default median; docs/e2.md)")
    p.add_argument("--in-order", action="store_true",
                   help="benchmark the placements in the same order every round (default: each round shuffled)")
    p.add_argument("--runs", type=positive_int, default=1,
                   help="consecutive runs, each calibrating afresh, in --out/run1 ... with a summary.md (default 1)")
    p.add_argument("--json", action="store_true", help="print the metrics and rows as JSON")
    p.set_defaults(handler=cmd_e5)


def cmd_e5(args) -> int:
    _needs_torch()
    from ..experiments.e5 import E5Settings, dumps, run_e5, summary_line

    for name in ("generations", "random", "zones", "splits", "sharded"):
        if getattr(args, name) < 0:
            raise InputError(f"--{name} must not be negative", field=f"--{name}")
    check_output_dir(args.out, "--out")
    shape, batch, _, _ = _shape_and_network(args)
    settings = E5Settings(generations=args.generations, checkpoint_every=args.checkpoint_every, random=args.random,
                          zones=args.zones, splits=args.splits, sharded=args.sharded, steps=args.steps,
                          warmup=args.warmup,
                          rounds=args.rounds, seed=args.seed, statistic=args.statistic, shuffle=not args.in_order)
    command = "placement experiment e5 " + " ".join(shlex.quote(a) for a in _argv(args))
    progress = None if args.json else (lambda m: print(m, file=sys.stderr))
    if args.runs > 1:
        from ..experiments.e5_series import run_series
        results = run_series(args.model, shape, args.devices, batch_size=batch, out_dir=args.out, runs=args.runs,
                             settings=settings, calibration_dir=args.calibration, command=command.strip(),
                             progress=progress)
    else:
        results = [run_e5(args.model, shape, args.devices, batch_size=batch, out_dir=args.out, settings=settings,
                          calibration_dir=args.calibration, command=command.strip(), progress=progress)]
    if args.json:
        print(dumps(results[0]) if len(results) == 1 else "[" + ",\n".join(dumps(r) for r in results) + "]")
    else:
        for k, result in enumerate(results, 1):
            print((f"run {k}: " if len(results) > 1 else "") + summary_line(result))
        print("wrote " + ", ".join(v for r in results for v in r.files.values()))
    return 0


def _argv(args) -> list[str]:
    """The command's options, for the report."""
    out = ["--model", args.model]
    for key in ("input_shape", "batch_size", "devices", "out", "calibration", "generations", "checkpoint_every",
                "random", "zones", "splits", "steps", "warmup", "rounds", "seed", "statistic", "runs"):
        v = getattr(args, key, None)
        if v is not None:
            out += [f"--{key.replace('_', '-')}", str(v)]
    return out + (["--in-order"] if getattr(args, "in_order", False) else [])


def register_e4(sub) -> None:
    """``placement experiment e4``: from the simulator's MAP-Elites archive to measured placements."""
    p = sub.add_parser("e4", help="sim -> real: top-K re-benchmarking, the surrogate-assisted GA and a plain GA "
                                  "on measurements, from the simulator's MAP-Elites archive",
                       description="MAP-Elites against the calibrated simulator, then three measured searches with "
                                   "the same budget, and a confirmation of each one's best (docs/e4.md).")
    _model_options(p)
    p.add_argument("--devices", default="cpu:2", help=DEVICES_HELP + " (default cpu:2)")
    p.add_argument("--calibration", required=True, help="a placement calibrate folder (devices.json + timings.json)")
    p.add_argument("--out", required=True, help="folder for runs.sqlite, report.md, history.csv, e4.png")
    p.add_argument("--budget", type=positive_int, default=50, help="measurements per search (default 50)")
    p.add_argument("--archive-budget", type=positive_int, default=20000,
                   help="MAP-Elites evaluations against the simulator (default 20000)")
    p.add_argument("--steps", type=positive_int, default=4, help="timed steps per round (default 4)")
    p.add_argument("--warmup", type=positive_int, default=1, help="warm-up steps per round (default 1)")
    p.add_argument("--rounds", type=positive_int, default=2, help="interleaved rounds per measurement (default 2)")
    p.add_argument("--confirm-rounds", type=positive_int, default=6,
                   help="interleaved rounds of the confirmation (default 6)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of MAP-Elites and the searches (default 0)")
    p.set_defaults(handler=cmd_e4)


def cmd_e4(args) -> int:
    _needs_torch()
    from ..experiments.e4 import run_e4

    check_output_dir(args.out, "--out")
    shape, batch, _, _ = _shape_and_network(args)
    command = "placement experiment e4 " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 else ""
    data = run_e4(args.model, shape, args.devices, batch_size=batch, calibration=args.calibration, out_dir=args.out,
                  budget=args.budget, archive_budget=args.archive_budget, seed=args.seed, steps=args.steps,
                  warmup=args.warmup, rounds=args.rounds, confirm_rounds=args.confirm_rounds, command=command,
                  say=lambda m: print(m, file=sys.stderr, flush=True))
    for c in data["confirm"]:
        shown = "-" if c["median_s"] is None else f"{c['median_s'] * 1e3:.2f} ms"
        print(f"{c['placement']}: {shown} (re-measured)")
    print(f"wrote {args.out}/report.md, history.csv, e4.png")
    return 0


def register_assisted(sub) -> None:
    passthrough(sub, "assisted", "the surrogate-assisted GA against the plain GA, the simulator as the truth",
                "placement_core.experiments.assisted:main")


def register_seeding(sub) -> None:
    passthrough(sub, "seeding", "the GA after 1,000 / 5,000 / 20,000 evaluations with and without initial mappings",
                "placement_core.experiments.assisted:main_seeding")


def register_sharding(sub) -> None:
    """``placement experiment sharding``: sharded placements against one GPU, placements and data parallelism."""
    from ..experiments.parallelism import NETWORKS
    p = sub.add_parser("sharding", help="one GPU, the best placement, data parallel, hybrid and the best sharded "
                                        "placement, simulated (docs/sharding.md)",
                       description="For each network: its batch time on one GPU, with the best placement of whole "
                                   "ops a search finds, data parallel, the best hybrid, and the best placement a "
                                   "search finds that may split ops (seeded with data parallel, hybrid and "
                                   "heft-sharded, and unseeded). Writes results.csv, the best sharded placements "
                                   "and a markdown report.")
    p.add_argument("--networks", default=",".join(NETWORKS), help=f"comma-separated (default {','.join(NETWORKS)})")
    p.add_argument("--devices", default="nvlink-8gpu", help="device graph (default nvlink-8gpu)")
    p.add_argument("--batch-size", type=positive_int, default=128, help="batch size (default 128)")
    p.add_argument("--budget", type=positive_int, default=20000, help="evaluations per search (default 20000)")
    p.add_argument("--algorithm", default="ga", help="the search (default ga; any of placement optimize's)")
    p.add_argument("--max-shards", type=positive_int, default=8, help="most devices per split (default 8)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of every search (default 0)")
    p.add_argument("--out", default="sharding-results", help="folder for results.csv and the placements "
                                                          "(default sharding-results, in the current folder)")
    p.add_argument("--markdown", help="the report (default: OUT.md beside the folder, sharding-results.md; this "
                                      "repository's is docs/sharding-results.md)")
    p.set_defaults(handler=cmd_sharding)


def cmd_sharding(args) -> int:
    from ..formats.catalog import load_devices, load_network
    from ..experiments.parallelism import run_sharding, table
    from ..optimize import algorithm_class

    networks = [n.strip() for n in args.networks.split(",") if n.strip()]
    if not networks:
        raise InputError("no network named", field="--networks", fix="e.g. --networks vgg16,resnet50")
    for n in networks:
        load_network(n)  # an unknown name fails here, before any search
    load_devices(args.devices)
    from ..optimize import LEARNED_NAMES
    if args.algorithm in LEARNED_NAMES:
        raise InputError(f"{args.algorithm} applies a trained policy, and the experiment's searches take none",
                         field="--algorithm", fix="Use a search such as ga or map-elites (see `placement algorithms`)")
    algorithm_class(args.algorithm)
    out = check_output_dir(args.out, "--out")
    if args.markdown is None:
        # beside the folder, as docs/sharding-results{,.md}
        args.markdown = str(out / "sharding-results.md") if out.name in ("", ".", "..") else str(out) + ".md"
    check_report_file(args.markdown, "--markdown", out)  # before the searches, not after them
    command = "placement experiment sharding " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    rows = run_sharding(networks, out_dir=args.out, markdown=args.markdown, command=command.strip(),
                        devices=args.devices, batch_size=args.batch_size, evaluations=args.budget,
                        seed=args.seed, algorithm=args.algorithm, max_shards=args.max_shards,
                        say=lambda m: print(m, file=sys.stderr, flush=True))
    print(table(rows))
    print(f"wrote {args.out}/results.csv, the best sharded placements and {args.markdown}")
    return 0


def register_learned(sub) -> None:
    """The learned placers' experiments (docs/learned.md)."""
    passthrough(sub, "generalization", "Placeto's generalization: zero-shot and fine-tuned policies against "
                "MAP-Elites, the GA and baselines on unseen family graphs", "placement_core.experiments.generalization:main")
    passthrough(sub, "traversal", "Placeto's traversal orders: train under fixed node orders, place under unseen ones",
                "placement_core.experiments.traversal:main")
    passthrough(sub, "post", "Post's comparison: PG, PPO, CE and Post learning curves and best placements",
                "placement_core.experiments.post_compare:main")


EXPERIMENTS = [register_e1, register_e2, register_e3, register_e4, register_e5, register_assisted,
               register_seeding, register_sharding, register_learned]


def register(sub) -> None:
    p = sub.add_parser("experiment", help="run one of the thesis' experiments (e1: link bandwidth, e2: step times, "
                                          "e3: optimizers, e4: sim -> real, e5: simulator accuracy; generalization, "
                                          "traversal, post: learned placers)",
                       description="Reproduce the thesis' experiments on this machine.")
    experiments = p.add_subparsers(dest="experiment", metavar="EXPERIMENT", parser_class=Parser)
    experiments.required = True
    for add in EXPERIMENTS:
        add(experiments)


def passthrough(sub, name: str, help: str, main: str) -> None:
    """An experiment whose ``module:function`` takes the rest of the command line itself."""
    p = sub.add_parser(name, help=help, add_help=False, prefix_chars="\0")
    p.add_argument("argv", nargs=argparse.REMAINDER)

    def handler(args) -> int:
        module, _, func = main.partition(":")
        return int(getattr(importlib.import_module(module), func)(args.argv) or 0)
    p.set_defaults(handler=handler)
