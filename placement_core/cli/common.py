"""Shared CLI plumbing: one-line errors with exit status 2, tables, problem options."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from ..errors import InputError


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def run_safely(build_parser: Callable[[], Parser], argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except (InputError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - a user never sees a traceback
        print(f"error: unexpected failure: {type(e).__name__}: {e} (please report this)", file=sys.stderr)
        return 1


def positive_int(text: str, maximum: int = 2**31 - 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not 1 <= value <= maximum:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {maximum}, got {text!r}")
    return value


MAX_UNITS = 10_000  # batches or micro-batches in one simulated run (the thesis uses 10)


def unit_count(text: str) -> int:
    """Batches, batches in flight or micro-batches: the simulator keeps state per unit, so bound them."""
    return positive_int(text, MAX_UNITS)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def add_problem_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The options that define a Problem, shared by simulate and optimize."""
    p.add_argument("--network", required=required, help="built-in name (see `placement networks`) or a JSON file "
                                                     "(placement-network/1 or Exprimo's layer format)")
    p.add_argument("--devices", required=required, help="preset name (see `placement devices`) or a JSON file "
                                                    "(placement-devices/1 or Exprimo's device format)")
    p.add_argument("--batch-size", type=positive_int, help="rescale the network to this batch size")
    p.add_argument("--batches", type=unit_count, default=1, help="batches simulated in total (default 1)")
    p.add_argument("--in-flight", type=unit_count, default=1,
                   help="batches in the system at once (default 1; the thesis' pipelining)")
    p.add_argument("--profile", default="default", choices=["default", "exprimo-2020"],
                   help="cost profile (default: roofline; exprimo-2020: the thesis' published model)")
    p.add_argument("--timings", metavar="NAME|FILE",
                   help="measured op times from `placement calibrate`: a calibration's preset name (local) or "
                        "its timings.json; they replace the cost formulas on the calibrated devices")
    p.add_argument("--comp-efficiency", type=fraction, help="fraction of peak FLOPS reached (default 0.9)")
    p.add_argument("--comm-efficiency", type=fraction,
                   help="fraction of link bandwidth reached (default 0.25, thesis E1)")
    p.add_argument("--schedule", default="thesis", choices=["thesis", "gpipe", "1f1b"],
                   help="thesis: whole batches, --in-flight at a time; gpipe / 1f1b: the batch split into "
                        "--micro-batches, one weight update per batch")
    p.add_argument("--micro-batches", type=unit_count, default=None,
                   help="micro-batches per batch for gpipe / 1f1b (default 4)")
    p.add_argument("--forward-only", action="store_true", help="inference: no backward pass or weight update")
    p.add_argument("--penalty", default="thesis", choices=["thesis", "placeto", "infeasible"],
                   help="memory-overflow penalty in the objective (default thesis: +1 ms per MB)")


def build_problem(args):
    from ..catalog import load_devices, load_network
    from ..simulate.schedules import pipeline_problem

    graph = load_network(args.network, batch_size=args.batch_size)
    devices = load_devices(args.devices)
    micro = args.micro_batches
    if args.schedule == "thesis":
        if micro not in (None, 1):
            raise InputError("--micro-batches needs --schedule gpipe or 1f1b", field="--micro-batches")
        micro = 1
    else:
        if args.in_flight != 1:
            raise InputError(f"only the thesis scheme has batches in flight; a {args.schedule} step runs its "
                             "micro-batches and ends with a flush", field="--in-flight",
                             fix="Drop --in-flight, or set the number of micro-batches with --micro-batches")
        if micro is None:
            micro = 4
    timings = load_cli_timings(args.timings, args.network, graph) if getattr(args, "timings", None) else None
    return pipeline_problem(graph, devices, args.schedule, micro, batches=args.batches, in_flight=args.in_flight,
                            forward_only=args.forward_only, profile=args.profile, penalty=args.penalty,
                            comp_efficiency=args.comp_efficiency, comm_efficiency=args.comm_efficiency,
                            timings=timings, timings_batch=graph.batch_size if timings else None)


def load_cli_timings(spec: str, network_spec: str, graph):
    """The calibrated table for ``graph``; a coarsened network (import-model --groups) sums its groups' ops."""
    from ..torch.coarsen import groups_path, read_groups
    from ..torch.timings import load_timings

    gp = groups_path(network_spec)
    groups = read_groups(gp) if gp.is_file() else None
    try:
        return load_timings(spec, graph, groups)
    except InputError as e:
        raise InputError(e.problem, source=e.source, field="--timings", fix=e.fix) from None


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str], right: Sequence[int] = ()) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def fmt(row):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def human_bytes(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def human_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"
