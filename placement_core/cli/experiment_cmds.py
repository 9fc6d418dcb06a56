"""``placement experiment NAME ...``: the thesis' experiments, reproducible from the command line.

Each entry of ``EXPERIMENTS`` adds one sub-command to the ``experiment``
parser (``register(sub)``, like the command modules). An experiment that
already has its own ``main(argv)`` registers with :func:`passthrough`, e.g.
``lambda sub: passthrough(sub, "e3", "...", "placement_core.experiments.e3:main")``.
"""

from __future__ import annotations

import argparse
import importlib

from . import torch_cmds
from .common import Parser

def register_e3(sub) -> None:
    passthrough(sub, "e3", "the optimizers on the thesis' normal, limited and pipelined problems",
                "placement_core.experiments.e3:main")


EXPERIMENTS = [register_e3, torch_cmds.register_e5]


def register(sub) -> None:
    p = sub.add_parser("experiment", help="run one of the thesis' experiments (e3: optimizers, e5: simulator accuracy)",
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
