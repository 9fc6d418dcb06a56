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

from ..errors import InputError
from .common import Parser, positive_int
from .torch_common import DEVICES_HELP, _model_options, _needs_torch, _shape_and_network
from .validate import check_output_dir, seed_int

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
    p.add_argument("--steps", type=positive_int, default=4, help="timed steps per round (default 4)")
    p.add_argument("--warmup", type=positive_int, default=1, help="warm-up steps per round (default 1)")
    p.add_argument("--rounds", type=positive_int, default=4, help="interleaved rounds (default 4)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the GA and the random placements (default 0)")
    p.add_argument("--json", action="store_true", help="print the metrics and rows as JSON")
    p.set_defaults(handler=cmd_e5)


def cmd_e5(args) -> int:
    _needs_torch()
    from ..experiments.e5 import E5Settings, dumps, run_e5, summary_line

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


def register_learned(sub) -> None:
    """The learned placers' experiments (docs/learned.md)."""
    passthrough(sub, "generalization", "Placeto's generalization: zero-shot and fine-tuned policies against "
                "MAP-Elites, the GA and baselines on unseen family graphs", "placement_core.experiments.generalization:main")
    passthrough(sub, "traversal", "Placeto's traversal orders: train under fixed node orders, place under unseen ones",
                "placement_core.experiments.traversal:main")
    passthrough(sub, "post", "Post's comparison: PG, PPO, CE and Post learning curves and best placements",
                "placement_core.experiments.post_compare:main")


EXPERIMENTS = [register_e3, register_e5, register_learned]


def register(sub) -> None:
    p = sub.add_parser("experiment", help="run one of the experiments (e3: optimizers, e5: simulator accuracy; "
                                          "generalization, traversal, post: learned placers)",
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
