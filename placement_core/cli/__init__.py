"""The ``placement`` command. Every subcommand lives in its own module and registers itself."""

from __future__ import annotations

import sys

from . import (core_cmds, experiment_cmds, learned_cmds, optimize_cmds, plan_cmds, runs_cmds, surrogate_cmds,
               sweep_cmds, torch_cmds)
from .common import Parser, run_safely

# Subcommand modules, in the order ``placement --help`` lists them.
COMMANDS = [core_cmds, optimize_cmds, sweep_cmds, plan_cmds, runs_cmds, torch_cmds, surrogate_cmds, learned_cmds,
            experiment_cmds]


def build_parser() -> Parser:
    parser = Parser(prog="placement", description="Device Placement Lab: simulate, optimize and benchmark "
                                                  "which device runs which part of a training step.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_safely(build_parser, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
