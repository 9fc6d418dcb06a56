"""Shared CLI plumbing: one-line errors with exit status 2, tables, problem options."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import threading
from typing import Callable, Sequence

from ..base.args import Parser, UsageError  # noqa: F401 - the CLI's parser, re-exported
from ..base.errors import InputError, escape, shown
from ..problem import Problem, ProblemSpec
from ..simulate.schedules import PIPELINES, SCHEDULES




def run_safely(build_parser: Callable[[], Parser], argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except (InputError, UsageError) as e:
        # InputError escapes and caps its parts; argparse's messages quote user strings raw
        print(f"error: {shown(e, 1500)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            return _unexpected(e)
        # the last line of defence for a path no loader checked first (an output file, say)
        name = e.filename if isinstance(e.filename, str) else ""
        longest = max((len(os.fsencode(p)) for p in name.split("/")), default=0)
        print(f"error: {shown(name, 200)}: a file name in the path is {longest} bytes long, more than the "
              f"limit of 255 for one file name. Use a shorter file name", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a user never sees a traceback
        return _unexpected(e)


def _unexpected(e: BaseException) -> int:
    print(f"error: unexpected failure: {type(e).__name__}: {shown(e, 1000)} (please report this)", file=sys.stderr)
    return 1


def printable(text) -> str:
    """A user string (a name from a file, a path from the command line) safe to print on a terminal:
    control characters and ANSI escapes written as ``repr`` would, undecodable bytes as ``\\udcff``."""
    return escape(str(text))


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


MIN_EFFICIENCY = 1e-3  # a thousandth of peak: lower is a typo, and 5e-324 made every time infinite


def fraction(text: str) -> float:
    """An efficiency: a share of peak FLOP/s or bandwidth, from 0.001 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not MIN_EFFICIENCY <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], at least {MIN_EFFICIENCY:g}, got {text!r}")
    return value


def add_problem_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The options that define a Problem, shared by simulate and optimize."""
    p.add_argument("--network", required=required, help="built-in name (see `placement networks`) or a JSON file "
                                                     "(placement-network/1 or Exprimo's layer format)")
    p.add_argument("--devices", required=required, help="preset name (see `placement devices`) or a JSON file "
                                                    "(placement-devices/1 or Exprimo's device format)")
    p.add_argument("--batch-size", type=positive_int, help="rescale the network to this batch size")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                   help="train in this datatype: tensors and weights at its size, matmuls at the devices' peak "
                        "for it (default: the network's own, fp32 unless a gpt: spec says otherwise)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                   help="what training keeps per parameter: sgd (weights and gradients, the default) or adam "
                        "(its two moments too, and an fp32 copy of bf16/fp16 weights; docs/clusters.md)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2], default=0,
                   help="ZeRO stage over data-parallel groups (ops split by batch): 1 partitions the optimizer "
                        "state, 2 the gradients too (default 0)")
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
    p.add_argument("--schedule", default="thesis", choices=list(SCHEDULES),
                   help="thesis: whole batches, --in-flight at a time; the pipelines (gpipe, 1f1b, interleaved-1f1b, "
                        "zb-h1) split the batch into --micro-batches and update the weights once per batch")
    p.add_argument("--micro-batches", type=unit_count, default=None,
                   help="micro-batches per batch for a pipeline schedule (default 4)")
    p.add_argument("--virtual-stages", type=positive_int, default=None,
                   help="interleaved-1f1b: chunks per device where the placement gives a device one run of ops "
                        "(a placement whose devices hold several runs says its chunks itself; default 1)")
    p.add_argument("--forward-only", action="store_true", help="inference: no backward pass or weight update")
    p.add_argument("--penalty", default="thesis", choices=["thesis", "placeto", "infeasible"],
                   help="memory-overflow penalty in the objective (default thesis: +1 ms per MB)")
    p.add_argument("--sharding", metavar="DIMS",
                   help="let placements split ops over devices: channel, batch or channel,batch (genes beyond the "
                        "devices are splits over windows of consecutive devices of one kind; docs/sharding.md)")
    p.add_argument("--max-shards", type=positive_int, default=None,
                   help="most devices one split op uses (with --sharding; default: every device of the kind)")


def sharding_splits(args, devices) -> tuple:
    """The split table ``--sharding DIMS --max-shards K`` stand for (empty without --sharding)."""
    from ..model.sharding import DIMS, MAX_SHARDS, search_splits
    dims_text = getattr(args, "sharding", None)
    if dims_text is None:
        if getattr(args, "max_shards", None) is not None:
            raise InputError("--max-shards needs --sharding", field="--max-shards",
                             fix="Add --sharding channel,batch (or one of them)")
        return ()
    dims = [d.strip() for d in dims_text.split(",") if d.strip()]
    if not dims or len(set(dims)) != len(dims) or any(d not in DIMS for d in dims):
        raise InputError(f"--sharding takes channel, batch or channel,batch, got {dims_text!r}", field="--sharding")
    k = args.max_shards
    if k is None:
        k = min(MAX_SHARDS, max(sum(1 for d in devices.devices if d.kind == kind) for kind in
                                {d.kind for d in devices.devices}))
    return search_splits(devices, dims, max(k, 2) if args.max_shards is None else k)


def spec_from_args(args, graph) -> ProblemSpec:
    """The problem recipe the command line's options stand for (``graph`` is the whole batch)."""
    micro = args.micro_batches
    virtual = getattr(args, "virtual_stages", None)
    if virtual is not None and args.schedule != "interleaved-1f1b":
        raise InputError("--virtual-stages needs --schedule interleaved-1f1b", field="--virtual-stages")
    if args.schedule == "thesis":
        if micro not in (None, 1):
            raise InputError("--micro-batches needs a pipeline schedule (--schedule " + ", ".join(PIPELINES) + ")",
                             field="--micro-batches")
        micro = 1
    else:
        if args.in_flight != 1:
            raise InputError(f"only the thesis scheme has batches in flight; a {args.schedule} step runs its "
                             "micro-batches and ends with a flush", field="--in-flight",
                             fix="Drop --in-flight, or set the number of micro-batches with --micro-batches")
        if micro is None:
            micro = 4
    timings = load_cli_timings(args.timings, args.network, graph) if getattr(args, "timings", None) else None
    return ProblemSpec(schedule=args.schedule, micro_batches=micro, batches=args.batches, in_flight=args.in_flight,
                       forward_only=args.forward_only, profile=args.profile, comp_efficiency=args.comp_efficiency,
                       comm_efficiency=args.comm_efficiency, timings=timings,
                       timings_batch=graph.batch_size if timings else 0, penalty=args.penalty,
                       optimizer=getattr(args, "optimizer", "sgd"), zero=getattr(args, "zero", 0),
                       virtual_stages=virtual or 1)


def build_problem(args) -> Problem:
    """Load the network and devices the options name and compile the problem they describe."""
    from ..formats.catalog import load_devices, load_network
    graph = load_network(args.network, batch_size=args.batch_size)
    if getattr(args, "precision", None):
        graph = graph.with_precision(args.precision)
    # an efficiency set by hand applies to every device or link, measured ones included
    devices = load_devices(args.devices).without_measured_rates(compute=args.comp_efficiency is not None,
                                                                links=args.comm_efficiency is not None)
    spec = spec_from_args(args, graph)
    return spec.replace(splits=sharding_splits(args, devices)).build(graph, devices)


def load_cli_timings(spec: str, network_spec: str, graph):
    """The calibrated table for ``graph``; a coarsened network (import-model --groups) sums its groups' ops."""
    from ..model.coarsen import groups_path, read_groups
    from ..cost.timings import load_timings

    gp = groups_path(network_spec)
    groups = read_groups(gp) if _is_file(gp) else None
    for g, members in (groups or {}).items():
        if not members:  # its time would be an intersection over no ops
            raise InputError("the group is empty", source=str(gp), field=f"groups.{g}",
                             fix="Every group needs at least one op; write the mapping again with "
                                 "import-model --groups")
    try:
        return load_timings(spec, graph, groups)
    except InputError as e:
        # a field inside the file (batch_size) says more than the option; otherwise name the option
        field = e.field if e.source and e.field else "--timings"
        raise InputError(e.problem, source=e.source, field=field, fix=e.fix) from None


def _is_file(path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long: then there is no such groups file
        return False


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str], right: Sequence[int] = ()) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def fmt(row):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


@contextlib.contextmanager
def stop_on_first_interrupt(message: str = "stopping after this update (Ctrl-C again to interrupt at once)"):
    """Ctrl-C once: the training (or search) stops after its current update and keeps what it learned (the
    policy is written, the run stored as stopped); twice: interrupted at once."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def first(signum, frame):
        stop.set()
        signal.signal(signal.SIGINT, previous)
        print(f"\n{message}", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
